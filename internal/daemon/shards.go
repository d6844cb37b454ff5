package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/ha"
	"github.com/axe-sched/axe/internal/startstop"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/workflow"
)

// This file runs `axe serve --ha` as one of several nodes that all schedule (scale-out,
// docs/scale-out.md): the shard loop (ha.Shards) holds this node's share of the 256 shards,
// and one engine, started once and never replaced, schedules the shards the loop tells it
// of: it recovers each shard gained (its runs left in flight, its window with misfire
// policies, its dependents, its backfills) while the others keep firing, stops firing a
// shard it hands over and lets that shard's runs end, and forgets a shard lost. Every write
// of the engine about a task is fenced by its shard's epoch, and every send asks the loop's
// gate for it. The API (admin's shard routing) serves each write on the node that schedules
// its task's shard and passes the others on.

// HA modes of Config.HAMode.
const (
	// HAModeShards: every node schedules a share of the shards (the default).
	HAModeShards = "shards"
	// HAModePrimary: one primary schedules everything; the others are its backups (ha.go).
	HAModePrimary = "primary"
)

// checkHAMode refuses a mode that is neither.
func checkHAMode(mode string) error {
	switch mode {
	case "", HAModeShards, HAModePrimary:
		return nil
	}
	return fmt.Errorf("ha-mode: must be %s or %s, got %q", HAModeShards, HAModePrimary, mode)
}

