package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/ha"
	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/workflow"
)

// This file runs `axe serve --ha --ha-mode primary` (docs/ha.md): a node that is the primary or a
// backup of one shared MySQL database, by the lease ha.Elector keeps.
//
// Each term as primary gets an engine of its own, built for the term's epoch: its store is fenced
// by that epoch, its dispatcher carries it and asks the elector's gate before every send. Promotion
// is that engine's Start, whose recovery is docs/ha.md's "Promotion" steps in order (reload the
// executor registry, resolve the runs left RUNNING, load the window applying misfire policies),
// before the wheel and the first dispatch. Demotion stops the term's engine at once, with an
// expired context: triggering stops, nothing is drained or flushed (the gate is closed and the
// fence refuses the writes anyway), and the wheel goes with the engine. Nothing of a term survives
// it, so a later term starts from what the database holds.
//
// Between terms a backup serves the read API from the database through an engine that is
// never started; the front server (admin.Server.ServeHA) asks the node for its term on every
// request and answers a backup's writes and the executor protocol with 503 naming the primary.

// Errors of the HA daemon.
var (
	// ErrHANeedsMySQL: --ha with the embedded store.
	ErrHANeedsMySQL = errors.New("--ha needs MySQL")
)

// haTerm is what serves the API for one role: the primary's engine of one epoch, or the
// backup's reader.
type haTerm struct {
	admin.HATerm
	set *metrics.Set      // the engine's metrics, written on /metrics while the term serves
	rec *minuteSeries     // a primary's minute recorder, started with the term; nil for the reader
	wf  *workflow.Service // the term's workflow service, started with a primary's engine
}

// haNode is the daemon state of one HA node.
type haNode struct {
	cfg        *Config // the skeleton's: Advertise is set once the front server listens
	store      persist.Store
	leaseStore persist.Store // the lease loop's own pool
	opts       persist.OpenOptions
	el         *ha.Elector // set before the role loop starts; handlers read elp
	elp        atomic.Pointer[ha.Elector]
	reader     *haTerm

	term      atomic.Pointer[haTerm]
	promoting atomic.Bool
	down      atomic.Bool // not ready: shutting down

	roleMu sync.Mutex // serialises promotions, demotions and shutdown
	ended  bool       // under roleMu: shutdown began, no more promotions
	loop   chan struct{}
}

// defaultNodeID is hostname:port, so that two nodes on one host differ.
func defaultNodeID(addr string) string {
	host, _ := os.Hostname()
	if host == "" {
		host = "axe"
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return host
	}
	return host + ":" + port
}

// checkHA refuses --ha on a store that cannot share a lease, naming why and what to use.
func checkHA(db string) error {
	if strings.HasPrefix(db, persist.SchemeMySQL+":") {
		return nil
	}
	return fmt.Errorf("cannot start with --ha on %s: the embedded SQLite store is a file one process owns, so a second node could neither read the lease nor take over; run every node with --db 'mysql:USER:PASS@tcp(HOST:3306)/DB' on one shared MySQL or MariaDB: %w",
		redactDSN(db), ErrHANeedsMySQL)
}

// haStoreOptions refuses a store --ha cannot run on and returns the options a node's stores
// open with: a node frozen mid-transaction must not hold the lease row's shared lock (or its
// shards' fence rows) past its lease, so the server ends its idle transactions after one
// renew interval (docs/ha.md).
func haStoreOptions(cfg Config) (persist.OpenOptions, error) {
	if err := checkHA(cfg.DB); err != nil {
		return persist.OpenOptions{}, err
	}
	renew := cfg.LeaseRenew
	if renew == 0 {
		renew = ha.LeaseRenewDefault
	}
	return persist.OpenOptions{TxIdleTimeout: renew, Metrics: newOwnMetrics(cfg.Version)}, nil
}

