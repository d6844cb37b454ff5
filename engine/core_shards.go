package engine

// Scheduling by shard (scale-out, docs/scale-out.md). An engine built with Config.Sharded
// schedules only the shards it is given: the daemon's shard loop (ha.Shards) holds their
// leases and tells the engine what it gained (Ownership().Gain), what it begins to hand over
// (Drain) and what it no longer holds (Drop). Without Sharded an engine (soleOwner, ownership.go)
// schedules every task, unfenced or under the primary's one epoch, as it always did.
//
// Invariants:
//
//  1. A task is in memory only while its shard is held: loading or ready, or draining for a
//     copy already in memory. Its copy carries the shard's epoch of the moment it went in
//     (task.sepoch, never changed), and every group written about it is fenced by that
//     epoch (persist.Group.Fence), checked inside the batch's transaction. A decision made
//     from a copy of an older epoch can therefore not land: the writer refuses it at the
//     fence, whatever the engine's own view of its shards.
//  2. Nothing of a shard fires or is sent unless the shard loop's gate is open for its epoch
//     (Config.ShardGate): fire asks it before deciding, the dispatcher just before each
//     request leaves. While the gate is closed only because the shard's lease renewal is
//     overdue (model.ErrLeaseDeadline: the shard is still held), a fire is armed again for
//     the same fire time and a run held back is kept unsent (holdUnsent), both until the
//     gate opens or the shard is dropped (docs/scale-out.md, "A stalled database").
//  3. A gained shard is recovered as a start is (core_recover.go): its runs left in flight
//     first, then its window with misfire policies, its dependents and its backfills, each
//     read with the shard filter (persist.WithShards), while the other shards keep firing.
//  4. A dropped shard leaves memory at once: its tasks are evicted, its runs in flight
//     abandoned (their ends would be refused at the fence anyway); the node that takes the
//     shard recovers them from the store, as a promotion does. It writes nothing but this:
//     each abandoned run whose record is durable and which no request of took to the wire
//     is marked held back (core_heldback.go), fenced by the shard's epoch, so that the next
//     owner sends it rather than take it as in doubt, and so is one whose record lands
//     after the drop (sendGate); a mark lands only if no next owner has taken the shard yet.
//  5. A shard being handed over (draining) fires nothing new and starts no run; its runs in
//     flight end and their ends are written under its epoch. InFlight reports it busy
//     until they have and every write fenced by it is durable, so the lease is released
//     only after (ha.ShardsConfig.InFlight).
//  6. A hand-over is no misfire. The giver fires nothing of a shard from its hand-over point
//     (HandOverPoint: the drain's start, or the engine's stop), and the shard loop writes
//     that point with the release. The taker recovers the shard applying no misfire policy
//     (handedOver, adopt: the fires were held in a window up to the point, and such a fire
//     is only ever late) and catches up every fire due, each once with its own time, oldest
//     first (catchupFollow): late by the hand-over's length, never consumed by a misfire or
//     overlap policy. Each fire is still made once: the giver's last fires are durable
//     before its release (InFlight), the taker's first are fenced by its new epoch, and the
//     fire record is unique.
//
// Lock order: a shard's insertion lock (shardSlot.mu) is taken before the task map's lock
// and never while holding a task's lock.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// Phases of a shard on this node.
const (
	shardOff      uint32 = iota // not held
	shardLoading                // held, its recovery under way: fires, but refuses the API
	shardReady                  // held and scheduled
	shardDraining               // held, being handed over: no new fire or run
)

// shardSlot is one shard as this engine holds it.
type shardSlot struct {
	// mu is held shared while a task of the shard goes into memory and exclusively while the
	// shard's epoch or phase changes, so a drop's purge finds every copy inserted before it.
	mu    sync.RWMutex
	epoch atomic.Int64 // the epoch held, 0 when not held
	phase atomic.Uint32
	// writes counts the groups fenced by the shard and not yet done.
	writes atomic.Int64
	// drainedAt is when its hand-over began (ms): nothing of it fired from then on. 0 while
	// it is not being handed over.
	drainedAt atomic.Int64
	// handedOver is, while it is being recovered after a graceful hand-over, the point its
	// previous holder handed it over at (ms); else 0.
	handedOver atomic.Int64
}

