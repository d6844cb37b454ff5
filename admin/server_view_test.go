package admin

import (
	"testing"

	"github.com/axe-sched/axe/model"
)

// TestTaskViewHidesTheRunningDue: a RUNNING task's stored next_trigger_time is the due of the
// fire in flight; the API shows no next fire until the run ends, and the real next fire of
// any other state.
func TestTaskViewHidesTheRunningDue(t *testing.T) {
	const due = 1_800_000_000_000
	for _, tc := range []struct {
		state    model.State
		wantNext int64
	}{
		{model.StateRunning, 0},
		{model.StateScheduled, due},
		{model.StatePaused, due},
	} {
		v := taskView(&model.Task{
			Def:     model.TaskDef{Name: "x", Timezone: "UTC"},
			Runtime: model.Runtime{State: tc.state, NextTriggerTime: due},
		})
		if v.Runtime.NextTriggerTime != tc.wantNext || (v.Runtime.NextFireAt != "") != (tc.wantNext > 0) {
			t.Errorf("%s: next_trigger_time %d, next_fire_at %q; want %d", tc.state, v.Runtime.NextTriggerTime, v.Runtime.NextFireAt, tc.wantNext)
		}
	}
}
