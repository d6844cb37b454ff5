// Package ha decides which node may write, in the two HA modes of `axe serve --ha`
// (docs/ha.md, docs/scale-out.md). It holds two loops, each judged by the database's clock,
// never a node's: this node's own monotonic clock only ever makes it give up earlier, never
// hold on longer.
//
//   - Elector (elector.go), for --ha-mode primary: one lease row (holder, epoch, expiry). A
//     backup tries to take it every renew interval, with epoch+1 once it has expired; the
//     primary renews it as a compare-and-swap on holder and epoch, and gives up at once when
//     a renewal changes no row or when none has succeeded within lease-ttl − lease-renew. It
//     reports role changes (Change) and says who the primary is.
//   - Shards (shards.go), the default under --ha: every task belongs to one of 256 shards,
//     each with a lease and fence row of its own. Every renew interval a node renews the
//     shards it holds, reads the live nodes, and takes unheld shards up to its fair share or
//     hands over those another node needs; planShards (plan.go) decides which. It reports the
//     shards gained and lost (ShardChange) and answers whether it holds a shard at an epoch
//     (Holds), which the engine asks before every fire and send of the shard's tasks.
//
// Both keep this node's row in the nodes table. Neither schedules anything: the daemon
// (internal/daemon) starts and stops the engine, or the engine's shards, on their changes.
package ha

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// Defaults for Config.
const (
	// LeaseTTLDefault is how long a lease lasts past its last renewal, by the database's
	// clock (docs/ha.md, "The lease"). A takeover waits this long after a primary dies silently.
	LeaseTTLDefault = 15 * time.Second
	// LeaseRenewDefault is how often the primary renews and a backup tries to take the
	// lease; a primary also gives up by itself TTL − renew after its last renewal was sent.
	LeaseRenewDefault = 5 * time.Second
	// LeaseNameDefault names the lease row.
	LeaseNameDefault = "scheduler"
)

// Sentinel errors.
var (
	// ErrNotPrimary is the gate's answer on a node that is not the primary of the epoch
	// asked about.
	ErrNotPrimary = errors.New("this node is not the primary")
	// ErrLeaseDeadline is the gate's answer on a primary whose last successful renewal was
	// sent more than TTL − renew ago: another node may take over soon.
	ErrLeaseDeadline = model.ErrLeaseDeadline
	// ErrReadOnly: the database refuses writes; a primary could not hold a lease on it.
	ErrReadOnly = errors.New("database is read-only")
	// ErrNodeIDTaken: another live node uses this node's id.
	ErrNodeIDTaken = persist.ErrNodeIDTaken
)

// haMetrics are the series of R8, in the set the daemon passes down (Config.Metrics). They
// are got or created, so that a single node's MarkSingleNode and the set's writer agree on
// one series per name.
type haMetrics struct {
	primary    *metrics.Gauge
	epoch      *metrics.Gauge
	renewOK    *metrics.Counter
	renewLost  *metrics.Counter
	renewError *metrics.Counter
	failovers  *metrics.Counter
	promotion  *metrics.PrometheusHistogram
}

func newHAMetrics(s *metrics.Set) *haMetrics {
	return &haMetrics{
		primary:    s.GetOrCreateGauge("axe_ha_primary", nil),
		epoch:      s.GetOrCreateGauge("axe_lease_epoch", nil),
		renewOK:    s.GetOrCreateCounter(`axe_lease_renewals_total{result="ok"}`),
		renewLost:  s.GetOrCreateCounter(`axe_lease_renewals_total{result="lost"}`),
		renewError: s.GetOrCreateCounter(`axe_lease_renewals_total{result="error"}`),
		failovers:  s.GetOrCreateCounter("axe_failovers_total"),
		promotion: s.GetOrCreatePrometheusHistogramExt("axe_promotion_duration_seconds",
			metrics.ExponentialBuckets(0.01, 2, 14)), // 10ms .. ~80s
	}
}

// MarkSingleNode registers the HA series in s for a node that runs without --ha, with
// axe_ha_primary at 1: it is its own primary.
func MarkSingleNode(s *metrics.Set) { newHAMetrics(s).primary.Set(1) }

