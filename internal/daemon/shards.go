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
	"github.com/axe-sched/axe/lib/startstop"
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

// shardNode is the mode (serve.go) of --ha with every node scheduling. Shutdown order, each
// step logged with how long it took:
//
//  1. not ready: /readyz answers 503;
//  2. say leaving in the nodes table, so the other nodes look for this node's shards every
//     tenth of a renew interval and take each soon after it is released (step 6);
//  3. stop the workflow service;
//  4. stop the engine (triggering, drain the runs in flight, flush the writer) while the
//     shard loop keeps renewing, so that the runs' ends are written under their shards'
//     epochs;
//  5. stop the minute recorder;
//  6. stop the shard loop, releasing every shard, so that the other nodes take them at
//     once (within a tenth of a renew interval, not a TTL);
//  7. stop the HTTP server;
//  8. close the stores.
type shardNode struct {
	cfg         *Config
	own         *metrics.Set // the node's own metrics (the stores', the loop's)
	leaseStore  persist.Store
	closeStores func() error
	eng         *engine.Engine
	wf          *workflow.Service
	rec         *minuteSeries
	loop        *ha.Shards
	loopp       atomic.Pointer[ha.Shards]
	changesDone chan struct{}
	down        atomic.Bool // not ready: shutting down
}

func (n *shardNode) open(ctx context.Context, cfg *Config, undo *startstop.Undo) (*admin.Server, error) {
	n.cfg = cfg
	log := cfg.Logger
	opts, err := haStoreOptions(*cfg)
	if err != nil {
		return nil, err
	}
	own := opts.Metrics
	n.own = own
	store, err := cfg.openStore(ctx, "store", opts)
	if err != nil {
		return nil, err
	}
	// The shard loop has a pool of its own: a renewal must never wait for a connection the
	// engine's batches and loads hold.
	leaseStore, err := cfg.openStore(ctx, "the lease store", opts)
	if err != nil {
		return nil, errors.Join(err, store.Close())
	}
	n.leaseStore = leaseStore
	n.closeStores = func() error { return errors.Join(leaseStore.Close(), store.Close()) }
	undo.Push("close stores", func(context.Context) error { return n.closeStores() })

	// The engine and the loop need each other: the loop asks the engine which shards it
	// hands over still have runs in flight, the engine asks the loop's gate before each
	// fire and send. Both are built before either starts.
	loopp := &n.loopp
	var srvp atomic.Pointer[admin.Server]
	ecfg := cfg.engineConfig(store)
	GateOnShards(&ecfg, loopp)
	ecfg.ReleaseElsewhere = func(shard int, upstream string) {
		if s := srvp.Load(); s != nil {
			s.ReleaseElsewhere(shard, upstream)
		}
	}
	eng, err := engine.New(ecfg)
	if err != nil {
		return nil, err
	}
	n.eng = eng
	undo.Push("stop engine", eng.Stop)
	n.wf = workflow.New(workflow.Config{Engine: eng.API(), Store: store, Clock: ecfg.Clock, Logger: log})
	cfg.metricSets = func() []*metrics.Set { return []*metrics.Set{own, eng.API().Metrics()} }
	n.rec = newMinuteSeries(eng, log)
	secret, err := peerSecret(ctx, leaseStore)
	if err != nil {
		return nil, err
	}
	srv, err := admin.NewServer(cfg.apiServer(admin.ServerConfig{Addr: cfg.Addr, Engine: eng, Store: store, Version: cfg.Version,
		Logger: log, Minutes: n.rec.points, Sharding: &admin.ShardRouting{NodeID: cfg.NodeID, PeerTLS: cfg.peerTLS,
			PeerToken: cfg.peerToken, PeerSecret: secret, Stopping: n.down.Load}, Workflows: n.wf}))
	if err != nil {
		return nil, err
	}
	srvp.Store(srv)
	return srv, nil
}

// run starts the shard loop and the engine, which schedules the shards the loop takes.
func (n *shardNode) run(ctx context.Context, _ *admin.Server, undo *startstop.Undo) (string, []any, error) {
	cfg, eng := n.cfg, n.eng
	loop, err := ha.NewShards(ha.ShardsConfig{Store: n.leaseStore, NodeID: cfg.NodeID, Advertise: cfg.Advertise,
		TTL: cfg.LeaseTTL, Renew: cfg.LeaseRenew, Logger: cfg.Logger, Metrics: n.own, InFlight: eng.API().Ownership().InFlight,
		HandOverPoint: eng.API().Ownership().HandOverPoint})
	if err != nil {
		return "", nil, err
	}
	n.loop = loop
	n.loopp.Store(loop)
	if err := eng.Start(ctx); err != nil {
		return "", nil, err
	}
	if err := loop.Start(ctx); err != nil {
		return "", nil, err
	}
	if err := n.wf.Start(ctx); err != nil {
		return "", nil, err
	}
	undo.Push("stop workflow service", n.wf.Stop)
	n.changesDone = make(chan struct{})
	go FollowShards(loop, eng, cfg.Logger, n.changesDone)
	n.rec.start()
	return "axe listening; scheduling the shards this node takes", []any{
		"advertise", cfg.Advertise, "store", redactDSN(cfg.DB), "node", cfg.NodeID,
		"lease_ttl", cfg.LeaseTTL, "lease_renew", cfg.LeaseRenew}, nil
}

