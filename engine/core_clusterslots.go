package engine

// Concurrency limits on a sharded cluster (docs/design.md, "Concurrency limits"; docs/scale-out.md).
//
// Every node schedules its own shards, so no node's memory sees every run of a limit. On a
// sharded engine the slots of the limited groups and keys are rows of the store
// (persist/slots.go): a run holds one row per limit it counts in, taken in a transaction that
// locks the limit's row, counts its rows and inserts the new ones only if they fit, under the
// fence of the run's shard. The gate in memory (core_concgate.go) still counts this node's
// runs and holds its waiting fires, in the same order; what changes is who lets a waiter go:
//
//   - A fire of a limited group or key always queues (offerCluster) and the slot loop
//     (clusterSlots.loop) claims, in one transaction, a slot for the best waiters of every
//     limit, in their order. A claim granted takes its slot in memory too and goes on to the
//     rate gate and fire, as concLoop's admissions do, on a goroutine of the pass's own while
//     the loop claims the next pass (at most two passes' grants wait to fire); one refused
//     waits for the next pass.
//     A fire of a group and key without a limit takes its slot in memory at once, as before.
//   - The loop runs when a slot of this node frees, when a fire queues, and every
//     clusterPoll while fires wait: a slot freed by another node is seen at the next poll
//     (no node tells another; the store is the only thing they share).
//   - A slot's rows are named by the run's ticket (predicted when the fire queues:
//     scheduledTicket of the entry's fire time and attempt; fire checks it is the run's) and
//     deleted when the run leaves e.runs (after its end action, as the gate in memory gives
//     a slot back), by the same loop, so that a release always reaches the store before a
//     later claim of the same ticket. A pass that claims takes every release along; one that
//     only gives back waits for more (giveBack), and a pass claims at most twice as many as
//     the one before (clusterClaimFirst), so that a burst's first grants fire sooner.
//   - A node dies holding slots: its rows stay, counting, until the next owner of each of its
//     shards has adopted the runs left in flight there (recoverShards): then the rows of the
//     runs it did not find in flight are deleted and those it adopted are kept at its epoch
//     (ReconcileSlots). An HTTP run it records lost keeps a row of its own until its deadline
//     (holdLost), as the gate in memory keeps its slot; the row's ticket names the deadline,
//     so a later owner of the shard keeps it until then too (reconcile). The loop writes the
//     holds queued (holdRows) first in its pass, so before the release of the lost run's own
//     rows, and those of a recovery together (writeHolds).
//   - A shard dropped with runs in flight (another node took it) keeps their rows: its next
//     owner adopts them.
//
// The limits themselves are set on every node at once (the API fans the call out) and read
// again from the store every clusterRefresh, so a node that missed a change catches up.

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wheel"
)

// clusterPoll is how often a node with fires waiting for a slot tries again without being
// woken: a slot freed by another node is taken no later than that. Each try is one short
// transaction per node, only while fires wait.
const clusterPoll = 50 * time.Millisecond

// clusterRefresh is how often a sharded node reads the limits again from the store.
const clusterRefresh = 5 * time.Second

// clusterClaimBatch bounds the claims of one pass: a burst of fires of a generous limit is
// claimed in a few transactions, each a few statements (persist.slotChunk rows each).
const clusterClaimBatch = 4096

// clusterClaimFirst bounds the claims of a pass after one of none; each pass after may claim
// twice as many as the one before, up to clusterClaimBatch. A burst's first grants then fire
// while the next, larger pass is claimed, instead of the node's sends standing idle through
// a first transaction of thousands of rows (the grants of one pass fire while the next is
// claimed, and a claim takes about half as long as the fires of as many).
const clusterClaimFirst = 256

// clusterReleaseLinger and clusterReleaseBatch: a pass that only gives slots back (no fire of
// this node waits) waits until clusterReleaseBatch slots are to go or the first of them has
// waited clusterReleaseLinger, so that the rows of a burst's ended runs go in a few large
// statements rather than in a transaction per few runs. A pass that claims takes every
// release along at once.
const (
	clusterReleaseLinger = 25 * time.Millisecond
	clusterReleaseBatch  = 1000
)

