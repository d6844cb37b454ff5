package persist_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestLanesKeepEachTaskInOrder drives chained transitions of many tasks through four lanes
// concurrently: every chain lands in order (each transition expects the previous one's
// version, so a reordering would conflict), and callbacks of one task fire in order.
func TestLanesKeepEachTaskInOrder(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		l, err := persist.NewLanes(s, persist.WriterConfig{}, 4)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var tasks []*task
		for i := 0; i < 12; i++ {
			tasks = append(tasks, newTask(t, s, fmt.Sprintf("lane-%d", i)))
		}
		const steps = 20
		var wg sync.WaitGroup
		errs := make(chan error, len(tasks)*steps)
		for _, k := range tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				last := 0
				var mu sync.Mutex
				for i := 1; i <= steps; i++ {
					g := k.next()
					g.Done = func(err error) {
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							errs <- fmt.Errorf("%s step %d: %w", k.name, i, err)
						}
						if i != last+1 {
							errs <- fmt.Errorf("%s: callback %d after %d", k.name, i, last)
						}
						last = i
					}
					if err := l.Submit(ctx, g); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := l.Write(ctx, &persist.Group{Actions: []model.Action{{Action: "system", Actor: "test", At: 1}}}); err != nil {
			t.Fatal(err)
		}
		if err := l.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for _, k := range tasks {
			k.checkLanded(t, s)
		}
		if n := l.Pending(); n != 0 {
			t.Errorf("%d groups pending after Stop", n)
		}
	})
}

// heldLanes starts two lanes on s whose first commit waits, once it has started (cs.entered),
// until open is called; the test's cleanup opens it and stops the lanes.
func heldLanes(t *testing.T, s persist.Store) (l *persist.Lanes, cs *countingStore, open func()) {
	t.Helper()
	cs = &countingStore{Store: s, entered: make(chan struct{}), gate: make(chan struct{})}
	var release sync.Once
	open = func() { release.Do(func() { close(cs.gate) }) }
	l, err := persist.NewLanes(cs, persist.WriterConfig{Logger: testLogger(t)}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		open()
		stopCtx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := l.Stop(stopCtx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return l, cs, open
}

// TestLanesCreatesAvoidACommittingLane holds one lane's commit before it reaches the
// database: a create submitted meanwhile goes to a lane that is gathering and lands while the
// held one waits, instead of queueing behind it. Then the held create lands too.
func TestLanesCreatesAvoidACommittingLane(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		l, cs, open := heldLanes(t, s)
		o := newOutcomes(2)
		if err := l.Submit(ctx, createGroup("held", o, 0)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-cs.entered:
		case <-ctx.Done():
			t.Fatal("the first create's commit never started")
		}
		if err := l.Submit(ctx, createGroup("beside", o, 1)); err != nil {
			t.Fatal(err)
		}
		if r := o.wait(t, 1)[0]; r.seq != 1 || r.err != nil {
			t.Fatalf("first outcome: group %d, %v; want the second create, landed beside the held commit", r.seq, r.err)
		}
		if _, err := s.GetTask(ctx, "beside"); err != nil {
			t.Errorf("beside: %v", err)
		}
		open()
		if r := o.wait(t, 1)[0]; r.seq != 0 || r.err != nil {
			t.Errorf("second outcome: group %d, %v; want the held create, landed", r.seq, r.err)
		}
		if _, err := s.GetTask(ctx, "held"); err != nil {
			t.Errorf("held: %v", err)
		}
	})
}

// TestLanesKeyFireRecordsByTask: a fire record goes to its task's lane, as the task's other
// writes do, so the fire records of a burst spread over every lane. One lane's commit is held
// before it reaches the database; a fire record of a task of the other lane lands meanwhile,
// and both are open fires once the held one lands.
func TestLanesKeyFireRecordsByTask(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		const due = 1_000_000
		byParity := map[int64]model.TaskDef{} // a task of each lane of two
		for i := 0; len(byParity) < 2; i++ {
			def := model.TaskDef{Name: fmt.Sprintf("fire-lane-%d", i), Group: "g", Trigger: model.TriggerDelay, DelayMS: 1,
				Timezone: "UTC", TimeoutSec: 5, Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:1/"},
				MisfirePolicy: model.MisfireFireOnce}
			rt := model.Runtime{State: model.StateScheduled, NextTriggerTime: due, Version: 1}
			if err := s.CreateTask(ctx, &def, &rt); err != nil {
				t.Fatal(err)
			}
			if _, ok := byParity[def.ID%2]; !ok {
				byParity[def.ID%2] = def
			}
		}
		l, cs, open := heldLanes(t, s)
		o := newOutcomes(2)
		fire := func(def model.TaskDef, seq int) *persist.Group {
			return &persist.Group{Fires: []model.Run{{
				Ticket: fmt.Sprintf("%d-%d-1", def.ID, due), TaskID: def.ID, TaskName: def.Name, Kind: model.RunScheduled,
				Attempt: 1, ScheduledAt: due, DispatchedAt: due + 1, Result: model.ResultRunning,
			}}, Done: o.done(seq)}
		}
		if err := l.Submit(ctx, fire(byParity[0], 0)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-cs.entered:
		case <-ctx.Done():
			t.Fatal("the first fire record's commit never started")
		}
		if err := l.Submit(ctx, fire(byParity[1], 1)); err != nil {
			t.Fatal(err)
		}
		if r := o.wait(t, 1)[0]; r.seq != 1 || r.err != nil {
			t.Fatalf("first outcome: group %d, %v; want the other lane's fire record, landed beside the held commit", r.seq, r.err)
		}
		open()
		if r := o.wait(t, 1)[0]; r.seq != 0 || r.err != nil {
			t.Fatalf("second outcome: group %d, %v; want the held fire record, landed", r.seq, r.err)
		}
		fires, err := s.ListOpenFires(ctx, due+1)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int64]bool{}
		for _, r := range fires {
			got[r.TaskID] = true
		}
		if len(fires) != 2 || !got[byParity[0].ID] || !got[byParity[1].ID] {
			t.Errorf("open fires %+v; want one of each task", fires)
		}
	})
}
