package engine

import (
	"context"
	"fmt"
)

// Pause on failure (docs/operations.md, "Pause on failure"; design.md, State machine).
//
// A task's pause_after_failures (TaskDef.PauseAfterFailures, 0: off) is a bound on its
// consecutive failed runs. What counts is a scheduled run that ends failed or timed out
// after its last retry: the end (decideEnd, core_transition.go) adds one to
// Runtime.ConsecutiveFailures, once per run whatever its attempts, and a success sets it
// back to 0. A kill (an operator's act), a lost run (the scheduler's fault, not the task's),
// a skipped misfire and every run-now instance neither count nor reset it. The count lives in the runtime row and is written by the end's
// own compare-and-swap, in the group that records the run's result, so it is durable exactly
// when the end is: a restart or a failover reads it back with the runtime, and the open fire
// recovery resolves is counted once, by the end recovery writes.
//
// When the count reaches the bound, the end pauses the task as a user pause does: the
// definition's paused flag, the runtime FAILED→PAUSED with a note, and a pause action, in
// the same group as the end (so there is no moment when the run has ended and the task is
// neither paused nor moved on). Then, once that group is durable, one alert. Resume sets the
// count back to 0, so a resumed task fails pause_after_failures times more before it is
// paused again. An edit keeps the count: the next failure compares it with the new bound.

// AlertPausedOnFailure is the alert a pause on failure raises, one per pause.
const AlertPausedOnFailure = "paused_on_failure"

// pausedOnFailureNote is the pause's note and action detail.
func pausedOnFailureNote(count, bound int) string {
	return fmt.Sprintf("paused after %d consecutive failed runs (pause_after_failures: %d); resume to run it again", count, bound)
}

// pausedOnFailureAlert returns the alert of a pause on failure, raised once the pause is
// durable (a then of commit, on its own goroutine): a pause the store refused
// raises none.
func (e *Alerts) pausedOnFailureAlert(id int64, name, group string, count int) func() {
	return func() {
		e.raiseFor(context.Background(), AlertPausedOnFailure, id, name, group,
			fmt.Sprintf("%s paused after %d consecutive failed runs", name, count))
	}
}