// clusterSlots takes and gives back the slots of limited groups and keys in the store.
type clusterSlots struct {
	e  *gates
	g  *concGate
	st persist.SlotStore

	mu      sync.Mutex
	rel     []persist.SlotRelease // slots given back, not yet deleted
	relAt   time.Time             // when the first of rel was given back
	holds   []persist.SlotRow     // rows of runs in flight over the limit, not yet written (holdRows)
	tracked map[limitRef]bool     // every limit this node has enforced: its runs' rows are deleted at their end
	reqs    []clusterReq          // reconciles asked for
	wake    chan struct{}
	wanting bool          // the last pass left waiting fires of this node in the store (loop only)
	claimed int           // the claims of the last pass (loop only): the next claims twice as many
	firing  chan struct{} // closed when the last pass's grants are fired (loop only; nil: none)
	stopped chan struct{} // closed when the loop has returned
}

// clusterReq is a reconcile of shards gained, done by the loop.
type clusterReq struct {
	fences []persist.ShardFence
	done   chan error
}

// initClusterSlots gives the gates of a node that shares its limits with others their slot
// loop (started by Start).
func (e *gates) initClusterSlots() {
	if !e.acrossNodes {
		return
	}
	st, ok := e.store.(persist.SlotStore)
	if !ok {
		return // a store without slots: loadLimits refuses the limits
	}
	e.conc.cl = &clusterSlots{e: e, g: e.conc, st: st, tracked: map[limitRef]bool{},
		wake: make(chan struct{}, 1), stopped: make(chan struct{})}
}

func (c *clusterSlots) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// track marks r as enforced by this node: the rows of its runs are deleted when they end.
func (c *clusterSlots) track(r limitRef) {
	c.mu.Lock()
	c.tracked[r] = true
	c.mu.Unlock()
}

