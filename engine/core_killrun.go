package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/axe-sched/axe/model"
)

// Kills by an operator. A kill ends a run in flight here at once: a kill is sent to the
// executor holding it (best effort; an HTTP callback's downstream sees its connection
// closed at the run's deadline), the run is recorded KILLED with who killed it and why, and
// the task's last result becomes killed. A periodic run's kill moves the task on to its next
// cycle (decideKill); a run-now, allow_all or backfill run's kill ends that run only. The
// output an executor reports after the kill (what the handler printed before it was
// cancelled) is added to the killed run's record (reportUnheld).

// killText is the error text of a killed run.
func killText(by, reason string) string {
	if reason == "" {
		return "killed by " + by
	}
	return "killed by " + by + ": " + reason
}

// maxKillReason bounds a kill's reason, as a note is bounded.
const maxKillReason = 1024

// Kill ends every run of the named task in flight (KillTask without a reason).
func (e *API) Kill(ctx context.Context, name, actor string) (*model.Task, error) {
	return e.KillTask(ctx, name, "", actor)
}

// KillTask ends every run of the named task in flight here: its periodic run, its allow_all
// runs, its run-now and backfill runs. It answers ErrConflict when none is in flight (or all
// were ending already), and returns the task as the kills left it.
func (e *API) KillTask(ctx context.Context, name, reason, actor string) (*model.Task, error) {
	if err := e.checkRunning(); err != nil {
		return nil, err
	}
	if len(reason) > maxKillReason {
		return nil, fieldErr("reason", "at most %d characters", maxKillReason)
	}
	t, err := e.acquire(ctx, 0, acquireOpts{name: name})
	if err != nil {
		return nil, err
	}
	state := t.rt.State
	tickets := e.runs.ticketsOf(t)
	e.release(t)
	if len(tickets) == 0 {
		return nil, fmt.Errorf("%w: task %q has no run in flight (it is %s)", ErrConflict, name, state)
	}
	killed := 0
	var periodic *model.Runtime // the runtime a periodic run's kill made durable
	for _, ticket := range tickets {
		_, rt, err := e.killTicket(ctx, ticket, reason, actor)
		switch {
		case err == nil:
			killed++
			if rt != nil {
				periodic = rt
			}
		case errors.Is(err, ErrConflict) || errors.Is(err, model.ErrRunNotFound):
			// Its result, timeout or loss took the run first and is recording that end.
		default:
			return nil, err
		}
	}
	if killed == 0 {
		return nil, fmt.Errorf("%w: the runs of task %q are ending already", ErrConflict, name)
	}
	pt, err := e.GetTask(ctx, name)
	if err == nil && periodic != nil {
		// The runtime the periodic run's kill made durable: a next fire already due may have
		// started since, and the caller asked about the kill.
		pt.Runtime = *periodic
	}
	return pt, err
}

// KillRun ends the run with ticket, whatever its kind (periodic, run-now, allow_all,
// backfill), with an optional reason, and returns its record as the kill left it. A ticket
// no run has is ErrRunNotFound; a run that has ended, or is not in flight here, ErrConflict;
// a run of a shard this node does not schedule, model.ErrShardNotHeld (the API passes the call on
// to the shard's owner).
func (e *API) KillRun(ctx context.Context, ticket, reason, actor string) (*model.Run, error) {
	if err := e.checkRunning(); err != nil {
		return nil, err
	}
	if ticket == "" {
		return nil, fieldErr("ticket", "is required")
	}
	if len(reason) > maxKillReason {
		return nil, fieldErr("reason", "at most %d characters", maxKillReason)
	}
	run, _, err := e.killTicket(ctx, ticket, reason, actor)
	return run, err
}

