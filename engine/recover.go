package engine

import (
	"context"
	"errors"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/persist"
)

// recoverInFlight resolves runs a previous process left RUNNING. Their outcome is unknown:
// an HTTP callback's connection died with the process. They are recorded as "lost" and the
// task goes on to its next cycle; they are never re-sent, because they may have executed.
func (e *Engine) recoverInFlight(ctx context.Context) error {
	var tasks []*task
	err := e.store.LoadByState(ctx, []persist.State{persist.StateRunning}, func(pt *persist.Task) error {
		t, err := newTask(pt)
		if err != nil {
			e.log.Error("cannot recover task", "task", pt.Def.Name, "error", err)
			return nil
		}
		tasks = append(tasks, t)
		return nil
	})
	if err != nil {
		return err
	}
	for _, t := range tasks {
		run, err := e.store.GetRun(ctx, t.rt.CurrentTicket)
		if err != nil {
			if !errors.Is(err, persist.ErrRunNotFound) {
				return err
			}
			run = &persist.Run{
				Ticket: t.rt.CurrentTicket, TaskID: t.id, TaskName: t.def.Name, Kind: persist.RunScheduled,
				Attempt: t.rt.Attempt, ScheduledAt: t.rt.LastTriggerTime, DispatchedAt: t.rt.LastTriggerTime,
			}
		}
		if !e.tasks.insertIfAbsent(t) {
			continue
		}
		t.mu.Lock()
		t.run = &inflight{run: *run}
		t.mu.Unlock()
		e.runsWG.Add(1)
		if t.def.Callback.Type == persist.CallbackExecutor {
			// An SDK executor re-sends its result until acknowledged: wait for it, under the
			// run's own deadline, as if this process had sent the run.
			e.adoptExecRun(t, *run, e.registry.Get(t.def.Callback.App, run.Executor))
			continue
		}
		e.complete(t, run.Ticket, outcome{result: persist.ResultLost,
			errText: "the scheduler stopped while the run was in flight; its outcome is unknown, so it is not re-sent"})
	}
	if len(tasks) > 0 {
		e.log.Warn("recovered periodic runs left in flight by the previous process", "runs", len(tasks))
	}
	return e.recoverManualRuns(ctx)
}

// recoverManualRuns does for run-now instances what recoverInFlight does for periodic runs.
func (e *Engine) recoverManualRuns(ctx context.Context) error {
	runs, err := e.store.ListRunningManual(ctx, 100000)
	if err != nil {
		return err
	}
	for _, run := range runs {
		t, err := e.acquire(ctx, run.TaskID)
		if err != nil {
			if !errors.Is(err, persist.ErrTaskNotFound) {
				return err
			}
			// The task is gone; close the record so it does not stay "running" forever.
			run.Result, run.EndedAt = persist.ResultLost, e.nowMS()
			run.Error = "the scheduler stopped while the run was in flight and the task was deleted"
			if err := e.write(ctx, &persist.Group{Runs: []persist.Run{run}}); err != nil {
				return err
			}
			continue
		}
		t.manual++
		x := e.registry.Get(t.def.Callback.App, run.Executor)
		isExec := t.def.Callback.Type == persist.CallbackExecutor
		t.mu.Unlock()
		e.runsWG.Add(1)
		if isExec {
			e.adoptExecRun(t, run, x)
			continue
		}
		e.completeManual(t, run, outcome{result: persist.ResultLost,
			errText: "the scheduler stopped while the run was in flight; its outcome is unknown, so it is not re-sent"})
	}
	return nil
}

// adoptExecRun waits for the result of a run that a previous process sent to an executor: x
// when the run row names a registered one, else nil (the address an executor accepted a
// run at is only written with its result), in which case only the result or the deadline
// resolves it.
func (e *Engine) adoptExecRun(t *task, run persist.Run, x *dispatch.Executor) {
	t.mu.Lock()
	deadline := time.UnixMilli(run.DispatchedAt).Add(time.Duration(t.def.TimeoutSec) * time.Second)
	t.mu.Unlock()
	r := &execRun{t: t, run: run, exec: x}
	if x != nil {
		x.AddInflight(1)
	}
	addr := run.Executor
	e.execRuns.mu.Lock()
	if e.execRuns.m == nil {
		e.execRuns.m = make(map[string]*execRun)
	}
	e.execRuns.m[run.Ticket] = r
	r.timer = time.AfterFunc(time.Until(deadline)+timeoutGrace, func() {
		if r := e.execRuns.take(run.Ticket); r != nil {
			e.resolve(r.t, r.run, outcome{result: persist.ResultTimeout, executor: addr,
				errText: "no result within timeout_sec"})
		}
	})
	e.execRuns.mu.Unlock()
	e.log.Info("waiting for the result of a run sent before the restart", "task", run.TaskName, "ticket", run.Ticket)
}