func (n *shardNode) notReady() { n.down.Store(true) }

func (n *shardNode) stopping() (before, after []startstop.Step) {
	loop := n.loop
	return []startstop.Step{
			{Name: "say leaving (the others look for the shards released)", Run: loop.Leaving},
			{Name: "stop workflow service", Run: n.wf.Stop},
			{Name: "stop engine (triggering, dispatch, writer)", Run: stopEngine(n.eng)},
			{Name: "stop minute recorder (records the last minute)", Run: func(context.Context) error { n.rec.stop(); return nil }},
			{Name: "stop shard loop (releasing every shard)", Run: func(ctx context.Context) error {
				err := loop.Stop(ctx, true)
				// The loop's last changes reach the engine (stopped by now) before the stores
				// close; a change stuck on a stopped engine does not hold the process past its
				// shutdown bound.
				select {
				case <-n.changesDone:
				case <-ctx.Done():
					err = errors.Join(err, fmt.Errorf("the shard loop's last changes were not all applied: %w", ctx.Err()))
				}
				return err
			}},
		}, []startstop.Step{
			{Name: "close stores", Run: func(ctx context.Context) error {
				// Closing waits for the queries in flight; one stuck on a database node that went
				// away does not hold the process past its shutdown bound.
				done := make(chan error, 1)
				go func() { done <- n.closeStores() }()
				select {
				case err := <-done:
					return err
				case <-ctx.Done():
					return fmt.Errorf("the stores did not close: %w", ctx.Err())
				}
			}},
		}
}

// stopEngine stops eng within a part of the shutdown's time, so that the steps after it (the
// release of the leases with their hand-over points above all) have the rest: a drain of
// runs in flight that took the whole bound left the leases to run out, and the next owner
// took the shards as a dead node's, misfire policies and all.
func stopEngine(eng *engine.Engine) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := startstop.Reserve(ctx, 2*time.Second)
		defer cancel()
		return eng.Stop(ctx)
	}
}

// FollowShards hands the shard loop's changes to the engine, in order, until the loop closes
// its channel, then closes done: a shard gained is recovered (and given up again should its
// recovery fail), one handed over drains, one lost is forgotten. The daemon and the bench's
// one-node cluster run it alike.
func FollowShards(loop *ha.Shards, eng *engine.Engine, log interface {
	Error(string, ...any)
}, done chan<- struct{}) {
	defer close(done)
	for ch := range loop.Changes() {
		if ch.Lost.Len() > 0 {
			eng.API().Ownership().Drop(ch.Lost)
		}
		if ch.Draining.Len() > 0 {
			eng.API().Ownership().Drain(ch.Draining)
		}
		if len(ch.Gained) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			err := eng.API().Ownership().Gain(ctx, ch.Gained, ch.HandedOver)
			cancel()
			if err != nil {
				log.Error("cannot recover the shards taken; giving them up for another node", "error", err)
				// Given up from another goroutine: each shard lost is a change on the channel
				// this loop reads, and more of them than its buffer holds (a recovery of 85
				// shards cancelled by a shutdown) blocked this loop on itself, and the
				// shutdown's own last change behind it, past any bound.
				gained := ch.Gained
				go func() {
					for _, f := range gained {
						loop.Lost(f.Shard, f.Epoch, err)
					}
				}()
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

// GateOnShards makes ecfg the engine of a node scheduling by shard under the loop *loopp will
// hold (none yet: every shard is refused): it fires and writes only for the shards the loop
// holds, at their epochs; every request the dispatcher sends asks the loop once more as its
// first byte leaves (ha.Shards.Renewed: the part of the shard gates that no request's shard
// is needed for); and a write the store refused for a shard's fence tells the loop the shard
// is lost. The daemon and the benchmarks that run a sharded engine of their own wire it so.
func GateOnShards(ecfg *engine.Config, loopp *atomic.Pointer[ha.Shards]) {
	ecfg.Sharded = true
	ecfg.ShardGate = func(shard int, epoch int64) error {
		l := loopp.Load()
		if l == nil {
			return model.ErrShardNotHeld
		}
		return l.Holds(shard, epoch)
	}
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
}
