package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// failScript answers a callbackServer's calls from a script: call i (0-based, over every
// call of the test) fails with 500 when fail(i), else succeeds.
type failScript struct {
	mu   sync.Mutex
	n    int
	fail func(i int) bool
}

func (f *failScript) status(call) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.n
	f.n++
	if f.fail(i) {
		return 500
	}
	return 200
}

// pauseFailSpec is a task firing every second on cs with the given bound.
func pauseFailSpec(name, url string, bound int) *wire.TaskSpec {
	spec := httpSpec(name, url)
	spec.Cron = "*/1 * * * * *"
	spec.Timezone = "UTC"
	spec.PauseAfterFailures = bound
	return spec
}

// waitPaused moves clk until the task is PAUSED in memory and its writes have landed.
func waitPaused(t *testing.T, e *Engine, clk *clock.Fake, name string) *model.Task {
	t.Helper()
	var pt *model.Task
	waitAdvancing(t, clk, 100*time.Millisecond, 20*time.Second, name+" to pause", func() bool {
		var err error
		pt, err = e.API().GetTask(context.Background(), name)
		return err == nil && pt.Runtime.State == model.StatePaused
	})
	waitSettled(t, e)
	return pt
}

// wantPauseRecords waits for the task's n-th paused_on_failure alert (raised once its pause
// is durable, on a goroutine of its own) and then requires exactly n pauses by the scheduler
// and n alerts, recorded and sent.
func wantPauseRecords(t *testing.T, e *Engine, name string, n int) {
	t.Helper()
	sent := func() int {
		k := 0
		for _, d := range e.API().Alerts().Recent() {
			if d.Kind == AlertPausedOnFailure && d.Task == name {
				k++
			}
		}
		return k
	}
	waitFor(t, 10*time.Second, "the pause's alert", func() bool {
		_, a := pauseRecords(t, e, name)
		return a >= n && sent() >= n
	})
	waitSettled(t, e)
	if p, a := pauseRecords(t, e, name); p != n || a != n || sent() != n {
		t.Fatalf("%d pause records, %d alert records, %d alerts sent; want %d of each", p, a, sent(), n)
	}
}

// pauseRecords counts the task's pause actions by the scheduler and its paused_on_failure
// alert records, from the store.
func pauseRecords(t *testing.T, e *Engine, name string) (pauses, alerts int) {
	t.Helper()
	acts, err := e.store.ListActions(context.Background(), bulkID(t, e, name), 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acts {
		switch {
		case a.Action == ActPause && a.Actor == ActorScheduler:
			pauses++
		case a.Action == AlertPausedOnFailure:
			alerts++
		}
	}
	return pauses, alerts
}

// TestPauseAfterConsecutiveFailures: a task that fails every run is paused after its bound,
// exactly as a user pause leaves it (definition paused, runtime PAUSED with a note), with one
// pause record and one alert; nothing fires while it is paused; resumed, it fails the bound
// again before the next pause.
func TestPauseAfterConsecutiveFailures(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		cs.status = func(call) int { return 500 }
		clk := clock.NewFake(time.Now())
		cs.clk = clk
		e := startEngine(t, s, withFakeClock(clk))
		mustCreate(t, e, pauseFailSpec("pf", cs.URL, 3))

		pt := waitPaused(t, e, clk, "pf")
		if n := len(cs.got("pf")); n != 3 {
			t.Fatalf("called %d times before the pause, want 3", n)
		}
		if !pt.Def.Paused || pt.Runtime.ConsecutiveFailures != 3 ||
			!strings.Contains(pt.Runtime.Note, "paused after 3 consecutive failed runs") {
			t.Fatalf("task after the pause: paused %v, runtime %+v", pt.Def.Paused, pt.Runtime)
		}
		// The store says the same: the pause is durable, not only in memory.
		st, err := s.GetTask(context.Background(), "pf")
		if err != nil {
			t.Fatal(err)
		}
		if !st.Def.Paused || st.Runtime.State != model.StatePaused || st.Runtime.ConsecutiveFailures != 3 {
			t.Fatalf("stored task: paused %v, runtime %+v", st.Def.Paused, st.Runtime)
		}
		wantPauseRecords(t, e, "pf", 1)

		// Paused: nothing fires, and nothing is counted.
		runFor(clk, 5*time.Second, 100*time.Millisecond)
		waitSettled(t, e)
		if n := len(cs.got("pf")); n != 3 {
			t.Fatalf("called %d times while paused, want still 3", n)
		}

		// Resumed: three more failures, not one, before the next pause.
		pt, err = e.API().Resume(context.Background(), "pf", "", "test")
		if err != nil {
			t.Fatal(err)
		}
		if pt.Runtime.ConsecutiveFailures != 0 || pt.Runtime.Note != "" {
			t.Fatalf("runtime after resume = %+v, want the count and note cleared", pt.Runtime)
		}
		waitPaused(t, e, clk, "pf")
		if n := len(cs.got("pf")); n != 6 {
			t.Fatalf("called %d times at the second pause, want 6", n)
		}
		wantPauseRecords(t, e, "pf", 2)
	})
}