// ObservePromotion records how long a promotion took, from taking the lease to the first
// dispatch allowed (axe_promotion_duration_seconds).
func (e *Elector) ObservePromotion(d time.Duration) { e.m.promotion.Update(d.Seconds()) }

// Config configures an Elector.
type Config struct {
	// Store holds the lease and the nodes table. Required; MySQL in production. The
	// elector reads and writes nothing else.
	Store persist.LeaseStore
	// NodeID names this node in the lease and the nodes table. Required.
	NodeID string
	// Advertise is the URL other nodes and clients reach this node's API at. Required.
	Advertise string
	// LeaseName names the lease row. Defaults to LeaseNameDefault.
	LeaseName string
	// TTL is the lease's life past a renewal. Defaults to LeaseTTLDefault (15s).
	TTL time.Duration
	// Renew is the renewal and campaign interval. Defaults to LeaseRenewDefault (5s); it
	// must be below TTL/2 so that a primary renews at least twice per TTL.
	Renew time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Clock is the node's own time: the local deadline, the watchdog, the loop's pauses.
	// The lease's expiry is judged by the database's clock, never this one. Defaults to
	// clock.Real; tests pass a clock.Fake.
	Clock clock.Clock
	// Metrics is the set the HA series are registered in (axe_ha_primary, axe_lease_epoch,
	// axe_lease_renewals_total, axe_failovers_total, axe_promotion_duration_seconds); the
	// daemon writes it on /metrics. Defaults to a new set of this elector's own, which
	// nothing exposes.
	Metrics *metrics.Set
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.LeaseName == "" {
		c.LeaseName = LeaseNameDefault
	}
	if c.TTL == 0 {
		c.TTL = LeaseTTLDefault
	}
	if c.Renew == 0 {
		c.Renew = LeaseRenewDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("store is required")
	case c.NodeID == "":
		return errors.New("node id is required")
	case c.Advertise == "":
		return errors.New("advertise URL is required")
	case c.Renew <= 0 || c.TTL <= 0:
		return fmt.Errorf("lease-ttl (%s) and lease-renew (%s) must be positive", c.TTL, c.Renew)
	case 2*c.Renew >= c.TTL:
		return fmt.Errorf("lease-renew (%s) must be below half the lease-ttl (%s)", c.Renew, c.TTL)
	}
	return nil
}

// Change is a role change of this node.
type Change struct {
	// Primary is true when this node became the primary at Epoch, false when it stopped.
	Primary bool
	Epoch   int64
	// Reason says why (for logs and action records).
	Reason string
	// At is when this node learned it (monotonic).
	At time.Time
}

// Elector runs the lease loop of one node. Create with New, then Start; Stop ends it.
type Elector struct {
	cfg      Config
	clk      clock.Clock
	log      *slog.Logger
	instance string
	changes  chan Change
	m        *haMetrics

	mu       sync.Mutex
	primary  bool
	epoch    int64     // the epoch held while primary; the last seen otherwise
	deadline time.Time // primary: the gate closes at this monotonic time
	watchdog clock.Timer
	leader   string // advertise URL of the primary as last seen; "" when none
	holder   string // node id of the primary as last seen

	life   startstop.Lifecycle
	cancel context.CancelFunc // set by Start
	done   chan struct{}
}

// New builds an elector; nothing runs until Start.
func New(cfg Config) (*Elector, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cannot create elector: %w", err)
	}
	return &Elector{
		cfg:      cfg,
		clk:      cfg.Clock,
		log:      cfg.Logger.With("node", cfg.NodeID),
		instance: newInstance(),
		changes:  make(chan Change, 16),
		m:        newHAMetrics(cfg.Metrics),
		done:     make(chan struct{}),
	}, nil
}

// Changes delivers every role change in order. The daemon must keep reading it.
func (e *Elector) Changes() <-chan Change { return e.changes }

