package engine

// The path of one fire, and the goroutine each step runs on.
//
// A fire crosses several goroutines. Each hand-off is a queue or a callback, and each step
// must respect what its goroutine may and may not do:
//
//	step                                   goroutine               may block?
//	wheel driver moves due entries          wheel driver (wheel/)   no: it is the clock tick
//	  to a partition's ready queue
//	consume → admit → fire                  consumer per partition  on the writer's backpressure
//	  (the rate gate may buffer the entry;  gateLoop or concLoop    (Submit, in unlock) and on
//	  gateLoop fires it when a token comes;                         the send pace (core_pace.go),
//	  fire asks the concurrency gate, where                         which is fine: it slows
//	  a fire without a slot waits; concLoop                         firing, and it holds no lock
//	  brings it back when a run of its                              meanwhile
//	  limit ends, core_concgate.go; a fire  or the pace's runner
//	  whose downstream holds its share of   (a fire parked in the
//	  the send pace is parked there and     send pace, runParked)
//	  fired with the permit it gives back)
//	fire: RUNNING in memory, run added to   consumer                holds t.mu only to decide;
//	  e.runs, group put in t's outbox and                           submits after unlocking
//	  submitted after unlock
//	  (core_submit.go)
//	writer commits, calls Group.Done        writer lane (persist/)  never: Done only appends to
//	                                                                a completion queue
//	dispatchDurable → send (Send and Go     completion goroutine    briefly on t.mu; never on
//	  only enqueue; a refused send is       (core_submit.go)        the writer (a send the
//	  ended on its own goroutine)                                   dispatcher refuses goes to
//	                                                                its own goroutine, notSent)
//	Post to the callback or the executor;   dispatch worker (ants)  on the network, bounded by
//	  the outcome → endRun → complete                               the run's deadline; on
//	  → commit → unlock                                             Submit, without t.mu
//	executor report, kill, run-now          API handler             on the writer (commit, wait),
//	                                                                without t.mu
//	executor timeout                        clock timer (AfterFunc) on Submit only
//	lost executor                           reaper (executors.go)   on Submit only
//	then (upstream released), reload        their own goroutines    on store reads
//	  after a conflict
//
// Why: the writer must stay free to complete groups, since every other step waits on it
// sooner or later, so it runs no engine code and no engine lock is held across a submit: a
// full queue then waits for nothing but the database (design.md, "Write path", Goroutines
// and locks). Settling a run goes through e.runs (core_inflight.go) on whichever goroutine ends
// it, which makes the end happen once whatever the goroutine. The steps after send are in
// core_complete.go, the writer plumbing in core_commit.go and core_submit.go.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/wheel"
)

// Actors recorded in action records.
const (
	ActorScheduler = "scheduler"
)

// Action names recorded in action records (design.md, "State machine").
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

func (e *Engine) action(t *task, ticket, name string, from, to model.State, actor, detail string, at int64) model.Action {
	return model.Action{
		TaskID: t.id, TaskName: t.def.Name, Ticket: ticket, Action: name,
		From: from, To: to, Actor: actor, At: at, Detail: detail,
	}
}

