package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// Overlap policy allow_all (design.md, "Overlap and catch-up"): every cron fire runs, beside
// the task's runs still in flight, each with its own ticket and fire record.
//
// A fire of an allow_all task does not move the task to RUNNING. It writes, in one group,
// its fire record (the run row, `running`) and the runtime moved on to the next fire, from
// the version the fire was made from (decideParallel). So the runtime always names the next
// fire, as a task at rest does, and the task is armed again at once; the run is held in
// e.runs and in the task's `parallel` set, outside the periodic state machine, as a run-now
// instance is. Because both rows are written together or not at all, a fire is either made
// (its record exists and the runtime is past it) or not made (neither), and the unique fire
// record still refuses a second dispatch of the same (task, fire time, attempt).
//
// Each run's end writes its run row, an action record when it did not succeed, and the
// runtime's counters (last result, success and failure counts, consecutive failures), by a
// compare-and-swap of its own; so pause_after_failures and the breaker count allow_all runs
// in the order they end. Kill kills every run of the task in flight. A restart finds the
// runs in flight with ListOpenParallelRuns and adopts them as run-now instances are
// adopted (adoptInstance): an executor's result is awaited, an HTTP run is recorded lost and
// never re-sent.
//
// allow_all runs are not retried (retry_count must be 0), and on_lost: resend is refused
// with it: a retry or a re-send of one of several runs in flight would need a durable
// waiting state per run, which the runtime row (one attempt, one due time) does not hold.

// allowsAll reports whether t's next fire runs beside its runs in flight (allow_all). A task
// whose policy became allow_all while it was RUNNING or RETRYING finishes that cycle first.
// Caller holds t.mu.
func (t *task) allowsAll() bool {
	return t.def.Trigger == model.TriggerCron && t.sched != nil && t.def.OverlapPolicy == model.OverlapAllowAll &&
		t.rt.State == model.StateScheduled
}

// fireParallel makes the fire of nominal time sched of an allow_all task at now and submits
// its group; the run is sent once the group is durable (parallelDurable). slot is the run's
// concurrency slot; detail is what the run row's detail says of its jitter and wait. Caller
// holds t.mu; fireParallel unlocks it.
func (e *Engine) fireParallel(t *task, sched, now int64, slot concSlot, detail string) {
	ticket := scheduledTicket(t.id, sched, 1)
	run := model.Run{
		Ticket: ticket, TaskID: t.id, TaskName: t.def.Name, Kind: model.RunScheduled, Attempt: 1,
		ScheduledAt: sched, DispatchedAt: now, Result: model.ResultRunning,
		Executor: downstreamOf(t.def), Detail: detail,
	}
	p := decideParallel(nextInput{
		Span: t.span(), Overlap: t.def.OverlapPolicy, Misfire: t.def.MisfirePolicy, Threshold: e.cfg.MisfireThreshold,
		CatchupFrom: t.catchupFrom, CatchupUntil: t.catchupBound(now), Last: sched, Now: now,
	})
	if p.CatchupDone {
		t.clearCatchup()
	}
	var acts []model.Action
	for _, r := range p.Records {
		acts = append(acts, e.action(t, ticket, r.action, t.rt.State, t.rt.State, ActorScheduler, r.detail, now))
	}
	if n := len(t.parallel); n > 0 || t.periodic != "" {
		if t.periodic != "" {
			n++
		}
		acts = append(acts, e.action(t, ticket, ActOverlap, t.rt.State, t.rt.State, ActorScheduler,
			"allow_all: the fire of "+stamp(sched, t.loc)+" runs beside "+strconv.Itoa(n)+" run(s) of the task in flight", now))
	}
	nrt := t.rt
	nrt.NextTriggerTime = p.Next
	nrt.LastTriggerTime = now
	expect := t.rt.Version
	nrt.Version = expect + 1
	t.rt = nrt
	t.pending++
	if t.parallel == nil {
		t.parallel = make(map[string]struct{})
	}
	t.parallel[ticket] = struct{}{}
	t.flying++
	e.runs.add(t, run, slot)
	def := t.def
	g := &persist.Group{
		Fires:       []model.Run{run}, // the fire record (docs/ha.md): refused if this fire was dispatched
		Transitions: []persist.Transition{{ExpectVersion: expect, Runtime: nrt}},
		Actions:     acts,
		Done:        func(err error) { e.parallelDurable(t, def, run, err) },
	}
	e.commitGroupLocked(t, g, func(error) {
		// Only when the writer has stopped: neither row reached the store, and the fire
		// happens after a restart.
		t.pending--
		e.runs.take(ticket, nil, nil)
	})
	e.m.triggers.Inc()
	e.loader.place(t) // arms the next fire now: it does not wait for this run
	e.unlock(t)
}