// Start checks that the database takes writes, claims the node id, and starts the loop as
// a backup. It waits up to 1.5 renew intervals for a previous instance of this id (a
// process that crashed) to fall silent; an id that stays live is refused with
// ErrNodeIDTaken. A refused start leaves the elector as new; its life is a
// startstop.Lifecycle, so a second Start gives startstop.ErrStarted and one after Stop
// startstop.ErrStopped.
func (e *Elector) Start(ctx context.Context) error {
	return e.life.StartOnce(func() error {
		// Nothing runs until the checks pass: a refused start leaves the elector new, so
		// that Start may be called again (say, once the other instance of the id is gone).
		if err := checkWritable(ctx, e.cfg.Store); err != nil {
			return startstop.NothingStarted(err)
		}
		if err := e.claim(ctx); err != nil {
			return startstop.NothingStarted(err)
		}
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		e.cancel = cancel
		go e.run(runCtx)
		return nil
	})
}

// liveWithin is how recently a node must have been seen to count as live: a live node
// touches its row every renew interval.
func (e *Elector) liveWithin() time.Duration { return e.cfg.Renew + e.cfg.Renew/2 }

func (e *Elector) claim(ctx context.Context) error {
	return claimNode(ctx, e.cfg.Store, persist.Node{ID: e.cfg.NodeID, Advertise: e.cfg.Advertise, Role: persist.RoleBackup, Instance: e.instance},
		e.liveWithin(), e.cfg.Renew, e.clk, e.log)
}

// newInstance names this process's run of a node id, to tell it from another with the id.
func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// checkWritable refuses a database that does not take writes: no node could hold a lease
// on it.
func checkWritable(ctx context.Context, store persist.LeaseStore) error {
	ro, err := store.ReadOnly(ctx)
	if err != nil {
		return fmt.Errorf("cannot start HA: %w", err)
	}
	if ro {
		return fmt.Errorf("cannot start HA: the %s server is read-only (@@read_only = 1; a replica?): point --db at the writable primary: %w",
			store.Kind(), ErrReadOnly)
	}
	return nil
}

// claimNode records me in the nodes table. It waits up to liveWithin and a second for a
// previous instance of the id (a process that crashed) to fall silent, checking every
// renew/10; an id that stays live is refused with ErrNodeIDTaken.
func claimNode(ctx context.Context, store persist.LeaseStore, me persist.Node, liveWithin, renew time.Duration, clk clock.Clock, log *slog.Logger) error {
	giveUp := clk.Now().Add(liveWithin + time.Second)
	waited := false
	for {
		other, err := store.ClaimNode(ctx, me, liveWithin)
		if err == nil {
			if waited {
				log.Info("node id free again: its previous instance fell silent")
			}
			return nil
		}
		if !errors.Is(err, persist.ErrNodeIDTaken) {
			return fmt.Errorf("cannot start HA: %w", err)
		}
		if clk.Now().After(giveUp) {
			return fmt.Errorf("cannot start HA: another live node uses node id %q (advertise %s, seen %s ago); give this node its own --node-id: %w",
				me.ID, other.Advertise, other.Age.Round(time.Millisecond), ErrNodeIDTaken)
		}
		if !waited {
			log.Warn("node id in use by another instance; waiting to see whether it is live",
				"other_advertise", other.Advertise, "seen_ago", other.Age.Round(time.Millisecond), "wait_up_to", giveUp.Sub(clk.Now()).Round(time.Millisecond))
			waited = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cannot start HA: %w", ctx.Err())
		case <-clk.After(renew / 10):
		}
	}
}

// Stop ends the loop. A primary releases the lease when release is set (after the engine
// drained: a graceful stop), so a backup takes over at its next attempt, about one renew
// interval later; the node's row is marked stopped. Idempotent; safe without Start.
func (e *Elector) Stop(ctx context.Context, release bool) error {
	return e.life.StopOnce(ctx, func(started bool) error {
		if !started {
			return nil
		}
		e.cancel()
		<-e.done
		e.mu.Lock()
		wasPrimary, epoch := e.primary, e.epoch
		e.mu.Unlock()
		e.demote("stopping")
		var errs []error
		if wasPrimary && release {
			t := e.clk.Now()
			err := e.cfg.Store.ReleaseLease(ctx, e.cfg.LeaseName, e.cfg.NodeID, epoch)
			e.log.Info("lease released", "epoch", epoch, "took", e.clk.Now().Sub(t), "error", err)
			errs = append(errs, err)
		}
		errs = append(errs, e.cfg.Store.TouchNode(ctx, e.cfg.NodeID, e.instance, persist.RoleStopped))
		close(e.changes)
		return errors.Join(errs...)
	})
}

