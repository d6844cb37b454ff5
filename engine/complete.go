package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// outcome is how a run ended.
type outcome struct {
	result   string // persist.Result*
	errText  string
	output   string
	executor string
	duration time.Duration
	// durable, when set, is told once whether the run's end was recorded (nil) or not: an
	// executor's result is acknowledged only then, so a primary that cannot write (cut off
	// from the database, deposed) never acknowledges a result it will lose, and the executor
	// re-sends it to the next primary. Called on a completion goroutine (submit.go): it must
	// not block, or it delays the completions of the tasks sharing its shard.
	durable func(error)
}

// notify tells oc.durable, when set, how recording the run's end went.
func (oc outcome) notify(err error) {
	if oc.durable != nil {
		oc.durable(err)
	}
}

func httpOutcome(o dispatch.Outcome, host string) outcome {
	oc := outcome{duration: o.Duration, executor: host, output: string(o.Body)}
	switch {
	case o.OK():
		oc.result = model.ResultSuccess
	case errors.Is(o.Err, dispatch.ErrTimeout):
		oc.result = model.ResultTimeout
		oc.errText = "no response within timeout_sec"
	case o.Err != nil:
		oc.result = model.ResultFailed
		oc.errText = o.Err.Error()
	default:
		oc.result = model.ResultFailed
		oc.errText = "HTTP " + strconv.Itoa(o.Status)
	}
	return oc
}

// settleRun ends the run as oc says, unless something else (a kill, a timeout, a lost
// executor) already took it from e.runs: then the late outcome changes nothing and is only
// logged for the operator.
func (e *Engine) settleRun(t *task, run model.Run, oc outcome) {
	if !e.runs.settle(run.Ticket, nil, func(*flight) { e.resolve(t, run, oc) }) {
		e.lateResult(run.TaskName, run.Ticket, oc)
	}
}

func (e *Engine) lateResult(task, ticket string, oc outcome) {
	e.log.Info("late result ignored", "task", task, "ticket", ticket, "result", oc.result)
	e.m.results.result("stale").Inc()
}

// resolve routes an outcome to the periodic state machine or to a run-now instance. The
// caller has taken the run from e.runs (runsInFlight.settle).
func (e *Engine) resolve(t *task, run model.Run, oc outcome) {
	if run.Kind == model.RunManual {
		e.completeManual(t, run, oc)
		return
	}
	e.complete(t, run, oc)
}

// ranDown notes that one of t's runs left e.runs. Caller holds t.mu.
func (e *Engine) ranDown(t *task, ticket string) {
	t.flying--
	if t.periodic == ticket {
		t.periodic = ""
	}
}