// serveShards is Serve for --ha with every node scheduling. Shutdown order, each step logged
// with how long it took:
//
//  1. not ready: /readyz answers 503;
//  2. say leaving in the nodes table, so the other nodes look for this node's shards every
//     tenth of a renew interval and take each soon after it is released (step 4);
//  3. stop the engine (triggering, drain the runs in flight, flush the writer) while the
//     shard loop keeps renewing, so that the runs' ends are written under their shards'
//     epochs, and the minute recorder;
//  4. stop the shard loop, releasing every shard, so that the other nodes take them at
//     once (within a tenth of a renew interval, not a TTL);
//  5. stop the HTTP server;
//  6. close the stores.
func serveShards(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	opts, err := haStoreOptions(cfg)
	if err != nil {
		return err
	}
	own := opts.Metrics
	store, err := cfg.openStore(ctx, "store", opts)
	if err != nil {
		return err
	}
	// The shard loop has a pool of its own: a renewal must never wait for a connection the
	// engine's batches and loads hold.
	leaseStore, err := cfg.openStore(ctx, "the lease store", opts)
	if err != nil {
		return errors.Join(err, store.Close())
	}
	closeStores := func() error { return errors.Join(leaseStore.Close(), store.Close()) }
	// undo, on a failed start, stops what has started, last first, and closes the stores.
	var started []func(context.Context) error
	undo := func(err error) error {
		errs := []error{err}
		for i := len(started) - 1; i >= 0; i-- {
			errs = append(errs, started[i](context.Background()))
		}
		return errors.Join(append(errs, closeStores())...)
	}

	// The engine and the loop need each other: the loop asks the engine which shards it
	// hands over still have runs in flight, the engine asks the loop's gate before each
	// fire and send. Both are built before either starts.
	var loopp atomic.Pointer[ha.Shards]
	var srvp atomic.Pointer[admin.Server]
	ecfg := cfg.engineConfig(store)
	ecfg.Sharded = true
	ecfg.ShardGate = func(shard int, epoch int64) error {
		l := loopp.Load()
		if l == nil {
			return model.ErrShardNotHeld
		}
		return l.Holds(shard, epoch)
	}
	// Every request the dispatcher sends asks the loop once more as its first byte leaves
	// (ha.Shards.Renewed): the part of the shard gates that no request's shard is needed for.
	ecfg.Dispatch.Gate = func() error {
		if l := loopp.Load(); l != nil {
			return l.Renewed()
		}
		return nil
	}
	ecfg.Writer.ShardLost = func(f persist.ShardFence, err error) {
		// Told on the writer's goroutine, which must not wait for the loop's channel (the
		// engine, busy recovering a shard, may be the one that reads it).
		if l := loopp.Load(); l != nil {
			go l.Lost(f.Shard, f.Epoch, err)
		}
	}
	ecfg.ReleaseElsewhere = func(shard int, upstream string) {
		if s := srvp.Load(); s != nil {
			s.ReleaseElsewhere(shard, upstream)
		}
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		return undo(err)
	}
	started = append(started, eng.Stop)
	wf := workflow.New(workflow.Config{Engine: eng, Store: store, Clock: ecfg.Clock, Logger: log})
	cfg.metricSets = func() []*metrics.Set { return []*metrics.Set{own, eng.Metrics()} }
	var stopping atomic.Bool
	rec := newMinuteSeries(eng, log)
	secret, err := peerSecret(ctx, leaseStore)
	if err != nil {
		return undo(err)
	}
	srv, err := admin.NewServer(cfg.apiServer(admin.ServerConfig{Addr: cfg.Addr, Engine: eng, Store: store, Version: cfg.Version,
		Logger: log, Minutes: rec.points, Sharding: &admin.ShardRouting{NodeID: cfg.NodeID, PeerTLS: cfg.peerTLS,
			PeerToken: cfg.peerToken, PeerSecret: secret, Stopping: stopping.Load}, Workflows: wf}))
	if err != nil {
		return undo(err)
	}
	srvp.Store(srv)
	if err := srv.Start(ctx); err != nil {
		return undo(err)
	}
	started = append(started, srv.Stop)
	if cfg.Advertise == "" {
		cfg.Advertise = cfg.scheme() + "://" + srv.Addr()
	}
	loop, err := ha.NewShards(ha.ShardsConfig{Store: leaseStore, NodeID: cfg.NodeID, Advertise: cfg.Advertise,
		TTL: cfg.LeaseTTL, Renew: cfg.LeaseRenew, Logger: log, Metrics: own, InFlight: eng.Ownership().InFlight})
	if err != nil {
		return undo(err)
	}
	loopp.Store(loop)
	if err := eng.Start(ctx); err != nil {
		return undo(err)
	}
	if err := loop.Start(ctx); err != nil {
		return undo(err)
	}
	if err := wf.Start(ctx); err != nil {
		return undo(err)
	}
	started = append(started, wf.Stop)
	changesDone := make(chan struct{})
	go followShards(loop, eng, log, changesDone)
	rec.start()
	log.Info("axe listening; scheduling the shards this node takes", "addr", cfg.scheme()+"://"+srv.Addr(),
		"advertise", cfg.Advertise, "store", redactDSN(cfg.DB), "node", cfg.NodeID,
		"lease_ttl", cfg.LeaseTTL, "lease_renew", cfg.LeaseRenew)
	if cfg.OnListen != nil {
		cfg.OnListen(srv.Addr())
	}

	<-ctx.Done()
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	sctx, scancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer scancel()
	return startstop.Steps(sctx, log, nil, "shutdown: ",
		startstop.Step{Name: "not ready", Run: func(context.Context) error { stopping.Store(true); return nil }},
		startstop.Step{Name: "say leaving (the others look for the shards released)", Run: loop.Leaving},
		startstop.Step{Name: "stop workflow service", Run: wf.Stop},
		startstop.Step{Name: "stop engine (triggering, dispatch, writer)", Run: eng.Stop},
		startstop.Step{Name: "stop minute recorder (records the last minute)", Run: func(context.Context) error { rec.stop(); return nil }},
		startstop.Step{Name: "stop shard loop (releasing every shard)", Run: func(ctx context.Context) error {
			err := loop.Stop(ctx, true)
			// The loop's last changes reach the engine (stopped by now) before the stores
			// close; a change stuck on a stopped engine does not hold the process past its
			// shutdown bound.
			select {
			case <-changesDone:
			case <-ctx.Done():
				err = errors.Join(err, fmt.Errorf("the shard loop's last changes were not all applied: %w", ctx.Err()))
			}
			return err
		}},
		startstop.Step{Name: "stop HTTP server", Run: srv.Stop},
		startstop.Step{Name: "close stores", Run: func(ctx context.Context) error {
			// Closing waits for the queries in flight; one stuck on a database node that went
			// away does not hold the process past its shutdown bound.
			done := make(chan error, 1)
			go func() { done <- closeStores() }()
			select {
			case err := <-done:
				return err
			case <-ctx.Done():
				return fmt.Errorf("the stores did not close: %w", ctx.Err())
			}
		}})
}

// followShards hands the shard loop's changes to the engine, in order, until the loop closes
// its channel: a shard gained is recovered (and given up again should its recovery fail),
// one handed over drains, one lost is forgotten.
func followShards(loop *ha.Shards, eng *engine.Engine, log interface {
	Error(string, ...any)
}, done chan<- struct{}) {
	defer close(done)
	for ch := range loop.Changes() {
		if ch.Lost.Len() > 0 {
			eng.Ownership().Drop(ch.Lost)
		}
		if ch.Draining.Len() > 0 {
			eng.Ownership().Drain(ch.Draining)
		}
		if len(ch.Gained) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			err := eng.Ownership().Gain(ctx, ch.Gained)
			cancel()
			if err != nil {
				log.Error("cannot recover the shards taken; giving them up for another node", "error", err)
				for _, f := range ch.Gained {
					loop.Lost(f.Shard, f.Epoch, err)
				}
			}
		}
	}
}

// peerTokenOf is the token a node presents on the calls it makes of the other nodes: --token,
// else the first write-scope token of the token file that holds its secret, else none.
func peerTokenOf(single string, entries []admin.TokenEntry) string {
	if single != "" {
		return single
	}
	for _, e := range entries {
		if e.Scope == admin.ScopeWrite && !strings.HasPrefix(e.Token, "sha256:") {
			return e.Token
		}
	}
	return ""
}
