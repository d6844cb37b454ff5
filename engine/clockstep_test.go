package engine

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestClockStepForwardAndBack steps the engine's clock an hour forward and then an hour back
// (docs/faults.md, "clock step"). Forward: the fire armed before the step runs once, late,
// and the fires missed in between are coalesced into one, which an action records. Back: nothing fires again for a time already fired; the tasks keep their next fire an
// hour ahead and fire there once the clock gets back to it. No (task, fire time, attempt) is
// dispatched twice at any point.
var coalescedNote = regexp.MustCompile(`(\d+) fire\(s\) \([^)]*\) before it skipped`)

func TestClockStepForwardAndBack(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	cs := newCallbackServer(t)
	clk := clock.NewFake(time.Now())
	cs.clk = clk
	e := startEngine(t, s, withFakeClock(clk))
	for _, policy := range []string{model.MisfireFireOnce, model.MisfireSkip} {
		spec := httpSpec("step-"+policy, cs.URL)
		spec.Cron = "*/5 * * * * *"
		spec.Timezone = "UTC"
		spec.MisfirePolicy = policy
		mustCreate(t, e, spec)
	}
	ctx := context.Background()
	fires := func(name string) int { return len(cs.got(name)) }
	// Run normally over two fires.
	waitAdvancing(t, clk, 100*time.Millisecond, 20*time.Second, "two regular fires of each task", func() bool {
		return fires("step-fire_once") >= 2 && fires("step-skip") >= 2
	})
	waitFor(t, 5*time.Second, "the runs to end", func() bool { return e.runs.count() == 0 })
	before := map[string]int{"step-fire_once": fires("step-fire_once"), "step-skip": fires("step-skip")}

	// Forward an hour, past MisfireThreshold: 720 fires of each task are missed at once.
	clk.Advance(time.Hour)
	waitAdvancing(t, clk, 10*time.Millisecond, 10*time.Second, "fire_once to run once for the missed fires", func() bool {
		return fires("step-fire_once") > before["step-fire_once"]
	})
	// Let the next regular fire (≤ 5 s later) come for both.
	for range 60 {
		clk.Advance(100 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
	}
	waitFor(t, 5*time.Second, "the runs to end", func() bool { return e.runs.count() == 0 })
	afterFwd := map[string]int{"step-fire_once": fires("step-fire_once"), "step-skip": fires("step-skip")}
	stepped := clk.Now().Add(-6 * time.Second) // the instant of the step, on the engine's clock
	for _, name := range []string{"step-fire_once", "step-skip"} {
		// The fire armed before the step runs once, an hour late; the 718 or so fires missed
		// in between are coalesced into one, recorded on the schedule action; then the task
		// is back on its regular fires. Whatever the policy: the wheel's armed entry is not
		// subject to the misfire rule, which applies to tasks loaded late (docs/faults.md).
		// (When the step lands while the task's write is pending, the re-armed task takes
		// the misfire path instead: a misfire action.)
		late := 0
		for _, c := range cs.got(name) {
			if c.at.After(stepped) && c.at.Sub(time.UnixMilli(c.body.ScheduledAt)) > time.Minute {
				late++
			}
		}
		if late > 1 {
			t.Errorf("%s ran %d fires an hour late after the step, want at most the one armed before it", name, late)
		}
		if d := afterFwd[name] - before[name]; d < 1 || d > 4 {
			t.Errorf("%s ran %d times in the 6 s after an hour's step, want at most the late fire, the coalesced one and two regular ones", name, d)
		}
		coalesced := false
		acts, err := e.API().Actions(ctx, name, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acts {
			if a.Action == ActMisfire && a.At >= stepped.UnixMilli() {
				coalesced = true // the step landed between two fires: the policy applied
			}
			if m := coalescedNote.FindStringSubmatch(a.Detail); m != nil {
				if n, _ := strconv.Atoi(m[1]); n > 700 {
					coalesced = true
				}
			}
		}
		if !coalesced {
			t.Errorf("%s: no action records the ~718 fires the step skipped (coalesced, or a misfire)", name)
		}
	}

	// Back an hour: the clock reads times already fired. Nothing may fire for them.
	clk.Advance(-time.Hour)
	for range 100 {
		clk.Advance(100 * time.Millisecond)
		time.Sleep(5 * time.Millisecond)
	}
	for name, n := range afterFwd {
		if got := fires(name); got != n {
			t.Errorf("%s fired %d times in the 10 s after the clock stepped back an hour, want 0: those times were fired already", name, got-n)
		}
		pt, err := e.API().GetTask(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if ahead := time.UnixMilli(pt.Runtime.NextTriggerTime).Sub(clk.Now()); pt.Runtime.State != model.StateScheduled || ahead < 50*time.Minute {
			t.Errorf("%s after the step back: %s, next fire %s ahead; want SCHEDULED about an hour ahead", name, pt.Runtime.State, ahead)
		}
	}
	// The clock catches up with the hour: the tasks fire again at their next fire, once.
	clk.Advance(time.Hour - 10*time.Second)
	waitAdvancing(t, clk, 100*time.Millisecond, 20*time.Second, "the tasks to fire once the clock is back at their next fire", func() bool {
		return fires("step-fire_once") > afterFwd["step-fire_once"] && fires("step-skip") > afterFwd["step-skip"]
	})

	type key struct {
		task    string
		sched   int64
		attempt int
	}
	seen := map[key]int{}
	for _, c := range cs.got("") {
		k := key{c.task, c.body.ScheduledAt, c.attempt}
		if seen[k]++; seen[k] == 2 {
			t.Errorf("%s @%d attempt %d dispatched twice", k.task, k.sched, k.attempt)
		}
	}
	t.Logf("clock step: %d dispatches, each (task, fire time, attempt) once", len(cs.got("")))
}