func (c *clusterSlots) tracks(group, key string) bool {
	gr, kr, hasKey := refs(group, key)
	var pr limitRef // the pattern limit a key without its own has (core_keys.go)
	if hasKey {
		c.g.mu.Lock()
		if p, _ := c.g.patternLocked(key); p != "" {
			pr = limitRef{model.LimitKey, p}
		}
		c.g.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tracked[gr] || (hasKey && c.tracked[kr]) || (pr.name != "" && c.tracked[pr])
}

// released queues the deletion of sl's rows: the run left e.runs, or a slot taken for a fire
// was not used. A slot kept for the shard's next owner (keep) or of a limit this node never
// enforced has none to delete.
func (c *clusterSlots) released(sl concSlot) {
	if sl.ticket == "" || sl.keep || !c.tracks(sl.group, sl.key) {
		return
	}
	c.mu.Lock()
	if len(c.rel) == 0 {
		c.relAt = c.e.clk.Now()
	}
	c.rel = append(c.rel, persist.SlotRelease{Ticket: sl.ticket, Epoch: sl.epoch})
	c.mu.Unlock()
	c.poke()
}

// limitedRefs returns the limits with a max among group's and key's. Caller holds g.mu.
func (g *concGate) limitedRefsLocked(group, key string) []persist.SlotRef {
	gr, kr, hasKey := refs(group, key)
	var out []persist.SlotRef
	if s := g.st[gr]; s != nil && s.max > 0 {
		out = append(out, persist.SlotRef{Kind: gr.kind, Name: gr.name})
	}
	if hasKey {
		max := 0
		if s := g.st[kr]; s != nil {
			max = s.max
		} else {
			_, max = g.patternLocked(key) // a key of a pattern with no run here yet
		}
		if max > 0 {
			out = append(out, persist.SlotRef{Kind: kr.kind, Name: kr.name})
		}
	}
	return out
}

// offerCluster is offer on a sharded engine: a fire of a group and key without a limit takes
// its slot at once; one of a limited group or key queues, and the slot loop claims its slot
// in the store for the run of ticket, shard at epoch. The caller holds the task's mu.
func (g *concGate) offerCluster(id int64, ent *wheel.Entry[*task], group, key, ticket string, shard uint8, epoch int64) (concSlot, bool) {
	gr, kr, hasKey := refs(group, key)
	g.mu.Lock()
	if old := g.byTask[id]; old != nil {
		g.removeLocked(old)
	}
	var on limitRef
	switch {
	case g.st[gr] != nil && g.st[gr].max > 0:
		on = gr
	case hasKey && g.state(kr).max > 0: // its own limit or its pattern's (core_keys.go)
		on = kr
	default:
		sl := g.takeLocked(group, key)
		g.mu.Unlock()
		return sl, true
	}
	g.seq++
	w := &concWaiter{id: id, ent: ent, group: group, key: key, seq: g.seq, first: g.clk.Now(),
		ticket: ticket, shard: shard, epoch: epoch}
	g.queueLocked(w, on)
	g.mu.Unlock()
	g.cl.poke()
	return concSlot{}, false
}

// fireTicket is the ticket of the run the fire of t's armed entry at its nominal time sched
// would make (decideFire, fireParallel). Caller holds t.mu.
func (t *task) fireTicket(sched int64) string {
	if t.allowsAll() {
		return scheduledTicket(t.id, sched, 1)
	}
	attempt := 1
	if t.rt.State == model.StateRetrying {
		attempt = t.rt.Attempt
	}
	return scheduledTicket(t.id, sched, attempt)
}

// offerFire asks the gate for the slot of the fire of t's entry ent at sched: offer, or
// offerCluster on a sharded engine. A slot taken for another ticket (the task's state moved
// while its fire waited) is given back first. Caller holds t.mu.
func (e *gates) offerFire(t *task, ent *wheel.Entry[*task], sched int64, adm *admission) bool {
	if adm.slot.held && adm.slot.ticket != "" && adm.slot.ticket != t.fireTicket(sched) {
		e.conc.release(adm.slot)
		adm.slot, adm.waited = concSlot{}, ""
	}
	if adm.slot.held {
		return true
	}
	var sl concSlot
	var ok bool
	if e.conc.cl != nil {
		sl, ok = e.conc.offerCluster(t.id, ent, t.def.Group, t.concKey(), t.fireTicket(sched), t.shard, t.sepoch)
	} else {
		sl, ok = e.conc.offer(t.id, ent, t.def.Group, t.concKey())
	}
	if ok {
		adm.slot = sl
	}
	return ok
}

// claim is one waiter the loop asks a slot for.
type claim struct {
	w   *concWaiter
	max int // the limit it waits on, for the note
}

// collect returns the best waiters of every limit, as claims: per limit at most its max
// (more cannot fit), best first, at most batch in all.
func (c *clusterSlots) collect(batch int) ([]claim, []persist.SlotClaim) {
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []claim
	var pc []persist.SlotClaim
	seen := map[*concWaiter]bool{}
	for _, s := range g.waiting {
		if s.pat != "" && s.used == 0 && !g.roomLocked(s) {
			continue // a key of a pattern past its bound of live keys on this node
		}
		n := len(s.q) // a limit removed: every waiter goes (collect's batch bounds them)
		if s.max > 0 {
			n = min(n, s.max) // more than max cannot fit
		}
		for _, w := range s.q.best(min(n, batch)) {
			if seen[w] || len(out) >= batch {
				continue
			}
			seen[w] = true
			refs := g.limitedRefsLocked(w.group, w.key)
			out = append(out, claim{w: w, max: s.max})
			pc = append(pc, persist.SlotClaim{Ticket: w.ticket, Shard: int(w.shard), Epoch: w.epoch, Refs: refs,
				Priority: int(w.ent.Priority), FireAt: w.ent.When, Since: w.first.UnixMilli()})
		}
	}
	// Best first across limits: the store grants them in this order.
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		if before(out[a].w, out[b].w) {
			return -1
		}
		if before(out[b].w, out[a].w) {
			return 1
		}
		return 0
	})
	so, sp := make([]claim, len(out)), make([]persist.SlotClaim, len(out))
	for i, j := range idx {
		so[i], sp[i] = out[j], pc[j]
	}
	return so, sp
}

