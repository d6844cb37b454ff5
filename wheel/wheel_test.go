package wheel

import (
	"cmp"
	"slices"
	"testing"
	"time"
	"unsafe"

	"pgregory.net/rapid"
)

// TestEntrySize pins the entry to the 48-byte size class with a pointer payload, as the
// engine's task pointer is: the B1 target is at most 64 bytes per pending timer.
func TestEntrySize(t *testing.T) {
	if size := unsafe.Sizeof(Entry[*int]{}); size != 48 {
		t.Fatalf("Entry[*int] is %d bytes, want 48", size)
	}
}

// refModel is the reference the wheels are checked against: a plain slice of pending
// entries, sorted on every advance.
type refModel struct {
	now     int64
	seq     int
	pending []refEntry
}

type refEntry struct {
	id   int
	when int64
	seq  int
}

func (m *refModel) add(id int, when int64) {
	m.pending = append(m.pending, refEntry{id: id, when: when, seq: m.seq})
	m.seq++
}

func (m *refModel) isPending(id int) bool {
	return slices.ContainsFunc(m.pending, func(r refEntry) bool { return r.id == id })
}

func (m *refModel) cancel(id int) bool {
	n := len(m.pending)
	m.pending = slices.DeleteFunc(m.pending, func(r refEntry) bool { return r.id == id })
	return len(m.pending) != n
}

// advance returns the ids due at now in (When, insertion) order.
func (m *refModel) advance(now int64) []int {
	m.now = max(m.now, now)
	slices.SortFunc(m.pending, func(a, b refEntry) int {
		return cmp.Or(cmp.Compare(a.when, b.when), cmp.Compare(a.seq, b.seq))
	})
	var fired []int
	for len(m.pending) > 0 && m.pending[0].when <= m.now {
		fired = append(fired, m.pending[0].id)
		m.pending = m.pending[1:]
	}
	return fired
}

// pickWhen draws a deadline around now: in the past, due now, near, mid-range, years
// away (forcing overflow levels), or equal to a pending deadline (forcing ties).
func (m *refModel) pickWhen(t *rapid.T) int64 {
	switch rapid.IntRange(0, 5).Draw(t, "whenKind") {
	case 0:
		return m.now - rapid.Int64Range(1, 5_000).Draw(t, "past")
	case 1:
		return m.now
	case 2:
		return m.now + rapid.Int64Range(1, 5_000).Draw(t, "near")
	case 3:
		return m.now + rapid.Int64Range(1, 50_000_000).Draw(t, "mid")
	case 4:
		return m.now + rapid.Int64Range(1, 1<<42).Draw(t, "far")
	default:
		if len(m.pending) == 0 {
			return m.now + 1
		}
		return rapid.SampledFrom(m.pending).Draw(t, "tie").when
	}
}

// pickNow draws an advance target: a few ticks on, far on, exactly at or just before a
// pending deadline, or backwards (which must not move time back).
func (m *refModel) pickNow(t *rapid.T) int64 {
	switch rapid.IntRange(0, 4).Draw(t, "nowKind") {
	case 0:
		return m.now + rapid.Int64Range(0, 100).Draw(t, "step")
	case 1:
		return m.now + rapid.Int64Range(0, 1<<43).Draw(t, "jump")
	case 2:
		if len(m.pending) > 0 {
			return rapid.SampledFrom(m.pending).Draw(t, "at").when - rapid.Int64Range(0, 1).Draw(t, "before")
		}
		return m.now + 1
	case 3:
		return m.now - rapid.Int64Range(1, 100).Draw(t, "back")
	default:
		return m.now + rapid.Int64Range(0, 100_000).Draw(t, "medium")
	}
}

// poolSize leaves room for bursts large enough to take the counting-sort path of a
// dense tick.
const poolSize = 160

// burst draws how many idle pool entries to add at once and a deadline for each within
// the next few ticks, so single ticks hold many entries with repeated deadlines.
func (m *refModel) burst(t *rapid.T, pool []*Entry[int], tickMS int64, add func(e *Entry[int])) {
	n := rapid.IntRange(1, poolSize).Draw(t, "burst")
	for id := range pool {
		if n == 0 {
			break
		}
		if m.isPending(id) {
			continue
		}
		n--
		pool[id].When = m.now + rapid.Int64Range(-tickMS, 3*tickMS).Draw(t, "dense")
		add(pool[id])
		m.add(id, pool[id].When)
	}
}

func newPool() []*Entry[int] {
	pool := make([]*Entry[int], poolSize)
	for i := range pool {
		pool[i] = &Entry[int]{Value: i}
	}
	return pool
}