// TestPauseOnFailureSuccessResets: a success between failures starts the count again.
func TestPauseOnFailureSuccessResets(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		// fail, fail, success, fail, fail, fail: paused after the sixth run, not the fourth.
		script := &failScript{fail: func(i int) bool { return i != 2 }}
		cs.status = script.status
		clk := clock.NewFake(time.Now())
		cs.clk = clk
		e := startEngine(t, s, withFakeClock(clk))
		mustCreate(t, e, pauseFailSpec("pf-reset", cs.URL, 3))
		var seen model.Runtime
		waitAdvancing(t, clk, 100*time.Millisecond, 20*time.Second, "the success", func() bool {
			pt, err := e.API().GetTask(context.Background(), "pf-reset")
			if err == nil {
				seen = pt.Runtime
			}
			return err == nil && pt.Runtime.SuccessCount == 1
		})
		// One snapshot: the next run may end between two reads, so the count is judged
		// against the failures of that same snapshot. Two failed before the success; the
		// count holds only those after it.
		if int64(seen.ConsecutiveFailures) != seen.FailureCount-2 {
			t.Fatalf("after a success: count %d with %d failures in all, want the failures since the success (%d)",
				seen.ConsecutiveFailures, seen.FailureCount, seen.FailureCount-2)
		}
		pt := waitPaused(t, e, clk, "pf-reset")
		if n := len(cs.got("pf-reset")); n != 6 {
			t.Fatalf("paused after %d runs, want 6", n)
		}
		if pt.Runtime.ConsecutiveFailures != 3 || pt.Runtime.SuccessCount != 1 || pt.Runtime.FailureCount != 5 {
			t.Fatalf("runtime = %+v", pt.Runtime)
		}
	})
}

// TestPauseOnFailureCountsARunOnce: the attempts of one run (its retries) are one failure.
func TestPauseOnFailureCountsARunOnce(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		cs.status = func(call) int { return 500 }
		clk := clock.NewFake(time.Now())
		cs.clk = clk
		e := startEngine(t, s, withFakeClock(clk))
		spec := pauseFailSpec("pf-retry", cs.URL, 2)
		spec.Cron = "*/10 * * * * *"
		spec.RetryCount = ptr(2)
		spec.RetryIntervalSec = ptr(1)
		mustCreate(t, e, spec)
		// The first run: three attempts, one failure, no pause.
		waitAdvancing(t, clk, 100*time.Millisecond, 20*time.Second, "the first run's end", func() bool {
			pt, err := e.API().GetTask(context.Background(), "pf-retry")
			return err == nil && pt.Runtime.FailureCount == 1
		})
		pt, err := e.API().GetTask(context.Background(), "pf-retry")
		if err != nil {
			t.Fatal(err)
		}
		if n := len(cs.got("pf-retry")); n != 3 || pt.Runtime.ConsecutiveFailures != 1 || pt.Def.Paused {
			t.Fatalf("after the first run: %d calls, runtime %+v, paused %v; want 3 calls, count 1, not paused",
				n, pt.Runtime, pt.Def.Paused)
		}
		pt = waitPaused(t, e, clk, "pf-retry")
		if n := len(cs.got("pf-retry")); n != 6 || pt.Runtime.ConsecutiveFailures != 2 {
			t.Fatalf("paused after %d calls with count %d, want 6 calls (two runs) and 2", n, pt.Runtime.ConsecutiveFailures)
		}
	})
}

// TestPauseOnFailureCountSurvivesRestart: the count is read back from the store by the next
// engine (a restart, or a promotion, which starts an engine the same way): two failures
// before the restart and one after pause a task whose bound is 3, and not earlier.
func TestPauseOnFailureCountSurvivesRestart(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		cs.status = func(call) int { return 500 }
		clk := clock.NewFake(time.Now())
		cs.clk = clk
		a := startEngine(t, s, withFakeClock(clk))
		mustCreate(t, a, pauseFailSpec("pf-restart", cs.URL, 3))
		waitAdvancing(t, clk, 100*time.Millisecond, 20*time.Second, "two failures", func() bool {
			pt, err := a.API().GetTask(context.Background(), "pf-restart")
			return err == nil && pt.Runtime.FailureCount >= 2
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := s.GetTask(ctx, "pf-restart")
		if err != nil {
			t.Fatal(err)
		}
		before := st.Runtime.ConsecutiveFailures
		if before != int(st.Runtime.FailureCount) || before < 2 || before >= 3 || st.Runtime.State == model.StatePaused {
			t.Fatalf("stored at the stop: runtime %+v; want the count equal to the failures, 2", st.Runtime)
		}
		calls := len(cs.got("pf-restart"))
		if calls != before {
			t.Fatalf("%d calls for %d counted failures", calls, before)
		}

		b := startEngine(t, s, withFakeClock(clk))
		pt, err := b.API().GetTask(ctx, "pf-restart")
		if err != nil {
			t.Fatal(err)
		}
		if pt.Runtime.ConsecutiveFailures != before {
			t.Fatalf("count after the restart = %d, want %d", pt.Runtime.ConsecutiveFailures, before)
		}
		pt = waitPaused(t, b, clk, "pf-restart")
		if n := len(cs.got("pf-restart")); n != 3 || pt.Runtime.ConsecutiveFailures != 3 {
			t.Fatalf("paused after %d calls with count %d, want 3 and 3", n, pt.Runtime.ConsecutiveFailures)
		}
		wantPauseRecords(t, b, "pf-restart", 1)
	})
}

// TestPauseAfterFailuresValidation: the bound is 0..MaxPauseAfterFailures, and an error
// names the field.
func TestPauseAfterFailuresValidation(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, MaxPauseAfterFailures + 1} {
		spec := pauseFailSpec("v", "http://127.0.0.1:1/", n)
		_, err := Normalize(spec, "UTC")
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "pause_after_failures" {
			t.Errorf("bound %d: error %v, want a FieldError naming pause_after_failures", n, err)
		}
	}
	for _, n := range []int{0, 1, MaxPauseAfterFailures} {
		d, err := Normalize(pauseFailSpec("v", "http://127.0.0.1:1/", n), "UTC")
		if err != nil || d.PauseAfterFailures != n {
			t.Errorf("bound %d: def %d, error %v", n, d.PauseAfterFailures, err)
		}
	}
}