// current reports whether t's copy is of the epoch at which its shard is held now (on
// an engine that is not sharded, always).
func (o *shardOwner) current(t *task) bool {
	s := &o.shards[t.shard]
	return s.phase.Load() != shardOff && s.epoch.Load() == t.sepoch
}

// shardGate is nil while a task of shard, in memory at epoch, may fire (firing) or have a
// run decided before sent: the shard held at that epoch, not being handed over when firing,
// and the shard loop's gate open (invariant 2). A run decided before a hand-over began is
// still sent: the lease is still this node's, and its end is written under it.
func (o *shardOwner) shardGate(shard uint8, epoch int64, firing bool) error {
	s := &o.shards[shard]
	switch ph := s.phase.Load(); {
	case ph == shardOff || s.epoch.Load() != epoch:
		return fmt.Errorf("shard %d at epoch %d: %w", shard, epoch, model.ErrShardNotHeld)
	case ph == shardDraining && firing:
		return fmt.Errorf("shard %d is being handed over: %w", shard, model.ErrShardNotHeld)
	}
	if o.cfg.ShardGate != nil {
		return o.cfg.ShardGate(int(shard), epoch)
	}
	return nil
}

// insert puts t in the task map unless a copy of it is there, as tasks.insertIfAbsent
// does; on a sharded engine only while t's shard is held (invariant 1), stamping t with the
// shard's epoch, and replacing a copy of an older epoch. api says the API asks: a shard
// still being recovered or being handed over then refuses with model.ErrShardNotHeld, as does a
// shard not held. It reports whether t went in.
func (o *shardOwner) insert(t *task, api bool) (bool, error) {
	s := &o.shards[t.shard]
	s.mu.RLock()
	defer s.mu.RUnlock()
	ph := s.phase.Load()
	if ph == shardOff || ph == shardDraining || (api && ph == shardLoading) {
		return false, fmt.Errorf("task %q is in shard %d: %w", t.def.Name, t.shard, model.ErrShardNotHeld)
	}
	t.sepoch = s.epoch.Load()
	for {
		if o.tasks.insertIfAbsent(t) {
			return true, nil
		}
		old := o.tasks.get(t.id)
		if old == nil {
			continue
		}
		old.mu.Lock()
		if old.evicted || old.sepoch == t.sepoch {
			old.mu.Unlock()
			if !old.evicted {
				return false, nil
			}
			continue
		}
		// A copy of an older epoch that a drop did not find (it went in while the shard was
		// dropped and taken again): it goes, as the drop would have taken it.
		o.loader.evict(old)
		old.mu.Unlock()
	}
}

// Gain schedules shards taken at the epochs given (invariant 3): they are held at once,
// then recovered in order, each step logged with how long it took: the runs their previous
// owner left in flight, the window (applying misfire policies), the dependents released
// meanwhile, the backfills under way. It returns once they are recovered; a failed recovery
// returns the error, and the caller must give the shards up (they are recovered again by
// whoever takes them next).
//
// A shard of handedOver was handed over by its previous holder, which fired nothing of it
// from the point given (invariant 6): its recovery applies no misfire policy, so the time the
// hand-over took is no misfire, and every fire due runs, late.
func (o *shardOwner) Gain(ctx context.Context, fences []persist.ShardFence, handedOver map[int]int64) error {
	if len(fences) == 0 {
		return nil
	}
	var set model.ShardSet
	for _, f := range fences {
		if f.Shard < 0 || f.Shard >= model.ShardCount || f.Epoch <= 0 {
			return fmt.Errorf("cannot gain shard %d at epoch %d", f.Shard, f.Epoch)
		}
		s := &o.shards[f.Shard]
		s.mu.Lock()
		s.epoch.Store(f.Epoch)
		s.phase.Store(shardLoading)
		s.drainedAt.Store(0)
		s.handedOver.Store(max(0, handedOver[f.Shard]))
		s.mu.Unlock()
		set.Add(f.Shard)
	}
	o.updateRateShare()
	start := o.now()
	err := o.recovery.shards(persist.WithShards(ctx, set), set, fences)
	for _, f := range fences {
		s := &o.shards[f.Shard]
		s.mu.Lock()
		if s.epoch.Load() == f.Epoch && s.phase.Load() == shardLoading {
			if err == nil {
				s.phase.Store(shardReady)
			}
			s.handedOver.Store(0)
		}
		s.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("cannot recover shards %s: %w", set, err)
	}
	o.log.Info("shards recovered: scheduling them", "shards", set.String(), "handed_over", len(handedOver), "took", o.since(start))
	return nil
}