// complete records how the periodic run ended and moves the task on: to the next cycle, to a
// retry, or to its resting state. The caller has taken the run from e.runs.
func (e *Engine) complete(t *task, run model.Run, oc outcome) {
	ticket := run.Ticket
	t.mu.Lock()
	if t.periodic != ticket || t.rt.State != model.StateRunning {
		// Cannot happen while runsInFlight settles each ticket once; kept as a guard so a
		// stray outcome never moves the state machine.
		if t.periodic == ticket {
			e.ranDown(t, ticket)
		}
		e.settle(t)
		t.mu.Unlock()
		e.lateResult(run.TaskName, ticket, oc)
		oc.notify(fmt.Errorf("%w: run %s is no longer the task's run in flight", ErrStaleTicket, ticket))
		return
	}
	now := e.nowMS()
	run.EndedAt = now
	run.Result = oc.result
	run.Error = oc.errText
	run.Output = oc.output
	if oc.executor != "" {
		run.Executor = oc.executor
	}
	run.DurationMS = oc.duration.Milliseconds()
	if oc.duration == 0 {
		run.DurationMS = now - run.DispatchedAt
	}
	e.ranDown(t, ticket)
	e.m.results.result(oc.result).Inc()

	nrt := t.rt
	nrt.LastEndTime = now
	nrt.LastExecutor = run.Executor
	nrt.CurrentTicket = ""
	nrt.NextTriggerTime = 0 // the due of the run that ended (fire); the next cycle sets its own
	// In the row written anyway: the console's "last result" and "failed within" filters.
	nrt.LastResult = oc.result
	if isFailure(oc.result) {
		nrt.LastFailureAt = now
	}
	var pausedDef *model.TaskDef // set when this end pauses the task (pausefail.go)
	var acts []model.Action
	finalFailure := false // the last attempt failed: alert (a lost run is not the task's fault)
	// The next cycle follows the cron fire this run belongs to: a retry's own scheduled time
	// is later, and fires between the two must be counted as missed, not dropped unrecorded.
	lastSched := run.ScheduledAt
	if run.Attempt > 1 && t.retryOf > 0 && t.retryOf < lastSched {
		lastSched = t.retryOf
	}
	t.retryOf = 0
	detail := oc.result
	if oc.errText != "" {
		detail += ": " + oc.errText
	}
	switch {
	case oc.result == model.ResultSuccess:
		nrt.State = model.StateSuccess
		nrt.SuccessCount++
		nrt.Attempt = 0
		nrt.ConsecutiveFailures = 0
		// No `result` action record: the run row carries the end (ended_at, result), and
		// the timeline derives the RUNNING→SUCCESS event from it (persist.Timeline). Every
		// other end keeps its action record, whose target state the run row cannot tell.
		e.nextCycle(t, &nrt, lastSched, now, &acts)
	case oc.result != model.ResultLost && run.Attempt <= t.def.RetryCount && !t.def.Paused:
		// (A pause stops retries too: they are future triggers.)
		if oc.result == model.ResultTimeout {
			e.m.timeouts.Inc()
		}
		delay := retryDelay(time.Duration(t.def.RetryIntervalSec)*time.Second, run.Attempt, e.cfg.RetryBackoffCap)
		nrt.State = model.StateRetrying
		nrt.Attempt = run.Attempt + 1
		t.retryOf = lastSched
		nrt.NextTriggerTime = now + delay.Milliseconds()
		acts = append(acts, e.action(t, ticket, ActRetry, model.StateRunning, model.StateRetrying, ActorScheduler,
			fmt.Sprintf("%s; attempt %d in %s", detail, nrt.Attempt, delay), now))
		e.m.retries.Inc()
	default:
		if oc.result == model.ResultTimeout {
			e.m.timeouts.Inc()
		}
		nrt.State = model.StateFailed
		nrt.FailureCount++
		nrt.Attempt = 0
		name := ActResult
		switch oc.result {
		case model.ResultLost:
			name = ActLost
		case model.ResultTimeout:
			name = ActTimeout // a timeout is an action of its own in the audit log
			finalFailure = true
		default:
			finalFailure = true
		}
		acts = append(acts, e.action(t, ticket, name, model.StateRunning, model.StateFailed, ActorScheduler, detail, now))
		if finalFailure {
			nrt.ConsecutiveFailures++
			pausedDef = e.pauseOnFailure(t, &nrt, now, &acts)
		}
		if pausedDef == nil {
			e.nextCycle(t, &nrt, lastSched, now, &acts)
		}
	}
	name, group, id := t.def.Name, t.def.Group, t.id
	var then func()
	if oc.result == model.ResultSuccess && e.upstreams.has(name) {
		then = func() { e.upstreamDone(name) }
	}
	if pausedDef != nil {
		then = e.pausedOnFailureAlert(id, name, group, nrt.ConsecutiveFailures)
	}
	e.commitLockedDef(t, nrt, pausedDef, []model.Run{run}, acts, then, oc.durable)
	e.unlock(t)
	e.recordHealth(id, name, group, oc.result)
	if finalFailure {
		e.alertFor(context.Background(), AlertFinalFailure, id, name, group,
			fmt.Sprintf("%s failed after %d attempt(s): %s", name, run.Attempt, detail))
	}
}

// completeManual records the end of a run-now instance: its run row and an action record.
func (e *Engine) completeManual(t *task, run model.Run, oc outcome) {
	now := e.nowMS()
	run.EndedAt = now
	run.Result = oc.result
	run.Error = oc.errText
	run.Output = oc.output
	run.DurationMS = oc.duration.Milliseconds()
	if oc.executor != "" {
		run.Executor = oc.executor
	}
	e.m.results.result(oc.result).Inc()
	t.mu.Lock()
	e.ranDown(t, run.Ticket)
	name, group := t.def.Name, t.def.Group
	detail := "run-now " + oc.result
	if oc.errText != "" {
		detail += ": " + oc.errText
	}
	actName := ActResult
	if oc.result == model.ResultTimeout {
		actName = ActTimeout
	}
	act := e.action(t, run.Ticket, actName, "", "", ActorScheduler, detail, now)
	e.settle(t)
	t.mu.Unlock()
	release := oc.result == model.ResultSuccess && e.upstreams.has(name)
	g := &persist.Group{Runs: []model.Run{run}, Actions: []model.Action{act}, Done: func(err error) {
		if err == nil && release {
			go e.upstreamDone(name)
		}
		oc.notify(err)
	}}
	if err := e.submit(context.Background(), g, submitWait); err != nil {
		e.log.Warn("run-now result not recorded: writer closed", "ticket", run.Ticket, "error", err)
		oc.notify(err)
	}
	e.recordHealth(t.id, name, group, oc.result)
}

