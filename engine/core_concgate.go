package engine

// The concurrency gate: limits on how many runs of a group, or of a concurrency key, are in
// flight at once (design.md, Concurrency limits). The API that changes the limits is in
// api_conclimits.go.

import (
	"container/heap"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wheel"
)

// limitRef names one limit: a group's (model.LimitGroup) or a concurrency key's
// (model.LimitKey).
type limitRef struct {
	kind, name string
}

func (r limitRef) String() string { return r.kind + " " + r.name }

// concSlot is what a run holds of the gate: the group and the key it counts in, as they
// were when it took its slot, so that its release gives back exactly what it took even if
// the task's definition changed meanwhile. The zero value holds nothing.
type concSlot struct {
	group, key string
	held       bool
	// On a sharded engine (core_clusterslots.go): the run's ticket and its shard's epoch,
	// which name the slot's rows in the store, and keep, set when the shard was dropped with
	// the run in flight, so that its rows stay for the shard's next owner.
	ticket string
	epoch  int64
	keep   bool
}

// admission is what the gates hand on with an entry to fire: the slot it holds (none on its
// first pass, before fire asked the concurrency gate) and, when it waited for a slot, the
// note for its run's record.
type admission struct {
	slot   concSlot
	waited string // "waited 1.2s for concurrency limit group etl (3)", or ""
}

// concState is one limit's count and its waiters.
type concState struct {
	max  int // 0: no limit, only counted
	used int // slots held: runs in flight, and fires admitted and not yet sent
	q    waitHeap
	// own is set when max is the limit's own (a limit of this group or key); pat names the
	// pattern limit (kind key, "tenant:*") whose max a key without one of its own has, ""
	// for none (core_keys.go, Keyed limits).
	own bool
	pat string
}

// MaxLiveKeys bounds the keys of one pattern limit with runs in flight at once (live keys):
// past it a fire of a key of the pattern that has none in flight waits, as over a full limit,
// until a key of the pattern has no run in flight any more; it never runs unlimited. Each
// live key is a row of the gate's map and of the limits page; 10,000 customers with runs in
// flight at once is far more than one limit's tenants usually are.
const MaxLiveKeys = 10_000

// roomLocked reports whether s has a slot free: under its max, and, for a key of a pattern
// with no run in flight, under the pattern's bound of live keys. Caller holds g.mu.
func (g *concGate) roomLocked(s *concState) bool {
	if s.max > 0 && s.used >= s.max {
		return false
	}
	return s.pat == "" || s.used > 0 || g.live[s.pat] < MaxLiveKeys
}

// concWaiter is one fire waiting for a slot: the task's wheel entry itself, already in
// memory, and where it waits.
type concWaiter struct {
	id    int64 // its task
	ent   *wheel.Entry[*task]
	group string
	key   string
	seq   uint64
	first time.Time // when it began to wait
	on    limitRef  // the limit whose queue holds it
	onMax int       // that limit when it queued there, for the note
	idx   int       // in on's heap
	// On a sharded engine: the ticket its run will have, and its shard at its epoch
	// (core_clusterslots.go).
	ticket string
	shard  uint8
	epoch  int64
}

// waitHeap orders waiters by priority (0 first), then fire time, then arrival.
type waitHeap []*concWaiter

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return before(h[i], h[j]) }
func (h waitHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *waitHeap) Push(x any) {
	w := x.(*concWaiter)
	w.idx = len(*h)
	*h = append(*h, w)
}
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.idx = -1
	return w
}

func before(a, b *concWaiter) bool {
	if a.ent.Priority != b.ent.Priority {
		return a.ent.Priority < b.ent.Priority
	}
	if a.ent.When != b.ent.When {
		return a.ent.When < b.ent.When
	}
	return a.seq < b.seq
}