// handedOver is the hand-over point of shard while it is being recovered after a graceful
// hand-over (Gain), else 0.
func (o *shardOwner) handedOver(shard uint8) int64 {
	s := &o.shards[shard]
	if s.phase.Load() != shardLoading {
		return 0
	}
	return s.handedOver.Load()
}

// HandOverPoint is the instant (ms) from which this node fires nothing of shard n: when its
// hand-over began, or when the engine began to stop (a graceful stop hands every shard
// over); 0 while the node may still fire it. The shard loop writes it with the release
// (ha.ShardsConfig.HandOverPoint).
func (o *shardOwner) HandOverPoint(n int) int64 {
	if n < 0 || n >= model.ShardCount {
		return 0
	}
	at := o.shards[n].drainedAt.Load()
	if stop := o.stoppedAt.Load(); stop > 0 && (at == 0 || stop < at) {
		at = stop
	}
	return at
}

// Drain begins handing shards over (invariant 5): from now on nothing of theirs fires
// or starts, and their runs in flight end as usual.
func (o *shardOwner) Drain(set model.ShardSet) {
	now := o.nowMS()
	for _, n := range set.List() {
		s := &o.shards[n]
		s.mu.Lock()
		if s.phase.Load() != shardOff {
			s.phase.Store(shardDraining)
			s.drainedAt.CompareAndSwap(0, now)
		}
		s.mu.Unlock()
	}
	o.updateRateShare()
}

// InFlight returns the shards of set with a run in flight on this node or a write
// fenced by them not yet durable: a shard being handed over is released once it has neither.
func (o *shardOwner) InFlight(set model.ShardSet) model.ShardSet {
	var busy model.ShardSet
	runs := o.runs.byShard()
	for _, n := range set.List() {
		s := &o.shards[n]
		// A shard whose hand-over this engine has not begun yet (Drain comes by the
		// daemon's channel) is busy too: its rate share and its fires stop first.
		if runs[n] > 0 || s.writes.Load() > 0 || s.phase.Load() != shardDraining {
			busy.Add(n)
		}
	}
	return busy
}

// updateRateShare gives the rate gate this node's share of every rate limit: the shards it
// schedules (being taken over included, being handed over not) out of all of them. A shard
// handed over leaves the share before its lease is released (InFlight), and another
// node counts it only once it has taken it, so the shares of the live nodes never add up to
// more than the whole (docs/scale-out.md). A node without shards keeps one shard's share: it
// dispatches nothing anyway.
func (o *shardOwner) updateRateShare() {
	n := max(1, o.heldShards().Len())
	if err := o.gate.lim.SetShare(float64(n) / model.ShardCount); err != nil {
		o.log.Error("cannot set the rate share", "shards", n, "error", err)
	}
}

// Drop forgets shards this node no longer holds (invariant 4): their gate closes, their
// tasks leave memory and their runs in flight are abandoned; the only writes are the
// held-back marks of the runs recorded and never sent (markDropped).
func (o *shardOwner) Drop(set model.ShardSet) {
	if set.Len() == 0 {
		return
	}
	start := o.now()
	for _, n := range set.List() {
		s := &o.shards[n]
		s.mu.Lock()
		s.phase.Store(shardOff)
		s.epoch.Store(0)
		s.drainedAt.Store(0)
		s.handedOver.Store(0)
		s.mu.Unlock()
	}
	// Turned off under each shard's lock: no request of theirs passes its gate from here
	// on (sendGate), so a run recorded and not on the wire now never left this node.
	var unsent []droppedRun
	abandoned := o.runs.abandon(set, func(f *flight) {
		f.t.mu.Lock()
		f.t.runLeft(f.run.Ticket)
		f.t.mu.Unlock()
		if f.recorded.Load() && !f.onWire.Load() {
			unsent = append(unsent, droppedRun{t: f.t, run: f.run, gated: f.gated.Load()})
		}
	})
	if len(unsent) > 0 {
		go o.markDropped(unsent)
	}
	evicted := 0
	for _, t := range o.tasks.all(func(t *task) bool { return set.Has(int(t.shard)) }) {
		t.mu.Lock()
		if !t.evicted {
			o.loader.evict(t)
			evicted++
		}
		t.mu.Unlock()
	}
	o.backfills.set.dropShards(set)
	o.updateRateShare()
	o.log.Warn("shards dropped: their tasks left memory and their runs in flight are the next owner's",
		"shards", set.String(), "tasks", evicted, "runs_abandoned", abandoned, "took", o.since(start))
}