// best returns the k best waiters of h, best first, without touching h: a walk of the heap
// from its root that always goes on with the best waiter seen and not taken, O(k log k)
// whatever the waiters (a burst has thousands).
func (h waitHeap) best(k int) []*concWaiter {
	k = min(k, len(h))
	if k <= 0 {
		return nil
	}
	out := make([]*concWaiter, 0, k)
	front := idxHeap{h: h, i: []int{0}}
	for len(out) < k {
		i := heap.Pop(&front).(int)
		out = append(out, h[i])
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < len(h) {
				heap.Push(&front, c)
			}
		}
	}
	return out
}

// idxHeap is a heap of indices of h, best waiter first (waitHeap.best).
type idxHeap struct {
	h waitHeap
	i []int
}

func (x idxHeap) Len() int           { return len(x.i) }
func (x idxHeap) Less(a, b int) bool { return before(x.h[x.i[a]], x.h[x.i[b]]) }
func (x idxHeap) Swap(a, b int)      { x.i[a], x.i[b] = x.i[b], x.i[a] }
func (x *idxHeap) Push(v any)        { x.i = append(x.i, v.(int)) }
func (x *idxHeap) Pop() any {
	v := x.i[len(x.i)-1]
	x.i = x.i[:len(x.i)-1]
	return v
}

// loop takes and gives back slots in the store until ctx ends.
func (c *clusterSlots) loop(ctx context.Context) {
	defer c.e.loopsWG.Done()
	defer func() {
		close(c.stopped)
		c.flush() // what was queued while the loop stopped; holdRows writes what comes after
	}()
	refresh := c.e.now().Add(clusterRefresh)
	for {
		c.pass(ctx)
		if now := c.e.now(); !now.Before(refresh) {
			c.refresh(ctx)
			refresh = now.Add(clusterRefresh)
		}
		wait := clusterRefresh
		if c.g.nwait.Load() > 0 {
			wait = clusterPoll
		}
		if d, ok := c.releaseDue(); ok {
			wait = min(wait, max(d, time.Millisecond)) // the slots given back that wait for more
		}
		t := c.e.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			c.fired() // a grant not fired gives its slot back (fire, stopping) before the flush
			c.flush()
			return
		case <-c.wake:
		case <-t.C():
		}
		t.Stop()
	}
}

// flush deletes the slots given back before the engine stopped.
func (c *clusterSlots) flush() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.mu.Lock()
	rel, holds := c.rel, c.holds
	c.rel, c.holds = nil, nil
	c.mu.Unlock()
	c.writeHolds(holds)
	if len(rel) == 0 {
		return
	}
	if err := c.st.ReleaseSlots(ctx, rel); err != nil {
		c.e.log.Warn("concurrency slots not given back at stop: the shards' next owners delete them", "slots", len(rel), "error", err)
	}
}

