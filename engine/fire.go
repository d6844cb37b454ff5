package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wheel"
)

// Actors recorded in action records.
const (
	ActorScheduler = "scheduler"
)

// Action names recorded in action records (R1.4).
const (
	ActCreate   = "create"
	ActUpdate   = "update"
	ActDelete   = "delete"
	ActSchedule = "schedule"
	ActDispatch = "dispatch"
	ActResult   = "result"
	ActRetry    = "retry"
	ActTimeout  = "timeout"
	ActMisfire  = "misfire"
	ActLost     = "lost"
	ActPause    = "pause"
	ActResume   = "resume"
	ActRunNow   = "run_now"
	ActKill     = "kill"
	ActConflict = "conflict"
	// ActRefusedResult records an executor's result for an unknown or stale ticket.
	ActRefusedResult = "refused_result"
	// ActSkippedByBreaker records a fire the open circuit breaker did not dispatch.
	ActSkippedByBreaker = "skipped_by_breaker"
)

// outcome is how a run ended.
type outcome struct {
	result   string // persist.Result*
	errText  string
	output   string
	executor string
	duration time.Duration
}

// scheduledTicket names a periodic fire. It is deterministic in (task, fire time, attempt):
// two triggers for the same fire produce the same ticket, so even the run row's primary key
// refuses a second dispatch, and an executor's ticket de-dup recognises a re-send.
func scheduledTicket(id, sched int64, attempt int) string {
	b := make([]byte, 0, 40)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, sched, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(attempt), 10)
	return string(b)
}

// manualTicket names a run-now instance: independent of any fire time, so it is random.
func manualTicket(id, now int64) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return strconv.FormatInt(id, 10) + "-m" + strconv.FormatInt(now, 10) + "-" + hex.EncodeToString(r[:])
}

func (e *Engine) action(t *task, ticket, name string, from, to persist.State, actor, detail string, at int64) persist.Action {
	return persist.Action{
		TaskID: t.id, TaskName: t.def.Name, Ticket: ticket, Action: name,
		From: from, To: to, Actor: actor, At: at, Detail: detail,
	}
}

// fire handles an entry popped from a ready queue: it moves the task to RUNNING in memory and
// submits the transition; the run is sent only when that write is durable (invariant 1).
func (e *Engine) fire(ent *wheel.Entry[*task]) {
	t := ent.Value
	t.mu.Lock()
	if t.ent != ent || t.evicted || t.deleted || t.stale || !armable(t.rt.State) || !e.running.Load() {
		// A stale entry: the task was re-armed, disarmed, deleted or is being reloaded after
		// the entry reached the ready queue. When stopping, the fire stays durable in the
		// store and happens after the restart.
		t.mu.Unlock()
		return
	}
	t.ent = nil
	now := e.nowMS()
	if t.rt.State == persist.StateScheduled && t.def.Trigger == persist.TriggerCron && !e.cfg.Breaker.Disabled {
		ok, closed := e.brk.allow(e.cfg.Breaker, t.id, now)
		if closed {
			name, group := t.def.Name, t.def.Group
			defer e.alertFor(context.Background(), AlertBreakerClose, t.id, name, group,
				"circuit breaker of "+name+" closed: the failure rate fell back; full trigger rate restored")
		}
		if !ok {
			e.skipByBreaker(t, ent.When, now)
			t.mu.Unlock()
			return
		}
	}
	e.m.lateness.Update(float64(now-ent.When) / 1000)
	from := t.rt.State
	if err := checkTransition(from, persist.StateRunning); err != nil {
		t.mu.Unlock()
		e.log.Error("refusing fire", "task", t.def.Name, "error", err)
		return
	}
	attempt := 1
	kind := persist.RunScheduled
	if from == persist.StateRetrying {
		attempt = t.rt.Attempt
	}
	ticket := scheduledTicket(t.id, ent.When, attempt)
	expect := t.rt.Version
	nrt := t.rt
	nrt.State = persist.StateRunning
	nrt.CurrentTicket = ticket
	nrt.Attempt = attempt
	nrt.LastTriggerTime = now
	// NextTriggerTime keeps the due time of the fire in flight: rewriting it would move the
	// task's entry in the window index twice per cron cycle (here, and again when the run
	// ends) instead of once, about 11 µs of MariaDB CPU per move (bench/rows_test.go). Only
	// SCHEDULED and RETRYING tasks are armed or loaded, so the stale due is never fired; the
	// run's end sets the field (complete, Kill).
	nrt.Version = expect + 1
	run := persist.Run{
		Ticket: ticket, TaskID: t.id, TaskName: t.def.Name, Kind: kind, Attempt: attempt,
		ScheduledAt: ent.When, DispatchedAt: now, Result: persist.ResultRunning,
		Executor: downstreamOf(t.def),
	}
	if t.releasedBy != "" {
		run.Detail, t.releasedBy = t.releasedBy, ""
	}
	t.rt = nrt
	t.pending++
	t.run = &inflight{run: run}
	def := t.def
	act := e.action(t, ticket, ActDispatch, from, persist.StateRunning, ActorScheduler, "attempt "+strconv.Itoa(attempt), now)
	t.mu.Unlock()

	e.m.triggers.Inc()
	e.runsWG.Add(1)
	g := &persist.Group{
		Transitions: []persist.Transition{{ExpectVersion: expect, Runtime: nrt}},
		Runs:        []persist.Run{run},
		Actions:     []persist.Action{act},
		Done:        func(err error) { e.dispatchDurable(t, def, run, err) },
	}
	if err := e.writer.Submit(context.Background(), g); err != nil {
		// Only when the writer has stopped: the transition never reached the store, so the
		// store still says SCHEDULED and the fire happens after a restart.
		e.log.Warn("fire dropped: writer closed", "task", def.Name, "ticket", ticket, "error", err)
		e.runsWG.Done()
	}
}

