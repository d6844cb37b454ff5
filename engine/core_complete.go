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
	// re-sends it to the next primary. Called on a completion goroutine (core_submit.go): it must
	// not block, or it delays the completions of the tasks sharing its lane.
	durable func(error)
	// killedBy, for a run-now or backfill run killed by an operator, is who killed it, and
	// killReason why (also read by an allow_all run's kill).
	killedBy, killReason string
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

// endRun ends the run as oc says, unless something else (a kill, a timeout, a lost
// executor) already took it from e.runs: then the late outcome changes nothing and is only
// logged for the operator.
func (e *Engine) endRun(t *task, run model.Run, oc outcome) {
	if !e.runs.take(run.Ticket, nil, func(*flight) { e.resolve(t, run, oc) }) {
		e.lateResult(run.TaskName, run.Ticket, oc)
	}
}

func (e *Engine) lateResult(task, ticket string, oc outcome) {
	e.log.Info("late result ignored", "task", task, "ticket", ticket, "result", oc.result)
	e.m.results.result("stale").Inc()
}

// resolve routes an outcome to the periodic state machine or to a run-now instance. The
// caller has taken the run from e.runs (runsInFlight.take).
func (e *Engine) resolve(t *task, run model.Run, oc outcome) {
	switch run.Kind {
	case model.RunManual:
		e.completeManual(t, run, oc)
		return
	case model.RunBackfill:
		e.completeBackfill(t, run, oc) // core_backfillruns.go
		return
	}
	e.complete(t, run, oc)
}

// complete records how the periodic run ended and moves the task on: to the next cycle, to a
// retry, or to its resting state, as decideEnd (core_transition.go) decides. The caller has taken
// the run from e.runs.
func (e *Engine) complete(t *task, run model.Run, oc outcome) {
	ticket := run.Ticket
	t.mu.Lock()
	if _, ok := t.parallel[ticket]; ok {
		e.completeParallel(t, run, oc) // core_parallel.go
		return
	}
	if t.periodic != ticket || t.rt.State != model.StateRunning {
		// Cannot happen while runsInFlight gives each ticket out once; kept as a guard so a
		// stray outcome never moves the state machine.
		if t.periodic == ticket {
			t.runLeft(ticket)
		}
		e.loader.place(t)
		t.mu.Unlock()
		e.lateResult(run.TaskName, ticket, oc)
		oc.notify(fmt.Errorf("%w: run %s is no longer the task's run in flight", ErrStaleTicket, ticket))
		return
	}
	d := decideEnd(e.endInput(t, run, oc, e.nowMS()))
	t.runLeft(ticket)
	e.applyEnd(t, d)
	name, group, id := t.def.Name, t.def.Group, t.id
	var then func()
	if d.ReleaseDownstream {
		then = func() { e.deps.upstreamDone(name) }
	}
	if d.PausedOnFailure {
		then = e.alerts.pausedOnFailureAlert(id, name, group, d.RT.ConsecutiveFailures)
	}
	e.commit(context.Background(), t, d.RT, commitOpts{def: d.PausedDef, runs: []model.Run{d.Run}, acts: d.Acts, then: then, notify: oc.durable})
	e.unlock(t)
	e.alerts.recordHealth(&e.brk, id, name, group, d.Breaker)
	if d.FinalFailure != "" {
		e.alerts.raiseFor(context.Background(), AlertFinalFailure, id, name, group, d.FinalFailure)
	}
}

// endInput copies what decideEnd reads out of t. Caller holds t.mu.
func (e *Engine) endInput(t *task, run model.Run, oc outcome, now int64) endInput {
	return endInput{
		ID: t.id, Def: t.def, Sched: t.sched, Loc: t.loc, RT: t.rt, RetryOf: t.retryOf, Deleted: t.deleted,
		// Looked up for a success only, the one end that releases downstream tasks.
		Upstream: oc.result == model.ResultSuccess && e.deps.upstreams.has(t.def.Name),
		Run:      run, Outcome: oc, Now: now,
		RetryBackoffCap: e.cfg.RetryBackoffCap, MisfireThreshold: e.cfg.MisfireThreshold,
		CatchupFrom: t.catchupFrom, CatchupUntil: e.endCatchupBound(t, now),
	}
}