// pass deletes the slots given back, reconciles the shards gained, and claims slots for the
// best waiters, in that order.
func (c *clusterSlots) pass(ctx context.Context) {
	c.mu.Lock()
	rel, relAt, reqs, holds := c.rel, c.relAt, c.reqs, c.holds
	c.rel, c.reqs, c.holds = nil, nil, nil
	c.mu.Unlock()
	c.writeHolds(holds) // before the releases and reconciles queued with or after them
	if len(reqs) > 0 {
		// The runs in flight a reconcile keeps include the last pass's grants.
		c.fired()
		if len(rel) > 0 {
			if err := c.st.ReleaseSlots(ctx, rel); err != nil {
				c.requeue(rel)
				c.e.log.Warn("cannot give concurrency slots back; trying again", "slots", len(rel), "error", err)
			}
			rel = nil
		}
		for _, r := range reqs {
			r.done <- c.reconcile(ctx, r.fences)
		}
	}
	claims, pc := c.collect(min(clusterClaimBatch, max(clusterClaimFirst, 2*c.claimed)))
	c.claimed = len(pc)
	if len(pc) == 0 && !c.wanting {
		c.giveBack(ctx, rel, relAt)
		return
	}
	outs, _, err := c.st.TakeSlots(ctx, c.e.cfg.NodeID, rel, pc, c.e.nowMS())
	if err != nil {
		c.requeue(rel)
		if ctx.Err() == nil {
			c.e.log.Warn("cannot take concurrency slots; trying again", "claims", len(pc), "releases", len(rel), "error", err)
		}
		return
	}
	// While a claim was refused this node's best waiting fires are in the store, and the
	// next pass (a poll at the latest) writes them again, or deletes them.
	c.wanting = slices.Contains(outs, persist.SlotFull)
	type admit struct {
		ent  *wheel.Entry[*task]
		adm  admission
		wait time.Duration
	}
	var go_ []admit
	var undo []persist.SlotRelease
	g := c.g
	g.mu.Lock()
	now := g.clk.Now()
	for i, cl := range claims {
		w := cl.w
		switch outs[i] {
		case persist.SlotGranted:
			if g.byTask[w.id] != w {
				// It stopped waiting meanwhile (its task was disarmed or fired again): the
				// rows taken for it go back.
				undo = append(undo, persist.SlotRelease{Ticket: w.ticket, Epoch: w.epoch})
				continue
			}
			g.removeLocked(w)
			sl := g.takeLocked(w.group, w.key)
			sl.ticket, sl.epoch = w.ticket, w.epoch
			a := admission{slot: sl}
			wait := now.Sub(w.first)
			if wait >= clusterPoll {
				a.waited = "waited " + wait.Round(time.Millisecond).String() + " for concurrency limit " + w.on.String() +
					" (" + strconv.Itoa(cl.max) + ")"
			}
			go_ = append(go_, admit{ent: w.ent, adm: a, wait: wait})
		case persist.SlotShardLost:
			if g.byTask[w.id] == w {
				g.removeLocked(w) // its shard is another node's now: the fire goes with it
			}
		}
	}
	g.mu.Unlock()
	if len(undo) > 0 {
		c.requeue(undo)
		c.poke()
	}
	if len(go_) == 0 {
		return
	}
	// The grants fire off the loop, so that its next claim (a transaction) overlaps their
	// fires rather than following them: a burst's fires would otherwise stop at every pass.
	// They fire after the previous pass's, in the order granted, and the loop waits for
	// those before it hands on these, so at most two passes' grants wait to fire.
	c.fired()
	done := make(chan struct{})
	c.firing = done
	go func() {
		defer close(done)
		for _, a := range go_ {
			c.e.m.concWait.Update(a.wait.Seconds())
			c.e.admitRate(a.ent, a.adm)
		}
	}()
}

// fired waits until the grants of the last pass have fired (loop only).
func (c *clusterSlots) fired() {
	if c.firing != nil {
		<-c.firing
		c.firing = nil
	}
}

func (c *clusterSlots) requeue(rel []persist.SlotRelease) { c.requeueAt(rel, c.e.clk.Now()) }

// requeueAt puts rel, given back since at, before the slots given back since.
func (c *clusterSlots) requeueAt(rel []persist.SlotRelease, at time.Time) {
	if len(rel) == 0 {
		return
	}
	c.mu.Lock()
	if len(c.rel) == 0 || at.Before(c.relAt) {
		c.relAt = at
	}
	c.rel = append(rel, c.rel...)
	c.mu.Unlock()
}

// giveBack deletes the slots of rel, given back since at, in a pass that claims none: in a
// transaction of their own, once clusterReleaseBatch are to go or the first has waited
// clusterReleaseLinger; until then they wait for the next pass (the loop wakes for them,
// releaseDue).
func (c *clusterSlots) giveBack(ctx context.Context, rel []persist.SlotRelease, at time.Time) {
	if len(rel) == 0 {
		return
	}
	if len(rel) < clusterReleaseBatch && c.e.clk.Now().Sub(at) < clusterReleaseLinger {
		c.requeueAt(rel, at)
		return
	}
	if err := c.st.ReleaseSlots(ctx, rel); err != nil {
		c.requeue(rel)
		if ctx.Err() == nil {
			c.e.log.Warn("cannot give concurrency slots back; trying again", "slots", len(rel), "error", err)
		}
	}
}