// parallelDurable runs on a completion goroutine when the group of an allow_all fire is
// durable (or failed), as dispatchDurable does for a periodic fire. It must not block.
func (e *Engine) parallelDurable(t *task, def *model.TaskDef, run model.Run, err error) {
	if err == nil {
		t.mu.Lock()
		t.pending--
		t.mu.Unlock()
		e.send(t, def, run, def.Params)
		return
	}
	// Neither row was written. A fire record already there means another scheduler made
	// this fire; a conflict, that another moved the runtime on. Either way this copy of the
	// task is behind the store: it is read back once nothing is pending.
	duplicate := errors.Is(err, persist.ErrDuplicateFire)
	e.runs.take(run.Ticket, nil, func(*flight) {
		t.mu.Lock()
		t.runLeft(run.Ticket)
		t.mu.Unlock()
	})
	t.mu.Lock()
	t.pending--
	if duplicate {
		t.stale = true
	} else {
		e.writeFailed(t, err)
	}
	e.loader.place(t)
	t.mu.Unlock()
	if duplicate {
		e.fireRefused(t, def, run)
	} else {
		e.m.dispatches.result("conflict").Inc()
	}
}

// endParallelLocked decides the end of allow_all run `run` as oc says (killedBy: killed by
// that actor) and queues its write in t's outbox; the caller's e.unlock submits it. It
// returns what runs once the caller has unlocked: the breaker's feed and the final-failure
// alert. The caller holds t.mu and has taken the run from e.runs.
func (e *Engine) endParallelLocked(t *task, run model.Run, oc outcome, killedBy string) (after func()) {
	now := e.nowMS()
	run = endedRun(run, oc, now)
	if killedBy != "" {
		run.Result, run.Error = model.ResultKilled, killText(killedBy, oc.killReason)
	}
	t.runLeft(run.Ticket)
	e.m.results.result(run.Result).Inc()
	st := t.rt.State
	nrt := t.rt
	nrt.LastEndTime = now
	nrt.LastExecutor = run.Executor
	nrt.LastResult = run.Result
	detail := run.Result
	if run.Error != "" {
		detail += ": " + run.Error
	}
	var acts []model.Action
	var pausedDef *model.TaskDef
	var then func()
	finalFailure := ""
	name, group, id := t.def.Name, t.def.Group, t.id
	switch {
	case killedBy != "":
		e.m.kills.Inc()
		acts = append(acts, e.action(t, run.Ticket, ActKill, st, st, killedBy, joinNote("allow_all run of "+stamp(run.ScheduledAt, t.loc)+" killed", oc.killReason), now))
	case run.Result == model.ResultSuccess:
		// As a periodic success: the run row carries the end; no action record.
		nrt.SuccessCount++
		nrt.ConsecutiveFailures = 0
		if e.deps.upstreams.has(name) {
			then = func() { e.deps.upstreamDone(name) }
		}
	case run.Result == model.ResultLost:
		// The scheduler's fault, not the task's: neither counted nor reset.
		acts = append(acts, e.action(t, run.Ticket, ActLost, st, st, ActorScheduler, detail, now))
	default: // failed, timeout: final, allow_all runs are not retried
		nrt.LastFailureAt = now
		nrt.FailureCount++
		nrt.ConsecutiveFailures++
		act := ActResult
		if run.Result == model.ResultTimeout {
			act = ActTimeout
			e.m.timeouts.Inc()
		}
		acts = append(acts, e.action(t, run.Ticket, act, st, st, ActorScheduler, detail, now))
		finalFailure = fmt.Sprintf("%s failed after 1 attempt(s): %s", name, detail)
		if b := t.def.PauseAfterFailures; b > 0 && nrt.ConsecutiveFailures >= b && !t.def.Paused && !t.deleted && !t.stale &&
			checkTransition(st, model.StatePaused) == nil {
			// As a pause on failure of a periodic run (core_pausefail.go), from where the
			// task rests: its next fire is kept for the resume's catch-up or misfire policy.
			def := *t.def
			def.Paused = true
			def.UpdatedAt = now
			note := pausedOnFailureNote(nrt.ConsecutiveFailures, b)
			nrt.State, nrt.Note, nrt.PausedBy = model.StatePaused, note, model.PausedByFailures
			acts = append(acts, e.action(t, "", ActPause, st, model.StatePaused, ActorScheduler, note, now))
			pausedDef = &def
			then = e.alerts.pausedOnFailureAlert(id, name, group, nrt.ConsecutiveFailures)
		}
	}
	runs := []model.Run{run}
	if t.deleted || t.stale {
		// No runtime to move (deleted), or one this copy is behind on (stale, reloaded once
		// nothing is in flight): the run's end and its records still land.
		g := &persist.Group{Runs: runs, Actions: acts, Done: func(err error) {
			if err == nil && then != nil {
				go then()
			}
			oc.notify(err)
		}}
		e.commitGroupLocked(t, g, func(err error) { oc.notify(err) })
	} else {
		if pausedDef != nil {
			t.def = pausedDef
		}
		e.commit(context.Background(), t, nrt, commitOpts{def: pausedDef, runs: runs, acts: acts, then: then, notify: oc.durable})
	}
	feed := breakerFeedOf(run.Result)
	return func() {
		e.alerts.recordHealth(&e.brk, id, name, group, feed)
		if finalFailure != "" {
			e.alerts.raiseFor(context.Background(), AlertFinalFailure, id, name, group, finalFailure)
		}
	}
}

// completeParallel records the end of an allow_all run. The caller has taken the run from
// e.runs and holds t.mu, which completeParallel releases.
func (e *Engine) completeParallel(t *task, run model.Run, oc outcome) {
	after := e.endParallelLocked(t, run, oc, "")
	e.unlock(t)
	after()
}