// Gate is nil while this node is the primary at epoch and its last successful renewal was sent less
// than TTL − renew ago (docs/ha.md, "Fencing"). Every dispatch asks it just before it leaves.
func (e *Elector) Gate(epoch int64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.primary || e.epoch != epoch {
		return fmt.Errorf("epoch %d: %w", epoch, ErrNotPrimary)
	}
	if !e.clk.Now().Before(e.deadline) {
		return fmt.Errorf("epoch %d: %w", epoch, ErrLeaseDeadline)
	}
	return nil
}

// Status is what /readyz shows.
type Status struct {
	Primary bool
	Epoch   int64
	NodeID  string
	// Leader is the advertise URL of the primary: this node's own while primary, "" when
	// none is known.
	Leader string
}

// Status returns this node's role and the primary it knows of.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Status{Primary: e.primary, Epoch: e.epoch, NodeID: e.cfg.NodeID, Leader: e.leader}
	if e.primary {
		s.Leader = e.cfg.Advertise
	}
	return s
}

// Lost tells the elector that a write at epoch failed on the fence: another node holds a
// newer epoch. A primary at that epoch stops at once.
func (e *Elector) Lost(epoch int64, err error) {
	e.mu.Lock()
	current := e.primary && e.epoch == epoch
	e.mu.Unlock()
	if current {
		e.log.Error("a write failed on the fence: another node holds the lease; stopping as primary", "epoch", epoch, "error", err)
		e.demote("a write failed on the fence")
	}
}

// run is the lease loop.
func (e *Elector) run(ctx context.Context) {
	defer close(e.done)
	next := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.clk.After(next):
		}
		e.mu.Lock()
		primary := e.primary
		e.mu.Unlock()
		if primary {
			next = e.renew(ctx)
		} else {
			next = e.campaign(ctx)
		}
	}
}

// campaign tries to take the lease once and returns when to try again.
func (e *Elector) campaign(ctx context.Context) time.Duration {
	// The touch and the take each have the renew interval: with one shared, a slow touch
	// (a write and its commit, often on a fresh connection) on a loaded database can leave
	// the take too little of it, attempt after attempt, while the primary is gone.
	tctx, tcancel := context.WithTimeout(ctx, e.cfg.Renew)
	e.touch(tctx, persist.RoleBackup)
	tcancel()
	cctx, cancel := context.WithTimeout(ctx, e.cfg.Renew)
	defer cancel()
	sent := e.clk.Now()
	l, ok, err := e.cfg.Store.TakeLease(cctx, e.cfg.LeaseName, e.cfg.NodeID, e.cfg.TTL)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("cannot try the lease", "error", err)
		}
		return e.cfg.Renew
	}
	if !ok {
		e.learnLeader(cctx, l)
		return e.cfg.Renew
	}
	e.mu.Lock()
	e.primary, e.epoch = true, l.Epoch
	e.holder, e.leader = e.cfg.NodeID, e.cfg.Advertise
	e.armLocked(sent)
	e.mu.Unlock()
	e.m.primary.Set(1)
	e.m.epoch.Set(float64(l.Epoch))
	if l.Epoch > 1 {
		e.m.failovers.Inc()
	}
	e.log.Info("lease taken: this node is the primary", "epoch", l.Epoch, "ttl_left", l.Remaining.Round(time.Millisecond))
	// The change goes out before the touch: a touch that finds the id taken demotes, and
	// that change must follow this one.
	e.changes <- Change{Primary: true, Epoch: l.Epoch, Reason: "lease taken", At: sent}
	e.touch(cctx, persist.RolePrimary)
	return e.cfg.Renew
}