// concGate counts the runs in flight of every group and every concurrency key, and holds
// back a fire whose group or key is at its limit until a run of it ends. Nothing is dropped:
// a waiting fire is only late. Every run counts, whatever started it (a fire, a retry, a
// run-now, recovery at start), from the moment it takes its slot until it leaves e.runs
// (runsInFlight.take releases it).
//
// Waiters are kept by task: a task has one armed entry at a time, so it has at most one
// waiter, and a newer entry of it replaces the older one (which fire would drop as stale).
// So the waiters are bounded by the tasks held in memory, each a pointer to the task's own
// wheel entry and about 100 bytes of bookkeeping.
//
// A waiter waits in the queue of one limit, the first it found without room; when a slot
// of that limit frees, the best waiter takes it if its other limit has room too, else it
// moves to that limit's queue. A new fire queues behind the waiters of a limit with room
// that the drain has not reached yet, so a freed slot goes to the best waiter, not to
// whichever fire came first.
//
// Lock order: a task's mu, then concGate.mu. The gate never calls out while holding mu; the
// waiters it admits are fired by concLoop.
type concGate struct {
	clk clock.Clock

	mu      sync.Mutex
	st      map[limitRef]*concState
	waiting map[limitRef]*concState // the states whose queue is not empty
	byTask  map[int64]*concWaiter
	seq     uint64
	// pats are the pattern limits of kind key, by prefix ("tenant:" for "tenant:*"), and
	// live the keys of each with runs in flight (core_keys.go).
	pats map[string]int
	live map[string]int

	nwait atomic.Int64 // waiters now
	nused atomic.Int64 // slots held now, over all groups (a run counts once here)
	wake  chan struct{}

	// cl, on a sharded engine, takes the slots of limited groups and keys in the store,
	// across nodes (core_clusterslots.go); nil otherwise.
	cl *clusterSlots
}

func newConcGate(clk clock.Clock) *concGate {
	return &concGate{clk: clk, st: make(map[limitRef]*concState), waiting: make(map[limitRef]*concState),
		byTask: make(map[int64]*concWaiter), wake: make(chan struct{}, 1), pats: make(map[string]int), live: make(map[string]int)}
}

func (g *concGate) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// refs are the limits a run of group and key counts in.
func refs(group, key string) (limitRef, limitRef, bool) {
	return limitRef{model.LimitGroup, group}, limitRef{model.LimitKey, key}, key != ""
}

func (g *concGate) state(r limitRef) *concState {
	s := g.st[r]
	if s == nil {
		s = &concState{}
		if r.kind == model.LimitKey && len(g.pats) > 0 {
			s.pat, s.max = g.patternLocked(r.name)
		}
		g.st[r] = s
	}
	return s
}

// forgetIdle drops a state that counts nothing, limits nothing and holds no waiter, so the
// map holds only the groups and keys with runs in flight or a limit.
func (g *concGate) forgetIdle(r limitRef, s *concState) {
	if s.used == 0 && !s.own && s.q.Len() == 0 {
		delete(g.st, r)
	}
}

// blockedLocked reports whether r has no slot for w: it is full, or its queue holds a
// waiter that goes before w (a nil w: any waiter).
func (g *concGate) blockedLocked(r limitRef, w *concWaiter) bool {
	s := g.st[r]
	if s == nil {
		if r.kind != model.LimitKey || len(g.pats) == 0 {
			return false
		}
		s = g.state(r) // a key of a pattern: its limit is the pattern's; kept by the caller's take or queue
	}
	if !g.roomLocked(s) {
		return true
	}
	return s.q.Len() > 0 && (w == nil || before(s.q[0], w))
}

func (g *concGate) takeLocked(group, key string) concSlot {
	gr, kr, hasKey := refs(group, key)
	g.state(gr).used++
	if hasKey {
		s := g.state(kr)
		s.used++
		if s.pat != "" && s.used == 1 {
			g.live[s.pat]++
		}
	}
	g.nused.Add(1)
	return concSlot{group: group, key: key, held: true}
}

