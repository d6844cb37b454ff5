package engine

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wheel"
)

// gateModel is what the property test knows of the gate: the slots it handed out, the fires
// that wait and the limits it set.
type gateModel struct {
	held    []concSlot
	waiting map[int64]*wheel.Entry[*task] // by task id
	meta    map[*wheel.Entry[*task]][2]string
	max     map[limitRef]int
}

func (m *gateModel) count(r limitRef) int {
	n := 0
	for _, s := range m.held {
		gr, kr, hasKey := refs(s.group, s.key)
		if gr == r || (hasKey && kr == r) {
			n++
		}
	}
	return n
}

func (m *gateModel) limitsOf(ent *wheel.Entry[*task]) []limitRef {
	gk := m.meta[ent]
	gr, kr, hasKey := refs(gk[0], gk[1])
	if hasKey {
		return []limitRef{gr, kr}
	}
	return []limitRef{gr}
}

// full reports whether r has no room now.
func (m *gateModel) full(r limitRef) bool { return m.max[r] > 0 && m.count(r) >= m.max[r] }

// take checks that a slot of group and key may be taken now (each limit below its max) and
// records it.
func (m *gateModel) take(t *rapid.T, sl concSlot, what string) {
	for _, r := range m.limitsOf(m.entOf(sl)) {
		if m.full(r) {
			t.Fatalf("%s took a slot of %s at %d of %d", what, r, m.count(r), m.max[r])
		}
	}
	m.held = append(m.held, sl)
}

// entOf is a stand-in entry for a slot's limits.
func (m *gateModel) entOf(sl concSlot) *wheel.Entry[*task] {
	e := &wheel.Entry[*task]{}
	m.meta[e] = [2]string{sl.group, sl.key}
	return e
}

// TestConcGateProperty drives the gate with random fires, run ends and limit changes against
// a model: no slot is taken of a full limit, no waiter is lost or counted twice, a waiter that
// stays waiting after a drain has a full limit, and a drain never passes over a better waiter
// for a worse one unless the better one waits for a limit the worse one does not count in.
func TestConcGateProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		g := newConcGate(clk)
		m := &gateModel{waiting: map[int64]*wheel.Entry[*task]{}, meta: map[*wheel.Entry[*task]][2]string{}, max: map[limitRef]int{}}
		groups := []string{"g1", "g2"}
		keys := []string{"", "k1", "k2"}
		allRefs := []limitRef{{model.LimitGroup, "g1"}, {model.LimitGroup, "g2"}, {model.LimitKey, "k1"}, {model.LimitKey, "k2"}}
		var when int64

		drain := func() {
			ents, adms, _ := g.drain()
			admitted := map[*wheel.Entry[*task]]bool{}
			for i, ent := range ents {
				id := int64(ent.Key)
				if m.waiting[id] != ent {
					rt.Fatalf("drain admitted an entry that does not wait (task %d)", id)
				}
				delete(m.waiting, id)
				m.take(rt, adms[i].slot, "drain")
				admitted[ent] = true
				if adms[i].waited == "" {
					rt.Fatalf("an admitted waiter has no note of its wait")
				}
			}
			for _, v := range m.waiting {
				var blocking []limitRef
				for _, r := range m.limitsOf(v) {
					if m.full(r) {
						blocking = append(blocking, r)
					}
				}
				if len(blocking) == 0 {
					rt.Fatalf("a waiter of %v stays waiting with room in all its limits", m.meta[v])
				}
				for w := range admitted {
					// The model's own order: priority 0 first, then the earlier fire time.
					if v.Priority > w.Priority || v.Priority == w.Priority && v.When >= w.When {
						continue
					}
					// Passed over: every limit v waits for is one w took a slot of, so v had
					// room where w did.
					passed := true
					for _, b := range blocking {
						shared := false
						for _, r := range m.limitsOf(w) {
							shared = shared || r == b
						}
						passed = passed && shared
					}
					if passed {
						rt.Fatalf("a worse fire (%d, %d) of %v was admitted before a better one (%d, %d) of %v", w.Priority, w.When, m.meta[w], v.Priority, v.When, m.meta[v])
					}
				}
			}
		}

		rt.Repeat(map[string]func(*rapid.T){
			"fire": func(rt *rapid.T) {
				id := rapid.Int64Range(1, 12).Draw(rt, "task")
				group := rapid.SampledFrom(groups).Draw(rt, "group")
				key := rapid.SampledFrom(keys).Draw(rt, "key")
				when++
				ent := &wheel.Entry[*task]{When: when, Key: uint64(id), Priority: uint8(rapid.IntRange(0, 4).Draw(rt, "priority"))}
				m.meta[ent] = [2]string{group, key}
				// The real offer queues behind waiters of a limit with room; the model's rule
				// is only that a taken slot fits.
				sl, ok := g.offer(id, ent, group, key)
				delete(m.waiting, id) // a newer entry of a task replaces its waiter
				if ok {
					m.take(rt, sl, "offer")
				} else {
					m.waiting[id] = ent
				}
			},
			"end": func(rt *rapid.T) {
				if len(m.held) == 0 {
					rt.Skip("nothing in flight")
				}
				i := rapid.IntRange(0, len(m.held)-1).Draw(rt, "run")
				sl := m.held[i]
				m.held = append(m.held[:i], m.held[i+1:]...)
				g.release(sl)
			},
			"limit": func(rt *rapid.T) {
				r := rapid.SampledFrom(allRefs).Draw(rt, "limit")
				n := rapid.IntRange(0, 4).Draw(rt, "max") // 0 removes it
				g.setMax(r, n)
				m.max[r] = n
			},
			"forget": func(rt *rapid.T) {
				id := rapid.Int64Range(1, 12).Draw(rt, "task")
				if ent := m.waiting[id]; ent != nil {
					g.forget(id, ent)
					delete(m.waiting, id)
				}
			},
			"drain": func(rt *rapid.T) { drain() },
			"": func(rt *rapid.T) {
				if got := g.nwait.Load(); got != int64(len(m.waiting)) {
					rt.Fatalf("gate counts %d waiters, model %d", got, len(m.waiting))
				}
				if got := g.nused.Load(); got != int64(len(m.held)) {
					rt.Fatalf("gate counts %d slots in use, model %d", got, len(m.held))
				}
				for _, r := range allRefs {
					if got := g.view(r).used; got != m.count(r) {
						rt.Fatalf("gate counts %d runs of %s, model %d", got, r, m.count(r))
					}
				}
			},
		})
		// Every limit removed: every waiter starts, none was lost.
		for _, r := range allRefs {
			g.setMax(r, 0)
			m.max[r] = 0
		}
		drain()
		if len(m.waiting) != 0 || g.nwait.Load() != 0 {
			rt.Fatalf("%d waiters left (gate: %d) after every limit was removed", len(m.waiting), g.nwait.Load())
		}
		for _, sl := range m.held {
			g.release(sl)
		}
		if g.nused.Load() != 0 || len(g.st) != 0 {
			rt.Fatalf("after every run ended the gate holds %d slots and %d states", g.nused.Load(), len(g.st))
		}
	})
}

