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

// commitOpts is what a commit writes beside the runtime, and how its caller hears of it.
type commitOpts struct {
	// runs and acts are written in the same group as the runtime.
	runs []model.Run
	acts []model.Action
	// def, when not nil, replaces the task's definition in the same group, so the
	// definition and the runtime change together or not at all (an update, a pause; a
	// pause on failure sets the paused flag with the run's end, core_pausefail.go).
	def *model.TaskDef
	// wait makes the call wait for the group to be durable, as the API's calls do: the
	// submit and the wait happen without t.mu (core_submit.go), which the caller holds
	// again when commit returns. Without it the group goes to the task's outbox, submitted
	// without waiting once the caller unlocks (e.unlock).
	wait bool
	// then runs on its own goroutine once the write is durable (not with wait).
	then func()
	// notify hears, on a completion goroutine, how the write went (nil: durable; not with
	// wait). It must not block: it delays the completions of the tasks sharing its lane.
	notify func(error)
}

// commit makes nrt the task's runtime and writes it with what o says, the one way a
// task's transition is committed. Caller holds t.mu. Without o.wait it returns nil.
//
// With o.wait the group is decided in memory before it is submitted: should ctx end while
// the call waits for room in the writer's queue or for the commit, the group is still
// written, and the error says only that the call stopped waiting.
func (e *Engine) commit(ctx context.Context, t *task, nrt model.Runtime, o commitOpts) error {
	expect := t.rt.Version
	nrt.Version = expect + 1
	t.rt = nrt
	t.pending++
	if !o.wait {
		e.loader.place(t)
	}
	var trans []persist.Transition
	if o.wait || !t.deleted {
		// A deleted task has no runtime row: its run and action records still land.
		trans = []persist.Transition{{ExpectVersion: expect, Runtime: nrt}}
	}
	g := &persist.Group{Transitions: trans, Runs: o.runs, Actions: o.acts}
	if o.def != nil {
		g.DefUpdates = []model.TaskDef{*o.def}
	}
	if !o.wait {
		then, notify := o.then, o.notify
		g.Done = func(err error) {
			e.writeDone(t, err)
			if err == nil && then != nil {
				go then()
			}
			if notify != nil {
				notify(err)
			}
		}
		e.commitGroupLocked(t, g, func(err error) {
			t.pending--
			if notify != nil {
				notify(err)
			}
		})
		return nil
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
	done := make(chan error, 1)
	g.Done = func(err error) {
		e.writeDone(t, err)
		done <- err
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
	e.loader.place(t)
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
	case errors.Is(err, model.ErrLeaseLost):
		e.own.leaseLost(t) // a shard moved to another node, or the primary's lease
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
		e.recovery.takeOverRun(t, run)
		return
	}
	e.adopt(t, e.nowMS())
}