// killTicket kills the run with ticket and returns its record; for a periodic run also the
// task's runtime as the kill committed it.
func (e *API) killTicket(ctx context.Context, ticket, reason, actor string) (*model.Run, *model.Runtime, error) {
	ft := e.runs.taskOf(ticket)
	if ft == nil {
		return nil, nil, e.notInFlight(ctx, ticket)
	}
	t, err := e.acquire(ctx, ft.id, acquireOpts{})
	if err != nil {
		return nil, nil, err
	}
	var rt *model.Runtime
	_, parallel := t.parallel[ticket]
	// The executor is told once the kill is decided and on record (or failed to be): a run
	// taken here is over for the scheduler either way (killSender).
	send, taken := e.killSender(ticket), false
	defer func() {
		if taken {
			send()
		}
	}()
	switch {
	case t.periodic == ticket:
		err = ErrConflict
		taken = e.runs.take(ticket, nil, func(f *flight) {
			var nrt model.Runtime
			if nrt, err = e.killLocked(ctx, t, f.run, actor, reason); err == nil {
				rt = &nrt
			}
		})
		e.release(t)
		if !taken {
			return nil, nil, e.notInFlight(ctx, ticket)
		}
		if err != nil {
			return nil, nil, err
		}
	case parallel:
		done := make(chan error, 1)
		var after func()
		taken = e.runs.take(ticket, nil, func(f *flight) {
			after = e.endParallelLocked(t, f.run, outcome{killReason: reason, durable: func(err error) { done <- err }}, actor)
		})
		e.release(t)
		if !taken {
			return nil, nil, e.notInFlight(ctx, ticket)
		}
		after()
		if err := waitKill(ctx, done); err != nil {
			return nil, nil, err
		}
	default: // run-now and backfill runs: their ends lock the task themselves
		e.release(t)
		done := make(chan error, 1)
		taken = e.runs.take(ticket, nil, func(f *flight) {
			now := e.nowMS()
			e.resolve(f.t, f.run, outcome{result: model.ResultKilled, errText: killText(actor, reason),
				killedBy: actor, killReason: reason, duration: time.Duration(now-f.run.DispatchedAt) * time.Millisecond,
				durable: func(err error) { done <- err }})
		})
		if !taken {
			return nil, nil, e.notInFlight(ctx, ticket)
		}
		if err := waitKill(ctx, done); err != nil {
			return nil, nil, err
		}
		if err := e.noteKilled(ctx, ft.id); err != nil {
			return nil, nil, err
		}
	}
	run, err := e.store.GetRun(ctx, ticket)
	return run, rt, err
}

// noteKilled sets the task's last result to killed after a run-now or backfill run's kill:
// the operator sees on the task that its newest end was a kill.
func (e *API) noteKilled(ctx context.Context, id int64) error {
	t, err := e.acquire(ctx, id, acquireOpts{})
	if errors.Is(err, model.ErrTaskNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer e.release(t)
	if t.deleted || t.rt.LastResult == model.ResultKilled {
		return nil
	}
	nrt := t.rt
	nrt.LastResult = model.ResultKilled
	nrt.LastEndTime = e.nowMS()
	return e.commit(ctx, t, nrt, commitOpts{wait: true})
}

// waitKill waits for a kill's record to be durable.
func waitKill(ctx context.Context, done <-chan error) error {
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("cannot record the kill: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cannot wait for the kill to be durable: %w", ctx.Err())
	}
}

// notInFlight says why ticket, not in flight here, cannot be killed.
func (e *API) notInFlight(ctx context.Context, ticket string) error {
	run, err := e.store.GetRun(ctx, ticket)
	if errors.Is(err, model.ErrRunNotFound) {
		return fmt.Errorf("%w: %s", model.ErrRunNotFound, ticket)
	}
	if err != nil {
		return fmt.Errorf("cannot read run %s: %w", ticket, err)
	}
	if run.Result != model.ResultRunning {
		return fmt.Errorf("%w: run %s already ended as %s", ErrConflict, ticket, run.Result)
	}
	if _, ready := e.own.State(model.ShardOf(run.TaskName)); !ready {
		return fmt.Errorf("run %s of task %q: %w", ticket, run.TaskName, model.ErrShardNotHeld)
	}
	return fmt.Errorf("%w: run %s is ending, or is not in flight on this scheduler (a previous one left it and it is being resolved)", ErrConflict, ticket)
}
