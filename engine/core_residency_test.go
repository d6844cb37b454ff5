package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestPlaceDecidesResidency: place, the one decision over a task in memory, case by case. Each
// case takes a task the engine holds armed, changes what keeps it in memory, places it, and
// checks where it stands: armed, held unarmed, evicted, and whether it was read back from the
// store. The fake clock never moves, so nothing fires meanwhile.
func TestPlaceDecidesResidency(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk))
		beyond := clk.Now().Add(time.Hour).UnixMilli() // past the 10 s window
		type want struct{ armed, evicted, readBack bool }
		for i, c := range []struct {
			name string
			set  func(*task)
			want want
		}{
			{"due in the window is armed", func(*task) {}, want{armed: true}},
			{"due beyond the horizon, nothing holding it, leaves", func(t *task) { t.rt.NextTriggerTime = beyond }, want{evicted: true}},
			{"a pending write holds it unarmed", func(t *task) { t.rt.NextTriggerTime = beyond; t.pending = 1 }, want{}},
			{"a run-now in flight holds it unarmed", func(t *task) { t.rt.NextTriggerTime = beyond; t.flying = 1 }, want{}},
			{"a resting state is not armed", func(t *task) { t.rt.State = model.StateSuccess; t.pending = 1 }, want{}},
			{"stale with a write pending waits unarmed", func(t *task) { t.stale = true; t.pending = 1 }, want{}},
			{"stale with its periodic run in flight waits unarmed", func(t *task) {
				t.stale = true
				t.rt.State, t.periodic, t.flying = model.StateRunning, "p-1", 1
			}, want{}},
			{"stale with an allow_all run in flight waits unarmed", func(t *task) {
				t.stale = true
				t.parallel, t.flying = map[string]struct{}{"a-1": {}}, 1
			}, want{}},
			{"stale with only a run-now in flight is read back", func(t *task) { t.stale = true; t.flying = 1 }, want{evicted: true, readBack: true}},
			{"stale and free is read back", func(t *task) { t.stale = true }, want{evicted: true, readBack: true}},
			{"deleted leaves and is not read back", func(t *task) { t.deleted = true }, want{evicted: true}},
			{"deleted and stale leaves and is not read back", func(t *task) { t.deleted, t.stale = true, true }, want{evicted: true}},
			{"an evicted copy is left alone", func(t *task) { t.evicted = true }, want{armed: true, evicted: true}},
		} {
			t.Run(c.name, func(tt *testing.T) {
				spec := httpSpec(fmt.Sprintf("res-%d", i), "http://127.0.0.1:9/hook")
				spec.DelayMS = ptr(int64(5000))
				id := mustCreate(tt, e, spec).Def.ID
				tk := e.tasks.get(id)
				if tk == nil || tk.ent == nil {
					tt.Fatalf("task due in 5 s: in memory %v, want armed", tk != nil)
				}
				before := e.loader.evictions.Load()
				tk.mu.Lock()
				c.set(tk)
				e.loader.place(tk)
				armed, evicted := tk.ent != nil, tk.evicted
				tk.mu.Unlock()
				if armed != c.want.armed || evicted != c.want.evicted {
					tt.Fatalf("armed %v, evicted %v; want armed %v, evicted %v", armed, evicted, c.want.armed, c.want.evicted)
				}
				if inMap := e.tasks.get(id) == tk; inMap == evicted && !c.want.armed {
					tt.Fatalf("the task map holds the copy: %v, evicted %v", inMap, evicted)
				}
				if n := e.loader.evictions.Load() - before; evicted && !c.want.armed && n != 1 {
					tt.Fatalf("evictions counted %d, want 1", n)
				}
				if c.want.readBack {
					waitFor(tt, 5*time.Second, "the stale copy to be read back", func() bool {
						nt := e.tasks.get(id)
						if nt == nil || nt == tk {
							return false
						}
						nt.mu.Lock()
						defer nt.mu.Unlock()
						return !nt.stale && nt.ent != nil
					})
				} else if evicted && !c.want.armed {
					// Nothing reads a deleted or idle copy back: the store's row waits for the window.
					time.Sleep(50 * time.Millisecond)
					if nt := e.tasks.get(id); nt != nil {
						tt.Fatalf("a copy of the task came back into memory")
					}
				}
				// Leave the engine as it was: nothing pending, no run in flight.
				tk.mu.Lock()
				tk.pending, tk.flying, tk.periodic, tk.parallel = 0, 0, "", nil
				if c.want.armed && c.want.evicted {
					tk.evicted = false // the copy never left the map
				}
				tk.mu.Unlock()
			})
		}
	})
}
