package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// This file holds what the engine does for high availability (R8): the recovery steps of a
// start, which on a promotion are R8.2's; the reaction to a refused fire record (R8.5); and
// the re-send of an HTTP run left in doubt whose task says on_lost: resend.

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

// recoverAtStart runs the recovery of Start in order, logging each step with how long it
// took and, under HA (Config.Epoch > 0), recording it as an action:
//
//  1. reload the executor registry from the store, so results and dispatches find every
//     executor at once;
//  2. resolve the runs left RUNNING: an SDK executor's run is waited for under its own
//     deadline (past it, it takes the timeout's retry/fail path at once); an HTTP run, whose
//     answer went to the process that sent it, follows its task's on_lost;
//  3. load the window from the store, applying the misfire policy to every fire that came
//     due while no primary dispatched (each misfire is an action of its task);
//  4. release dependency tasks whose upstreams succeeded meanwhile.
//
// Runs left RUNNING are resolved before the window is loaded so that their tasks' next
// fires are decided (and misfires among them handled) by the same rules.
func (e *Engine) recoverAtStart(ctx context.Context, now, horizon int64) error {
	var detail string
	steps := []struct {
		name string
		fn   func() error
	}{
		{"reload the executor registry", func() error {
			if err := e.restoreExecutors(ctx); err != nil {
				return fmt.Errorf("cannot restore executors: %w", err)
			}
			detail = strconv.Itoa(len(e.registry.Snapshot())) + " executor(s)"
			return nil
		}},
		{"resolve runs left running", func() error {
			before := e.runs.count()
			if err := e.recoverInFlight(ctx); err != nil {
				return fmt.Errorf("cannot recover in-flight runs: %w", err)
			}
			detail = strconv.Itoa(e.runs.count()-before) + " run(s) still awaited; the others resolved"
			return nil
		}},
		{"load the window and apply misfire policies", func() error {
			misfires := e.m.misfires.Get()
			n, err := e.loadRange(ctx, 1, horizon, now) // every past fire too: misfires (R3.5)
			if err != nil {
				return fmt.Errorf("cannot load the first window: %w", err)
			}
			detail = fmt.Sprintf("%d task(s) due within %s; %d misfire(s) handled by policy", n, e.cfg.Window, e.m.misfires.Get()-misfires)
			return nil
		}},
		{"release dependents", func() error {
			if err := e.loadDependencies(ctx); err != nil {
				return fmt.Errorf("cannot load dependencies: %w", err)
			}
			detail = ""
			return nil
		}},
	}
	start := e.now()
	for i, st := range steps {
		t := e.now()
		detail = ""
		err := st.fn()
		took := e.since(t)
		e.log.Info("start: "+st.name, "step", i+1, "took", took, "detail", detail, "epoch", e.cfg.Epoch, "error", err)
		if err != nil {
			return err
		}
		if e.cfg.Epoch > 0 {
			e.systemAction(ActPromotion, fmt.Sprintf("epoch %d, step %d: %s took %s; %s", e.cfg.Epoch, i+1, st.name, took.Round(time.Microsecond), detail))
		}
	}
	e.log.Info("start: recovery done; dispatching", "took", e.since(start), "epoch", e.cfg.Epoch)
	return nil
}

// systemAction records a task-less action without waiting.
func (e *Engine) systemAction(name, detail string) {
	act := model.Action{Action: name, Actor: ActorScheduler + ":" + e.cfg.NodeID, At: e.nowMS(), Detail: detail}
	if err := e.submit(context.Background(), &persist.Group{Actions: []model.Action{act}}, submitWait); err != nil {
		e.log.Warn("cannot record action", "action", name, "error", err)
	}
}

// fireRefused records a fire the database refused: it is not dispatched (R8.5).
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
// and RUNNING with run in flight (recoverInFlight).
func (e *Engine) resendLost(t *task, lost model.Run) {
	now := e.nowMS()
	// The lost run leaves e.runs (recoverInFlight added it); its re-send takes its place.
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
	body := e.runJSON(def, run, wireTicket, deadline)
	req := &dispatch.Request{URL: def.Callback.URL, Task: def.Name, Ticket: wireTicket, Attempt: run.Attempt,
		Body: body, Deadline: deadline, ResendInDoubt: def.OnLost == persist.OnLostResend}
	if err := e.disp.Send(req, func(o dispatch.Outcome) { e.endRun(t, run, httpOutcome(o, run.Executor)) }); err != nil {
		e.notSent(t, run, "not sent: "+err.Error())
	}
}

// runJSON is the run body send posts, with ticket as its ticket.
func (e *Engine) runJSON(def *model.TaskDef, run model.Run, ticket string, deadline time.Time) []byte {
	body, _ := json.Marshal(runBody{
		Task: def.Name, Handler: def.Callback.Handler, Group: def.Group, Ticket: ticket, Attempt: run.Attempt,
		Kind: run.Kind, ScheduledAt: run.ScheduledAt, Deadline: deadline.UnixMilli(), Params: def.Params,
		DedupTTLMS: e.dedupTTL(def).Milliseconds(), Epoch: e.cfg.Epoch,
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