// releaseDue reports how long the slots given back may still wait for more (giveBack), 0 or
// less when they are due; ok is false when none wait.
func (c *clusterSlots) releaseDue() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.rel) == 0 {
		return 0, false
	}
	if len(c.rel) >= clusterReleaseBatch {
		return 0, true
	}
	return clusterReleaseLinger - c.e.clk.Now().Sub(c.relAt), true
}

// slotRows are the rows of the limited limits of a run of group and key with ticket, of
// shard at epoch.
func (c *clusterSlots) slotRows(group, key, ticket string, shard uint8, epoch int64) []persist.SlotRow {
	c.g.mu.Lock()
	refs := c.g.limitedRefsLocked(group, key)
	c.g.mu.Unlock()
	out := make([]persist.SlotRow, 0, len(refs))
	for _, r := range refs {
		out = append(out, persist.SlotRow{Ticket: ticket, Ref: r, Shard: int(shard), Epoch: epoch})
	}
	return out
}

// reconcile, for shards just gained at the epochs of fences, keeps the rows of the runs
// adopted in flight there and deletes the rest of the rows their earlier owners left.
func (c *clusterSlots) reconcile(ctx context.Context, fences []persist.ShardFence) error {
	var set model.ShardSet
	for _, f := range fences {
		set.Add(f.Shard)
	}
	var keep []persist.SlotRow
	for _, f := range c.e.runs.slotsOf(set) {
		keep = append(keep, c.slotRows(f.slot.group, f.slot.key, f.slot.ticket, f.shard, f.slot.epoch)...)
	}
	held, err := c.st.ReconcileSlots(ctx, fences, keep, true, c.e.nowMS())
	if err != nil {
		return err
	}
	// The holds of runs recorded lost that the shards' earlier owners left (holdLost) are
	// this node's now: it gives each back at its deadline, as their writer would have.
	seen := map[string]bool{}
	for _, h := range held {
		if seen[h.Ticket] {
			continue
		}
		seen[h.Ticket] = true
		d, _ := persist.HoldDeadline(h.Ticket)
		rel := persist.SlotRelease{Ticket: h.Ticket, Epoch: h.Epoch}
		c.g.clk.AfterFunc(clock.Until(c.g.clk, time.UnixMilli(d)), func() {
			c.requeue([]persist.SlotRelease{rel})
			c.poke()
		})
	}
	return nil
}

// reconcileShards asks the loop to reconcile the slots of shards gained (recoverShards).
func (e *gates) reconcileShards(ctx context.Context, fences []persist.ShardFence) error {
	c := e.conc.cl
	if c == nil {
		return nil
	}
	r := clusterReq{fences: fences, done: make(chan error, 1)}
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	c.mu.Unlock()
	c.poke()
	select {
	case err := <-r.done:
		return err
	case <-c.stopped:
		return c.reconcile(ctx, fences) // the engine stopped: no loop to order it after releases
	case <-ctx.Done():
		return ctx.Err()
	}
}

// holdRows has the loop write the rows of a slot taken over the limit for a run already in
// flight (a re-send in a lost run's place, a lost run held until its deadline), fenced by its
// shard at its epoch. They are written at the start of the loop's next pass, before any
// release that pass makes and before a reconcile, so before the rows of the lost run go
// (its release is queued after); a recovery that records many runs lost writes their holds
// in a few transactions, not one each. Once the loop has stopped they are written at once.
func (e *gates) holdRows(group, key, ticket string, shard uint8, epoch int64) {
	c := e.conc.cl
	if c == nil || epoch <= 0 {
		return
	}
	rows := c.slotRows(group, key, ticket, shard, epoch)
	if len(rows) == 0 {
		return
	}
	c.mu.Lock()
	c.holds = append(c.holds, rows...)
	c.mu.Unlock()
	select {
	case <-c.stopped:
		c.flush()
	default:
		c.poke()
	}
}

