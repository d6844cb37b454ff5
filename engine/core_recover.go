package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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

// takeOverRun puts t, with its periodic run in flight that no part of this process sent,
// into memory and resolves the run as recovery does: an executor run waits for its result,
// an HTTP run is re-sent (on_lost: resend) or recorded lost. It reports false when a copy of
// t is in memory already. t must be RUNNING with run as its current ticket.
func (e *Engine) takeOverRun(t *task, run model.Run) bool {
	if in, _ := e.own.insert(t, false); !in {
		return false // a copy is in memory, or the shard is not held
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
		e.resendLost(t, run)
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
	shard, epoch := t.shard, t.sepoch
	t.mu.Unlock()
	sl := e.conc.force(group, key)
	if e.conc.cl != nil {
		// On a sharded engine the hold has rows of its own, written before the run's end
		// deletes the run's (core_clusterslots.go).
		sl.ticket, sl.epoch = run.Ticket+"~lost", epoch
		e.holdRows(group, key, sl.ticket, shard, epoch)
	}
	e.conc.releaseAt(sl, time.UnixMilli(run.DispatchedAt).Add(timeout))
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

// adoptInstance takes over an independent instance (a run-now, a backfill run or a run of an
// allow_all task) that a
// previous process left running: with its task deleted meanwhile the run is closed lost;
// otherwise it takes its concurrency slot (it counts, over the limit if need be), then a
// run on an executor is awaited and an HTTP run is recorded lost, its slot held until its
// deadline (holdLost). track, when set, runs before the run enters e.runs.
func (e *Engine) adoptInstance(ctx context.Context, run model.Run, track func()) error {
	t, err := e.acquire(ctx, run.TaskID, acquireOpts{})
	if err != nil {
		if !errors.Is(err, model.ErrTaskNotFound) {
			return err
		}
		// The task is gone; close the record so it does not stay "running" forever.
		run.Result, run.EndedAt = model.ResultLost, e.nowMS()
		run.DurationMS = run.EndedAt - run.DispatchedAt
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

// ---- the recovery steps of a start, refused fires, re-sends ----
//
// What the engine does for high availability (docs/ha.md) lives here with the recovery of runs in
// flight: the recovery steps of a start, which on a promotion are those of docs/ha.md, "Promotion";
// the reaction to a refused fire record (docs/ha.md, "The fire record"); and the re-send of an HTTP
// run left in doubt whose task says on_lost: resend.

// Action names of this file.
const (
	// ActPromotion records one step of a start's recovery on a promoted primary (a task-less
	// action, listed with the alerts).
	ActPromotion = "promotion"
	// ActDuplicateFire records a fire the database refused because its run exists: that
	// (task, fire time, attempt) was dispatched already, so it is not dispatched again.
	ActDuplicateFire = "duplicate_fire_suppressed"
	// ActResend records an HTTP run left in doubt sent again as a new attempt (on_lost).
	ActResend = "resend"
	// ActLateResult records a result that arrived for a run already marked lost.
	ActLateResult = "late_result"
)

// fireRefused records a fire the database refused: it is not dispatched (docs/ha.md, "The fire
// record").
func (e *Engine) fireRefused(t *task, def *model.TaskDef, run model.Run) {
	e.m.fireRefusals.Inc()
	e.log.Warn("duplicate fire suppressed: this (task, fire time, attempt) was dispatched already",
		"task", def.Name, "ticket", run.Ticket, "scheduled_at", run.ScheduledAt, "attempt", run.Attempt)
	act := model.Action{TaskID: t.id, TaskName: def.Name, Ticket: run.Ticket, Action: ActDuplicateFire,
		Actor: ActorScheduler + ":" + e.cfg.NodeID, At: e.nowMS(),
		Detail: "fire of " + time.UnixMilli(run.ScheduledAt).UTC().Format(time.RFC3339Nano) + " attempt " +
			strconv.Itoa(run.Attempt) + " not dispatched: its run record already exists"}
	if err := e.submit(context.Background(), &persist.Group{Actions: []model.Action{act}}, submitWait); err != nil {
		e.log.Warn("cannot record suppressed fire", "ticket", run.Ticket, "error", err)
	}
}

// resendLost sends an HTTP run left in doubt again (on_lost: resend): the lost run is
// recorded lost, and the same ticket goes out as attempt n+1 of the same fire, whose run
// row has a ticket of its own, so no (task, fire time, attempt) is dispatched twice. The
// endpoint sees X-Axe-Ticket of the first send and can de-duplicate on it. t is in memory
// and RUNNING with run in flight (Recovery.inFlight).
func (e *Engine) resendLost(t *task, lost model.Run) {
	now := e.nowMS()
	if e.conc.cl != nil {
		// Its re-send's slot rows are written before the lost run's go (core_clusterslots.go).
		t.mu.Lock()
		group, key, shard, epoch := t.def.Group, t.def.ConcurrencyKey, t.shard, t.sepoch
		t.mu.Unlock()
		e.holdRows(group, key, scheduledTicket(t.id, lost.ScheduledAt, lost.Attempt+1), shard, epoch)
	}
	// The lost run leaves e.runs (Recovery.inFlight added it); its re-send takes its place.
	e.runs.take(lost.Ticket, nil, func(*flight) {
		t.mu.Lock()
		t.runLeft(lost.Ticket)
		t.mu.Unlock()
	})
	t.mu.Lock()
	def := t.def
	attempt := lost.Attempt + 1
	re := model.Run{
		Ticket: scheduledTicket(t.id, lost.ScheduledAt, attempt), TaskID: t.id, TaskName: def.Name,
		Kind: model.RunScheduled, Attempt: attempt, ScheduledAt: lost.ScheduledAt, DispatchedAt: now,
		Result: model.ResultRunning, Executor: downstreamOf(def),
		Detail: "re-send of " + lost.Ticket + " (on_lost: resend), sent with X-Axe-Ticket " + lost.Ticket,
	}
	lost.Result, lost.EndedAt = model.ResultLost, now
	lost.Error = "the scheduler stopped while the run was in flight; re-sent as attempt " + strconv.Itoa(attempt) + " (on_lost: resend)"
	lost.DurationMS = now - lost.DispatchedAt
	expect := t.rt.Version
	nrt := t.rt
	nrt.CurrentTicket, nrt.Attempt, nrt.LastTriggerTime = re.Ticket, attempt, now
	nrt.Version = expect + 1
	t.rt = nrt
	t.pending++
	t.periodic = re.Ticket
	t.flying++
	e.runs.add(t, re, e.conc.force(def.Group, def.ConcurrencyKey)) // in the lost run's place
	acts := []model.Action{
		e.action(t, lost.Ticket, ActLost, model.StateRunning, model.StateRunning, ActorScheduler, lost.Error, now),
		e.action(t, re.Ticket, ActResend, model.StateRunning, model.StateRunning, ActorScheduler, re.Detail, now),
	}
	g := &persist.Group{
		Transitions: []persist.Transition{{ExpectVersion: expect, Runtime: nrt}},
		Runs:        []model.Run{lost},
		Fires:       []model.Run{re},
		Actions:     acts,
		Done: func(err error) {
			if err != nil {
				e.dispatchDurable(t, def, re, err)
				return
			}
			t.mu.Lock()
			t.pending--
			t.mu.Unlock()
			e.sendAs(t, def, re, lost.Ticket)
		},
	}
	e.commitGroupLocked(t, g, func(error) { e.runs.take(re.Ticket, nil, nil) })
	e.m.triggers.Inc()
	e.unlock(t)
}

// sendAs posts the HTTP run as send does, but under the wire ticket of an earlier attempt.
func (e *Engine) sendAs(t *task, def *model.TaskDef, run model.Run, wireTicket string) {
	deadline := e.now().Add(time.Duration(def.TimeoutSec) * time.Second)
	epoch, shard := e.runEpoch(t)
	body := e.runJSON(def, run, wireTicket, deadline, epoch, shard)
	req := &dispatch.Request{URL: def.Callback.URL, Task: def.Name, Ticket: wireTicket, Attempt: run.Attempt,
		Body: body, Deadline: deadline, ResendInDoubt: def.OnLost == persist.OnLostResend, Epoch: epoch, Gate: e.sendGate(t)}
	if err := e.disp.Send(req, func(o dispatch.Outcome) {
		if e.holdUnsent(t, run, o.Err, func() { e.sendAs(t, def, run, wireTicket) }) {
			return
		}
		e.endRun(t, run, httpOutcome(o, run.Executor))
	}); err != nil {
		e.notSent(t, run, "not sent: "+err.Error())
	}
}

// runJSON is the run body send posts, with ticket as its ticket.
func (e *Engine) runJSON(def *model.TaskDef, run model.Run, ticket string, deadline time.Time, epoch int64, shard *int) []byte {
	body, _ := json.Marshal(runBody{
		Task: def.Name, Handler: def.Callback.Handler, Group: def.Group, Ticket: ticket, Attempt: run.Attempt,
		Kind: run.Kind, ScheduledAt: run.ScheduledAt, Deadline: deadline.UnixMilli(), Params: def.Params,
		DedupTTLMS: e.dedupTTL(def).Milliseconds(), Epoch: epoch, Shard: shard,
	})
	return body
}

// recordLateResult records an executor's result for a run already marked lost (its
// executor was reaped, or the scheduler failed over while it ran): the run row takes the
// result, keeping in its detail when and why it was marked lost, and an action says so.
// The task's state is not changed: it moved on when the run was marked lost.
func (e *Engine) recordLateResult(ctx context.Context, run model.Run, rep Report) error {
	now := e.nowMS()
	lostAt, lostWhy := run.EndedAt, run.Error
	run.Result = rep.Status
	run.Error = rep.Error
	run.Output = tail(rep.Output, maxOutput)
	if rep.Address != "" {
		run.Executor = rep.Address
	}
	run.EndedAt = now
	if rep.EndedAt > 0 {
		run.EndedAt = rep.EndedAt
	}
	run.DurationMS = rep.DurationMS
	note := "marked lost at " + time.UnixMilli(lostAt).UTC().Format(time.RFC3339Nano) + " (" + lostWhy + "); this result arrived later"
	if run.Detail != "" {
		note = run.Detail + "; " + note
	}
	run.Detail = note
	act := model.Action{TaskID: run.TaskID, TaskName: run.TaskName, Ticket: run.Ticket, Action: ActLateResult,
		Actor: "executor:" + rep.Address, At: now,
		Detail: rep.Status + " result for a run marked lost: recorded; the task had moved on and is not changed"}
	e.m.results.result("late").Inc()
	if err := e.write(ctx, &persist.Group{Runs: []model.Run{run}, Actions: []model.Action{act}}); err != nil {
		return fmt.Errorf("cannot record the late result of %s: %w", run.Ticket, err)
	}
	e.log.Info("late result recorded for a run marked lost", "task", run.TaskName, "ticket", run.Ticket, "result", rep.Status)
	return nil
}
