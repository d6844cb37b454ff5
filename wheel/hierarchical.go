package wheel

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Wheel is one partition's timer structure (the engine takes the implementation through this interface,
// so another may replace it). A Wheel is not safe for concurrent use; Sharded serialises access
// with the partition's mutex.
//
// The fire callback given to Advance must not call back into the same wheel (Add,
// Cancel and Advance panic while it runs): the wheel is mid-update then.
type Wheel[V any] interface {
	// Add schedules e. e must not be pending anywhere; an entry whose When has
	// already passed fires on the next Advance.
	Add(e *Entry[V])
	// Cancel removes e and reports whether it was pending in this wheel.
	Cancel(e *Entry[V]) bool
	// Advance moves the wheel's time to now (never backwards) and calls fire, in
	// (When, insertion) order, for every entry with When <= now, removing it first.
	Advance(now int64, fire func(*Entry[V]))
	// Len is the number of pending entries.
	Len() int
}

// dueLevel is Entry.level for entries in the due list.
const dueLevel = 255

// hierarchical is the hierarchical timing wheel; the package doc describes its layout
// and the cascade invariant it keeps.
type hierarchical[V any] struct {
	id   uint16 // Entry.owner of the entries pending here
	tick int64  // milliseconds per tick
	bits int    // log2 of the slots per level
	mask int64  // 2*slots - 1: a level keeps buckets for its current and next block

	now int64 // last Advance time: every entry with When <= now fired or is in due
	cur int64 // tick containing now; levels are laid out relative to it

	levels []level[V]
	due    list[V] // entries added with When <= now, in insertion order
	n      int

	firing bool // inside Advance; guards against re-entry from fire

	// Scratch for expiring one bucket, reused to avoid allocating per tick.
	batch  []*Entry[V]
	sorted []*Entry[V]
	counts []int
}

type level[V any] struct {
	buckets []list[V]
	n       int // entries in this level, so Advance can skip empty stretches
}

// NewHierarchical returns a hierarchical timing wheel with ticks of tickMS
// milliseconds, levels of slots buckets (each level stores two blocks, so 2*slots
// lists) and its clock at start (Unix milliseconds).
// It panics unless tickMS > 0 and slots is a power of two of at least 2; Config.validate
// checks both before Sharded calls it.
func NewHierarchical[V any](tickMS int64, slots int, start int64) Wheel[V] {
	if tickMS <= 0 {
		panic(fmt.Sprintf("wheel: tick must be positive, got %d ms", tickMS))
	}
	if slots < 2 || slots&(slots-1) != 0 {
		panic(fmt.Sprintf("wheel: slots must be a power of two >= 2, got %d", slots))
	}
	w := &hierarchical[V]{
		id:   newWheelID(),
		tick: tickMS,
		bits: bits.TrailingZeros(uint(slots)),
		mask: int64(2*slots - 1),
		now:  start,
		cur:  floorDiv(start, tickMS),
	}
	w.addLevel()
	return w
}

func (w *hierarchical[V]) addLevel() {
	w.levels = append(w.levels, level[V]{buckets: make([]list[V], w.mask+1)})
}

func (w *hierarchical[V]) Add(e *Entry[V]) {
	if w.firing {
		panic("wheel: Add called from a fire callback")
	}
	if e.owner != 0 {
		panic("wheel: Add of an entry that is already pending")
	}
	w.place(e)
	w.n++
}

// place files e relative to the current tick: in due if its time has passed, else in
// the lowest level whose current block holds it, creating overflow levels on demand.
func (w *hierarchical[V]) place(e *Entry[V]) {
	if e.When <= w.now {
		w.due.pushBack(e)
		e.owner, e.level = w.id, dueLevel
		return
	}
	t := floorDiv(e.When, w.tick) // t >= w.cur because When > now
	lv := 0
	if x := uint64(t ^ w.cur); x != 0 {
		lv = (bits.Len64(x) - 1) / w.bits
	}
	for lv >= len(w.levels) {
		w.addLevel()
	}
	w.file(e, t, lv)
}

// file appends e, due in tick t, to its bucket in level lv.
func (w *hierarchical[V]) file(e *Entry[V], t int64, lv int) {
	b := (t >> (w.bits * lv)) & w.mask
	w.levels[lv].buckets[b].pushBack(e)
	w.levels[lv].n++
	e.owner, e.level, e.pos = w.id, uint8(lv), int32(b)
}

func (w *hierarchical[V]) Cancel(e *Entry[V]) bool {
	if w.firing {
		panic("wheel: Cancel called from a fire callback")
	}
	if e.owner != w.id {
		return false
	}
	if e.level == dueLevel {
		w.due.remove(e)
	} else {
		w.levels[e.level].buckets[e.pos].remove(e)
		w.levels[e.level].n--
	}
	w.n--
	return true
}

func (w *hierarchical[V]) Len() int { return w.n }

func (w *hierarchical[V]) Advance(now int64, fire func(*Entry[V])) {
	if w.firing {
		panic("wheel: Advance called from a fire callback")
	}
	w.firing = true
	defer func() { w.firing = false }()

	now = max(now, w.now)
	// Due entries all have When <= the previous now, so they precede every bucket entry.
	w.expire(&w.due, now, nil, anyTick, fire)
	target := floorDiv(now, w.tick)
	for {
		// Bucket cur holds exactly the entries due in tick cur; at the target tick
		// only the part up to now fires and the rest waits for the next Advance.
		w.expire(&w.levels[0].buckets[w.cur&w.mask], now, &w.levels[0].n, w.cur, fire)
		if w.cur == target {
			break
		}
		w.cur = w.nextTick(target)
		w.turn()
	}
	w.now = now
}