// writeHolds writes the rows holdRows queued, each fenced by its shard at its epoch: in one
// transaction for each epoch a shard has among them (one in all, but for a shard taken
// again meanwhile). The rows of a shard no longer held at their epoch are not written (its
// next owner resolves the run, and holds its slot as this node would have), nor, with a
// warning, those of a transaction that failed otherwise.
func (c *clusterSlots) writeHolds(rows []persist.SlotRow) {
	if len(rows) == 0 {
		return
	}
	// Not the loop's context: a hold queued is written even when the engine stops meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(rows) > 0 {
		epochOf := map[int]int64{}
		var now, later []persist.SlotRow
		var fences []persist.ShardFence
		for _, r := range rows {
			ep, ok := epochOf[r.Shard]
			if !ok {
				ep = r.Epoch
				epochOf[r.Shard] = ep
				fences = append(fences, persist.ShardFence{Shard: r.Shard, Epoch: ep})
			}
			if ep == r.Epoch {
				now = append(now, r)
			} else {
				later = append(later, r)
			}
		}
		for len(now) > 0 {
			_, err := c.st.ReconcileSlots(ctx, fences, now, false, c.e.nowMS())
			var sl *persist.ShardsLostError
			if errors.As(err, &sl) && len(sl.Lost) > 0 {
				lost := map[int]bool{}
				for _, f := range sl.Lost {
					lost[f.Shard] = true
				}
				n := len(now)
				now = slices.DeleteFunc(now, func(r persist.SlotRow) bool { return lost[r.Shard] })
				fences = slices.DeleteFunc(fences, func(f persist.ShardFence) bool { return lost[f.Shard] })
				c.e.log.Warn("concurrency slots of runs in flight not written: their shards are another node's now",
					"slots", n-len(now), "shards", len(sl.Lost))
				if len(now) < n {
					continue
				}
			}
			if err != nil {
				c.e.log.Warn("cannot write the concurrency slots of runs in flight", "slots", len(now), "error", err)
			}
			break
		}
		rows = later
	}
}

// adoptRef writes the rows of r for the runs of this node in flight in it: r just got a
// limit, and its runs started before count in it.
func (c *clusterSlots) adoptRef(ctx context.Context, r limitRef) {
	var keep []persist.SlotRow
	fences := map[int]int64{}
	for _, f := range c.e.runs.slotsOf(model.AllShards()) {
		gr, kr, hasKey := refs(f.slot.group, f.slot.key)
		row := persist.SlotRef{Kind: r.kind, Name: r.name}
		if prefix, ok := model.KeyPattern(r.name); ok && r.kind == model.LimitKey {
			// A pattern: the runs of the keys it limits, each counted in its own key.
			c.g.mu.Lock()
			p, _ := c.g.patternLocked(f.slot.key)
			s := c.g.st[kr]
			own := s != nil && s.own
			c.g.mu.Unlock()
			if !hasKey || !strings.HasPrefix(f.slot.key, prefix) || p != r.name || own || f.slot.epoch <= 0 {
				continue
			}
			row.Name = f.slot.key
		} else if gr != r && (!hasKey || kr != r) || f.slot.epoch <= 0 {
			continue
		}
		if e, ok := fences[int(f.shard)]; ok && e != f.slot.epoch {
			continue
		}
		fences[int(f.shard)] = f.slot.epoch
		keep = append(keep, persist.SlotRow{Ticket: f.slot.ticket, Ref: row, Shard: int(f.shard), Epoch: f.slot.epoch})
	}
	if len(keep) == 0 {
		return
	}
	var fs []persist.ShardFence
	for s, ep := range fences {
		fs = append(fs, persist.ShardFence{Shard: s, Epoch: ep})
	}
	if _, err := c.st.ReconcileSlots(ctx, fs, keep, false, c.e.nowMS()); err != nil {
		c.e.log.Warn("cannot count the runs in flight in a new concurrency limit", "limit", r.String(), "runs", len(keep), "error", err)
	}
}

