package engine

import (
	"context"
	"fmt"

	"github.com/axe-sched/axe/model"
)

// Pause on failure (docs/operations.md, "Pause on failure"; design.md, State machine).
//
// A task's pause_after_failures (TaskDef.PauseAfterFailures, 0: off) is a bound on its
// consecutive failed runs. What counts is a scheduled run that ends failed or timed out
// after its last retry: complete adds one to Runtime.ConsecutiveFailures, once per run
// whatever its attempts, and a success sets it back to 0. A kill (an operator's act), a lost
// run (the scheduler's fault, not the task's), a skipped misfire and every run-now instance
// neither count nor reset it. The count lives in the runtime row and is written by the end's
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

// pauseOnFailure pauses t when the failure that ended its run (already counted in nrt)
// reaches its pause_after_failures: nrt goes from FAILED to PAUSED with a note, a pause
// action joins acts, and the paused definition is returned to be written with the end.
// It returns nil (and changes nothing) when the task has no bound, is below it, is paused
// already (a pause asked for during the run takes effect through nextCycle), or was deleted
// during the run (only its run and action records land). Caller holds t.mu.
func (e *Engine) pauseOnFailure(t *task, nrt *model.Runtime, now int64, acts *[]model.Action) *model.TaskDef {
	n := t.def.PauseAfterFailures
	if n <= 0 || nrt.ConsecutiveFailures < n || t.def.Paused || t.deleted {
		return nil
	}
	if err := checkTransition(nrt.State, model.StatePaused); err != nil {
		e.log.Error("state machine refused a pause on failure", "task", t.def.Name, "error", err)
		return nil
	}
	def := *t.def
	def.Paused = true
	def.UpdatedAt = now
	t.def = &def
	note := pausedOnFailureNote(nrt.ConsecutiveFailures, n)
	from := nrt.State
	nrt.State = model.StatePaused
	nrt.Note = note
	nrt.NextTriggerTime = t.nextCron(now) // as a pause during the run leaves it (nextCycle)
	*acts = append(*acts, e.action(t, "", ActPause, from, model.StatePaused, ActorScheduler, note, now))
	return &def
}

// pausedOnFailureNote is the pause's note and action detail.
func pausedOnFailureNote(count, bound int) string {
	return fmt.Sprintf("paused after %d consecutive failed runs (pause_after_failures: %d); resume to run it again", count, bound)
}

// pausedOnFailureAlert returns the alert of a pause on failure, raised once the pause is
// durable (a then of commitLockedDef, on its own goroutine): a pause the store refused
// raises none.
func (e *Engine) pausedOnFailureAlert(id int64, name, group string, count int) func() {
	return func() {
		e.alertFor(context.Background(), AlertPausedOnFailure, id, name, group,
			fmt.Sprintf("%s paused after %d consecutive failed runs", name, count))
	}
}