// anyTick tells expire that a list's deadlines are not confined to one tick.
const anyTick = math.MinInt64

// maxScratch bounds the scratch slices kept between advances, so one huge catch-up
// does not pin megabytes for the life of the wheel.
const maxScratch = 1 << 16

// expire unlinks the entries of l with When <= now and fires them in (When, insertion)
// order. l is in insertion order (the cascade invariant), so a stable sort by When
// gives that order. levelN is the level's count to decrement (nil for the due list);
// tick is the tick all of l's deadlines fall in, or anyTick.
func (w *hierarchical[V]) expire(l *list[V], now int64, levelN *int, tick int64, fire func(*Entry[V])) {
	if l.head == nil {
		return
	}
	batch := w.batch[:0]
	for e := l.head; e != nil; {
		next := e.next
		if e.When <= now {
			l.remove(e)
			batch = append(batch, e)
		}
		e = next
	}
	w.n -= len(batch)
	if levelN != nil {
		*levelN -= len(batch)
	}
	sorted := w.sortByWhen(batch, tick)
	for _, e := range sorted {
		fire(e)
	}
	// Drop references so fired entries can be collected; keep moderate capacity.
	clear(batch)
	clear(sorted)
	if cap(batch) <= maxScratch {
		w.batch = batch[:0]
	} else {
		w.batch = nil
	}
}

// sortByWhen sorts batch stably by When. One tick holds at most tickMS distinct
// deadlines, so a tick's batch is counting-sorted in linear time: a comparison sort
// was a third of Advance's time for 10k entries per tick in profiles.
func (w *hierarchical[V]) sortByWhen(batch []*Entry[V], tick int64) []*Entry[V] {
	if tick == anyTick || len(batch) < 64 || w.tick > 4096 {
		if !slices.IsSortedFunc(batch, compareWhen[V]) {
			slices.SortStableFunc(batch, compareWhen[V])
		}
		return batch
	}
	base := tick * w.tick
	if len(w.counts) == 0 {
		w.counts = make([]int, w.tick+1)
	}
	counts := w.counts
	clear(counts)
	for _, e := range batch {
		counts[e.When-base+1]++
	}
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	out := slices.Grow(w.sorted[:0], len(batch))[:len(batch)]
	for _, e := range batch {
		i := e.When - base
		out[counts[i]] = e
		counts[i]++
	}
	if cap(out) <= maxScratch {
		w.sorted = out[:0]
	} else {
		w.sorted = nil
	}
	return out
}

// nextTick returns the next tick (at most target) where something must happen: the
// next tick when level 0 holds entries, otherwise the next bucket boundary of the
// lowest non-empty level, where that bucket moves down. Skipped ticks only lose the
// gradual moves of turn, which the boundary then does in full.
func (w *hierarchical[V]) nextTick(target int64) int64 {
	for lv := range w.levels {
		if w.levels[lv].n == 0 {
			continue
		}
		if lv == 0 {
			return w.cur + 1
		}
		shift := w.bits * lv
		return min((w.cur>>shift+1)<<shift, target)
	}
	return target
}

// turn moves entries down the levels for the tick just entered (see the package doc).
// Where the tick starts a new block of level L, the level-(L+1) bucket covering that
// block must be in level L in full; highest level first, so what one level receives
// is passed on below in the same turn. On every tick each level also takes its share
// of the next block's bucket, so the boundary finds little left to move: moving a
// whole busy bucket at once stalled one tick for tens of milliseconds in profiles.
func (w *hierarchical[V]) turn() {
	top := bits.TrailingZeros64(uint64(w.cur))/w.bits - 1
	for lv := min(top, len(w.levels)-2); lv >= 0; lv-- {
		src := w.source(lv, 0)
		w.moveDown(lv, src, src.n)
	}
	for lv := len(w.levels) - 2; lv >= 0; lv-- {
		src := w.source(lv, 1)
		if src.n == 0 {
			continue
		}
		span := int64(1) << (w.bits * (lv + 1)) // ticks in a level-lv block
		left := int(span - w.cur&(span-1))
		w.moveDown(lv, src, (src.n+left-1)/left)
	}
}

// source returns the level-(lv+1) bucket covering level lv's current block (ahead 0)
// or its next block (ahead 1).
func (w *hierarchical[V]) source(lv int, ahead int64) *list[V] {
	return &w.levels[lv+1].buckets[(w.cur>>(w.bits*(lv+1))+ahead)&w.mask]
}

// moveDown moves up to limit entries from the head of src, a level-(lv+1) bucket, into
// level lv. Taking from the head and appending keeps both lists in insertion order.
func (w *hierarchical[V]) moveDown(lv int, src *list[V], limit int) {
	for ; limit > 0 && src.head != nil; limit-- {
		e := src.head
		src.remove(e)
		w.levels[lv+1].n--
		w.file(e, floorDiv(e.When, w.tick), lv)
	}
}

func compareWhen[V any](a, b *Entry[V]) int {
	switch {
	case a.When < b.When:
		return -1
	case a.When > b.When:
		return 1
	}
	return 0
}

// floorDiv divides rounding towards negative infinity, so ticks stay contiguous for
// times before the epoch.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