// offer takes a slot for a fire of task id (entry ent, of group and key) when both its limits
// have room, or queues it (replacing the task's older waiter) and reports false. The caller
// holds the task's mu, and ent is its armed entry.
func (g *concGate) offer(id int64, ent *wheel.Entry[*task], group, key string) (concSlot, bool) {
	gr, kr, hasKey := refs(group, key)
	g.mu.Lock()
	defer g.mu.Unlock()
	if old := g.byTask[id]; old != nil {
		g.removeLocked(old)
	}
	var on limitRef
	switch {
	case g.blockedLocked(gr, nil):
		on = gr
	case hasKey && g.blockedLocked(kr, nil):
		on = kr
	default:
		return g.takeLocked(group, key), true
	}
	g.seq++
	w := &concWaiter{id: id, ent: ent, group: group, key: key, seq: g.seq, first: g.clk.Now()}
	g.queueLocked(w, on)
	return concSlot{}, false
}

func (g *concGate) queueLocked(w *concWaiter, on limitRef) {
	s := g.state(on)
	w.on, w.onMax = on, s.max
	heap.Push(&s.q, w)
	g.waiting[on] = s
	if _, ok := g.byTask[w.id]; !ok {
		g.nwait.Add(1)
	}
	g.byTask[w.id] = w
	if g.roomLocked(s) {
		g.signal() // queued behind waiters the drain has not reached yet
	}
}

func (g *concGate) removeLocked(w *concWaiter) {
	s := g.st[w.on]
	if s != nil && w.idx >= 0 && w.idx < s.q.Len() && s.q[w.idx] == w {
		heap.Remove(&s.q, w.idx)
		if s.q.Len() == 0 {
			delete(g.waiting, w.on)
			g.forgetIdle(w.on, s)
		}
	}
	if g.byTask[w.id] == w {
		delete(g.byTask, w.id)
		g.nwait.Add(-1)
	}
}

// forget drops the waiter of task id for entry ent, if it waits: the task was disarmed
// (paused, edited, deleted), so the entry would only be dropped as stale when its turn came.
// The caller holds the task's mu.
func (g *concGate) forget(id int64, ent *wheel.Entry[*task]) {
	if g.nwait.Load() == 0 {
		return
	}
	g.mu.Lock()
	if w := g.byTask[id]; w != nil && w.ent == ent {
		g.removeLocked(w)
	}
	g.mu.Unlock()
}

// tryAcquire takes a slot for a run of group and key when both have room (waiters or not:
// the caller does not wait), else names the full limit.
func (g *concGate) tryAcquire(group, key string) (concSlot, limitRef, int, int, bool) {
	gr, kr, hasKey := refs(group, key)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range []limitRef{gr, kr} {
		if r == kr && !hasKey {
			break
		}
		if s := g.st[r]; s != nil && !g.roomLocked(s) {
			return concSlot{}, r, s.used, s.max, false
		}
		if r == kr && g.st[r] == nil && len(g.pats) > 0 {
			if s := g.state(r); !g.roomLocked(s) {
				used, max := s.used, s.max
				g.forgetIdle(r, s)
				return concSlot{}, r, used, max, false
			}
		}
	}
	return g.takeLocked(group, key), limitRef{}, 0, 0, true
}

// force takes a slot whatever the limits: for a run that is in flight already (recovered at
// start), which counts even when it puts its limit over.
func (g *concGate) force(group, key string) concSlot {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.takeLocked(group, key)
}

// release gives a slot back; a release of the zero slot does nothing.
func (g *concGate) release(sl concSlot) {
	if !sl.held {
		return
	}
	gr, kr, hasKey := refs(sl.group, sl.key)
	g.mu.Lock()
	wake := g.releaseLocked(gr)
	if hasKey {
		wake = g.releaseLocked(kr) || wake
	}
	g.nused.Add(-1)
	g.mu.Unlock()
	if wake {
		g.signal()
	}
	if g.cl != nil {
		g.cl.released(sl)
	}
}