// haNode is the mode (serve.go) of --ha --ha-mode primary. Shutdown order, each step logged
// with how long it took:
//
//  1. not ready: /readyz answers 503;
//  2. a primary stops its workflow service, its engine (triggering, drain in-flight runs,
//     flush the writer) and its minute recorder (the last minute's statistics) while the
//     elector keeps renewing the lease;
//  3. stop the lease loop, releasing the lease if held, so a backup takes over at its next
//     attempt (about one renew interval); a backup just stops campaigning;
//  4. stop the HTTP server;
//  5. stop the reader (the backup's engine, never started);
//  6. close the stores.
func (n *haNode) open(ctx context.Context, cfg *Config, undo *startstop.Undo) (*admin.Server, error) {
	log := cfg.Logger
	opts, err := haStoreOptions(*cfg)
	if err != nil {
		return nil, err
	}
	n.opts = opts
	own := opts.Metrics
	store, err := cfg.openStore(ctx, "store", opts)
	if err != nil {
		return nil, err
	}
	n.store = store
	undo.Push("close store", func(context.Context) error { return store.Close() })
	cfg.metricSets = func() []*metrics.Set {
		if t := n.term.Load(); t != nil && t.Primary {
			return []*metrics.Set{own, t.set}
		}
		return []*metrics.Set{own}
	}
	n.cfg = cfg
	// The listener is bound first: the advertise URL defaults to it, and clients can read
	// /readyz while the node claims its id.
	reader, err := n.newTerm(nil, false, 0)
	if err != nil {
		return nil, err
	}
	n.reader = reader
	n.term.Store(reader)
	undo.Push("stop reader", reader.Engine.Stop)
	front, err := admin.NewServer(cfg.apiServer(admin.ServerConfig{Addr: cfg.Addr, Engine: reader.Engine, Store: store, Version: cfg.Version, Logger: log}))
	if err != nil {
		return nil, err
	}
	front.ServeHA(admin.HAFrontConfig{Node: n, NodeID: cfg.NodeID, PeerTLS: cfg.peerTLS})
	return front, nil
}

// run claims the lease, or campaigns for it, and follows the role changes.
func (n *haNode) run(ctx context.Context, _ *admin.Server, undo *startstop.Undo) (string, []any, error) {
	cfg := n.cfg
	// The lease loop has a pool of its own: a renewal must never wait for a connection that
	// the engine's batches and loads hold.
	leaseStore, err := cfg.openStore(ctx, "the lease store", n.opts)
	if err != nil {
		return "", nil, err
	}
	n.leaseStore = leaseStore
	undo.Push("close the lease store", func(context.Context) error { _ = leaseStore.Close(); return nil })
	el, err := ha.New(ha.Config{Store: leaseStore, NodeID: cfg.NodeID, Advertise: cfg.Advertise,
		TTL: cfg.LeaseTTL, Renew: cfg.LeaseRenew, Logger: cfg.Logger, Metrics: n.opts.Metrics})
	if err == nil {
		err = el.Start(ctx)
	}
	if err != nil {
		return "", nil, err
	}
	n.el = el
	n.elp.Store(el)
	go n.roles(ctx)
	return "axe listening as a backup until it holds the lease", []any{
		"advertise", cfg.Advertise, "store", redactDSN(cfg.DB), "node", cfg.NodeID,
		"lease_ttl", cfg.LeaseTTL, "lease_renew", cfg.LeaseRenew}, nil
}

func (n *haNode) notReady() { n.down.Store(true) }

// stopping ends the promotions (under roleMu, held until the primary's steps are done) and
// returns the shutdown's steps.
func (n *haNode) stopping() (before, after []startstop.Step) {
	n.roleMu.Lock()
	n.ended = true
	t := n.term.Load()
	if t.Primary {
		before = append(before,
			startstop.Step{Name: "stop workflow service", Run: t.wf.Stop},
			startstop.Step{Name: "stop engine (triggering, dispatch, writer)", Run: stopEngine(t.Engine)},
			startstop.Step{Name: "stop minute recorder (records the last minute)", Run: func(context.Context) error { t.rec.stop(); return nil }})
	}
	before = append(before, startstop.Step{Name: "stop lease loop (releasing the lease if held)", Run: func(ctx context.Context) error {
		n.term.Store(n.reader)
		n.roleMu.Unlock()
		err := n.el.Stop(ctx, t.Primary)
		<-n.loop
		return err
	}})
	after = []startstop.Step{
		{Name: "stop reader", Run: n.reader.Engine.Stop},
		{Name: "close store", Run: func(context.Context) error {
			err := n.store.Close()
			_ = n.leaseStore.Close()
			return err
		}},
	}
	return before, after
}

