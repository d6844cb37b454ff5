package persist_test

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
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
// record, and the other two land (docs/ha.md, "The fire record").
func TestWriterRefusedFireIsolation(t *testing.T) {
	t.Parallel()
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

// TestListOpenFires: a fire record still running is open while its task's runtime holds the
// state it fired from (due time and attempt included); a finished run, a run of another due
// time or attempt, a run-now run and a task already RUNNING in its runtime are not. The
// store's RUNNING filter lists the open ones (whatever their due) with the RUNNING
// runtimes, and no other.
func TestListOpenFires(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		const due = 1_000_000
		mk := func(name string, rt model.Runtime, runs ...model.Run) int64 {
			def := model.TaskDef{Name: name, Group: "g", Trigger: model.TriggerDelay, DelayMS: 1, Timezone: "UTC",
				TimeoutSec: 5, Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:1/"},
				MisfirePolicy: model.MisfireFireOnce}
			rt.Version = 1
			if err := s.CreateTask(ctx, &def, &rt); err != nil {
				t.Fatal(err)
			}
			for i := range runs {
				runs[i].TaskID, runs[i].TaskName = def.ID, name
				if runs[i].Ticket == "" {
					runs[i].Ticket = name + "-" + string(rune('a'+i))
				}
				if runs[i].Kind == "" {
					runs[i].Kind = model.RunScheduled
				}
			}
			if err := s.ApplyBatch(ctx, &persist.Batch{Fires: runs}); err != nil {
				t.Fatal(err)
			}
			return def.ID
		}
		running := func(sched int64, attempt int) model.Run {
			return model.Run{Attempt: attempt, ScheduledAt: sched, DispatchedAt: sched + 1, Result: model.ResultRunning}
		}
		sched := model.Runtime{State: model.StateScheduled, NextTriggerTime: due}
		retry := model.Runtime{State: model.StateRetrying, NextTriggerTime: due + 10, Attempt: 3}
		open1 := mk("open", sched, running(due, 1))
		open2 := mk("open-retry", retry, running(due, 1), running(due+10, 3))
		mk("ended", sched, model.Run{Attempt: 1, ScheduledAt: due, DispatchedAt: due, EndedAt: due + 5, Result: model.ResultSuccess})
		mk("other-due", sched, running(due-500, 1))
		mk("other-attempt", retry, running(due+10, 2))
		mk("manual", sched, model.Run{Kind: model.RunManual, Attempt: 1, ScheduledAt: due, DispatchedAt: due, Result: model.ResultRunning})
		late := mk("late", model.Runtime{State: model.StateScheduled, NextTriggerTime: due + 5000}, running(due+5000, 1))
		rtRunning := mk("runtime-running", model.Runtime{State: model.StateRunning, NextTriggerTime: due, CurrentTicket: "runtime-running-a", Attempt: 1}, running(due, 1))

		open, err := s.ListOpenFires(ctx, due+1000)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, r := range open {
			got = append(got, r.TaskID)
			if r.Result != model.ResultRunning || r.Kind != model.RunScheduled {
				t.Errorf("open fire %+v", r)
			}
		}
		if !slices.Equal(got, []int64{open1, open2}) {
			t.Fatalf("ListOpenFires = %v (%+v), want tasks %v", got, open, []int64{open1, open2})
		}
		if open[1].Attempt != 3 || open[1].ScheduledAt != due+10 {
			t.Errorf("open fire of the retrying task = %+v, want attempt 3 at its retry due", open[1])
		}
		list, err := s.ListTasks(ctx, persist.TaskFilter{State: model.StateRunning})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, tk := range list {
			ids = append(ids, tk.Def.ID)
		}
		slices.Sort(ids)
		if want := []int64{open1, open2, late, rtRunning}; !slices.Equal(ids, want) {
			t.Errorf("ListTasks(RUNNING) = %v, want %v", ids, want)
		}
		// The SCHEDULED and RETRYING pages leave them out.
		for st, want := range map[model.State]int{model.StateScheduled: 3, model.StateRetrying: 1} {
			if list, err := s.ListTasks(ctx, persist.TaskFilter{State: st}); err != nil || len(list) != want {
				t.Errorf("ListTasks(%s) = %d tasks, %v; want %d", st, len(list), err, want)
			}
		}
		// The groups page counts them the same way.
		gc, ok := s.(persist.GroupCounter)
		if !ok {
			t.Fatalf("%T counts no groups", s)
		}
		counts, err := gc.GroupCounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byState := map[model.State]int64{}
		for _, c := range counts {
			if c.Group == "g" {
				byState[c.State] += c.Count
			}
		}
		if want := map[model.State]int64{model.StateRunning: 4, model.StateScheduled: 3, model.StateRetrying: 1}; !maps.Equal(byState, want) {
			t.Errorf("GroupCounts of g = %v, want %v", byState, want)
		}
	})
}