func (g *concGate) releaseLocked(r limitRef) bool {
	s := g.st[r]
	if s == nil {
		return false // cannot happen: a held slot counts in its states
	}
	s.used--
	wake := s.q.Len() > 0 && g.roomLocked(s)
	if s.pat != "" && s.used == 0 {
		// A live key of the pattern less: a waiter held by the bound may go.
		if g.live[s.pat]--; g.live[s.pat] == MaxLiveKeys-1 {
			wake = true
		}
	}
	g.forgetIdle(r, s)
	return wake
}

// releaseAt gives sl back at deadline: the slot of a run whose end is recorded but which may
// still be running where it was sent (an HTTP run left by a restart, recorded lost).
func (g *concGate) releaseAt(sl concSlot, deadline time.Time) {
	if !sl.held {
		return
	}
	d := clock.Until(g.clk, deadline)
	if d <= 0 {
		g.release(sl)
		return
	}
	g.clk.AfterFunc(d, func() { g.release(sl) })
}

// setMax sets the limit of r (0 removes it). A limit below the count lets no new run start
// until the count falls under it; a higher one, or none, lets the waiters take the room at
// once.
func (g *concGate) setMax(r limitRef, max int) {
	g.mu.Lock()
	wake := g.setMaxLocked(r, max)
	g.mu.Unlock()
	if wake {
		g.signal()
	}
}

func (g *concGate) setMaxLocked(r limitRef, max int) bool {
	if prefix, ok := model.KeyPattern(r.name); ok && r.kind == model.LimitKey {
		if max > 0 {
			g.pats[prefix] = max
		} else {
			delete(g.pats, prefix)
		}
		return g.repatternLocked()
	}
	s := g.state(r)
	s.max, s.own = max, max > 0
	if !s.own && r.kind == model.LimitKey {
		g.setPatLocked(s, r.name)
	} else if s.own && s.pat != "" {
		g.setPatLocked(s, "")
	}
	wake := s.q.Len() > 0 && g.roomLocked(s)
	g.forgetIdle(r, s)
	return wake
}

// setAll replaces every limit with ls (at start, from the store).
func (g *concGate) setAll(ls []model.ConcurrencyLimit) {
	g.mu.Lock()
	clear(g.pats)
	for r, s := range g.st {
		s.max, s.own = 0, false
		g.setPatLocked(s, "")
		g.forgetIdle(r, s)
	}
	for _, l := range ls {
		if prefix, ok := model.KeyPattern(l.Name); ok && l.Kind == model.LimitKey {
			g.pats[prefix] = l.Max
			continue
		}
		s := g.state(limitRef{l.Kind, l.Name})
		s.max, s.own = l.Max, l.Max > 0
	}
	g.repatternLocked()
	g.mu.Unlock()
	g.signal()
}

// drainBatch bounds the waiters one drain admits, so that a limit lifted over many waiters
// lets the consumers' own fires interleave with theirs.
const drainBatch = 256

// drain admits the waiters that have room now, best first across limits, taking their
// slots, and returns them with the note of their wait.
func (g *concGate) drain() ([]*wheel.Entry[*task], []admission, []time.Duration) {
	var ents []*wheel.Entry[*task]
	var adms []admission
	var waits []time.Duration
	if g.cl != nil {
		return nil, nil, nil // the store decides who waits no more (clusterSlots.loop)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(ents) < drainBatch {
		// The best head among the limits with room.
		var best *concWaiter
		for _, s := range g.waiting {
			if s.q.Len() > 0 && g.roomLocked(s) && (best == nil || before(s.q[0], best)) {
				best = s.q[0]
			}
		}
		if best == nil {
			break
		}
		g.removeLocked(best)
		gr, kr, hasKey := refs(best.group, best.key)
		other := kr
		if best.on == kr {
			other = gr
		}
		if (other != kr || hasKey) && g.blockedLocked(other, best) {
			g.queueLocked(best, other) // its other limit has no room for it: wait there
			continue
		}
		sl := g.takeLocked(best.group, best.key)
		now := g.clk.Now()
		wait := now.Sub(best.first)
		ents = append(ents, best.ent)
		adms = append(adms, admission{slot: sl, waited: "waited " + wait.Round(time.Millisecond).String() +
			" for concurrency limit " + best.on.String() + " (" + strconv.Itoa(best.onMax) + ")"})
		waits = append(waits, wait)
	}
	if len(ents) == drainBatch {
		g.signal()
	}
	return ents, adms, waits
}

