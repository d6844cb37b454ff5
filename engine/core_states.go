package engine

import (
	"fmt"

	"github.com/axe-sched/axe/model"
)

// transitions is the state machine (design.md, "State machine"), in one declarative place. Every state change
// the engine makes is checked against it (checkTransition) and recorded as an action.
//
// The basic table is:
//
//	WAITING→SCHEDULED,PAUSED · SCHEDULED→RUNNING,FAILED · RUNNING→SUCCESS,FAILED,RETRYING,KILLED ·
//	RETRYING→RUNNING,FAILED · SUCCESS→SCHEDULED · FAILED→RUNNING · PAUSED→WAITING,RUNNING ·
//	KILLED→WAITING
//
// Edges added beyond it, each needed by a behaviour the spec or an issue asks for:
//
//   - SCHEDULED→PAUSED, RETRYING→PAUSED: pausing a task that is armed in the wheel or waiting
//     for a retry must stop its future triggers at once; going through WAITING first
//     would arm nothing and only add a meaningless record.
//   - SUCCESS→PAUSED, FAILED→PAUSED, KILLED→PAUSED: a pause requested while a run was in flight
//     takes effect when that run ends ("a running instance finishes, and the task then rests in
//     PAUSED"); a finished one-shot (delay) task can also be paused.
//   - FAILED→SCHEDULED: a periodic task whose last retry failed still gets its next cycle; the
//     FAILED run stays visible in the run history.
//   - SUCCESS→WAITING, FAILED→WAITING: a dependency-triggered task waits for its upstreams
//     again after each run, and a finished task can be re-armed by an edit.
//   - RETRYING→SCHEDULED: a retry that can no longer be sent (its executor app is gone) falls
//     back to the next cycle instead of failing the task for good.
//   - PAUSED→SCHEDULED: resuming a periodic task computes its next fire time from now and
//     arms it directly; WAITING→SCHEDULED would be recorded as a second action for one click.
//   - WAITING→WAITING is not an edge: updates that only move next_trigger_time within a state
//     are recorded as "update" actions, not transitions.
var transitions = map[model.State][]model.State{
	model.StateWaiting:   {model.StateScheduled, model.StatePaused},
	model.StateScheduled: {model.StateRunning, model.StateFailed, model.StatePaused},
	model.StateRunning:   {model.StateSuccess, model.StateFailed, model.StateRetrying, model.StateKilled},
	model.StateRetrying:  {model.StateRunning, model.StateFailed, model.StatePaused, model.StateScheduled},
	model.StateSuccess:   {model.StateScheduled, model.StateWaiting, model.StatePaused},
	model.StateFailed:    {model.StateRunning, model.StateScheduled, model.StateWaiting, model.StatePaused},
	model.StatePaused:    {model.StateWaiting, model.StateRunning, model.StateScheduled},
	model.StateKilled:    {model.StateWaiting, model.StatePaused},
}

// legal is the table compiled for O(1) checks on the hot path.
var legal = func() map[[2]model.State]bool {
	m := make(map[[2]model.State]bool)
	for from, tos := range transitions {
		for _, to := range tos {
			m[[2]model.State{from, to}] = true
		}
	}
	return m
}()

// checkTransition reports whether from→to is an edge of the state machine.
func checkTransition(from, to model.State) error {
	if legal[[2]model.State{from, to}] {
		return nil
	}
	return fmt.Errorf("%w: %s→%s", ErrInvalidTransition, from, to)
}