func TestWheelMatchesModel(t *testing.T) {
	impls := map[string]func(tickMS int64, slots int, start int64) Wheel[int]{
		"hierarchical": NewHierarchical[int],
		"heap": func(_ int64, _ int, start int64) Wheel[int] {
			h := NewHeap[int]()
			h.Advance(start, func(*Entry[int]) { panic("empty heap fired") })
			return h
		},
	}
	for name, newWheel := range impls {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				tick := rapid.Int64Range(1, 20).Draw(t, "tick")
				slots := 1 << rapid.IntRange(1, 9).Draw(t, "slotBits")
				start := rapid.Int64Range(-1_000_000, 1<<41).Draw(t, "start")
				w := newWheel(tick, slots, start)
				m := &refModel{now: start}
				pool := newPool()

				t.Repeat(map[string]func(*rapid.T){
					"add": func(t *rapid.T) {
						id := rapid.IntRange(0, poolSize-1).Draw(t, "id")
						if m.isPending(id) {
							t.Skip("entry is pending")
						}
						pool[id].When = m.pickWhen(t)
						w.Add(pool[id])
						m.add(id, pool[id].When)
					},
					"burst": func(t *rapid.T) {
						m.burst(t, pool, tick, func(e *Entry[int]) { w.Add(e) })
					},
					"cancel": func(t *rapid.T) {
						id := rapid.IntRange(0, poolSize-1).Draw(t, "id")
						if got, want := w.Cancel(pool[id]), m.cancel(id); got != want {
							t.Fatalf("Cancel(%d) = %v, want %v", id, got, want)
						}
					},
					"advance": func(t *rapid.T) {
						now := m.pickNow(t)
						var got []int
						w.Advance(now, func(e *Entry[int]) { got = append(got, e.Value) })
						if want := m.advance(now); !slices.Equal(got, want) {
							t.Fatalf("Advance(%d) fired %v, want %v", now, got, want)
						}
					},
					"": func(t *rapid.T) {
						if got, want := w.Len(), len(m.pending); got != want {
							t.Fatalf("Len = %d, want %d", got, want)
						}
					},
				})
			})
		})
	}
}

func TestShardedMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.Int64Range(0, 1<<41).Draw(t, "start")
		clock := newFakeClock(start)
		tick := rapid.Int64Range(1, 20).Draw(t, "tick")
		s, err := New(Config[int]{
			Partitions: rapid.IntRange(1, 4).Draw(t, "partitions"),
			Tick:       time.Duration(tick) * time.Millisecond,
			Slots:      1 << rapid.IntRange(1, 9).Draw(t, "slotBits"),
			Clock:      clock,
		})
		if err != nil {
			t.Fatal(err)
		}
		m := &refModel{now: start}
		pool := newPool()

		t.Repeat(map[string]func(*rapid.T){
			"add": func(t *rapid.T) {
				id := rapid.IntRange(0, poolSize-1).Draw(t, "id")
				if m.isPending(id) {
					t.Skip("entry is pending")
				}
				e := pool[id]
				e.When = m.pickWhen(t)
				e.Key = rapid.Uint64().Draw(t, "key")
				e.Priority = rapid.Uint8Range(0, MaxPriority+2).Draw(t, "priority")
				s.Add(e)
				m.add(id, e.When)
			},
			"burst": func(t *rapid.T) {
				m.burst(t, pool, tick, func(e *Entry[int]) {
					e.Key = rapid.Uint64().Draw(t, "key")
					e.Priority = rapid.Uint8Range(0, MaxPriority+2).Draw(t, "priority")
					s.Add(e)
				})
			},
			"cancel": func(t *rapid.T) {
				id := rapid.IntRange(0, poolSize-1).Draw(t, "id")
				if got, want := s.Cancel(pool[id]), m.cancel(id); got != want {
					t.Fatalf("Cancel(%d) = %v, want %v", id, got, want)
				}
			},
			"advance": func(t *rapid.T) {
				now := m.pickNow(t)
				clock.Set(now)
				s.AdvanceTo(clock.Now())
				fired := m.advance(now)
				for partition := range s.Partitions() {
					// Each queue gets its partition's entries in (When, insertion) order
					// and hands them out by priority, FIFO within a priority.
					var want []int
					for _, id := range fired {
						if pool[id].Key%uint64(s.Partitions()) == uint64(partition) {
							want = append(want, id)
						}
					}
					slices.SortStableFunc(want, func(a, b int) int {
						return cmp.Compare(min(pool[a].Priority, MaxPriority), min(pool[b].Priority, MaxPriority))
					})
					var got []int
					for e := s.Ready(partition).Pop(); e != nil; e = s.Ready(partition).Pop() {
						got = append(got, e.Value)
					}
					if !slices.Equal(got, want) {
						t.Fatalf("AdvanceTo(%d): partition %d popped %v, want %v", now, partition, got, want)
					}
				}
			},
			"": func(t *rapid.T) {
				if got, want := s.Len(), len(m.pending); got != want {
					t.Fatalf("Len = %d, want %d", got, want)
				}
			},
		})
	})
}

