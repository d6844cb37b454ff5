package persist_test

import (
	"strings"
	"testing"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// names renders a timeline oldest first as "action(ticket)" items.
func names(tl []model.Action) string {
	var b []string
	for i := len(tl) - 1; i >= 0; i-- {
		s := tl[i].Action
		if tl[i].Ticket != "" {
			s += "(" + tl[i].Ticket + ")"
		}
		b = append(b, s)
	}
	return strings.Join(b, " ")
}

// newestFirst reverses acts given oldest first, with ids in that order, as ListActions
// returns them.
func newestFirst(acts ...model.Action) []model.Action {
	out := make([]model.Action, len(acts))
	for i := range acts {
		acts[i].ID = int64(i + 1)
		out[len(acts)-1-i] = acts[i]
	}
	return out
}

// TestTimelineDerivesDispatchAndSuccess: a cron task's two cycles, the first a success
// (no action records of its own), the second a failure that retried then succeeded; events
// of one millisecond keep the order they happened in.
func TestTimelineDerivesDispatchAndSuccess(t *testing.T) {
	t.Parallel()
	acts := newestFirst(
		model.Action{Action: "create", At: 100},
		model.Action{Action: "schedule", At: 100},
		model.Action{Action: "schedule", At: 200}, // next cycle, the instant run a ended
		model.Action{Action: "retry", Ticket: "b1", At: 300},
		model.Action{Action: "schedule", At: 400},
	)
	runs := []model.Run{ // newest first, as ListRuns returns them
		{Ticket: "b2", Kind: model.RunScheduled, Attempt: 2, ScheduledAt: 350, DispatchedAt: 350, EndedAt: 400, Result: model.ResultSuccess},
		{Ticket: "b1", Kind: model.RunScheduled, Attempt: 1, ScheduledAt: 300, DispatchedAt: 300, EndedAt: 300, Result: model.ResultFailed},
		{Ticket: "a", Kind: model.RunScheduled, Attempt: 1, ScheduledAt: 150, DispatchedAt: 150, EndedAt: 200, Result: model.ResultSuccess},
		{Ticket: "skipped", Kind: model.RunScheduled, Attempt: 1, ScheduledAt: 120, EndedAt: 130, Result: model.ResultSkipped},
	}
	tl := persist.Timeline(acts, runs, 0)
	want := "create schedule dispatch(a) result(a) schedule dispatch(b1) retry(b1) dispatch(b2) result(b2) schedule"
	if got := names(tl); got != want {
		t.Fatalf("timeline\n got %s\nwant %s", got, want)
	}
	for _, a := range tl {
		switch {
		case a.Action == "dispatch" && a.Ticket == "b2":
			if a.From != model.StateRetrying || a.To != model.StateRunning || a.Detail != "attempt 2" || a.At != 350 || a.ID != 0 {
				t.Errorf("derived retry dispatch = %+v", a)
			}
		case a.Action == "dispatch" && a.Ticket == "a":
			if a.From != model.StateScheduled || a.Actor != "scheduler" {
				t.Errorf("derived dispatch = %+v", a)
			}
		case a.Action == "result":
			if a.From != model.StateRunning || a.To != model.StateSuccess || a.Detail != "success" {
				t.Errorf("derived result = %+v", a)
			}
		}
	}
	if got := names(persist.Timeline(acts, runs, 3)); got != "dispatch(b2) result(b2) schedule" {
		t.Errorf("limit 3 = %s", got)
	}
}

// TestTimelineKeepsRecordedEventsOnce: runs written with their dispatch and result action
// records (as earlier builds did), re-sends and run-now runs get no derived events.
func TestTimelineKeepsRecordedEventsOnce(t *testing.T) {
	t.Parallel()
	acts := newestFirst(
		model.Action{Action: "dispatch", Ticket: "old", At: 10, From: model.StateScheduled, To: model.StateRunning},
		model.Action{Action: "result", Ticket: "old", At: 20},
		model.Action{Action: "run_now", Ticket: "m", At: 30},
		model.Action{Action: "result", Ticket: "m", At: 40},
		model.Action{Action: "lost", Ticket: "lost", At: 60},
		model.Action{Action: "resend", Ticket: "re", At: 60},
	)
	runs := []model.Run{
		{Ticket: "re", Kind: model.RunScheduled, Attempt: 2, ScheduledAt: 50, DispatchedAt: 60, EndedAt: 70, Result: model.ResultSuccess},
		{Ticket: "lost", Kind: model.RunScheduled, Attempt: 1, ScheduledAt: 50, DispatchedAt: 50, EndedAt: 60, Result: model.ResultLost},
		{Ticket: "m", Kind: model.RunManual, Attempt: 1, ScheduledAt: 30, DispatchedAt: 30, EndedAt: 40, Result: model.ResultSuccess},
		{Ticket: "old", Kind: model.RunScheduled, Attempt: 1, ScheduledAt: 10, DispatchedAt: 10, EndedAt: 20, Result: model.ResultSuccess},
	}
	want := "dispatch(old) result(old) run_now(m) result(m) dispatch(lost) lost(lost) resend(re) result(re)"
	if got := names(persist.Timeline(acts, runs, 0)); got != want {
		t.Fatalf("timeline\n got %s\nwant %s", got, want)
	}
}
