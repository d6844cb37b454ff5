package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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

// consume drains one shard's ready queue: highest priority first, then earliest fire time.
func (e *Engine) consume(ctx context.Context, q *wheel.ReadyQueue[*task]) {
	defer e.loopsWG.Done()
	for {
		for ent := q.Pop(); ent != nil; ent = q.Pop() {
			if ent.Value == nil { // a cold entry (armCold)
				e.promo.push(int64(ent.Key))
				continue
			}
			e.admit(ent)
		}
		select {
		case <-ctx.Done():
			return
		case <-q.Signal():
		}
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