// limitSet is a limit set or removed on a sharded node (SetConcurrencyLimit, the refresh).
func (c *clusterSlots) limitSet(ctx context.Context, r limitRef, max int) {
	if max > 0 {
		c.track(r)
		c.adoptRef(ctx, r)
	}
	c.poke()
}

// refresh reads the limits from the store and applies those that changed.
func (c *clusterSlots) refresh(ctx context.Context) {
	ls, err := c.e.store.ListConcurrencyLimits(ctx)
	if err != nil {
		return
	}
	want := map[limitRef]int{}
	for _, l := range ls {
		want[limitRef{l.Kind, l.Name}] = l.Max
	}
	c.g.mu.Lock()
	var changed []limitRef
	for r, s := range c.g.st {
		if s.own && want[r] != s.max {
			changed = append(changed, r)
		}
	}
	for p, m := range c.g.pats {
		if r := (limitRef{model.LimitKey, p + "*"}); want[r] != m {
			changed = append(changed, r)
		}
	}
	for r, m := range want {
		if prefix, ok := model.KeyPattern(r.name); ok && r.kind == model.LimitKey {
			if c.g.pats[prefix] != m {
				changed = append(changed, r)
			}
			continue
		}
		if s := c.g.st[r]; s == nil || !s.own || s.max != m {
			changed = append(changed, r)
		}
	}
	c.g.mu.Unlock()
	for _, r := range changed {
		m := want[r]
		c.e.log.Info("concurrency limit changed by another node", "limit", r.String(), "max", m)
		c.g.setMax(r, m)
		c.e.limitGauges(r, m > 0)
		c.limitSet(ctx, r, m)
	}
}

// clusterCounts returns the slots held in every limit across the cluster, read from the
// store.
func (c *clusterSlots) clusterCounts(ctx context.Context) (map[persist.SlotRef]int, error) {
	return c.st.CountSlots(ctx)
}

// slotFlight is a run in flight's slot and its task's shard.
type slotFlight struct {
	slot  concSlot
	shard uint8
}

// slotsOf returns the held slots of the runs in flight of the shards of set.
func (r *runsInFlight) slotsOf(set model.ShardSet) []slotFlight {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slotFlight
	for _, f := range r.m {
		if s := shardOfTask(f.t); f.slot.held && f.slot.ticket != "" && set.Has(int(s)) {
			out = append(out, slotFlight{slot: f.slot, shard: s})
		}
	}
	return out
}

// tryAcquireRun is concGate.tryAcquire for a run that does not wait (a run-now, a backfill
// run) of ticket, of a task of shard at epoch: on a sharded engine a limited group or key's
// slot is claimed in the store at once.
func (e *gates) tryAcquireRun(group, key, ticket string, shard uint8, epoch int64) (concSlot, limitRef, int, int, bool) {
	c := e.conc.cl
	if c == nil {
		return e.conc.tryAcquire(group, key)
	}
	c.g.mu.Lock()
	lrefs := c.g.limitedRefsLocked(group, key)
	c.g.mu.Unlock()
	if len(lrefs) == 0 {
		return e.conc.tryAcquire(group, key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc := []persist.SlotClaim{{Ticket: ticket, Shard: int(shard), Epoch: epoch, Refs: lrefs}}
	outs, counts, err := c.st.TakeSlots(ctx, "", nil, pc, e.nowMS())
	if err != nil || outs[0] != persist.SlotGranted {
		if err != nil {
			e.log.Warn("cannot claim a concurrency slot", "ticket", ticket, "error", err)
		}
		// Name the full limit (the first without room).
		for _, r := range lrefs {
			m := e.conc.maxOf(limitRef{r.Kind, r.Name})
			if counts == nil || counts[r] >= m {
				return concSlot{}, limitRef{r.Kind, r.Name}, counts[r], m, false
			}
		}
		r := lrefs[0]
		return concSlot{}, limitRef{r.Kind, r.Name}, counts[r], e.conc.maxOf(limitRef{r.Kind, r.Name}), false
	}
	sl := e.conc.force(group, key)
	sl.ticket, sl.epoch = ticket, epoch
	return sl, limitRef{}, 0, 0, true
}