// limitView is one limit's count and waiters, as the API shows them.
type limitView struct {
	used, waiting int
}

// view returns the count and the waiters of r.
func (g *concGate) view(r limitRef) limitView {
	if _, ok := model.KeyPattern(r.name); ok && r.kind == model.LimitKey {
		var v limitView // a pattern: the sums of its keys
		for _, k := range g.keysOf(r.name) {
			v.used += k.used
			v.waiting += k.waiting
		}
		return v
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.st[r]
	if s == nil {
		return limitView{}
	}
	return limitView{used: s.used, waiting: s.q.Len()}
}

// maxOf returns the limit of r, 0 for none.
func (g *concGate) maxOf(r limitRef) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := model.KeyPattern(r.name); ok && r.kind == model.LimitKey {
		return g.pats[p]
	}
	if s := g.st[r]; s != nil {
		return s.max
	}
	return 0
}

// concLoop fires the waiters the gate admits as slots free.
func (e *gates) concLoop(ctx context.Context) {
	defer e.loopsWG.Done()
	g := e.conc
	for {
		ents, adms, waits := g.drain()
		for i, ent := range ents {
			e.m.concWait.Update(waits[i].Seconds())
			e.admitRate(ent, adms[i])
		}
		if len(ents) == drainBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-g.wake:
		}
	}
}

// patternLocked returns the pattern limit of key (the longest prefix of the pattern limits
// that key starts with) and its max, or "" and 0. Caller holds g.mu.
func (g *concGate) patternLocked(key string) (string, int) {
	best, found := "", false
	for p := range g.pats {
		if strings.HasPrefix(key, p) && (!found || len(p) > len(best)) {
			best, found = p, true
		}
	}
	if !found {
		return "", 0
	}
	return best + "*", g.pats[best]
}

// setPatLocked makes s, the state of key, count in the pattern that matches key now ("" for
// none), moving its live count. Caller holds g.mu.
func (g *concGate) setPatLocked(s *concState, key string) {
	pat, max := "", 0
	if key != "" {
		pat, max = g.patternLocked(key)
	}
	if s.pat != pat && s.used > 0 {
		if s.pat != "" {
			g.live[s.pat]--
		}
		if pat != "" {
			g.live[pat]++
		}
	}
	s.pat = pat
	if !s.own {
		s.max = max
	}
}

// repatternLocked gives every key without a limit of its own the pattern limit that matches
// it now, after a pattern changed, and reports whether a waiter may have room. Caller holds
// g.mu.
func (g *concGate) repatternLocked() bool {
	wake := false
	for r, s := range g.st {
		if r.kind != model.LimitKey || s.own {
			continue
		}
		g.setPatLocked(s, r.name)
		if s.q.Len() > 0 && g.roomLocked(s) {
			wake = true
		}
		g.forgetIdle(r, s)
	}
	for p, n := range g.live {
		if n <= 0 {
			delete(g.live, p)
		}
	}
	return wake
}

// keyView is one key of a pattern limit in use: its runs in flight and fires waiting.
type keyView struct {
	key           string
	used, waiting int
}

// keysOf returns the keys of pattern (a limit's name, "tenant:*") in use, by key.
func (g *concGate) keysOf(pattern string) []keyView {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []keyView
	for r, s := range g.st {
		if r.kind == model.LimitKey && s.pat == pattern && (s.used > 0 || s.q.Len() > 0) {
			out = append(out, keyView{key: r.name, used: s.used, waiting: s.q.Len()})
		}
	}
	slices.SortFunc(out, func(a, b keyView) int { return strings.Compare(a.key, b.key) })
	return out
}
