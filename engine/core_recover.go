package engine

import (
	"context"
	"encoding/json"
	"errors"
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
func (r *Recovery) takeOverRun(t *task, run model.Run) bool {
	if in, _ := r.own.insert(t, false); !in {
		return false // a copy is in memory, or the shard is not held
	}
	t.mu.Lock()
	t.periodic = run.Ticket
	t.flying++
	// It counts in its group and key before anything fires (design.md, Concurrency limits).
	slot := r.gates.conc.force(t.def.Group, t.runKey(run))
	now := r.nowMS()
	if r.own.handedOver(t.shard) > 0 && t.def.Trigger == model.TriggerCron && t.sched != nil {
		// Its shard was handed over (core_shards.go, invariant 6) while this run outlived the
		// giver's drain: the fires due since are a catch-up, decided at the end of this run
		// (decideNext), each run once, as adopt decides those of a task not in flight.
		late := max(0, now-t.fireAt(run.ScheduledAt))
		t.catchupFrom, t.catchupUntil = run.ScheduledAt, now
		t.catchupFollow = now + 2*late + r.cfg.MisfireThreshold.Milliseconds()
	} else if w := t.catchupWindow(); w > 0 {
		// Taken up after downtime: the fires missed up to now are the catch-up's, decided at
		// the end of this run (decideNext), as adopt decides those of a task not in flight.
		t.catchupFrom, t.catchupUntil = now-int64(w)*1000, now
	}
	t.mu.Unlock()
	r.runs.add(t, run, slot)
	t.mu.Lock()
	r.loader.place(t) // cancel_other arms the next fire while the run is in flight
	t.mu.Unlock()
	if heldBack(run) {
		// Its previous owner held it back unsent and recorded so: never sent, it is sent
		// now under its fire record, whatever on_lost says (core_heldback.go).
		r.core.refireHeld(t, run, nil)
		return true
	}
	if t.def.Callback.Type == model.CallbackExecutor {
		// An SDK executor re-sends its result until acknowledged: wait for it, under the
		// run's own deadline, as if this process had sent the run.
		r.adoptExecRun(t, run, r.executors.reg.Get(t.def.Callback.App, run.Executor))
		return true
	}
	if t.def.OnLost == persist.OnLostResend { // an HTTP run: executor runs were adopted above
		r.resendLost(t, run)
		return true
	}
	r.holdLost(t, run)
	r.core.endRun(t, run, outcome{result: model.ResultLost, errText: errLostInRestart})
	return true
}

// holdLost keeps a slot of t's group and key for an HTTP run recorded lost at start until
// the run's deadline: its end is recorded, but the endpoint may still be running it, and a
// new run must not start beside it over the limit.
func (r *Recovery) holdLost(t *task, run model.Run) {
	t.mu.Lock()
	group, key, timeout := t.def.Group, t.runKey(run), time.Duration(t.def.TimeoutSec)*time.Second
	shard, epoch := t.shard, t.sepoch
	t.mu.Unlock()
	sl := r.gates.conc.force(group, key)
	deadline := time.UnixMilli(run.DispatchedAt).Add(timeout)
	if r.gates.conc.cl != nil {
		// On a sharded engine the hold has rows of its own, written before the run's end
		// deletes the run's, and named with its deadline, so that a next owner of the shard
		// keeps them until then (core_clusterslots.go).
		sl.ticket, sl.epoch = persist.HoldTicket(run.Ticket, deadline.UnixMilli()), epoch
		r.gates.holdRows(group, key, sl.ticket, shard, epoch)
	}
	r.gates.conc.releaseAt(sl, deadline)
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
func (r *Recovery) adoptInstance(ctx context.Context, run model.Run, track func()) error {
	// A workflow step attempt held back unsent: its workflow makes its call (the step as
	// its run's version defines it, and the params it built) again from the stored rows.
	var step *StepCall
	if heldBack(run) && IsStepTask(run.TaskName) {
		step = r.steps.heldCall(ctx, run)
	}
	t, err := r.core.acquire(ctx, run.TaskID, acquireOpts{})
	if err != nil {
		if !errors.Is(err, model.ErrTaskNotFound) {
			return err
		}
		// The task is gone; close the record so it does not stay "running" forever.
		run.Result, run.EndedAt = model.ResultLost, r.nowMS()
		run.DurationMS = run.EndedAt - run.DispatchedAt
		run.Error = "the scheduler stopped while the run was in flight and the task was deleted"
		return r.core.write(ctx, &persist.Group{Runs: []model.Run{run}})
	}
	t.flying++
	if run.Kind == model.RunScheduled {
		// A run of an allow_all task (recoverParallelRuns): it ends through completeParallel.
		if t.parallel == nil {
			t.parallel = make(map[string]struct{})
		}
		t.parallel[run.Ticket] = struct{}{}
	}
	key := t.runKey(run)
	if step != nil {
		// The step as its run's version defines it replaces the stored definition in
		// memory, as a start does (Steps.Start), and its key renders over its params.
		def := t.useStepDef(step.Def)
		key = t.concKey()
		if k, err := model.RenderKey(def.ConcurrencyKey, step.Params); err == nil {
			key = k
		}
	}
	x := r.executors.reg.Get(t.def.Callback.App, run.Executor)
	isExec := t.def.Callback.Type == model.CallbackExecutor
	slot := r.gates.conc.force(t.def.Group, key)
	t.mu.Unlock()
	if track != nil {
		track()
	}
	r.runs.add(t, run, slot)
	if heldBack(run) && (step != nil || !IsStepTask(run.TaskName)) {
		// Its previous owner held it back unsent and recorded so: a run-now, a backfill run
		// or an allow_all run is sent now under its record, with the params it was fired
		// with (its row holds them), as a periodic one is (takeOverRun), whatever on_lost
		// says (core_heldback.go). A workflow step attempt is too, with the params its
		// workflow made again above; one whose call could not be made again is resolved
		// per on_lost, as a run in doubt is.
		var params json.RawMessage
		if step != nil {
			params = step.Params
		}
		r.core.refireHeld(t, run, params)
		return nil
	}
	if isExec {
		r.adoptExecRun(t, run, x)
		return nil
	}
	r.holdLost(t, run)
	r.core.endRun(t, run, outcome{result: model.ResultLost, errText: errLostInRestart})
	return nil
}

// adoptExecRun waits for the result of a run that a previous process sent to an executor: x
// when the run row names a registered one, else nil (the address an executor accepted a
// run at is only written with its result), in which case only the result or the deadline
// resolves it.
func (r *Recovery) adoptExecRun(t *task, run model.Run, x *dispatch.Executor) {
	t.mu.Lock()
	deadline := time.UnixMilli(run.DispatchedAt).Add(time.Duration(t.def.TimeoutSec) * time.Second)
	t.mu.Unlock()
	r.runs.assign(run.Ticket, x)
	r.core.armExecTimeout(run.Ticket, deadline, run.Executor)
	r.log.Info("waiting for the result of a run sent before the restart", "task", run.TaskName, "ticket", run.Ticket)
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
func (r *Recovery) resendLost(t *task, lost model.Run) {
	now := r.nowMS()
	if r.gates.conc.cl != nil {
		// Its re-send's slot rows are written before the lost run's go (core_clusterslots.go).
		t.mu.Lock()
		group, key, shard, epoch := t.def.Group, t.runKey(lost), t.shard, t.sepoch
		t.mu.Unlock()
		r.gates.holdRows(group, key, scheduledTicket(t.id, lost.ScheduledAt, lost.Attempt+1), shard, epoch)
	}
	// The lost run leaves r.runs (Recovery.inFlight added it); its re-send takes its place.
	r.runs.take(lost.Ticket, nil, func(*flight) {
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
	r.runs.add(t, re, r.gates.conc.force(def.Group, t.runKey(lost))) // in the lost run's place
	acts := []model.Action{
		r.core.action(t, lost.Ticket, ActLost, model.StateRunning, model.StateRunning, ActorScheduler, lost.Error, now),
		r.core.action(t, re.Ticket, ActResend, model.StateRunning, model.StateRunning, ActorScheduler, re.Detail, now),
	}
	g := &persist.Group{
		Transitions: []persist.Transition{{ExpectVersion: expect, Runtime: nrt}},
		Runs:        []model.Run{lost},
		Fires:       []model.Run{re},
		Actions:     acts,
		Done: func(err error) {
			if err != nil {
				r.core.dispatchDurable(t, def, re, def.Params, err)
				return
			}
			t.mu.Lock()
			t.pending--
			t.mu.Unlock()
			r.core.sendAs(t, def, re, lost.Ticket)
		},
	}
	r.core.commitGroupLocked(t, g, func(error) { r.runs.take(re.Ticket, nil, nil) })
	r.m.triggers.Inc()
	r.core.unlock(t)
}

// sendAs posts the HTTP run as send does, but under the wire ticket of an earlier attempt.
func (e *Engine) sendAs(t *task, def *model.TaskDef, run model.Run, wireTicket string) {
	deadline := e.now().Add(time.Duration(def.TimeoutSec) * time.Second)
	epoch, shard := e.own.runEpoch(t)
	body := e.runJSON(def, run, wireTicket, deadline, epoch, shard)
	gate, dropped := e.own.sendGate(t, run)
	if dropped {
		return // its shard dropped from this node: marked for the next owner instead
	}
	req := &dispatch.Request{URL: def.Callback.URL, Task: def.Name, Ticket: wireTicket, Attempt: run.Attempt,
		Body: body, Deadline: deadline, ResendInDoubt: def.OnLost == persist.OnLostResend, Epoch: epoch, Gate: gate}
	if err := e.disp.Send(req, func(o dispatch.Outcome) {
		if o.Err != nil && e.own.holdUnsent(t, run, o.Err, nil, func(*permit) { e.sendAs(t, def, run, wireTicket) }) {
			return
		}
		e.endRun(t, run, httpOutcome(o, run.Executor))
	}); err != nil {
		e.notSent(t, run, "not sent: "+err.Error())
	}
}

// runJSON is the run body send posts, with ticket as its ticket.
func (e *base) runJSON(def *model.TaskDef, run model.Run, ticket string, deadline time.Time, epoch int64, shard *int) []byte {
	body, _ := json.Marshal(runBody{
		Task: def.Name, Handler: def.Callback.Handler, Group: def.Group, Ticket: ticket, Attempt: run.Attempt,
		Kind: run.Kind, ScheduledAt: run.ScheduledAt, Deadline: deadline.UnixMilli(), Params: def.Params,
		DedupTTLMS: e.dedupTTL(def).Milliseconds(), Epoch: epoch, Shard: shard,
	})
	return body
}