// endCatchupBound is the end of the catch-up a run's end at now decides by (nextInput
// .CatchupUntil). On a node handing t's shard over (core_shards.go, invariant 6) the fires
// due by now are the taker's: the end arms the first of them, which this node no longer
// fires, and the taker catches them all up from it, where the overlap policy would have
// consumed all but the latest. Caller holds t.mu.
func (e *Engine) endCatchupBound(t *task, now int64) int64 {
	b := t.catchupBound(now)
	if e.own.HandOverPoint(int(t.shard)) > 0 {
		return max(b, now)
	}
	return b
}

// applyEnd applies the parts of d that stay in memory: the counters, the task's retryOf and
// paused definition, and the log of refused moves. The caller commits d.RT with d's runs and
// actions. Caller holds t.mu.
func (e *Engine) applyEnd(t *task, d endDecision) {
	e.m.results.result(d.Run.Result).Inc()
	if d.Killed {
		e.m.kills.Inc()
	}
	if d.Timeout {
		e.m.timeouts.Inc()
	}
	if d.Retried {
		e.m.retries.Inc()
	}
	if d.Misfire {
		e.m.misfires.Inc()
	}
	for _, err := range d.Refused {
		e.log.Error("state machine refused a move at a run's end", "task", t.def.Name, "error", err)
	}
	t.retryOf = d.RetryOf
	if d.CatchupDone {
		t.clearCatchup()
	}
	if d.PausedDef != nil {
		t.def = d.PausedDef
	}
}

// completeManual records the end of a run-now instance: its run row and an action record.
func (e *Engine) completeManual(t *task, run model.Run, oc outcome) {
	if e.steps.sink != nil && IsStepTask(run.TaskName) {
		e.steps.complete(t, run, oc) // steps.go
		return
	}
	now := e.nowMS()
	// An outcome without a duration (a lost run) lasted from its dispatch until now.
	run = endedRun(run, oc, now)
	e.m.results.result(oc.result).Inc()
	t.mu.Lock()
	t.runLeft(run.Ticket)
	name, group := t.def.Name, t.def.Group
	detail := "run-now " + oc.result
	if oc.errText != "" {
		detail += ": " + oc.errText
	}
	actName, actor := ActResult, ActorScheduler
	switch {
	case oc.result == model.ResultTimeout:
		actName = ActTimeout
		e.m.timeouts.Inc()
	case oc.killedBy != "":
		actName, actor, detail = ActKill, oc.killedBy, joinNote("run-now killed", oc.killReason)
		e.m.kills.Inc()
	}
	act := e.action(t, run.Ticket, actName, "", "", actor, detail, now)
	e.loader.place(t)
	t.mu.Unlock()
	release := oc.result == model.ResultSuccess && e.deps.upstreams.has(name)
	g := &persist.Group{Runs: []model.Run{run}, Actions: []model.Action{act}, Done: func(err error) {
		if err == nil && release {
			go e.deps.upstreamDone(name)
		}
		oc.notify(err)
	}}
	if err := e.submit(context.Background(), g, submitWait); err != nil {
		e.log.Warn("run-now result not recorded: writer closed", "ticket", run.Ticket, "error", err)
		oc.notify(err)
	}
	e.alerts.recordHealth(&e.brk, t.id, name, group, breakerFeedOf(oc.result))
}