// skipByBreaker consumes a fire without dispatching it while the task's breaker is open,
// and moves the task on to its next fire. Caller holds t.mu.
func (e *Engine) skipByBreaker(t *task, sched, now int64) {
	e.m.skipped.Inc()
	nrt := t.rt
	next, _ := e.nextFire(t, sched, now)
	nrt.NextTriggerTime = next
	detail := "fire of " + time.UnixMilli(sched).In(t.loc).Format(time.RFC3339) + " skipped: circuit breaker open (one fire in " +
		strconv.Itoa(e.cfg.Breaker.ProbeEvery) + " goes through)"
	act := e.action(t, "", ActSkippedByBreaker, t.rt.State, t.rt.State, ActorScheduler, detail, now)
	e.commitLocked(t, nrt, nil, []persist.Action{act})
}

// recordHealth feeds a result to the task's breaker and raises its alerts. Caller must not
// hold t.mu.
func (e *Engine) recordHealth(id int64, name, group, result string) {
	if e.cfg.Breaker.Disabled {
		return
	}
	var ok bool
	switch result {
	case persist.ResultSuccess:
		ok = true
	case persist.ResultFailed, persist.ResultTimeout:
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

// downstreamOf names the downstream a run goes to, for run records and rate limits.
func downstreamOf(def *persist.TaskDef) string {
	if def.Callback.Type == persist.CallbackExecutor {
		return def.Callback.App
	}
	if u, err := url.Parse(def.Callback.URL); err == nil {
		return u.Host
	}
	return ""
}

// dispatchDurable runs on the writer goroutine when the RUNNING transition is durable (or
// failed). It must not block.
func (e *Engine) dispatchDurable(t *task, def *persist.TaskDef, run persist.Run, err error) {
	if err != nil {
		t.mu.Lock()
		t.pending--
		if t.run != nil && t.run.run.Ticket == run.Ticket {
			t.run = nil
		}
		e.writeFailed(t, err)
		e.settle(t)
		t.mu.Unlock()
		e.m.dispatches.result("conflict").Inc()
		e.runsWG.Done()
		return
	}
	t.mu.Lock()
	t.pending--
	t.mu.Unlock()
	e.send(t, def, run, def.Params)
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
	case errors.Is(err, persist.ErrLeaseLost):
		e.log.Error("lease lost: this scheduler no longer owns the store", "task", t.def.Name)
		t.stale = true
	default:
		e.log.Error("write failed", "task", t.def.Name, "error", err)
		t.stale = true
	}
}

// runBody is the JSON a run carries to its callback (SPEC R4.2, section 10).
type runBody struct {
	Task        string          `json:"task"`
	Handler     string          `json:"handler,omitempty"`
	Group       string          `json:"group"`
	Ticket      string          `json:"ticket"`
	Attempt     int             `json:"attempt"`
	Kind        string          `json:"kind"`
	ScheduledAt int64           `json:"scheduled_at"`
	Deadline    int64           `json:"deadline"`
	Params      json.RawMessage `json:"params,omitempty"`
	// DedupTTLMS tells an executor how long to remember the ticket: the task's longest retry
	// span plus five minutes (R5.4), so a re-sent run is recognised for as long as it can come.
	DedupTTLMS int64 `json:"dedup_ttl_ms,omitempty"`
}

// dedupTTL is the longest span over which runs of one fire can arrive, plus five minutes.
func (e *Engine) dedupTTL(def *persist.TaskDef) time.Duration {
	timeout := time.Duration(def.TimeoutSec) * time.Second
	span := timeout
	for k := 1; k <= def.RetryCount; k++ {
		span += retryDelay(time.Duration(def.RetryIntervalSec)*time.Second, k, e.cfg.RetryBackoffCap) + timeout
	}
	const most = 30 * 24 * time.Hour
	if span > most-5*time.Minute {
		return most
	}
	return span + 5*time.Minute
}

// send delivers a durable run to its callback.
func (e *Engine) send(t *task, def *persist.TaskDef, run persist.Run, params json.RawMessage) {
	// The deadline counts from the send, not from the decision: a slow commit must not eat
	// the run's time, let alone time it out before it is sent.
	deadline := time.Now().Add(time.Duration(def.TimeoutSec) * time.Second)
	body, _ := json.Marshal(runBody{
		Task: def.Name, Handler: def.Callback.Handler, Group: def.Group, Ticket: run.Ticket, Attempt: run.Attempt,
		Kind: run.Kind, ScheduledAt: run.ScheduledAt, Deadline: deadline.UnixMilli(), Params: params,
		DedupTTLMS: e.dedupTTL(def).Milliseconds(),
	})
	switch def.Callback.Type {
	case persist.CallbackHTTP:
		req := &dispatch.Request{
			URL: def.Callback.URL, Task: def.Name, Ticket: run.Ticket, Attempt: run.Attempt,
			Body: body, Deadline: deadline,
		}
		err := e.disp.Send(req, func(o dispatch.Outcome) { e.resolve(t, run, httpOutcome(o, run.Executor)) })
		if err != nil {
			e.resolve(t, run, outcome{result: persist.ResultFailed, errText: "not sent: " + err.Error()})
		}
	case persist.CallbackExecutor:
		err := e.disp.Go(func() { e.sendToExecutor(t, def, run, body, deadline) })
		if err != nil {
			e.resolve(t, run, outcome{result: persist.ResultFailed, errText: "not sent: " + err.Error()})
		}
	default:
		e.resolve(t, run, outcome{result: persist.ResultFailed, errText: "unknown callback type " + def.Callback.Type})
	}
}

func httpOutcome(o dispatch.Outcome, host string) outcome {
	oc := outcome{duration: o.Duration, executor: host, output: string(o.Body)}
	switch {
	case o.OK():
		oc.result = persist.ResultSuccess
	case errors.Is(o.Err, dispatch.ErrTimeout):
		oc.result = persist.ResultTimeout
		oc.errText = "no response within timeout_sec"
	case o.Err != nil:
		oc.result = persist.ResultFailed
		oc.errText = o.Err.Error()
	default:
		oc.result = persist.ResultFailed
		oc.errText = "HTTP " + strconv.Itoa(o.Status)
	}
	return oc
}

// resolve routes an outcome to the periodic state machine or to a run-now instance.
func (e *Engine) resolve(t *task, run persist.Run, oc outcome) {
	if run.Kind == persist.RunManual {
		e.completeManual(t, run, oc)
		return
	}
	e.complete(t, run.Ticket, oc)
}

// complete records how the periodic run with ticket ended and moves the task on: to the next
// cycle, to a retry, or to its resting state.
func (e *Engine) complete(t *task, ticket string, oc outcome) {
	t.mu.Lock()
	if t.run == nil || t.run.run.Ticket != ticket || t.rt.State != persist.StateRunning {
		// Already resolved another way (killed, timed out, lost): the late result changes
		// nothing; it is in the log for the operator.
		t.mu.Unlock()
		e.log.Info("late result ignored", "task", t.def.Name, "ticket", ticket, "result", oc.result)
		e.m.results.result("stale").Inc()
		return
	}
	now := e.nowMS()
	run := t.run.run
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
	t.run = nil
	e.m.results.result(oc.result).Inc()

	nrt := t.rt
	nrt.LastEndTime = now
	nrt.LastExecutor = run.Executor
	nrt.CurrentTicket = ""
	nrt.NextTriggerTime = 0 // the due of the run that ended (fire); the next cycle sets its own
	var acts []persist.Action
	finalFailure := false // the last attempt failed: alert (a lost run is not the task's fault)
	detail := oc.result
	if oc.errText != "" {
		detail += ": " + oc.errText
	}
	switch {
	case oc.result == persist.ResultSuccess:
		nrt.State = persist.StateSuccess
		nrt.SuccessCount++
		nrt.Attempt = 0
		acts = append(acts, e.action(t, ticket, ActResult, persist.StateRunning, persist.StateSuccess, ActorScheduler, detail, now))
		e.nextCycle(t, &nrt, run.ScheduledAt, now, &acts)
	case oc.result != persist.ResultLost && run.Attempt <= t.def.RetryCount && !t.def.Paused:
		// (A pause stops retries too: they are future triggers.)
		if oc.result == persist.ResultTimeout {
			e.m.timeouts.Inc()
		}
		delay := retryDelay(time.Duration(t.def.RetryIntervalSec)*time.Second, run.Attempt, e.cfg.RetryBackoffCap)
		nrt.State = persist.StateRetrying
		nrt.Attempt = run.Attempt + 1
		nrt.NextTriggerTime = now + delay.Milliseconds()
		acts = append(acts, e.action(t, ticket, ActRetry, persist.StateRunning, persist.StateRetrying, ActorScheduler,
			fmt.Sprintf("%s; attempt %d in %s", detail, nrt.Attempt, delay), now))
		e.m.retries.Inc()
	default:
		if oc.result == persist.ResultTimeout {
			e.m.timeouts.Inc()
		}
		nrt.State = persist.StateFailed
		nrt.FailureCount++
		nrt.Attempt = 0
		name := ActResult
		if oc.result == persist.ResultLost {
			name = ActLost
		} else {
			finalFailure = true
		}
		acts = append(acts, e.action(t, ticket, name, persist.StateRunning, persist.StateFailed, ActorScheduler, detail, now))
		e.nextCycle(t, &nrt, run.ScheduledAt, now, &acts)
	}
	name, group, id := t.def.Name, t.def.Group, t.id
	var then func()
	if oc.result == persist.ResultSuccess && e.upstreams.has(name) {
		then = func() { e.upstreamDone(name) }
	}
	e.commitLockedThen(t, nrt, []persist.Run{run}, acts, then)
	t.mu.Unlock()
	e.recordHealth(id, name, group, oc.result)
	if finalFailure {
		e.alertFor(context.Background(), AlertFinalFailure, id, name, group,
			fmt.Sprintf("%s failed after %d attempt(s): %s", name, run.Attempt, detail))
	}
	e.runsWG.Done()
}

// nextCycle moves a task that just finished a run (SUCCESS or FAILED in nrt) to where it
// waits next: SCHEDULED with the next cron fire, PAUSED when a pause was requested during the
// run, WAITING for dependency tasks; one-shot tasks rest where they are. Caller holds t.mu.
func (e *Engine) nextCycle(t *task, nrt *persist.Runtime, lastSched, now int64, acts *[]persist.Action) {
	from := nrt.State
	to := from
	detail := ""
	switch {
	case t.def.Paused:
		to = persist.StatePaused
		nrt.NextTriggerTime = t.nextCron(now)
		detail = "pause requested during the run takes effect"
	case t.def.Trigger == persist.TriggerCron:
		next, d := e.nextFire(t, lastSched, now)
		if next == 0 {
			detail = "the cron expression fires no more"
			break
		}
		to = persist.StateScheduled
		nrt.NextTriggerTime = next
		detail = "next fire " + time.UnixMilli(next).In(t.loc).Format(time.RFC3339) + d
	case t.def.Trigger == persist.TriggerDependency:
		to = persist.StateWaiting
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
	if to == persist.StatePaused {
		name = ActPause
	}
	*acts = append(*acts, e.action(t, "", name, from, to, ActorScheduler, detail, now))
}

// nextFire returns the cron fire that follows lastSched given the time now, and a note for
// the action record. Fires missed while the run overran (or while no scheduler ran) are
// coalesced: at most one of them fires. A fire later than MisfireThreshold follows the
// task's misfire policy (R3.5): fire_once fires the latest missed one now, skip goes on to
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
	if t.def.MisfirePolicy == persist.MisfireSkip {
		return t.nextCron(now), fmt.Sprintf(" (misfire: %d fire(s) skipped)", missed+1)
	}
	return n, fmt.Sprintf(" (misfire: fire_once, %d fire(s) coalesced into one)", missed+1)
}

// misfire applies the misfire policy to a SCHEDULED task loaded with a fire time more than
// MisfireThreshold in the past (R3.5). One-shot (delay) tasks always fire once: skipping their
// only fire would lose the task. Caller holds t.mu.
func (e *Engine) misfire(t *task, now int64) {
	due := t.rt.NextTriggerTime
	nrt := t.rt
	var detail string
	switch t.def.Trigger {
	case persist.TriggerCron:
		// nextFire counts from the fire before `due`; emulate that by asking for fires after
		// due-1ms, which yields due itself first.
		next, d := e.nextFire(t, due-1, now)
		if next == 0 {
			return
		}
		nrt.NextTriggerTime = next
		detail = "due " + time.UnixMilli(due).In(t.loc).Format(time.RFC3339) + d
	default:
		e.m.misfires.Inc()
		detail = "due " + time.UnixMilli(due).In(t.loc).Format(time.RFC3339) + " (misfire: one-shot task fires now)"
	}
	act := e.action(t, "", ActMisfire, t.rt.State, nrt.State, ActorScheduler, detail, now)
	e.commitLocked(t, nrt, nil, []persist.Action{act})
}

// retryDelay is the backoff of R4.4: the interval for retries 1 and 2, then doubling from the
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

// commitLocked makes nrt the task's runtime and submits it with runs and actions to the
// writer without waiting. Caller holds t.mu.
func (e *Engine) commitLocked(t *task, nrt persist.Runtime, runs []persist.Run, acts []persist.Action) {
	e.commitLockedThen(t, nrt, runs, acts, nil)
}

// commitLockedThen is commitLocked that also runs then, on its own goroutine, once the write
// is durable.
func (e *Engine) commitLockedThen(t *task, nrt persist.Runtime, runs []persist.Run, acts []persist.Action, then func()) {
	expect := t.rt.Version
	nrt.Version = expect + 1
	t.rt = nrt
	t.pending++
	e.settle(t)
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
		},
	}
	// Submit may block on a full writer queue: that is the writer's backpressure. It never
	// waits on this task's lock, so holding it here cannot deadlock.
	if err := e.writer.Submit(context.Background(), g); err != nil {
		t.pending--
		e.log.Warn("write dropped: writer closed", "task", t.def.Name, "error", err)
	}
}

// writeDone runs on the writer goroutine when a write of t completed.
func (e *Engine) writeDone(t *task, err error) {
	t.mu.Lock()
	t.pending--
	if err != nil {
		e.writeFailed(t, err)
	}
	reload := e.settleStale(t)
	e.settle(t)
	t.mu.Unlock()
	if reload {
		go e.reload(t.id)
	}
}

// settleStale evicts a stale task once nothing is pending for it; it reports whether the
// caller should reload it. Caller holds t.mu.
func (e *Engine) settleStale(t *task) bool {
	if !t.stale || t.pending > 0 || t.run != nil || t.evicted {
		return false
	}
	e.disarm(t)
	t.evicted = true
	e.tasks.remove(t)
	return !t.deleted
}

// reload reads a task back from the store after a conflict and arms it from there.
func (e *Engine) reload(id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pt, err := e.store.GetTaskByID(ctx, id)
	if err != nil {
		if !errors.Is(err, persist.ErrTaskNotFound) {
			e.log.Error("cannot reload task", "id", id, "error", err)
		}
		return
	}
	t, err := newTask(pt)
	if err != nil {
		e.log.Error("cannot reload task", "id", id, "error", err)
		return
	}
	e.adopt(t, e.nowMS())
}

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