// Kill ends the task's periodic run in flight: the run is recorded KILLED and the task goes
// on to WAITING and its next cycle. For HTTP callbacks the scheduler stops waiting for the
// call; the downstream sees its connection closed at the run's deadline.
func (e *Engine) Kill(ctx context.Context, name, actor string) (*model.Task, error) {
	if err := e.checkRunning(); err != nil {
		return nil, err
	}
	t, err := e.acquireByName(ctx, name)
	if err != nil {
		return nil, err
	}
	defer e.release(t)
	if t.periodic == "" || t.rt.State != model.StateRunning {
		return nil, fmt.Errorf("%w: task %q is %s, not RUNNING", ErrConflict, name, t.rt.State)
	}
	ticket := t.periodic
	e.killOnExecutor(ticket) // best effort, while the run still names its executor
	var rt model.Runtime
	err = ErrConflict
	settled := e.runs.settle(ticket, nil, func(f *flight) { rt, err = e.killLocked(ctx, t, f.run, actor) })
	if !settled {
		// Its result, timeout or loss took the run first and is recording that end.
		return nil, fmt.Errorf("%w: the run of task %q is ending already", ErrConflict, name)
	}
	if err != nil {
		return nil, err
	}
	// The runtime the kill made durable: while commitWait waited without the lock, a next
	// fire already due may have started, and the caller asked about the kill.
	return &model.Task{Def: *t.def, Runtime: rt}, nil
}

// killLocked records the periodic run as killed and moves t on to its next cycle, and
// returns the runtime it committed. The caller holds t.mu and has taken the run from e.runs.
func (e *Engine) killLocked(ctx context.Context, t *task, run model.Run, actor string) (model.Runtime, error) {
	now := e.nowMS()
	run.EndedAt = now
	run.Result = model.ResultKilled
	run.Error = "killed by " + actor
	run.DurationMS = now - run.DispatchedAt
	e.ranDown(t, run.Ticket)
	e.m.results.result(model.ResultKilled).Inc()
	e.m.kills.Inc()
	nrt := t.rt
	nrt.LastEndTime = now
	nrt.CurrentTicket = ""
	nrt.NextTriggerTime = 0 // the due of the killed run (see fire)
	nrt.Attempt = 0
	nrt.State = model.StateWaiting
	acts := []model.Action{
		e.action(t, run.Ticket, ActKill, model.StateRunning, model.StateKilled, actor, "", now),
		e.action(t, run.Ticket, ActSchedule, model.StateKilled, model.StateWaiting, ActorScheduler, "", now),
	}
	switch {
	case t.def.Paused:
		nrt.State = model.StatePaused
		acts[1].To = model.StatePaused
		acts[1].Action = ActPause
		acts[1].Detail = "pause requested during the run takes effect"
	case t.def.Trigger == model.TriggerCron:
		if next, d := e.nextFire(t, run.ScheduledAt, now); next != 0 {
			nrt.State = model.StateScheduled
			nrt.NextTriggerTime = next
			acts = append(acts, e.action(t, "", ActSchedule, model.StateWaiting, model.StateScheduled, ActorScheduler,
				"next fire "+time.UnixMilli(next).In(t.loc).Format(time.RFC3339)+d, now))
		}
	}
	nrt.Version = t.rt.Version + 1 // as commitWait sets it
	return nrt, e.commitWait(ctx, t, nrt, []model.Run{run}, acts)
}

// nextCycle moves a task that just finished a run (SUCCESS or FAILED in nrt) to where it
// waits next: SCHEDULED with the next cron fire, PAUSED when a pause was requested during the
// run, WAITING for dependency tasks; one-shot tasks rest where they are. Caller holds t.mu.
func (e *Engine) nextCycle(t *task, nrt *model.Runtime, lastSched, now int64, acts *[]model.Action) {
	from := nrt.State
	to := from
	detail := ""
	switch {
	case t.def.Paused:
		to = model.StatePaused
		nrt.NextTriggerTime = t.nextCron(now)
		detail = "pause requested during the run takes effect"
	case t.def.Trigger == model.TriggerCron:
		next, d := e.nextFire(t, lastSched, now)
		if next == 0 {
			detail = "the cron expression fires no more"
			break
		}
		to = model.StateScheduled
		nrt.NextTriggerTime = next
		detail = "next fire " + time.UnixMilli(next).In(t.loc).Format(time.RFC3339) + d
	case t.def.Trigger == model.TriggerDependency:
		to = model.StateWaiting
		detail = "waiting for upstreams"
	default:
		return
	}
	if to == from {
		return
	}
	if err := checkTransition(from, to); err != nil {
		e.log.Error("state machine refused next cycle", "task", t.def.Name, "error", err)
		return
	}
	nrt.State = to
	name := ActSchedule
	if to == model.StatePaused {
		name = ActPause
	}
	*acts = append(*acts, e.action(t, "", name, from, to, ActorScheduler, detail, now))
}

