package persist_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// asFire turns a dispatch group's run into a fire record, as the engine writes it.
func asFire(g *persist.Group) *persist.Group {
	g.Fires, g.Runs = g.Runs, nil
	return g
}

// TestWriterRefusedFireIsolation puts a fire record whose run already exists between two
// good groups of one batch: only its group fails, with a *FireRefusedError naming its own
// record, and the other two land (R8.5).
func TestWriterRefusedFireIsolation(t *testing.T) {
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		a, b, c := newTask(t, s, "a"), newTask(t, s, "b"), newTask(t, s, "c")
		// b's first fire lands; its group is then built again with a CAS that passes.
		first := asFire(b.next())
		if err := s.ApplyBatch(ctx, &persist.Batch{Transitions: first.Transitions, Fires: first.Fires, Actions: first.Actions}); err != nil {
			t.Fatalf("first fire of b: %v", err)
		}
		landed := b.rt
		again := asFire(b.next())
		again.Fires[0].Ticket = first.Fires[0].Ticket // the same (task, fire time, attempt)

		cs := &countingStore{Store: s}
		w := newWriter(t, cs, persist.WriterConfig{MaxDelay: time.Hour, MaxBatchRows: 9}, false)
		res := newOutcomes(3)
		groups := []*persist.Group{asFire(a.next()), again, asFire(c.next())}
		for i, g := range groups {
			g.Done = res.done(i)
			submit(t, w, g)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		got := res.wait(t, 3)
		var re *persist.FireRefusedError
		if got[0].err != nil || got[2].err != nil {
			t.Fatalf("good groups failed: %v, %v", got[0].err, got[2].err)
		}
		if !errors.As(got[1].err, &re) || !errors.Is(got[1].err, persist.ErrDuplicateFire) || !slices.Equal(re.Indexes, []int{0}) {
			t.Fatalf("refused group got %v, want *FireRefusedError{[0]}", got[1].err)
		}
		if calls := cs.calls.Load(); calls != 2 {
			t.Errorf("ApplyBatch called %d times, want 2 (the batch, then without the refused group)", calls)
		}
		a.checkLanded(t, s)
		c.checkLanded(t, s)
		b.rt = landed
		b.checkLanded(t, s)
	})
}
