package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestColdTasksArePromotedAndFireOnce loads a window whose tasks are due later than the
// promote lead: they are held as cold references only, read in full shortly before they
// fire, and each fires exactly once at its time. Tasks paused, deleted or run by hand while
// cold behave as if they had been in memory all along.
func TestColdTasksArePromotedAndFireOnce(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		const n = 30
		// A first engine only creates the tasks; the second finds them in the store.
		e0, err := New(Config{Store: s})
		if err != nil {
			t.Fatal(err)
		}
		if err := e0.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ids, dues := make([]int64, n), make([]int64, n)
		for i := range n {
			spec := httpSpec(fmt.Sprintf("cold-%02d", i), cs.URL)
			// Due well past the promotion lead even when creating them takes seconds on a
			// loaded box: the second engine's clock starts when it does.
			spec.DelayMS = ptr(int64(60_000))
			pt := mustCreate(t, e0, spec)
			ids[i], dues[i] = pt.Def.ID, pt.Runtime.NextTriggerTime
		}
		hot := httpSpec("hot", cs.URL)
		hot.DelayMS = ptr(int64(300))
		mustCreate(t, e0, hot)
		if err := e0.Stop(ctx); err != nil {
			t.Fatal(err)
		}

		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk), func(c *Config) {
			c.PromoteLead = time.Second
			c.Window = 2 * time.Minute // the cold tasks' fires are in it, armed as cold references
		})
		tasks, armed := e.API().InMemory()
		if tasks > 1 || armed != n+1 {
			t.Fatalf("after the load: %d tasks in memory and %d entries armed, want at most the hot one and %d armed", tasks, armed, n+1)
		}
		if got := e.loader.promo.queued.Load(); got != n {
			t.Fatalf("%d cold references, want %d", got, n)
		}

		// While cold: pause one, delete one, run one by hand.
		if _, err := e.API().Pause(ctx, "cold-00", "while cold", "test"); err != nil {
			t.Fatal(err)
		}
		if err := e.API().DeleteTask(ctx, "cold-01", "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.API().RunNow(ctx, "cold-02", nil, "test"); err != nil {
			t.Fatal(err)
		}

		// Promotion and the fires follow the engine's clock, 50 ms a poll. The clock waits for
		// the engine, so that a loaded box's slow reads and commits do not read as lateness:
		// it does not move while a task past its promotion point is not in memory yet, or
		// one past its due time has not been called.
		deadline := time.Now().Add(90 * time.Second)
		for len(cs.got("cold-29")) != 1 || len(cs.got("cold-03")) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for the cold tasks to fire (clock at %d)", clk.Now().UnixMilli())
			}
			now, ready := clk.Now().UnixMilli(), true
			for i := 2; i < n; i++ { // cold-00 is paused, cold-01 deleted
				want := 1
				if i == 2 {
					want = 2 // its manual run, then its fire
				}
				if len(cs.got(fmt.Sprintf("cold-%02d", i))) >= want {
					continue // called (and, a one-shot task done, out of memory again)
				}
				if dues[i] <= now || dues[i]-time.Second.Milliseconds() <= now && !e.loader.inMemory(ids[i]) {
					ready = false
				}
			}
			if ready {
				clk.Advance(50 * time.Millisecond)
			}
			time.Sleep(10 * time.Millisecond)
		}
		waitSettled(t, e) // a duplicate would be queued or in flight until then
		for i := range n {
			name := fmt.Sprintf("cold-%02d", i)
			want := 1
			switch i {
			case 0, 1:
				want = 0
			case 2:
				want = 2 // the manual run and the scheduled fire
			}
			calls := cs.got(name)
			if len(calls) != want {
				t.Errorf("%s received %d runs, want %d", name, len(calls), want)
			}
			if len(calls) == 2 && calls[0].ticket == calls[1].ticket {
				t.Errorf("%s: manual and scheduled runs share ticket %s", name, calls[0].ticket)
			}
			for _, c := range calls {
				if c.body.ScheduledAt == 0 {
					continue
				}
				// A correctness bound, not a speed figure: promoted ahead of time, the fire
				// is not held up by reading the task. Measured on the engine's clock, by
				// the run's own record of when it was dispatched.
				r, err := s.GetRun(ctx, c.ticket)
				if err != nil {
					t.Fatal(err)
				}
				if late := r.DispatchedAt - c.body.ScheduledAt; late > 1000 {
					t.Errorf("%s fired %d ms after its time", name, late)
				}
			}
		}
		if len(cs.got("hot")) != 1 {
			t.Errorf("the task due within the lead received %d runs, want 1", len(cs.got("hot")))
		}
		pt, err := e.API().GetTask(ctx, "cold-00")
		if err != nil || pt.Runtime.State != model.StatePaused {
			t.Errorf("paused cold task = %+v, %v; want PAUSED", pt, err)
		}
		waitAdvancing(t, clk, 100*time.Millisecond, 30*time.Second, "every cold reference to be promoted", func() bool {
			return e.loader.promo.queued.Load() == 0
		})
		// Promoted one-shot tasks leave memory once their runs are recorded.
		waitFor(t, 30*time.Second, "finished tasks to leave memory", func() bool {
			tasks, _ := e.API().InMemory()
			return tasks == 0
		})
	})
}

// TestPromoteLeadValidation refuses a lead the window cannot hold.
func TestPromoteLeadValidation(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	for _, lead := range []time.Duration{time.Microsecond, 10 * time.Second, time.Minute} {
		_, err := New(Config{Store: s, Window: 10 * time.Second, LoadInterval: 2 * time.Second, PromoteLead: lead})
		if err == nil {
			t.Errorf("promote lead %s with a 10s window accepted", lead)
		}
	}
}

// TestPromoterQueueOrder checks the promoter's queue: ids come out oldest first in batches
// of at most promoteBatch, and a batch put back after a failed read comes out first again.
func TestPromoterQueueOrder(t *testing.T) {
	t.Parallel()
	var p promoter
	p.init()
	const n = 2*promoteBatch + 17
	for i := range int64(n) {
		p.push(i)
	}
	first := p.take()
	if len(first) != promoteBatch || first[0] != 0 || first[promoteBatch-1] != promoteBatch-1 {
		t.Fatalf("first batch: %d ids from %d, want %d from 0", len(first), first[0], promoteBatch)
	}
	p.putBack(first)
	var got []int64
	for ids := p.take(); len(ids) > 0; ids = p.take() {
		if len(ids) > promoteBatch {
			t.Fatalf("batch of %d ids, want at most %d", len(ids), promoteBatch)
		}
		got = append(got, ids...)
	}
	if len(got) != n {
		t.Fatalf("took %d ids, want %d", len(got), n)
	}
	for i, id := range got {
		if id != int64(i) {
			t.Fatalf("id %d at position %d: order lost", id, i)
		}
	}
	select {
	case <-p.signal:
	default:
		t.Fatal("push did not signal the promoter")
	}
}