// consume drains one wheel partition's ready queue: highest priority first, then earliest fire time.
func (e *Engine) consume(ctx context.Context, q *wheel.ReadyQueue[*task]) {
	defer e.loopsWG.Done()
	for {
		for ent := q.Pop(); ent != nil; ent = q.Pop() {
			if ent.Value == nil { // a cold entry (armCold)
				e.loader.promo.push(int64(ent.Key))
				continue
			}
			e.gates.admit(ent)
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
// adm is what the gates gave the entry: on its first pass no concurrency slot, which fire
// asks the concurrency gate for (core_concgate.go); a fire without room waits there, and
// concLoop brings it back with its slot. A slot that fire does not hand on to a run is given
// back.
//
// pm is its room in the pace of records to sends (core_pace.go), taken before t.mu (the
// gates' fire, set at New, waits for it or parks the entry with its downstream): given back
// here unless a run took it (pm emptied).
func (e *Engine) fire(ent *wheel.Entry[*task], adm admission, pm *permit) {
	defer func() { e.conc.release(adm.slot) }() // the run took it, if it left (adm.slot emptied)
	defer func() { pm.release() }()
	t := ent.Value
	t.mu.Lock()
	if !t.evicted {
		if err := e.own.shardGate(t.shard, t.sepoch, true); err != nil {
			if errors.Is(err, model.ErrLeaseDeadline) && t.ent == ent {
				// The shard is still held but its renewal is overdue (a slow database): the
				// fire waits for the renewal, armed again for the same nominal time, and
				// goes once the gate opens, or leaves with the task if the shard is dropped.
				e.loader.armAt(t, t.entDue, e.nowMS()+gateRetry.Milliseconds())
				t.mu.Unlock()
				return
			}
			// Its shard is being handed over, or is no longer this node's at the copy's
			// epoch: nothing fires (core_shards.go). A copy of an older epoch leaves memory.
			if t.ent == ent {
				t.ent = nil
			}
			if !e.own.current(t) {
				e.loader.evict(t)
			}
			t.mu.Unlock()
			return
		}
	}
	if t.ent != ent && t.ent != nil {
		// The task was armed again with another entry: this one firing too would fire the
		// task twice.
		e.m.dupFires.Inc()
	}
	if t.ent == ent && t.rt.State == model.StateRunning && !t.evicted && !t.deleted && !t.stale && e.running.Load() {
		// cancel_other: the next fire came due while the run is in flight (place armed it).
		t.ent = nil
		ticket, due := t.periodic, t.entDue
		t.mu.Unlock()
		if ticket != "" {
			// Not on the consumer: the kill waits for its write to be durable.
			go e.cancelOther(t.id, ticket, due)
		}
		return
	}
	if t.ent != ent || t.evicted || t.deleted || t.stale || !armable(t.rt.State) || !e.running.Load() {
		// A stale entry: the task was re-armed, disarmed, deleted or is being reloaded after
		// the entry reached the ready queue. When stopping, the fire stays durable in the
		// store and happens after the restart.
		t.mu.Unlock()
		return
	}
	t.ent = nil
	// sched is the fire's nominal time, which its ticket, run row and next cycle name;
	// ent.When is when it was meant to leave, later by its jitter (core_jitter.go).
	sched, jitter := t.entDue, ent.When-t.entDue
	now := e.nowMS()
	// A fire that waited for a slot was let through by the breaker on its first pass.
	if !adm.slot.held && t.rt.State == model.StateScheduled && t.def.Trigger == model.TriggerCron && !e.cfg.Breaker.Disabled {
		ok, closed := e.brk.allow(e.cfg.Breaker, t.id, now)
		if closed {
			name, group := t.def.Name, t.def.Group
			defer e.alerts.raiseFor(context.Background(), AlertBreakerClose, t.id, name, group,
				"circuit breaker of "+name+" closed: the failure rate fell back; full trigger rate restored")
		}
		if !ok {
			e.skipByBreaker(t, sched, now)
			e.unlock(t)
			return
		}
	}
	if !e.gates.offerFire(t, ent, sched, &adm) { // core_clusterslots.go
		// Its group or key is at its limit (on a sharded engine: is limited, and its slot is
		// claimed in the store): the entry waits in the gate, still the task's armed entry
		// (t.ent), and fires when a run of it ends.
		t.ent = ent
		t.mu.Unlock()
		e.m.concWaits.Inc()
		return
	}
	e.m.lateness.Update(float64(now-ent.When) / 1000)
	from := t.rt.State
	if t.allowsAll() {
		// allow_all: the fire runs beside the task's runs in flight (core_parallel.go).
		slot := adm.slot
		adm.slot = concSlot{} // the run holds it now
		e.fireParallel(t, sched, now, slot, t.fireDetail(from, jitter, adm.waited))
		return
	}
	d := decideFire(fireInput{ID: t.id, Def: t.def, RT: t.rt, Sched: sched, Now: now,
		Detail: t.fireDetail(from, jitter, adm.waited)})
	if d.Refused != nil {
		t.mu.Unlock()
		e.log.Error("refusing fire", "task", t.def.Name, "error", d.Refused)
		return
	}
	nrt, run, ticket := d.RT, d.Run, d.Run.Ticket
	t.rt = nrt
	t.pending++
	t.periodic = ticket
	t.flying++
	e.runs.add(t, run, adm.slot)
	adm.slot = concSlot{} // the run holds it now; runsInFlight.take releases it
	def := t.def
	paced := pm
	pm = nil // the run holds it now, until its request is handed to the wire
	// The fire record (docs/ha.md): refused if this fire was dispatched. Done sends the run
	// the record holds (the writer only reads it), so that the run is not copied to the heap
	// once more for the closure.
	g := &persist.Group{Fires: []model.Run{run}}
	g.Done = func(err error) { e.dispatchPaced(t, def, g.Fires[0], def.Params, err, paced) }
	// Submitted by e.unlock, after the task's earlier groups (the end of its last run).
	e.commitGroupLocked(t, g, func(error) {
		// Only when the writer has stopped: the fire record never reached the store, so the
		// store still says SCHEDULED and the fire happens after a restart.
		paced.release()
		e.runs.take(ticket, nil, nil)
	})
	e.m.triggers.Inc()
	e.loader.place(t) // cancel_other arms the next fire while this run is in flight
	e.unlock(t)
}

// fireDetail is the run row's detail of a fire made from state from: the upstream runs that
// released a dependency fire (taken), the fire's jitter, and its wait for a concurrency
// slot. Caller holds t.mu.
func (t *task) fireDetail(from model.State, jitter int64, waited string) string {
	detail := ""
	if t.releasedBy != "" {
		detail, t.releasedBy = t.releasedBy, ""
	}
	if jitter > 0 || (from == model.StateScheduled && t.def.JitterSec > 0 && t.def.Trigger == model.TriggerCron) {
		detail = jitterDetail(jitter) // "jitter 0 ms" too: the task is jittered
	}
	if waited != "" {
		if detail != "" {
			detail += "; "
		}
		detail += waited
	}
	if n := t.keyNote(); n != "" {
		detail = joinWait(detail, n)
	}
	return detail
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
	e.commit(context.Background(), t, nrt, commitOpts{acts: []model.Action{act}})
}

// downstreamOf names the downstream a run goes to, for run records and rate limits.
func downstreamOf(def *model.TaskDef) string {
	if def.Callback.Type == model.CallbackExecutor {
		return def.Callback.App
	}
	if h, ok := plainHost(def.Callback.URL); ok {
		return h
	}
	if u, err := url.Parse(def.Callback.URL); err == nil {
		return u.Host
	}
	return ""
}

// plainHost is url.Parse(raw).Host without parsing, for the URLs callbacks have: http or
// https, a host of letters, digits, dots and dashes with an optional numeric port, and
// nothing after it that url.Parse could refuse (a percent escape or a control byte). It
// reports false for anything else, which the caller parses. Every fire names its downstream
// (the run row, the rate limit), and url.Parse allocated a URL for it each time.
func plainHost(raw string) (string, bool) {
	rest, ok := strings.CutPrefix(raw, "http://")
	if !ok {
		if rest, ok = strings.CutPrefix(raw, "https://"); !ok {
			return "", false
		}
	}
	end, port := len(rest), -1
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c == '/' || c == '?' || c == '#' {
			end = i
			break
		}
		switch {
		case c == ':' && port < 0:
			port = i
		case c >= '0' && c <= '9':
		case port < 0 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '-'):
		default:
			return "", false
		}
	}
	if end == 0 || port == 0 || port == end-1 {
		return "", false
	}
	for i := end; i < len(rest); i++ {
		if c := rest[i]; c == '%' || c < ' ' || c == 0x7f {
			return "", false
		}
	}
	return rest[:end], true
}

// dispatchDurable runs on a completion goroutine (core_submit.go) when the fire record is durable
// (or failed), and sends run with params. It must not block: it delays the completions of
// the tasks sharing its lane.
func (e *Engine) dispatchDurable(t *task, def *model.TaskDef, run model.Run, params json.RawMessage, err error) {
	e.dispatchPaced(t, def, run, params, err, nil)
}

// dispatchPaced is dispatchDurable for a fire that holds pm, its place in the pace of
// records to sends (core_pace.go): released as the request is handed to the wire, or here
// when it is not sent.
func (e *Engine) dispatchPaced(t *task, def *model.TaskDef, run model.Run, params json.RawMessage, err error, pm *permit) {
	if err != nil {
		pm.release()
		duplicate := errors.Is(err, persist.ErrDuplicateFire)
		failed := func() { // caller holds t.mu
			if duplicate {
				t.stale = true // another node dispatched this fire: its runtime is newer
			} else {
				e.writeFailed(t, err)
			}
			e.loader.place(t)
		}
		taken := e.runs.take(run.Ticket, nil, func(*flight) {
			t.mu.Lock()
			t.pending--
			t.runLeft(run.Ticket)
			failed()
			t.mu.Unlock()
		})
		if !taken { // killed while its transition was in flight: Kill recorded the end
			t.mu.Lock()
			t.pending--
			failed()
			t.mu.Unlock()
		}
		if duplicate {
			e.fireRefused(t, def, run)
		} else {
			e.m.dispatches.result("conflict").Inc()
		}
		return
	}
	t.mu.Lock()
	t.pending--
	t.mu.Unlock()
	e.sendPaced(t, def, run, params, pm)
}

// runBody is the JSON a run carries to its callback (docs/protocol.md).
type runBody = protocol.Run

// dedupTTL is the longest span over which runs of one fire can arrive, plus five minutes.
func (e *base) dedupTTL(def *model.TaskDef) time.Duration {
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
func (e *Engine) send(t *task, def *model.TaskDef, run model.Run, params json.RawMessage) {
	e.sendPaced(t, def, run, params, nil)
}

// sendPaced is send for a run that holds pm, its place in the pace of records to sends
// (core_pace.go): released when its request is handed to the wire (the send gate is asked),
// when its executor call begins, or when it is not sent at all.
func (e *Engine) sendPaced(t *task, def *model.TaskDef, run model.Run, params json.RawMessage, pm *permit) {
	gate, dropped := e.own.sendGate(t, run)
	if dropped {
		pm.release() // its shard dropped from this node: marked for the next owner instead
		return
	}
	// The deadline counts from the send, not from the decision: a slow commit must not eat
	// the run's time, let alone time it out before it is sent.
	sentAt := e.now()
	deadline := sentAt.Add(time.Duration(def.TimeoutSec) * time.Second)
	e.m.sent.Inc()
	epoch, shard := e.own.runEpoch(t)
	if run.ScheduledAt > 0 && run.Kind != model.RunBackfill {
		// Late against when the fire was meant to leave: its nominal time plus its jitter.
		// A backfill's runs are of past fire times by design: their lag says nothing.
		e.m.dispatchLag.Update(max(0, float64(sentAt.UnixMilli()-run.ScheduledAt-runJitter(def, run))/1000))
	}
	body, _ := json.Marshal(runBody{
		Task: def.Name, Handler: def.Callback.Handler, Group: def.Group, Ticket: run.Ticket, Attempt: run.Attempt,
		Kind: run.Kind, ScheduledAt: run.ScheduledAt, Deadline: deadline.UnixMilli(), Params: params,
		DedupTTLMS: e.dedupTTL(def).Milliseconds(), Epoch: epoch, Shard: shard,
		Parallel: def.OverlapPolicy == model.OverlapAllowAll,
	})
	switch def.Callback.Type {
	case model.CallbackHTTP:
		// A call whose connection failed after it was sent is in doubt, as a run left by a
		// failover is: the task's on_lost says whether it goes out once more.
		req := &dispatch.Request{
			URL: def.Callback.URL, Task: def.Name, Ticket: run.Ticket, Attempt: run.Attempt,
			Body: body, Deadline: deadline, ResendInDoubt: def.OnLost == persist.OnLostResend,
			Epoch: epoch, Gate: onWire(pm, gate),
		}
		if IsStepTask(def.Name) {
			req.KeepBody = StepOutputMax // a step's output is its response body (steps.go)
		}
		err := e.disp.Send(req, func(o dispatch.Outcome) {
			// o.Err first: the retry closure is built (and allocated) only for a run held
			// back, which keeps its permit until it is sent or let go.
			if o.Err != nil && e.own.holdUnsent(t, run, o.Err, pm, func(pm *permit) { e.sendPaced(t, def, run, params, pm) }) {
				return
			}
			pm.release() // a request refused before its gate admitted it
			e.endRun(t, run, httpOutcome(o, run.Executor))
		})
		if err != nil {
			pm.release()
			e.notSent(t, run, "not sent: "+err.Error())
		}
	case model.CallbackExecutor:
		err := e.disp.Go(func() {
			e.sendToExecutor(t, def, run, body, deadline, pm, func(pm *permit) { e.sendPaced(t, def, run, params, pm) })
		})
		if err != nil {
			pm.release()
			e.notSent(t, run, "not sent: "+err.Error())
		}
	default:
		pm.release()
		e.notSent(t, run, "unknown callback type "+def.Callback.Type)
	}
}

// notSent records a run the dispatcher refused as failed. It does so on its own goroutine:
// send runs on the completion goroutine that reported the run durable (dispatchDurable), and
// the failure's own write may wait for room in the writer's queue, which would hold up the
// other completions of that lane. The run stays in e.runs until then, so Stop drains it.
func (e *Engine) notSent(t *task, run model.Run, why string) {
	go e.endRun(t, run, outcome{result: model.ResultFailed, errText: why})
}
