package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/ha"
	"github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// HA modes of Config.HAMode.
const (
	// HAModePrimary: the engine is the primary of one lease (asPrimary).
	HAModePrimary = "primary"
	// HAModeShards: the engine is the only node of a sharded cluster and schedules all 256
	// shards under their own leases and epochs, as `axe serve --ha` (the default mode) runs
	// one node (shardNode).
	HAModeShards = "shards"
)

// shardNode makes the phase's engine the one node of a sharded cluster, wired as the daemon's
// serveShards wires one: the engine schedules only the shards a shard loop (ha.Shards) holds,
// every fire and send asks the loop's gate, every write is fenced by its shard's epoch. Call
// it before engine.New; call the returned start after the engine started: it starts the loop
// on a lease store of its own (as the daemon does), hands the loop's changes to the engine
// and returns once all 256 shards are recovered, with a stop to call after the engine's.
func shardNode(store persist.Store, ecfg *engine.Config) func(ctx context.Context, dsn string, eng *engine.Engine, log *slog.Logger) (func(), error) {
	var loopp atomic.Pointer[ha.Shards]
	daemon.GateOnShards(ecfg, &loopp)
	return func(ctx context.Context, dsn string, eng *engine.Engine, log *slog.Logger) (func(), error) {
		leases, err := persist.OpenWith(ctx, dsn, persist.OpenOptions{Metrics: processMetrics})
		if err != nil {
			return nil, err
		}
		loop, err := ha.NewShards(ha.ShardsConfig{Store: leases, NodeID: "bench", Advertise: "http://127.0.0.1:0",
			Logger: log, Metrics: processMetrics, InFlight: eng.API().Ownership().InFlight,
			HandOverPoint: eng.API().Ownership().HandOverPoint})
		if err != nil {
			_ = leases.Close()
			return nil, fmt.Errorf("cannot create the shard loop: %w", err)
		}
		loopp.Store(loop)
		if err := loop.Start(ctx); err != nil {
			_ = leases.Close()
			return nil, fmt.Errorf("cannot start the shard loop: %w", err)
		}
		done := make(chan struct{})
		go daemon.FollowShards(loop, eng, log, done)
		stop := func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = loop.Stop(sctx, true)
			<-done
			_ = leases.Close()
		}
		wait := time.NewTimer(haWaitDefault)
		defer wait.Stop()
		for eng.API().Ownership().Ready().Len() < model.ShardCount {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-wait.C:
				stop()
				return nil, fmt.Errorf("cannot take and recover every shard within %s", haWaitDefault)
			case <-ctx.Done():
				stop()
				return nil, fmt.Errorf("cannot take every shard: %w", ctx.Err())
			}
		}
		return stop, nil
	}
}