// runEpoch is the epoch a run of t carries, and the shard whose it is: t's shard's on a
// sharded engine; Config.Epoch (the primary's, or 0) and no shard otherwise.
func (o *shardOwner) runEpoch(t *task) (int64, *int) {
	n := int(t.shard)
	return t.sepoch, &n
}

// sendGate is the gate a request of the run of t with ticket asks just before it leaves
// (dispatch.Request.Gate): nil on an engine that is not sharded, whose dispatcher asks
// Config.Dispatch.Gate. The run's record is durable: its flight is marked recorded, and
// marked on the wire by the gate as it lets a request go, under the shard's lock held
// shared and with the shard still held at the epoch. So once Drop has turned the shard
// off (holding that lock), no request of it passes and every flight not marked on the wire
// provably never left (Drop).
//
// A run abandoned with its dropped shard before its record was durable, whose record has
// landed since, is not sent: sendGate marks it held back for the next owner (markDropped)
// and reports it dropped.
func (o *shardOwner) sendGate(t *task, run model.Run) (gate func() error, dropped bool) {
	shard, epoch := t.shard, t.sepoch
	f, dropped := o.runs.recorded(run.Ticket)
	if dropped {
		go o.markDropped([]droppedRun{{t: t, run: run}})
		return nil, true
	}
	return func() error {
		if err := o.shardGate(shard, epoch, false); err != nil || f == nil {
			return err
		}
		s := &o.shards[shard]
		s.mu.RLock()
		defer s.mu.RUnlock()
		if s.phase.Load() == shardOff || s.epoch.Load() != epoch {
			return fmt.Errorf("shard %d at epoch %d: %w", shard, epoch, model.ErrShardNotHeld)
		}
		f.onWire.Store(true)
		return nil
	}, false
}

// where returns the shards whose phase keep accepts: every shard on an engine that
// is not sharded.
func (o *shardOwner) where(keep func(phase uint32) bool) model.ShardSet {
	var set model.ShardSet
	for n := range model.ShardCount {
		if keep(o.shards[n].phase.Load()) {
			set.Add(n)
		}
	}
	return set
}

// fencesOf returns the shards of set with the epochs at which they are held, ascending (0
// on an engine that is not sharded).
func (o *shardOwner) fencesOf(set model.ShardSet) []persist.ShardFence {
	out := make([]persist.ShardFence, 0, set.Len())
	for _, n := range set.List() {
		out = append(out, persist.ShardFence{Shard: n, Epoch: o.shards[n].epoch.Load()})
	}
	return out
}

// heldShards returns the shards scheduled here, being taken over included and being handed
// over not: every shard on an engine that is not sharded.
func (o *shardOwner) heldShards() model.ShardSet {
	return o.where(func(ph uint32) bool { return ph == shardLoading || ph == shardReady })
}

// schedules reports whether this engine schedules shard n (loading, ready or being handed
// over): every shard on an engine that is not sharded.
func (o *shardOwner) schedules(n int) bool {
	return o.shards[n].phase.Load() != shardOff
}

// Sharded reports whether this engine schedules by shard (Config.Sharded).
func (o *shardOwner) Sharded() bool { return true }

// State tells how this engine holds shard n: held (loading, ready or being handed
// over: the results of its runs are taken here) and ready (the API's calls about its tasks
// are served here). An engine that is not sharded holds every shard, ready.
func (o *shardOwner) State(n int) (held, ready bool) {
	if n < 0 || n >= model.ShardCount {
		return false, false
	}
	ph := o.shards[n].phase.Load()
	return ph != shardOff, ph == shardReady
}

// Ready returns the shards whose tasks this engine schedules and whose API calls it
// serves: every shard on an engine that is not sharded.
func (o *shardOwner) Ready() model.ShardSet {
	return o.where(func(ph uint32) bool { return ph == shardReady })
}

// Held returns the shards this engine schedules (loading, ready or being handed over),
// with their epochs, ascending; every shard at epoch 0 on an engine that is not sharded.
func (o *shardOwner) Held() []persist.ShardFence {
	return o.fencesOf(o.where(func(ph uint32) bool { return ph != shardOff }))
}