// renew renews the lease once and returns when to renew next.
func (e *Elector) renew(ctx context.Context) time.Duration {
	e.mu.Lock()
	epoch, left := e.epoch, e.deadline.Sub(e.clk.Now())
	e.mu.Unlock()
	if left <= 0 {
		e.demote("no successful renewal within lease-ttl − lease-renew")
		return 0
	}
	cctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	sent := e.clk.Now()
	err := e.cfg.Store.RenewLease(cctx, e.cfg.LeaseName, e.cfg.NodeID, epoch, e.cfg.TTL)
	switch {
	case err == nil:
		e.m.renewOK.Inc()
		e.mu.Lock()
		if e.primary && e.epoch == epoch {
			e.armLocked(sent)
		}
		e.mu.Unlock()
		e.touch(cctx, persist.RolePrimary)
		return e.cfg.Renew
	case errors.Is(err, model.ErrLeaseLost):
		e.m.renewLost.Inc()
		e.log.Error("lease lost: the renewal changed no row; stopping as primary at once", "epoch", epoch)
		e.demote("the lease renewal found another holder or epoch")
		return 0
	default:
		if ctx.Err() != nil {
			return 0
		}
		e.m.renewError.Inc()
		e.log.Warn("cannot renew the lease; retrying until the local deadline", "epoch", epoch,
			"left", e.deadlineOf().Sub(e.clk.Now()).Round(time.Millisecond), "error", err)
		return min(e.cfg.Renew/5, time.Second)
	}
}

func (e *Elector) deadlineOf() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.deadline
}

// armLocked moves the local deadline to TTL − renew after sent, the moment the successful
// renewal left: the database set its expiry no earlier than that, so this node gives up at
// least one renew interval before another could take over. Caller holds e.mu.
func (e *Elector) armLocked(sent time.Time) {
	e.deadline = sent.Add(e.cfg.TTL - e.cfg.Renew)
	epoch := e.epoch
	if e.watchdog != nil {
		e.watchdog.Stop()
	}
	// The watchdog demotes on time even when the loop is stuck in a database call.
	e.watchdog = e.clk.AfterFunc(e.deadline.Sub(e.clk.Now()), func() {
		e.mu.Lock()
		due := e.primary && e.epoch == epoch && !e.clk.Now().Before(e.deadline)
		e.mu.Unlock()
		if due {
			e.log.Error("no successful lease renewal within lease-ttl − lease-renew; stopping as primary", "epoch", epoch)
			e.demote("no successful renewal within lease-ttl − lease-renew")
		}
	})
}

// demote makes this node a backup, closing the gate first.
func (e *Elector) demote(reason string) {
	e.mu.Lock()
	if !e.primary {
		e.mu.Unlock()
		return
	}
	e.primary = false
	e.deadline = time.Time{}
	if e.watchdog != nil {
		e.watchdog.Stop()
		e.watchdog = nil
	}
	e.leader, e.holder = "", ""
	epoch := e.epoch
	e.mu.Unlock()
	e.m.primary.Set(0)
	e.log.Warn("lost the lease: this node is a backup now", "epoch", epoch, "reason", reason)
	e.changes <- Change{Primary: false, Epoch: epoch, Reason: reason, At: e.clk.Now()}
}

// learnLeader records who holds the lease l, and its advertise URL.
func (e *Elector) learnLeader(ctx context.Context, l persist.LeaseState) {
	leader := ""
	if l.Held {
		e.mu.Lock()
		known := l.Holder == e.holder
		leader = e.leader
		e.mu.Unlock()
		if !known {
			leader = ""
			nodes, err := e.cfg.Store.ListNodes(ctx)
			if err == nil {
				for _, n := range nodes {
					if n.ID == l.Holder {
						leader = n.Advertise
					}
				}
			}
		}
	}
	e.mu.Lock()
	if !e.primary {
		e.epoch = l.Epoch
		e.holder, e.leader = "", ""
		if l.Held {
			e.holder, e.leader = l.Holder, leader
		}
	}
	e.mu.Unlock()
	e.m.epoch.Set(float64(l.Epoch))
}

func (e *Elector) touch(ctx context.Context, role string) {
	err := e.cfg.Store.TouchNode(ctx, e.cfg.NodeID, e.instance, role)
	if errors.Is(err, persist.ErrNodeIDTaken) {
		e.log.Error("another instance claimed this node id; stopping as primary", "error", err)
		e.demote("another instance claimed this node id")
		return
	}
	if err != nil && ctx.Err() == nil {
		e.log.Warn("cannot touch this node's row", "error", err)
	}
}
