// Package daemon wires `axe serve` together: it opens the store, builds the engine (one per
// term as primary under --ha --ha-mode primary, one that follows the shard loop under --ha),
// runs the HA elector or the shard loop, starts the HTTP server of package admin and stops
// them all in order. One skeleton (serve.go) runs the three modes, each plugged into it as a
// mode: singleNode (daemon.go), haNode (ha.go) and shardNode (shards.go). It owns the daemon's configuration and lifecycle and holds
// no scheduling state and no HTTP handlers of its own: scheduling is the engine's, the API
// and the console are admin's. Nothing but cmd/axe imports it.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
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

// Daemon defaults.
const (
	DBDefault              = "sqlite:axe.db"
	ShutdownTimeoutDefault = 30 * time.Second
)

// Config is what `axe serve` is configured with (cmd/axe/serve.go has the flags).
type Config struct {
	// Addr to listen on. Defaults to admin.AddrDefault.
	Addr string
	// DB is "sqlite:PATH" or "mysql:DSN". Defaults to DBDefault.
	DB string
	// Token, when set, guards the API.
	Token string
	// NodeID names this scheduler. Defaults to hostname:port (of Addr).
	NodeID string
	// Tick is the wheel resolution. Defaults to engine.TickDefault.
	Tick time.Duration
	// Timezone is the default zone of tasks. Defaults to engine.TimezoneDefault.
	Timezone string
	// ShutdownTimeout bounds the graceful stop. Defaults to ShutdownTimeoutDefault.
	ShutdownTimeout time.Duration
	// Version is reported by axe_build_info.
	Version string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// OnListen, when set, is called with the bound address once the API serves.
	OnListen func(addr string)
	// Engine lets tests and benchmarks tune the engine (window, load interval, clock); its
	// Store, Tick, DefaultTimezone, NodeID and Logger are set from the fields above, and its
	// Metrics is a new set for each engine (metrics.go).
	Engine engine.Config
	// HA runs the node as one of several on a shared MySQL database (docs/ha.md): by default every
	// node schedules a share of the shards (shards.go), or, with HAMode "primary", one
	// primary schedules everything and the others are its backups (ha.go). Defaults to
	// false: a single node.
	HA bool
	// HAMode is HAModeShards or HAModePrimary. Defaults to HAModeShards.
	HAMode string
	// Advertise is the URL other nodes and clients reach this node at, named in a backup's
	// 503 and in /readyz. Defaults to http:// (https:// when the API is served over TLS) and
	// the bound address.
	Advertise string
	// LeaseTTL is the HA lease's life past a renewal. Defaults to ha.LeaseTTLDefault (15s).
	LeaseTTL time.Duration
	// LeaseRenew is how often the primary renews and a backup campaigns. Defaults to
	// ha.LeaseRenewDefault (5s).
	LeaseRenew time.Duration

	// BasePath prefixes the console and the API (admin.ServerConfig.BasePath). Defaults to "".
	BasePath string
	// Pprof serves /debug/pprof behind the token. Defaults to false.
	Pprof bool

	// Outbound and bind safety, token file; see security.go.
	Security SecurityConfig

	tokens    *atomic.Pointer[admin.Tokens] // built from Token and Security.TokenFile by applySecurity
	peerToken string                        // the token of this node's calls of the others (peerTokenOf)
	tlsConfig *tls.Config                   // built from Security.TLSCert and TLSKey by applySecurity
	peerTLS   *tls.Config                   // built from Security.PeerCA by applySecurity; nil: system roots
	// metricSets are what /metrics writes (metrics.go), set by Serve before any server is
	// built.
	metricSets func() []*metrics.Set
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Addr == "" {
		c.Addr = admin.AddrDefault
	}
	if c.DB == "" {
		c.DB = DBDefault
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = ShutdownTimeoutDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.NodeID == "" {
		c.NodeID = defaultNodeID(c.Addr)
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = ha.LeaseTTLDefault
	}
	if c.LeaseRenew == 0 {
		c.LeaseRenew = ha.LeaseRenewDefault
	}
	if c.HAMode == "" {
		c.HAMode = HAModeShards
	}
	return c
}

// Serve runs the daemon until ctx is cancelled (SIGTERM in `axe serve`), in the mode cfg
// names: a single node (singleNode), a primary or backup (--ha --ha-mode primary, ha.go) or
// a node of a sharded cluster (--ha, shards.go), each plugged into one skeleton (serve.go).
// A single node shuts down in this order, logging each step with how long it took:
//
//  1. not ready: /readyz answers 503 so a load balancer stops sending;
//  2. stop the workflow service;
//  3. stop triggering, drain in-flight runs and flush the batched writer (engine.Stop);
//  4. stop the minute recorder, which writes the last minute's statistics (minutes.go);
//  5. stop the HTTP server (it stayed up so results could still arrive while draining);
//  6. close the store.
//
// Nothing is left half-written: every transition either committed or was never decided.
func Serve(ctx context.Context, cfg Config) error {
	cfg = cfg.WithDefaults()
	if err := cfg.applySecurity(); err != nil {
		return err
	}
	defer cfg.reloadTokensOnHUP()()
	if err := checkHAMode(cfg.HAMode); err != nil {
		return err
	}
	switch {
	case cfg.HA && cfg.HAMode == HAModePrimary:
		return serve(ctx, cfg, &haNode{loop: make(chan struct{})})
	case cfg.HA:
		return serve(ctx, cfg, &shardNode{})
	}
	return serve(ctx, cfg, &singleNode{})
}

// singleNode is the mode of a node alone on its store: one engine, started before the API
// listens.
type singleNode struct {
	store persist.Store
	eng   *engine.Engine
	wf    *workflow.Service
	rec   *minuteSeries
	down  atomic.Bool // not ready: shutting down
	cfg   *Config
}

func (n *singleNode) open(ctx context.Context, cfg *Config, undo *startstop.Undo) (*admin.Server, error) {
	n.cfg = cfg
	own := newOwnMetrics(cfg.Version)
	ha.MarkSingleNode(own)
	log := cfg.Logger
	store, err := cfg.openStore(ctx, "store", persist.OpenOptions{Metrics: own})
	if err != nil {
		return nil, err
	}
	n.store = store
	undo.Push("close store", func(context.Context) error { return store.Close() })
	ecfg := cfg.engineConfig(store)
	eng, err := engine.New(ecfg)
	if err != nil {
		return nil, err
	}
	n.eng = eng
	undo.Push("stop engine", eng.Stop)
	n.wf = workflow.New(workflow.Config{Engine: eng.API(), Store: store, Clock: ecfg.Clock, Logger: log})
	if err := eng.Start(ctx); err != nil {
		return nil, err
	}
	if err := n.wf.Start(ctx); err != nil {
		return nil, err
	}
	undo.Push("stop workflow service", n.wf.Stop)
	cfg.metricSets = func() []*metrics.Set { return []*metrics.Set{own, eng.API().Metrics()} }

	n.rec = newMinuteSeries(eng, log)
	srv, err := admin.NewServer(cfg.apiServer(admin.ServerConfig{Addr: cfg.Addr, Engine: eng, Store: store, Version: cfg.Version, Logger: log,
		Minutes: n.rec.points, Workflows: n.wf}))
	if err != nil {
		return nil, err
	}
	srv.SetReady(func() error {
		if n.down.Load() || !eng.API().Running() {
			return errors.New("not ready: shutting down")
		}
		if err := eng.API().WriteStalled(); err != nil {
			return fmt.Errorf("not ready: %w", err)
		}
		return nil
	})
	return srv, nil
}

func (n *singleNode) run(_ context.Context, srv *admin.Server, _ *startstop.Undo) (string, []any, error) {
	n.rec.start()
	c := n.cfg
	return "axe listening", []any{"console", c.scheme() + "://" + srv.Addr() + c.BasePath + "/", "store", redactDSN(c.DB), "node", c.NodeID}, nil
}

func (n *singleNode) notReady() { n.down.Store(true) }

func (n *singleNode) stopping() (before, after []startstop.Step) {
	return []startstop.Step{
			{Name: "stop workflow service", Run: n.wf.Stop},
			{Name: "stop engine (triggering, dispatch, writer)", Run: stopEngine(n.eng)},
			{Name: "stop minute recorder (records the last minute)", Run: func(context.Context) error { n.rec.stop(); return nil }},
		}, []startstop.Step{
			{Name: "close store", Run: func(context.Context) error { return n.store.Close() }},
		}
}

// openStore opens c.DB, giving it a minute to answer and its schema migrations as long as
// they take (until ctx ends: a stop signal); what names the store in the error.
func (c Config) openStore(ctx context.Context, what string, opts persist.OpenOptions) (persist.Store, error) {
	opts.ReachTimeout = time.Minute
	store, err := persist.OpenWith(ctx, c.DB, opts)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s %s: %w", what, redactDSN(c.DB), err)
	}
	return store, nil
}

