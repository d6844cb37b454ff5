package engine

import (
	"context"
	"fmt"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// One ownership model (docs/design.md; docs/ha.md; docs/scale-out.md). The core asks one
// question of every mode: does this node own this task now, under which fence? Three
// implementations answer it:
//
//   - a single node owns every task, unfenced (soleOwner at epoch 0);
//   - the primary of a primary/backup pair owns every task under its term's epoch, the one
//     Config.Epoch the daemon builds its engine with; its store is fenced by it
//     (persist.Fenced), so the engine writes as a single node does (soleOwner);
//   - a node of a sharded cluster owns the shards it is given, each under its own epoch
//     (shardOwner, core_shards.go).
//
// No other file of the engine asks which mode it runs in.

// Ownership is what the daemon and the API ask of this node's ownership: the shards it
// holds and their hand-overs. A node that is not sharded holds every shard, ready, and its
// hand-overs do nothing.
type Ownership interface {
	// Sharded reports whether the node schedules by shard (Config.Sharded).
	Sharded() bool
	// State tells how the node holds shard n: held (loading, ready or being handed over:
	// the results of its runs are taken here) and ready (the API's calls about its tasks
	// are served here).
	State(n int) (held, ready bool)
	// Ready returns the shards whose tasks the node schedules and whose API calls it serves.
	Ready() model.ShardSet
	// Held returns the shards the node schedules (loading, ready or being handed over),
	// with their epochs, ascending.
	Held() []persist.ShardFence
	// Gain schedules the shards taken at the epochs given, once they are recovered. The
	// shards of handedOver were handed over by their previous holder at the point (ms)
	// given: the fires due from it are fired, late, rather than judged misfires.
	Gain(ctx context.Context, fences []persist.ShardFence, handedOver map[int]int64) error
	// Drain begins handing shards over: nothing of theirs fires or starts any more.
	Drain(set model.ShardSet)
	// HandOverPoint is the instant (ms) from which the node fires nothing of shard n: the
	// start of its drain, or of the engine's stop; 0 while the node may still fire it.
	HandOverPoint(n int) int64
	// InFlight returns the shards of set with a run in flight or a write not yet durable.
	InFlight(set model.ShardSet) model.ShardSet
	// Drop forgets shards the node no longer holds, writing nothing.
	Drop(set model.ShardSet)
}

// ownership is what the core asks of the ownership model.
type ownership interface {
	Ownership
	// start recovers at Start what this node owns from the first moment.
	start(ctx context.Context, now, horizon int64) error
	// current reports whether t's copy is of the epoch at which it is owned now.
	current(t *task) bool
	// shardGate is nil while a task of shard, in memory at epoch, may fire (firing) or have a
	// decided run sent.
	shardGate(shard uint8, epoch int64, firing bool) error
	// insert puts t in the task map unless a copy is there, while it is owned; api: the
	// API asks, and a shard still recovering or handed over refuses.
	insert(t *task, api bool) (bool, error)
	// runEpoch is the epoch a run of t carries, and its shard (nil: none).
	runEpoch(t *task) (int64, *int)
	// sendGate is the gate a request of run, of t, asks before it leaves (nil: the
	// dispatcher's own); the run's record is durable. dropped: the run is not to be sent
	// (its shard dropped from this node before its record was durable).
	sendGate(t *task, run model.Run) (gate func() error, dropped bool)
	// schedules reports whether the node schedules shard n.
	schedules(n int) bool
	// serves tells whether the API's calls about the task named name are served here
	// (ready), or the task's shard moves between nodes (moving).
	serves(name string) (ready, moving bool)
	// apiFences are the fences of a write of the API outside the batched writer.
	apiFences(names []string) ([]persist.ShardFence, error)
	// fencedFor, readyFenced and scheduling narrow ctx: fenced by the task's shard, by the
	// ready shards, filtered to the shards scheduled.
	fencedFor(ctx context.Context, name string) (context.Context, error)
	readyFenced(ctx context.Context) context.Context
	scheduling(ctx context.Context) context.Context
	// fenceGroup fences g by the shard of the task it writes.
	fenceGroup(g *persist.Group, t *task) error
	// handedOver is the hand-over point of shard while the node recovers it after a
	// graceful hand-over, else 0.
	handedOver(shard uint8) int64
	// holdsShardZero: this node runs the cluster's singleton duties.
	holdsShardZero() bool
	// leaseLost logs a write of t refused because the lease it was fenced by is lost.
	leaseLost(t *task)
	// holdUnsent keeps a run of t whose send the shard gate held back (err) while the
	// shard's lease renewal is overdue, and sends it (again) once the gate opens; false: the
	// caller ends the run as it would any refused send (core_heldback.go).
	holdUnsent(t *task, run model.Run, err error, pm *permit, again func(*permit)) bool
}

// Ownership is this node's ownership model, which the daemon's shard loop and the API's
// shard front ask.
func (e *API) Ownership() Ownership { return e.own }

// soleOwner is a node that owns every task: a single node (epoch 0) or the primary of a
// pair (its term's epoch).
type soleOwner struct {
	e     *Engine
	epoch int64
}

func (o *soleOwner) Sharded() bool                { return false }
func (o *soleOwner) State(int) (held, ready bool) { return true, true }
func (o *soleOwner) Ready() model.ShardSet        { return model.AllShards() }
func (o *soleOwner) Gain(context.Context, []persist.ShardFence, map[int]int64) error {
	return nil
}
func (o *soleOwner) Drain(model.ShardSet)                                            {}
func (o *soleOwner) HandOverPoint(int) int64                                         { return 0 }
func (o *soleOwner) handedOver(uint8) int64                                          { return 0 }
func (o *soleOwner) InFlight(model.ShardSet) (none model.ShardSet)                   { return none }
func (o *soleOwner) Drop(model.ShardSet)                                             {}
func (o *soleOwner) current(*task) bool                                              { return true }
func (o *soleOwner) shardGate(uint8, int64, bool) error                              { return nil }
func (o *soleOwner) insert(t *task, _ bool) (bool, error)                            { return o.e.tasks.insertIfAbsent(t), nil }
func (o *soleOwner) runEpoch(*task) (int64, *int)                                    { return o.epoch, nil }
func (o *soleOwner) sendGate(*task, model.Run) (func() error, bool)                  { return nil, false }
func (o *soleOwner) schedules(int) bool                                              { return true }
func (o *soleOwner) serves(string) (ready, moving bool)                              { return true, false }
func (o *soleOwner) apiFences([]string) ([]persist.ShardFence, error)                { return nil, nil }
func (o *soleOwner) readyFenced(ctx context.Context) context.Context                 { return ctx }
func (o *soleOwner) scheduling(ctx context.Context) context.Context                  { return ctx }
func (o *soleOwner) fenceGroup(*persist.Group, *task) error                          { return nil }
func (o *soleOwner) holdsShardZero() bool                                            { return true }
func (o *soleOwner) holdUnsent(*task, model.Run, error, *permit, func(*permit)) bool { return false }
func (o *soleOwner) fencedFor(ctx context.Context, _ string) (context.Context, error) {
	return ctx, nil
}

// Held is every shard at epoch 0.
func (o *soleOwner) Held() []persist.ShardFence {
	out := make([]persist.ShardFence, 0, model.ShardCount)
	for n := range model.ShardCount {
		out = append(out, persist.ShardFence{Shard: n})
	}
	return out
}

// start runs the recovery of Start (recovery.go), then resumes the backfills.
func (o *soleOwner) start(ctx context.Context, now, horizon int64) error {
	if err := o.e.recovery.atStart(ctx, now, horizon); err != nil {
		return err
	}
	return o.e.backfills.recover(ctx)
}

func (o *soleOwner) leaseLost(t *task) {
	o.e.log.Error("lease lost: this scheduler no longer owns the store", "task", t.def.Name)
}

// shardOwner is a node of a sharded cluster (core_shards.go).
type shardOwner struct{ *Engine }

// start restores the executor registry, which every node shares: every shard is recovered
// when it is gained (Gain).
func (o *shardOwner) start(ctx context.Context, _, _ int64) error {
	o.updateRateShare() // no shard yet
	if err := o.executors.restore(ctx, false); err != nil {
		return fmt.Errorf("cannot restore executors: %w", err)
	}
	return nil
}

// serves: the shard of name is ready here, or moving (being taken over or handed over).
func (o *shardOwner) serves(name string) (ready, moving bool) {
	switch o.shards[model.ShardOf(name)].phase.Load() {
	case shardReady:
		return true, false
	case shardLoading, shardDraining:
		return false, true
	}
	return false, false
}

func (o *shardOwner) leaseLost(t *task) {
	// Its shard moved to another node: the writer logged the shard once, and the engine
	// drops the shard's tasks.
	o.log.Debug("write refused: the task's shard is another node's now", "task", t.def.Name, "shard", t.shard)
}

// newOwnership is the ownership model cfg asks for: the one place that reads the mode.
func newOwnership(e *Engine) ownership {
	if e.cfg.Sharded {
		return &shardOwner{e}
	}
	return &soleOwner{e: e, epoch: e.cfg.Epoch}
}