// apiFences returns the fences of the shards of names for a write the API asks for that
// does not go through the batched writer (a batch of creates): each shard must be
// scheduled here and not being taken over or handed over, else model.ErrShardNotHeld. It returns
// nil on an engine that is not sharded.
func (o *shardOwner) apiFences(names []string) ([]persist.ShardFence, error) {
	var seen model.ShardSet
	var out []persist.ShardFence
	for _, name := range names {
		n := model.ShardOf(name)
		if seen.Has(n) {
			continue
		}
		seen.Add(n)
		s := &o.shards[n]
		if s.phase.Load() != shardReady {
			return nil, fmt.Errorf("task %q is in shard %d: %w", name, n, model.ErrShardNotHeld)
		}
		out = append(out, persist.ShardFence{Shard: n, Epoch: s.epoch.Load()})
	}
	return out, nil
}

// heldFence is the fence of the shard of the task named name at the epoch held now, on a
// sharded engine; model.ErrShardNotHeld when the shard is not held.
func (o *shardOwner) heldFence(name string) (persist.ShardFence, error) {
	n := model.ShardOf(name)
	s := &o.shards[n]
	epoch := s.epoch.Load()
	if s.phase.Load() == shardOff || epoch == 0 {
		return persist.ShardFence{}, fmt.Errorf("task %q is in shard %d: %w", name, n, model.ErrShardNotHeld)
	}
	return persist.ShardFence{Shard: n, Epoch: epoch}, nil
}

// fencedFor returns ctx with the fence of the shard of the task named name at the epoch
// held now (persist.WithShardFences), for a write the store makes outside the batched
// writer about that task (a backfill's row); ctx as it is on an engine that is not sharded.
// It reports model.ErrShardNotHeld when the shard is not held.
func (o *shardOwner) fencedFor(ctx context.Context, name string) (context.Context, error) {
	f, err := o.heldFence(name)
	if err != nil {
		return nil, err
	}
	return persist.WithShardFences(ctx, []persist.ShardFence{f}), nil
}

// readyFenced returns ctx fenced by the shards this engine schedules and serves, at their
// epochs (persist.WithShardFences): ctx as it is on an engine that is not sharded.
func (o *shardOwner) readyFenced(ctx context.Context) context.Context {
	return persist.WithShardFences(ctx, o.fencesOf(o.Ready()))
}

// scheduling returns ctx with the filter of the shards this engine schedules, for the reads
// that load tasks to arm (the window loader): none on an engine that is not sharded.
func (o *shardOwner) scheduling(ctx context.Context) context.Context {
	return persist.WithShards(ctx, o.heldShards())
}

// fenceGroup fences g by the shard of the task it writes (persist.Group.Fence), at t's epoch
// when t is given and else at the epoch held now (a group of run rows or actions written
// outside a task's lock). It reports model.ErrShardNotHeld for a group of a task whose shard is
// not held. Groups of no task (system actions) stay unfenced, as does every group of an
// engine that is not sharded.
func (o *shardOwner) fenceGroup(g *persist.Group, t *task) error {
	if g.Fence.Epoch > 0 {
		return nil
	}
	if t != nil {
		g.Fence = persist.ShardFence{Shard: int(t.shard), Epoch: t.sepoch}
		return nil
	}
	name := groupTaskName(g)
	if name == "" {
		return nil
	}
	f, err := o.heldFence(name)
	if err != nil {
		return fmt.Errorf("cannot write about it: %w", err)
	}
	g.Fence = f
	return nil
}

// groupTaskName is the name of the task g writes about, "" for none.
func groupTaskName(g *persist.Group) string {
	switch {
	case len(g.Creates) > 0:
		return g.Creates[0].Def.Name
	case len(g.Fires) > 0:
		return g.Fires[0].TaskName
	case len(g.Runs) > 0:
		return g.Runs[0].TaskName
	case len(g.Actions) > 0:
		return g.Actions[0].TaskName
	case len(g.DefUpdates) > 0:
		return g.DefUpdates[0].Name
	}
	return ""
}

// holdsShardZero reports whether this node runs the cluster's singleton duties (the pruner,
// the executor registry's verdicts and their alerts): on a sharded engine the holder of
// shard 0, ready; always on one that is not.
func (o *shardOwner) holdsShardZero() bool {
	return o.shards[0].phase.Load() == shardReady
}