// engineConfig is the engine's configuration on store: Config.Engine with the daemon's tick,
// zone, node id and logger, and a metrics set of its own (metrics.go).
func (c Config) engineConfig(store persist.Store) engine.Config {
	ecfg := c.Engine
	ecfg.Store = store
	ecfg.Tick = c.Tick
	ecfg.DefaultTimezone = c.Timezone
	ecfg.NodeID = c.NodeID
	ecfg.Logger = c.Logger
	ecfg.Metrics = metrics.NewSet()
	return ecfg
}

// redactDSN hides a MySQL password in logs.
func redactDSN(dsn string) string {
	const p = "mysql:"
	if len(dsn) <= len(p) || dsn[:len(p)] != p {
		return dsn
	}
	rest := dsn[len(p):]
	at := -1
	for i := len(rest) - 1; i >= 0; i-- {
		if rest[i] == '@' {
			at = i
			break
		}
	}
	if at < 0 {
		return dsn
	}
	cred := rest[:at]
	for i := 0; i < len(cred); i++ {
		if cred[i] == ':' {
			return p + cred[:i] + ":***" + rest[at:]
		}
	}
	return dsn
}

// scheme is the URL scheme the API is served with: https once applySecurity loaded a
// certificate, else http.
func (c *Config) scheme() string {
	if c.tlsConfig != nil {
		return "https"
	}
	return "http"
}
