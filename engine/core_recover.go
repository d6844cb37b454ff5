package engine

import (
	"context"
	"errors"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// errLostInRestart is the error text of a run recovered as lost.
const errLostInRestart = "the scheduler stopped while the run was in flight; its outcome is unknown, so it is not re-sent"

// openFireMargin is how far past its own clock recovery looks for open fires: a fire made
// by a node whose clock ran ahead of this one's. One this misses is still never sent twice
// (its fire record refuses the second dispatch, and reload then adopts it).
const openFireMargin = time.Minute

// recoverInFlight resolves runs a previous process left running. Their outcome is unknown:
// an HTTP callback's connection died with the process. They are recorded as "lost" and the
// task goes on to its next cycle; they are never re-sent, because they may have executed
// (unless the task says on_lost: resend). Executor runs are adopted and wait for the result
// the executor re-sends.
//
// A periodic run in flight is found two ways. Its fire record is the durable RUNNING marker:
// a run row still `running` whose task's runtime still holds the SCHEDULED or RETRYING state
// the fire was made from (ListOpenFires). A runtime that says RUNNING (written by a pause or
// a re-send during the run, or by an older build at every fire) names its run itself.
func (e *Engine) recoverInFlight(ctx context.Context) error {
	type inFlight struct {
		t   *task
		run model.Run
	}
	var found []inFlight
	err := e.store.LoadByState(ctx, []model.State{model.StateRunning}, func(pt *model.Task) error {
		t, err := newTask(pt)
		if err != nil {
			e.log.Error("cannot recover task", "task", pt.Def.Name, "error", err)
			return nil
		}
		found = append(found, inFlight{t: t})
		return nil
	})
	if err != nil {
		return err
	}
	for i := range found {
		t := found[i].t
		run, err := e.store.GetRun(ctx, t.rt.CurrentTicket)
		if err != nil {
			if !errors.Is(err, model.ErrRunNotFound) {
				return err
			}
			run = &model.Run{
				Ticket: t.rt.CurrentTicket, TaskID: t.id, TaskName: t.def.Name, Kind: model.RunScheduled,
				Attempt: t.rt.Attempt, ScheduledAt: t.rt.LastTriggerTime, DispatchedAt: t.rt.LastTriggerTime,
			}
		}
		found[i].run = *run
	}
	open, err := e.store.ListOpenFires(ctx, e.nowMS()+openFireMargin.Milliseconds())
	if err != nil {
		return err
	}
	runOf := make(map[int64]model.Run, len(open))
	ids := make([]int64, 0, len(open))
	for _, r := range open {
		runOf[r.TaskID] = r
		ids = append(ids, r.TaskID)
	}
	err = e.store.LoadByIDs(ctx, ids, func(pt *model.Task) error {
		t, err := newTask(pt)
		if err != nil {
			e.log.Error("cannot recover task", "task", pt.Def.Name, "error", err)
			return nil
		}
		run := runOf[t.id]
		if !t.adoptOpenFire(run) {
			return nil // moved on since ListOpenFires read it: not this run's task any more
		}
		found = append(found, inFlight{t: t, run: run})
		return nil
	})
	if err != nil {
		return err
	}
	recovered := 0
	for _, f := range found {
		if e.takeOverRun(f.t, f.run) {
			recovered++
		}
	}
	if recovered > 0 {
		e.log.Warn("recovered periodic runs left in flight by the previous process", "runs", recovered)
	}
	return e.recoverManualRuns(ctx)
}

// takeOverRun puts t, with its periodic run in flight that no part of this process sent,
// into memory and resolves the run as recovery does: an executor run waits for its result,
// an HTTP run is re-sent (on_lost: resend) or recorded lost. It reports false when a copy of
// t is in memory already. t must be RUNNING with run as its current ticket.
func (e *Engine) takeOverRun(t *task, run model.Run) bool {
	if !e.tasks.insertIfAbsent(t) {
		return false
	}
	t.mu.Lock()
	t.periodic = run.Ticket
	t.flying++
	// It counts in its group and key before anything fires (design.md, Concurrency limits).
	slot := e.conc.force(t.def.Group, t.def.ConcurrencyKey)
	if w := t.catchupWindow(); w > 0 {
		// Taken up after downtime: the fires missed up to now are the catch-up's, decided at
		// the end of this run (decideNext), as adopt decides those of a task not in flight.
		now := e.nowMS()
		t.catchupFrom, t.catchupUntil = now-int64(w)*1000, now
	}
	t.mu.Unlock()
	e.runs.add(t, run, slot)
	t.mu.Lock()
	e.place(t) // cancel_other arms the next fire while the run is in flight
	t.mu.Unlock()
	if t.def.Callback.Type == model.CallbackExecutor {
		// An SDK executor re-sends its result until acknowledged: wait for it, under the
		// run's own deadline, as if this process had sent the run.
		e.adoptExecRun(t, run, e.registry.Get(t.def.Callback.App, run.Executor))
		return true
	}
	if t.def.OnLost == persist.OnLostResend { // an HTTP run: executor runs were adopted above
		e.resendLost(t, run) // ha.go
		return true
	}
	e.holdLost(t, run)
	e.endRun(t, run, outcome{result: model.ResultLost, errText: errLostInRestart})
	return true
}

// holdLost keeps a slot of t's group and key for an HTTP run recorded lost at start until
// the run's deadline: its end is recorded, but the endpoint may still be running it, and a
// new run must not start beside it over the limit.
func (e *Engine) holdLost(t *task, run model.Run) {
	t.mu.Lock()
	group, key, timeout := t.def.Group, t.def.ConcurrencyKey, time.Duration(t.def.TimeoutSec)*time.Second
	t.mu.Unlock()
	e.conc.releaseAt(e.conc.force(group, key), time.UnixMilli(run.DispatchedAt).Add(timeout))
}

// openFire returns the open fire of t as read from the store, if there is one: its run row
// still running while the runtime holds the state the fire was made from. reload asks,
// because the window only ever holds such a task again when recovery missed its run (a
// fire record whose commit was reported failed but landed, or a fire made by a node whose
// clock ran more than openFireMargin ahead): firing it would meet its fire record forever.
func (e *Engine) openFire(ctx context.Context, t *task) (model.Run, bool, error) {
	if !armable(t.rt.State) || t.rt.NextTriggerTime <= 0 {
		return model.Run{}, false, nil
	}
	attempt := 1
	if t.rt.State == model.StateRetrying {
		attempt = t.rt.Attempt
	}
	run, err := e.store.GetRun(ctx, scheduledTicket(t.id, t.rt.NextTriggerTime, attempt))
	if errors.Is(err, model.ErrRunNotFound) {
		return model.Run{}, false, nil
	}
	if err != nil {
		return model.Run{}, false, err
	}
	return *run, true, nil
}

// adoptOpenFire makes t, read from the store in the state its open fire run was made from,
// RUNNING with that run in memory, as the fire made it (core_fire.go): same version, the due time
// kept. It reports false when the stored runtime is not that state any more. t is not shared
// yet.
func (t *task) adoptOpenFire(run model.Run) bool {
	want := 1
	if t.rt.State == model.StateRetrying {
		want = t.rt.Attempt
	}
	if !armable(t.rt.State) || t.rt.NextTriggerTime != run.ScheduledAt || run.Attempt != want {
		return false
	}
	t.rt.State = model.StateRunning
	t.rt.CurrentTicket = run.Ticket
	t.rt.Attempt = run.Attempt
	t.rt.LastTriggerTime = run.DispatchedAt
	return true
}

// recoverManualRuns does for run-now instances what recoverInFlight does for periodic runs.
func (e *Engine) recoverManualRuns(ctx context.Context) error {
	runs, err := e.store.ListRunningManual(ctx, 100000)
	if err != nil {
		return err
	}
	for _, run := range runs {
		if err := e.adoptInstance(ctx, run, nil); err != nil {
			return err
		}
	}
	return e.recoverParallelRuns(ctx) // core_parallel.go
}

// adoptInstance takes over an independent instance (a run-now, a backfill run or a run of an
// allow_all task) that a
// previous process left running: with its task deleted meanwhile the run is closed lost;
// otherwise it takes its concurrency slot (it counts, over the limit if need be), then a
// run on an executor is awaited and an HTTP run is recorded lost, its slot held until its
// deadline (holdLost). track, when set, runs before the run enters e.runs.
func (e *Engine) adoptInstance(ctx context.Context, run model.Run, track func()) error {
	t, err := e.acquire(ctx, run.TaskID)
	if err != nil {
		if !errors.Is(err, model.ErrTaskNotFound) {
			return err
		}
		// The task is gone; close the record so it does not stay "running" forever.
		run.Result, run.EndedAt = model.ResultLost, e.nowMS()
		run.Error = "the scheduler stopped while the run was in flight and the task was deleted"
		return e.write(ctx, &persist.Group{Runs: []model.Run{run}})
	}
	t.flying++
	if run.Kind == model.RunScheduled {
		// A run of an allow_all task (recoverParallelRuns): it ends through completeParallel.
		if t.parallel == nil {
			t.parallel = make(map[string]struct{})
		}
		t.parallel[run.Ticket] = struct{}{}
	}
	x := e.registry.Get(t.def.Callback.App, run.Executor)
	isExec := t.def.Callback.Type == model.CallbackExecutor
	slot := e.conc.force(t.def.Group, t.def.ConcurrencyKey)
	t.mu.Unlock()
	if track != nil {
		track()
	}
	e.runs.add(t, run, slot)
	if isExec {
		e.adoptExecRun(t, run, x)
		return nil
	}
	e.holdLost(t, run)
	e.endRun(t, run, outcome{result: model.ResultLost, errText: errLostInRestart})
	return nil
}

// adoptExecRun waits for the result of a run that a previous process sent to an executor: x
// when the run row names a registered one, else nil (the address an executor accepted a
// run at is only written with its result), in which case only the result or the deadline
// resolves it.
func (e *Engine) adoptExecRun(t *task, run model.Run, x *dispatch.Executor) {
	t.mu.Lock()
	deadline := time.UnixMilli(run.DispatchedAt).Add(time.Duration(t.def.TimeoutSec) * time.Second)
	t.mu.Unlock()
	e.runs.assign(run.Ticket, x)
	e.armExecTimeout(run.Ticket, deadline, run.Executor)
	e.log.Info("waiting for the result of a run sent before the restart", "task", run.TaskName, "ticket", run.Ticket)
}