// nextFire returns the cron fire that follows lastSched given the time now, and a note for
// the action record. Fires missed while the run overran (or while no scheduler ran) are
// coalesced: at most one of them fires. A fire later than MisfireThreshold follows the
// task's misfire policy (design.md, "Window and cold entries"): fire_once fires the latest missed one now, skip goes on to
// the first fire after now.
func (e *Engine) nextFire(t *task, lastSched, now int64) (int64, string) {
	n := t.nextCron(lastSched)
	if n == 0 || n > now {
		return n, ""
	}
	missed := 0
	for i := 0; i < 100000; i++ {
		m := t.nextCron(n)
		if m == 0 || m > now {
			break
		}
		n = m
		missed++
	}
	if now-n <= e.cfg.MisfireThreshold.Milliseconds() {
		if missed == 0 {
			return n, ""
		}
		return n, fmt.Sprintf(" (%d earlier fire(s) missed while running, coalesced)", missed)
	}
	e.m.misfires.Inc()
	if t.def.MisfirePolicy == model.MisfireSkip {
		return t.nextCron(now), fmt.Sprintf(" (misfire: %d fire(s) skipped)", missed+1)
	}
	return n, fmt.Sprintf(" (misfire: fire_once, %d fire(s) coalesced into one)", missed+1)
}

// misfire applies the misfire policy to a SCHEDULED task loaded with a fire time more than
// MisfireThreshold in the past (design.md, "Window and cold entries"). One-shot (delay) tasks always fire once: skipping their
// only fire would lose the task. Caller holds t.mu.
func (e *Engine) misfire(t *task, now int64) {
	due := t.rt.NextTriggerTime
	nrt := t.rt
	var detail string
	var runs []model.Run
	switch t.def.Trigger {
	case model.TriggerCron:
		// nextFire counts from the fire before `due`; emulate that by asking for fires after
		// due-1ms, which yields due itself first.
		next, d := e.nextFire(t, due-1, now)
		if next == 0 {
			return
		}
		nrt.NextTriggerTime = next
		detail = "due " + time.UnixMilli(due).In(t.loc).Format(time.RFC3339) + d
		if next > now {
			// The skip policy: the missed fire is not run, and its run history says so.
			runs = append(runs, model.Run{
				Ticket: scheduledTicket(t.id, due, 1), TaskID: t.id, TaskName: t.def.Name, Kind: model.RunScheduled,
				Attempt: 1, ScheduledAt: due, EndedAt: now, Result: model.ResultSkipped, Detail: detail,
			})
		}
	default:
		e.m.misfires.Inc()
		detail = "due " + time.UnixMilli(due).In(t.loc).Format(time.RFC3339) + " (misfire: one-shot task fires now)"
	}
	act := e.action(t, "", ActMisfire, t.rt.State, nrt.State, ActorScheduler, detail, now)
	e.commitLocked(t, nrt, runs, []model.Action{act})
}

// retryDelay is the retry backoff: the interval for retries 1 and 2, then doubling from the
// third, capped at max(capD, interval).
func retryDelay(interval time.Duration, retry int, capD time.Duration) time.Duration {
	if retry <= 2 {
		return interval
	}
	if capD < interval {
		capD = interval
	}
	d := interval
	for i := 2; i < retry; i++ {
		d *= 2
		if d >= capD || d <= 0 {
			return capD
		}
	}
	return d
}

// recordHealth feeds a result to the task's breaker and raises its alerts. Caller must not
// hold t.mu.
func (e *Engine) recordHealth(id int64, name, group, result string) {
	if e.cfg.Breaker.Disabled {
		return
	}
	var ok bool
	switch result {
	case model.ResultSuccess:
		ok = true
	case model.ResultFailed, model.ResultTimeout:
	default:
		return // killed and lost say nothing about the task's health
	}
	changed, open := e.brk.record(e.cfg.Breaker, id, e.nowMS(), ok)
	if !changed {
		return
	}
	if open {
		e.alertFor(context.Background(), AlertBreakerOpen, id, name, group, fmt.Sprintf(
			"circuit breaker of %s opened: more than %.0f%% of its runs failed over %s; only one fire in %d is dispatched",
			name, e.cfg.Breaker.FailureRate*100, e.cfg.Breaker.Window, e.cfg.Breaker.ProbeEvery))
	} else {
		e.alertFor(context.Background(), AlertBreakerClose, id, name, group,
			"circuit breaker of "+name+" closed: the failure rate fell back; full trigger rate restored")
	}
}