func TestHierarchicalGrowsOverflowLevels(t *testing.T) {
	const start = 1_700_000_000_000
	w := NewHierarchical[int](10, 512, start).(*hierarchical[int])
	tenYears := int64(10 * 365 * 24 * 3600 * 1000)
	far := &Entry[int]{When: start + tenYears}
	near := &Entry[int]{When: start + 1000}
	w.Add(far)
	w.Add(near)
	if len(w.levels) < 3 {
		t.Fatalf("a deadline ten years out left %d levels, want overflow levels", len(w.levels))
	}

	var fired []*Entry[int]
	collect := func(e *Entry[int]) { fired = append(fired, e) }
	w.Advance(far.When-1, collect)
	if len(fired) != 1 || fired[0] != near {
		t.Fatalf("before the far deadline fired %v, want only the near entry", fired)
	}
	w.Advance(far.When, collect)
	if len(fired) != 2 || fired[1] != far || w.Len() != 0 {
		t.Fatalf("at the far deadline fired %d entries (Len %d), want the far one too", len(fired), w.Len())
	}
}

func TestWheelReentryPanics(t *testing.T) {
	for name, w := range map[string]Wheel[int]{"hierarchical": NewHierarchical[int](10, 8, 0), "heap": NewHeap[int]()} {
		t.Run(name, func(t *testing.T) {
			w.Add(&Entry[int]{When: 5})
			defer func() {
				if recover() == nil {
					t.Fatal("Add from a fire callback did not panic")
				}
			}()
			w.Advance(10, func(*Entry[int]) { w.Add(&Entry[int]{When: 20}) })
		})
	}
}

func TestAddPendingPanics(t *testing.T) {
	for name, w := range map[string]Wheel[int]{"hierarchical": NewHierarchical[int](10, 8, 0), "heap": NewHeap[int]()} {
		t.Run(name, func(t *testing.T) {
			e := &Entry[int]{When: 5}
			w.Add(e)
			defer func() {
				if recover() == nil {
					t.Fatal("adding a pending entry twice did not panic")
				}
			}()
			w.Add(e)
		})
	}
}

func TestCancelForeignEntry(t *testing.T) {
	a, b := NewHierarchical[int](10, 8, 0), NewHierarchical[int](10, 8, 0)
	e := &Entry[int]{When: 100}
	a.Add(e)
	if b.Cancel(e) {
		t.Fatal("a wheel cancelled an entry pending in another wheel")
	}
	if !a.Cancel(e) || a.Cancel(e) {
		t.Fatal("Cancel should succeed once in the owning wheel, then fail")
	}
}

func TestNewHierarchicalRejectsBadLayout(t *testing.T) {
	for _, tc := range []struct {
		tick  int64
		slots int
	}{{0, 8}, {10, 0}, {10, 1}, {10, 6}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewHierarchical[int](%d, %d) did not panic", tc.tick, tc.slots)
				}
			}()
			NewHierarchical[int](tc.tick, tc.slots, 0)
		}()
	}
}

// TestHierarchicalDenseTicksMatchModel packs hundreds of entries into a few ticks,
// the load that takes expire's counting-sort path, and checks firing order against
// the model.
func TestHierarchicalDenseTicksMatchModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tick := rapid.Int64Range(1, 20).Draw(t, "tick")
		start := rapid.Int64Range(-1_000_000, 1<<41).Draw(t, "start")
		w := NewHierarchical[int](tick, 1<<rapid.IntRange(1, 9).Draw(t, "slotBits"), start)
		m := &refModel{now: start}
		var entries []*Entry[int]
		for round := range rapid.IntRange(1, 4).Draw(t, "rounds") {
			for range rapid.IntRange(64, 300).Draw(t, "adds") {
				e := &Entry[int]{When: m.now + rapid.Int64Range(-tick, 3*tick).Draw(t, "when"), Value: len(entries)}
				entries = append(entries, e)
				w.Add(e)
				m.add(e.Value, e.When)
				if rapid.IntRange(0, 9).Draw(t, "cancelOne") == 0 {
					victim := rapid.IntRange(0, len(entries)-1).Draw(t, "victim")
					if got, want := w.Cancel(entries[victim]), m.cancel(victim); got != want {
						t.Fatalf("Cancel(%d) = %v, want %v", victim, got, want)
					}
				}
			}
			now := m.now + rapid.Int64Range(0, 3*tick).Draw(t, "advance")
			var got []int
			w.Advance(now, func(e *Entry[int]) { got = append(got, e.Value) })
			if want := m.advance(now); !slices.Equal(got, want) {
				t.Fatalf("round %d: Advance(%d) fired %v, want %v", round, now, got, want)
			}
			if w.Len() != len(m.pending) {
				t.Fatalf("round %d: Len = %d, want %d", round, w.Len(), len(m.pending))
			}
		}
	})
}