// cancelOther kills the periodic run ticket of task id because the fire due came due while
// it was in flight (overlap policy cancel_other), as an operator's kill would, with actor
// ActorOverlap: a kill is sent to the executor, the run ends KILLED, and the end's decision
// (decideKill, decideNext) starts the latest fire due at once. It does nothing when the run
// has ended meanwhile.
func (e *Engine) cancelOther(id int64, ticket string, due int64) {
	if e.checkRunning() != nil {
		return // the run is recovered by the next scheduler, and its entry armed again
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := e.acquire(ctx, id, acquireOpts{})
	if err != nil {
		return
	}
	defer e.release(t)
	if t.periodic != ticket || t.rt.State != model.StateRunning {
		return
	}
	e.killOnExecutor(ticket)
	taken := e.runs.take(ticket, nil, func(f *flight) {
		_, err = e.killLocked(ctx, t, f.run, ActorOverlap, "")
	})
	if taken && err != nil {
		e.log.Warn("overlap kill not recorded", "task", t.def.Name, "ticket", ticket, "error", err)
	}
	if taken {
		e.log.Info("run killed by overlap policy cancel_other", "task", t.def.Name, "ticket", ticket,
			"fire", time.UnixMilli(due).UTC().Format(time.RFC3339))
	}
}

// killLocked records the periodic run as killed and moves t on to its next cycle, as
// decideEnd decides, and returns the runtime it committed. The caller holds t.mu and has
// taken the run from e.runs.
func (e *Engine) killLocked(ctx context.Context, t *task, run model.Run, actor, reason string) (model.Runtime, error) {
	in := e.endInput(t, run, outcome{}, e.nowMS())
	in.Kill, in.KilledBy, in.KillReason = true, actor, reason
	d := decideEnd(in)
	t.runLeft(run.Ticket)
	e.applyEnd(t, d)
	nrt := d.RT
	nrt.Version = t.rt.Version + 1 // as commit sets it
	return nrt, e.commit(ctx, t, nrt, commitOpts{wait: true, runs: []model.Run{d.Run}, acts: d.Acts})
}

// nextFire is fireAfter for t, counting a misfire. Caller holds t.mu.
func (e *Engine) nextFire(t *task, lastSched, now int64) (int64, string) {
	n, note, misfired := fireAfter(t.sched, t.loc, t.def.MisfirePolicy, e.cfg.MisfireThreshold, t.def.Name, t.def.JitterSec, lastSched, now)
	if misfired {
		e.m.misfires.Inc()
	}
	return n, note
}

// misfire applies the misfire policy to a SCHEDULED task loaded with a fire time more than
// MisfireThreshold in the past (design.md, "Window and cold entries"). One-shot (delay) tasks always fire once: skipping their
// only fire would lose the task. Caller holds t.mu.
func (e *Engine) misfire(t *task, now int64) {
	if t.catchupWindow() > 0 {
		e.catchup(t, t.rt.NextTriggerTime, now, t.rt)
		return
	}
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
		if t.fireAt(next) > now {
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
	e.commit(context.Background(), t, nrt, commitOpts{runs: runs, acts: []model.Action{act}})
}

// catchup starts the catch-up of t's fires missed since due (decideCatchup): nrt, the
// runtime to write, goes on to the first missed fire within the window, or the first fire
// after now when none is, and the decision is recorded. Caller holds t.mu; t is a cron task
// with a catch-up window.
func (e *Engine) catchup(t *task, due, now int64, nrt model.Runtime) {
	p := decideCatchup(catchupInput{Span: t.span(), WindowSec: t.catchupWindow(), Due: due, Now: now})
	if p.Next == 0 {
		return // the schedule fires no more: its last due fire fires, as misfire leaves it
	}
	t.catchupFrom, t.catchupUntil, t.catchupFollow = p.CatchupFrom, p.CatchupUntil, 0
	from := nrt.State
	nrt.State = model.StateScheduled
	nrt.NextTriggerTime = p.Next
	if p.Next != due {
		e.m.misfires.Inc() // fires passed over, as a skip misfire counts them
	}
	act := e.action(t, "", ActCatchup, from, nrt.State, ActorScheduler, p.Detail, now)
	e.commit(context.Background(), t, nrt, commitOpts{acts: []model.Action{act}})
}