// newTerm builds the engine and API handler of a term: a primary's at epoch, or (el nil,
// primary false) the backup's reader, which is never started.
func (n *haNode) newTerm(el *ha.Elector, primary bool, epoch int64) (*haTerm, error) {
	cfg := *n.cfg
	ecfg := cfg.engineConfig(n.store)
	if primary {
		lease := ha.LeaseNameDefault
		fenced, err := persist.Fenced(n.store, lease, epoch, func(err error) { el.Lost(epoch, err) })
		if err != nil {
			return nil, err
		}
		ecfg.Store = fenced
		ecfg.Epoch = epoch
		ecfg.Writer.LeaseName = lease
		ecfg.Writer.Epoch = func() int64 { return epoch }
		ecfg.Dispatch.Epoch = epoch
		ecfg.Dispatch.Gate = func() error { return el.Gate(epoch) }
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		return nil, err
	}
	wf := workflow.New(workflow.Config{Engine: eng.API(), Store: ecfg.Store, Clock: ecfg.Clock, Logger: cfg.Logger})
	sc := admin.ServerConfig{Addr: cfg.Addr, Engine: eng, Store: n.store, Version: cfg.Version, Logger: cfg.Logger, Workflows: wf}
	var rec *minuteSeries
	if primary {
		rec = newMinuteSeries(eng, cfg.Logger)
		sc.Minutes = rec.points
	}
	srv, err := admin.NewServer(cfg.apiServer(sc))
	if err != nil {
		return nil, errors.Join(err, eng.Stop(context.Background()))
	}
	return &haTerm{HATerm: admin.HATerm{Primary: primary, Epoch: epoch, Engine: eng, Handler: srv.Handler()}, set: eng.API().Metrics(), rec: rec, wf: wf}, nil
}

// roles follows the elector's role changes until it stops.
func (n *haNode) roles(ctx context.Context) {
	defer close(n.loop)
	for ch := range n.el.Changes() {
		if ch.Primary {
			n.promote(ctx, ch)
		} else {
			n.demote(ch)
		}
	}
}

// promote starts the engine of ch's epoch, whose start-up recovery does the steps of docs/ha.md,
// "Promotion", and serves the API with it once they are done.
func (n *haNode) promote(ctx context.Context, ch ha.Change) {
	n.roleMu.Lock()
	defer n.roleMu.Unlock()
	log := n.cfg.Logger.With("epoch", ch.Epoch)
	if n.ended || n.el.Gate(ch.Epoch) != nil {
		return // shutting down, or the lease went again before this change was read
	}
	n.promoting.Store(true)
	defer n.promoting.Store(false)
	log.Info("promotion: starting the engine of this term")
	t, err := n.newTerm(n.el, true, ch.Epoch)
	if err == nil {
		err = t.Engine.Start(ctx)
		if err == nil {
			err = t.wf.Start(ctx)
		}
		if err != nil {
			_ = t.wf.Stop(expiredContext())
			_ = t.Engine.Stop(expiredContext())
		}
	}
	if err != nil {
		log.Error("promotion failed; giving up the lease for another node", "error", err)
		n.el.Lost(ch.Epoch, err)
		return
	}
	if err := n.el.Gate(ch.Epoch); err != nil {
		log.Warn("the lease went during the promotion; stopping its engine", "error", err)
		_ = t.wf.Stop(expiredContext())
		_ = t.Engine.Stop(expiredContext())
		return
	}
	t.rec.start()
	n.term.Store(t)
	took := time.Since(ch.At)
	n.el.ObservePromotion(took)
	log.Info("promotion complete: this node is the primary and dispatches", "took", took)
}

// demote serves as a backup at once and stops the primary's engine without draining or
// flushing: its gate is already closed and its writes fenced.
func (n *haNode) demote(ch ha.Change) {
	n.roleMu.Lock()
	defer n.roleMu.Unlock()
	t := n.term.Load()
	if !t.Primary || t.Epoch != ch.Epoch || n.ended {
		return
	}
	n.term.Store(n.reader)
	start := time.Now()
	_ = t.wf.Stop(expiredContext())
	err := t.Engine.Stop(expiredContext())
	t.rec.abandon()
	n.cfg.Logger.Warn("demoted: the engine of this term is stopped and its wheel dropped",
		"epoch", ch.Epoch, "reason", ch.Reason, "took", time.Since(start), "stop_error", err)
}

// expiredContext is the context of a stop that must not wait for anything.
func expiredContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// The front server's questions (admin.HANode).

// Term is the term serving now.
func (n *haNode) Term() *admin.HATerm { return &n.term.Load().HATerm }

// Lease is the elector's view; not ok until the elector runs (the node id is claimed).
func (n *haNode) Lease() (ha.Status, bool) {
	el := n.elp.Load()
	if el == nil {
		return ha.Status{}, false
	}
	return el.Status(), true
}

// Promoting reports a promotion under way.
func (n *haNode) Promoting() bool { return n.promoting.Load() }

// Stopping reports that shutdown began.
func (n *haNode) Stopping() bool { return n.down.Load() }
