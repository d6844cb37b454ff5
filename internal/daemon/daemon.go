// Package daemon wires `axe serve` together: it opens the store, builds the engine (one per
// term as primary under --ha), runs the HA elector, starts the HTTP server of package admin
// and stops them all in order. It owns the daemon's configuration and lifecycle and holds
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
	"github.com/axe-sched/axe/internal/startstop"
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

// Serve runs the daemon until ctx is cancelled (SIGTERM in `axe serve`), then shuts down in
// this order, logging each step with how long it took:
//
//  1. not ready: /readyz answers 503 so a load balancer stops sending;
//  2. stop triggering, drain in-flight runs and flush the batched writer (engine.Stop);
//  3. stop the minute recorder, which writes the last minute's statistics (minutes.go);
//  4. stop the HTTP server (it stayed up so results could still arrive while draining);
//  5. close the store.
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
	if cfg.HA && cfg.HAMode == HAModePrimary {
		return serveHA(ctx, cfg)
	}
	if cfg.HA {
		return serveShards(ctx, cfg)
	}
	own := newOwnMetrics(cfg.Version)
	ha.MarkSingleNode(own)
	log := cfg.Logger
	store, err := cfg.openStore(ctx, "store", persist.OpenOptions{Metrics: own})
	if err != nil {
		return err
	}
	ecfg := cfg.engineConfig(store)
	eng, err := engine.New(ecfg)
	if err != nil {
		_ = store.Close()
		return err
	}
	wf := workflow.New(workflow.Config{Engine: eng, Store: store, Clock: ecfg.Clock, Logger: log})
	if err := eng.Start(ctx); err != nil {
		_ = eng.Stop(context.Background())
		_ = store.Close()
		return err
	}
	if err := wf.Start(ctx); err != nil {
		return errors.Join(err, eng.Stop(context.Background()), store.Close())
	}
	cfg.metricSets = func() []*metrics.Set { return []*metrics.Set{own, eng.Metrics()} }

	rec := newMinuteSeries(eng, log)
	srv, err := admin.NewServer(cfg.apiServer(admin.ServerConfig{Addr: cfg.Addr, Engine: eng, Store: store, Version: cfg.Version, Logger: log,
		Minutes: rec.points, Workflows: wf}))
	if err != nil {
		return errors.Join(err, wf.Stop(context.Background()), eng.Stop(context.Background()), store.Close())
	}
	var stopping atomic.Bool
	srv.SetReady(func() error {
		if stopping.Load() || !eng.Running() {
			return errors.New("not ready: shutting down")
		}
		if err := eng.WriteStalled(); err != nil {
			return fmt.Errorf("not ready: %w", err)
		}
		return nil
	})
	if err := srv.Start(ctx); err != nil {
		return errors.Join(err, wf.Stop(context.Background()), eng.Stop(context.Background()), store.Close())
	}
	rec.start()
	log.Info("axe listening", "addr", cfg.scheme()+"://"+srv.Addr(), "console", cfg.scheme()+"://"+srv.Addr()+cfg.BasePath+"/",
		"store", redactDSN(cfg.DB), "node", cfg.NodeID)
	if cfg.OnListen != nil {
		cfg.OnListen(srv.Addr())
	}

	<-ctx.Done()
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	sctx, scancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer scancel()
	return startstop.Steps(sctx, log, nil, "shutdown: ",
		startstop.Step{Name: "not ready", Run: func(context.Context) error { stopping.Store(true); return nil }},
		startstop.Step{Name: "stop workflow service", Run: wf.Stop},
		startstop.Step{Name: "stop engine (triggering, dispatch, writer)", Run: eng.Stop},
		startstop.Step{Name: "stop minute recorder (records the last minute)", Run: func(context.Context) error { rec.stop(); return nil }},
		startstop.Step{Name: "stop HTTP server", Run: srv.Stop},
		startstop.Step{Name: "close store", Run: func(context.Context) error { return store.Close() }})
}

// engineConfig is the engine's configuration on store: Config.Engine with the daemon's tick,
// zone, node id and logger, and a metrics set of its own (metrics.go).
// openStore opens c.DB, giving it a minute; what names the store in the error.
func (c Config) openStore(ctx context.Context, what string, opts persist.OpenOptions) (persist.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	store, err := persist.OpenWith(ctx, c.DB, opts)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s %s: %w", what, redactDSN(c.DB), err)
	}
	return store, nil
}

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
