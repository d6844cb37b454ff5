package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// write submits a group and waits until it is durable. The caller holds no engine lock.
func (e *Engine) write(ctx context.Context, g *persist.Group) error {
	done := make(chan error, 1)
	g.Done = func(err error) { done <- err }
	if err := e.submit(ctx, g, submitWait); err != nil {
		return fmt.Errorf("cannot write: %w", err)
	}
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("cannot write: %w", err)
		}
		return nil
	case <-ctx.Done():
		// The group may still land: the caller must not act as if it had not.
		return fmt.Errorf("cannot wait for write to be durable: %w", ctx.Err())
	}
}

// commitLocked makes nrt the task's runtime and puts it with runs and actions in the task's
// outbox, to be submitted without waiting once the caller unlocks (e.unlock). Caller holds
// t.mu.
func (e *Engine) commitLocked(t *task, nrt model.Runtime, runs []model.Run, acts []model.Action) {
	e.commitLockedThen(t, nrt, runs, acts, nil)
}

// commitLockedThen is commitLocked that also runs then, on its own goroutine, once the write
// is durable.
func (e *Engine) commitLockedThen(t *task, nrt model.Runtime, runs []model.Run, acts []model.Action, then func()) {
	e.commitLockedNotify(t, nrt, runs, acts, then, nil)
}

// commitLockedNotify is commitLockedThen that also tells notify, on a completion goroutine,
// how the write went (nil: durable). notify must not block: it delays the completions of
// the tasks sharing its completion lane.
func (e *Engine) commitLockedNotify(t *task, nrt model.Runtime, runs []model.Run, acts []model.Action, then func(), notify func(error)) {
	e.commitLockedDef(t, nrt, nil, runs, acts, then, notify)
}

// commitLockedDef is commitLockedNotify that also replaces the task's definition with def
// (when not nil) in the same group, as commitWaitDef does: a pause on failure (core_pausefail.go)
// sets the definition's paused flag with the run's end.
func (e *Engine) commitLockedDef(t *task, nrt model.Runtime, def *model.TaskDef, runs []model.Run, acts []model.Action, then func(), notify func(error)) {
	expect := t.rt.Version
	nrt.Version = expect + 1
	t.rt = nrt
	t.pending++
	e.place(t)
	var trans []persist.Transition
	if !t.deleted {
		// A deleted task has no runtime row: its run and action records still land.
		trans = []persist.Transition{{ExpectVersion: expect, Runtime: nrt}}
	}
	g := &persist.Group{
		Transitions: trans,
		Runs:        runs,
		Actions:     acts,
		Done: func(err error) {
			e.writeDone(t, err)
			if err == nil && then != nil {
				go then()
			}
			if notify != nil {
				notify(err)
			}
		},
	}
	if def != nil {
		g.DefUpdates = []model.TaskDef{*def}
	}
	e.commitGroupLocked(t, g, func(err error) {
		t.pending--
		if notify != nil {
			notify(err)
		}
	})
}

// commitWait is commitLocked for API calls: it makes nrt the runtime and waits for it to be
// durable. Caller holds t.mu; the submit and the wait happen without it (core_submit.go).
func (e *Engine) commitWait(ctx context.Context, t *task, nrt model.Runtime, runs []model.Run, acts []model.Action) error {
	return e.commitWaitDef(ctx, t, nrt, nil, runs, acts)
}

// commitWaitDef is commitWait that also replaces the task's definition with def (when not
// nil) in the same group, so the definition and the runtime change together or not at all.
//
// The group is decided in memory before it is submitted: should ctx end while the call
// waits for room in the writer's queue or for the commit, the group is still written, and
// the error says only that the call stopped waiting.
func (e *Engine) commitWaitDef(ctx context.Context, t *task, nrt model.Runtime, def *model.TaskDef, runs []model.Run, acts []model.Action) error {
	expect := t.rt.Version
	nrt.Version = expect + 1
	t.rt = nrt
	t.pending++
	done := make(chan error, 1)
	g := &persist.Group{
		Transitions: []persist.Transition{{ExpectVersion: expect, Runtime: nrt}},
		Runs:        runs,
		Actions:     acts,
		Done: func(err error) {
			e.writeDone(t, err)
			done <- err
		},
	}
	if def != nil {
		g.DefUpdates = []model.TaskDef{*def}
	}
	if sink := bulkSinkOf(ctx); sink != nil {
		// A bulk operation (api_bulk.go): queued without waiting, submitted when the caller
		// releases the task; the sink hears the outcome.
		g.Done = func(err error) {
			e.writeDone(t, err)
			sink.done(err)
		}
		e.commitGroupLocked(t, g, func(err error) {
			t.pending--
			sink.done(err)
		})
		sink.submitted = true
		return nil
	}
	e.commitGroupLocked(t, g, func(err error) {
		t.pending--
		done <- err
	})
	e.unlock(t)
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	t.mu.Lock()
	if err != nil {
		return fmt.Errorf("cannot write: %w", err)
	}
	return nil
}

// writeDone runs on a completion goroutine when a write of t completed.
func (e *Engine) writeDone(t *task, err error) {
	t.mu.Lock()
	t.pending--
	if err != nil {
		e.writeFailed(t, err)
	}
	e.place(t)
	t.mu.Unlock()
}

// writeFailed reacts to a write that did not apply. Caller holds t.mu.
func (e *Engine) writeFailed(t *task, err error) {
	var ce *persist.ConflictError
	switch {
	case errors.As(err, &ce):
		if !t.deleted {
			e.log.Warn("stale in-memory task; reloading it from the store", "task", t.def.Name, "error", err)
		}
		e.m.conflicts.Inc()
		t.stale = true
	case errors.Is(err, model.ErrLeaseLost) && e.cfg.Sharded:
		// Its shard moved to another node: the writer logged the shard once, and the engine
		// drops the shard's tasks (core_shards.go).
		e.log.Debug("write refused: the task's shard is another node's now", "task", t.def.Name, "shard", t.shard)
		t.stale = true
	case errors.Is(err, model.ErrLeaseLost):
		e.log.Error("lease lost: this scheduler no longer owns the store", "task", t.def.Name)
		t.stale = true
	default:
		e.log.Error("write failed", "task", t.def.Name, "error", err)
		t.stale = true
	}
}

// reload reads a task back from the store after a conflict and arms it from there.
func (e *Engine) reload(id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pt, err := e.store.GetTaskByID(ctx, id)
	if err != nil {
		if !errors.Is(err, model.ErrTaskNotFound) {
			e.log.Error("cannot reload task", "id", id, "error", err)
		}
		return
	}
	t, err := newTask(pt)
	if err != nil {
		e.log.Error("cannot reload task", "id", id, "error", err)
		return
	}
	run, open, err := e.openFire(ctx, t)
	if err != nil {
		e.log.Error("cannot reload task", "id", id, "error", err)
		return
	}
	if open {
		if run.Result != model.ResultRunning || !t.adoptOpenFire(run) {
			// The fire of this due time has ended, yet the runtime was not moved on with it:
			// the two are written in one group, so this is not a state axe leaves. Firing
			// again would be refused by the fire record; leave it to the operator.
			e.log.Error("task's runtime is behind its last run; not arming it", "task", t.def.Name,
				"ticket", run.Ticket, "result", run.Result)
			return
		}
		e.log.Warn("adopting a run in flight found on reload", "task", t.def.Name, "ticket", run.Ticket)
		e.takeOverRun(t, run)
		return
	}
	e.adopt(t, e.nowMS())
}