// TestConcGateOrder: with a limit of one, the waiters start one per freed slot, best priority
// first, then earliest fire time.
func TestConcGateOrder(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	g := newConcGate(clk)
	g.setMax(limitRef{model.LimitGroup, "g"}, 1)
	first, ok := g.offer(100, &wheel.Entry[*task]{When: 1, Key: 100, Priority: 2}, "g", "")
	if !ok {
		t.Fatal("the first fire did not get the free slot")
	}
	// id, priority, fire time; offered in this order.
	type f struct {
		id   int64
		prio uint8
		when int64
	}
	fires := []f{{1, 3, 10}, {2, 1, 30}, {3, 1, 20}, {4, 0, 40}, {5, 3, 5}}
	for _, x := range fires {
		if _, ok := g.offer(x.id, &wheel.Entry[*task]{When: x.when, Key: uint64(x.id), Priority: x.prio}, "g", ""); ok {
			t.Fatalf("fire %d got a slot of a full limit", x.id)
		}
	}
	clk.Advance(1500 * time.Millisecond)
	want := []int64{4, 3, 2, 5, 1}
	held := first
	for _, id := range want {
		g.release(held)
		ents, adms, waits := g.drain()
		if len(ents) != 1 || int64(ents[0].Key) != id {
			t.Fatalf("after a run ended the gate admitted %d entries (first %v), want task %d", len(ents), ents, id)
		}
		if adms[0].waited != "waited 1.5s for concurrency limit group g (1)" || waits[0] != 1500*time.Millisecond {
			t.Fatalf("note %q, wait %s", adms[0].waited, waits[0])
		}
		held = adms[0].slot
	}
}

// TestConcGateLowered: a limit lowered below the count lets nothing start until the count is
// under it; removing it starts every waiter.
func TestConcGateLowered(t *testing.T) {
	t.Parallel()
	g := newConcGate(clock.NewFake(time.Unix(1_700_000_000, 0)))
	r := limitRef{model.LimitKey, "db"}
	g.setMax(r, 3)
	var held []concSlot
	for i := range 3 {
		sl, ok := g.offer(int64(i), &wheel.Entry[*task]{When: int64(i), Key: uint64(i)}, "a", "db")
		if !ok {
			t.Fatalf("fire %d found no room under 3", i)
		}
		held = append(held, sl)
	}
	g.setMax(r, 1)
	for i := 3; i < 6; i++ {
		if _, ok := g.offer(int64(i), &wheel.Entry[*task]{When: int64(i), Key: uint64(i)}, "b", "db"); ok {
			t.Fatalf("fire %d started at 3 of 1", i)
		}
	}
	g.release(held[0])
	g.release(held[1])
	if ents, _, _ := g.drain(); len(ents) != 0 {
		t.Fatalf("%d fires started at 1 of 1", len(ents))
	}
	g.release(held[2])
	if ents, _, _ := g.drain(); len(ents) != 1 {
		t.Fatalf("%d fires started when the count fell to 0 of 1, want 1", len(ents))
	}
	g.setMax(r, 0)
	if ents, _, _ := g.drain(); len(ents) != 2 {
		t.Fatalf("%d fires started when the limit was removed, want the other 2", len(ents))
	}
	if v := g.view(r); v.used != 3 || v.waiting != 0 {
		t.Fatalf("view %+v, want 3 in use and none waiting", v)
	}
}
