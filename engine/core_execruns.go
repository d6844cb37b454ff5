package engine

// Runs on executors: the offer of a durable run to an executor of its app, its timeout, the
// executor's reports of its end, and kills. The registry they rely on (registration,
// heartbeats, lost executors) is in executors.go.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
)

// sendToExecutor offers a durable run to the executors of its app, in the order its route
// prefers, until one accepts. It runs on a dispatch worker, which it leaves as soon as the
// first offer is queued: no goroutine waits for the offer (dispatch.OfferFunc), whose
// answer arms the run's timeout on the sender that got it, and only a refusal goes on on a
// worker, to the next executor. again sends the run anew (with a fresh deadline) once a
// gate that held it back because of an overdue lease renewal opens (holdUnsent). pm, the
// run's place in the pace of records to sends (core_pace.go), is given back when a gate
// lets an offer leave, or when the run ends unsent; a run held back keeps it.
func (e *Engine) sendToExecutor(t *task, def *model.TaskDef, run model.Run, body []byte, deadline time.Time, pm *permit, again func(*permit)) {
	cands := e.registry.Candidates(def.Callback.App, def.Callback.Handler, def.Callback.Route, def.Name)
	if len(cands) == 0 {
		pm.release()
		e.endRun(t, run, outcome{result: model.ResultFailed,
			errText: "no alive executor of app " + def.Callback.App + " serves handler " + def.Callback.Handler})
		return
	}
	(&execOffer{e: e, t: t, def: def, run: run, body: body, deadline: deadline, pm: pm, again: again, cands: cands}).offer()
}

// execOffer is a run being offered to its candidate executors, cands[next] the one to ask
// next, refusals what those asked before answered.
type execOffer struct {
	e        *Engine
	t        *task
	def      *model.TaskDef
	run      model.Run
	body     []byte
	deadline time.Time
	pm       *permit
	again    func(*permit)
	cands    []*dispatch.Executor
	next     int
	refusals []string
}

// offer offers the run to its next candidate; with none left it ends the run failed.
func (r *execOffer) offer() {
	e := r.e
	if r.next >= len(r.cands) {
		r.pm.release()
		e.endRun(r.t, r.run, outcome{result: model.ResultFailed,
			errText: "no executor accepted the run (" + strings.Join(r.refusals, "; ") + ")"})
		return
	}
	x := r.cands[r.next]
	r.next++
	offerBy := e.now().Add(offerTimeout)
	if r.deadline.Before(offerBy) {
		offerBy = r.deadline
	}
	// Assign the run before offering it: the executor may call back before the answer.
	if !e.runs.assign(r.run.Ticket, x) {
		r.pm.release()
		return // killed meanwhile
	}
	epoch, _ := e.own.runEpoch(r.t)
	gate, dropped := e.own.sendGate(r.t, r.run)
	if dropped {
		r.pm.release()
		return
	}
	req := &dispatch.Request{
		Task: r.def.Name, Ticket: r.run.Ticket, Attempt: r.run.Attempt,
		Body: r.body, Deadline: offerBy, Token: e.cfg.ExecutorToken,
		Epoch: epoch, Gate: onWire(r.pm, gate),
	}
	registered, signedFor := x.Registered(), x.Incarnation()
	e.disp.OfferFunc(x, req, func(o dispatch.Outcome) {
		if accepted(o) {
			e.armExecTimeout(r.run.Ticket, r.deadline, x.Address)
			return
		}
		// Not on the sender, which answers the rest of its batch: the refusal may wait for
		// the executor to register again (offerAgainToIncarnation) or for the writer.
		refused := func() {
			o := offerAgainToIncarnation(x, offerBy, registered, signedFor, o, func() dispatch.Outcome { return e.disp.Offer(x, req) })
			if accepted(o) {
				e.armExecTimeout(r.run.Ticket, r.deadline, x.Address)
				return
			}
			if r.refusedBy(x, o) {
				r.offer()
			}
		}
		if err := e.disp.Go(refused); err != nil {
			refused() // the pool has stopped
		}
	})
}

// accepted reports whether an executor took the run offered.
func accepted(o dispatch.Outcome) bool { return o.Err == nil && (o.Status == 202 || o.Status == 200) }

// refusedBy notes that x refused r's run (o) and reports whether the run goes on to the next
// candidate: not when it was resolved meanwhile or is held back by the gate.
func (r *execOffer) refusedBy(x *dispatch.Executor, o dispatch.Outcome) bool {
	e := r.e
	if !e.runs.unassign(r.run.Ticket, x) {
		// Resolved meanwhile (a result raced the refusal): nothing more to do.
		r.pm.release()
		return false
	}
	if r.again != nil && e.own.holdUnsent(r.t, r.run, o.Err, r.pm, r.again) {
		return false // the gate refused it before it left; the other executors would be refused alike
	}
	why := strconv.Itoa(o.Status)
	if o.Err != nil {
		why = o.Err.Error()
	} else if len(o.Body) > 0 {
		why += " " + strings.TrimSpace(string(o.Body))
	}
	if o.Status == 401 && !x.Signed() {
		why += "; it registered without signed calls: upgrade it, or give axe --executor-token set to its scheduler_token"
	}
	r.refusals = append(r.refusals, x.Address+": "+why)
	return true
}

// armExecTimeout sets the scheduler's timeout of a run an executor holds (at addr): the
// run's deadline plus timeoutGrace, so the executor's own deadline result (the second
// timeout layer) arrives first when the executor is alive.
func (e *Engine) armExecTimeout(ticket string, deadline time.Time, addr string) {
	e.runs.arm(ticket, deadline.Add(timeoutGrace), deadline, func(f *flight) {
		e.resolve(f.t, f.run, outcome{result: model.ResultTimeout, executor: addr,
			errText: "no result within timeout_sec"})
	})
}

// deadlineReported starts the error of a run an executor reported failed at its deadline,
// recorded timeout (deadlineEnded): a delivery of that report again is a duplicate.
const deadlineReported = "deadline passed (timeout_sec); the executor reported: "

// deadlineSkewMax bounds how far ahead of the scheduler's clock an executor's clock may run
// and a failure it reports just before the run's deadline still count as the deadline's
// (deadlineEnded). It is timeoutGrace, the time the scheduler waits past the deadline for
// the executor's own deadline result: the two layers meet with the same allowance either
// side of the deadline.
const deadlineSkewMax = timeoutGrace

// deadlineEnded reports whether a run dispatched at dispatchedAt (Unix ms) with deadline
// (zero: none known) that an executor reports failed, arriving at arrived and ended at
// executorEnd (Unix ms on the executor's
// clock, 0 when not given), ended because its deadline passed. The scheduler's clock judges,
// as it judges a timeout without a result: the failure arrived after the deadline less an
// allowance for clock skew (deadlineSkewMax, at most a tenth of the run's timeout, so a
// short run's genuine failures stay failures). An executor whose own clock says it ended at
// or after the deadline (it cancelled the handler at the deadline it was given) is believed
// too: its clock ahead of the scheduler's would otherwise make it report before the
// deadline every time. The error text is not read: "context deadline exceeded" can be a
// handler's own short timeout on a call it makes.
func deadlineEnded(deadline, arrived time.Time, dispatchedAt, executorEnd int64) bool {
	if deadline.IsZero() {
		return false
	}
	if executorEnd > 0 && executorEnd >= deadline.UnixMilli() {
		return true
	}
	skew := min(deadlineSkewMax, deadline.Sub(time.UnixMilli(dispatchedAt))/10)
	return !arrived.Before(deadline.Add(-skew))
}

// Report is the body of POST /api/v1/callback: an executor's result for a ticket.
type Report = protocol.Result

// maxOutput bounds the output tail kept in a run record.
const maxOutput = 8 << 10

// ReportResult records an executor's result (docs/protocol.md). It is idempotent by ticket: a repeated
// report of the recorded result returns duplicate=true and changes nothing; a report for a
// run that ended another way returns ErrStaleTicket; an unknown ticket ErrRunNotFound.
func (e *API) ReportResult(ctx context.Context, rep Report) (duplicate bool, err error) {
	return e.BeginReport(ctx, rep)(ctx)
}

// ReportWait waits for a result that BeginReport accepted to be recorded.
type ReportWait func(ctx context.Context) (duplicate bool, err error)

// BeginReport starts settling an executor's result and returns how to wait for it: a result
// for a run in flight here is acknowledged only once its end is durable, so many results of
// one batch call are begun together and share group commits. The wait returns an error when
// the end could not be recorded (the executor then re-sends it) or ctx ends first.
func (e *API) BeginReport(ctx context.Context, rep Report) ReportWait {
	if rep.Ticket == "" {
		return failedReport(fieldErr("ticket", "is required"))
	}
	if rep.Status != model.ResultSuccess && rep.Status != model.ResultFailed {
		return failedReport(fieldErr("status", "must be success or failed, got %q", rep.Status))
	}
	if err := e.checkReport(ctx, rep); err != nil {
		return failedReport(err)
	}
	recorded := make(chan error, 1)
	var note *endingEntry
	var sentElsewhere *dispatch.Executor
	// The result is noted as ending while the flight is taken, under the same lock, so a
	// duplicate delivery that finds the flight gone finds the note. The executor is compared
	// there too: the run may have moved to another executor since checkReport looked.
	taken := e.runs.take(rep.Ticket, func(f *flight) bool {
		if !waitingReport(f) {
			return false
		}
		if f.exec != nil && rep.Address != "" && rep.Address != f.exec.Address {
			sentElsewhere = f.exec
			return false
		}
		note = e.ending.add(rep.Ticket, rep.Status, e.now())
		return true
	}, func(r *flight) {
		keep := maxOutput
		if IsStepTask(r.run.TaskName) {
			keep = StepOutputMax // a step's output is what its executor reports (steps.go)
		}
		oc := outcome{result: rep.Status, errText: rep.Error, output: tail(rep.Output, keep), executor: r.run.Executor}
		switch {
		case r.exec != nil:
			// The executor the run was sent to, whatever the result says of itself.
			e.registry.Seen(r.exec, e.nowMS())
			oc.executor = r.exec.Address
		case rep.Address != "":
			oc.executor = rep.Address // a registered executor of the run's app (checkReport)
		}
		if rep.ExitCode != nil {
			oc.errText = strings.TrimSpace(fmt.Sprintf("%s (exit code %d)", rep.Error, *rep.ExitCode))
			if rep.Status == model.ResultSuccess {
				oc.errText = ""
			}
		}
		if rep.DurationMS > 0 {
			oc.duration = time.Duration(rep.DurationMS) * time.Millisecond
		}
		if rep.Status == model.ResultFailed && deadlineEnded(r.deadline, e.now(), r.run.DispatchedAt, rep.EndedAt) {
			// The executor honoured the run's deadline and said so first: a timeout, as
			// the scheduler's own timer would have recorded it a moment later.
			oc.result = model.ResultTimeout
			oc.errText = strings.TrimSpace(deadlineReported + oc.errText)
		}
		oc.durable = func(err error) {
			e.ending.settle(note, err) // a repeat delivery is answered as this record goes
			recorded <- err
		}
		e.resolve(r.t, r.run, oc)
	})
	if taken {
		return func(ctx context.Context) (bool, error) {
			select {
			case err := <-recorded:
				if err != nil {
					return false, fmt.Errorf("cannot record the result of %s: %w", rep.Ticket, err)
				}
				return false, nil
			case <-ctx.Done():
				return false, fmt.Errorf("cannot record the result of %s: %w", rep.Ticket, ctx.Err())
			}
		}
	}
	if sentElsewhere != nil {
		return failedReport(fmt.Errorf("%w: run %s was sent to executor %s, not %s", ErrForeignExecutor,
			rep.Ticket, sentElsewhere.Address, protocol.ClipText(rep.Address, protocol.MaxAddressBytes)))
	}
	if wait := e.ending.waiter(rep.Ticket, rep.Status); wait != nil {
		return wait // a repeat of a result being recorded: a duplicate once durable, not before
	}
	dup, err := e.reportUnheld(ctx, rep)
	return func(context.Context) (bool, error) { return dup, err }
}

// checkReport refuses a result whose claims about its run are not the run's:
//   - an executor app (rep.App) other than the one the run belongs to: the executor it was
//     offered to, or the task's callback app for a run adopted after a restart or no longer
//     in flight (ErrForeignApp). The API lets a token bound to apps report only as one of
//     them, so together no executor can end another app's run;
//   - a task (rep.Task) other than the run's (a *FieldError on "task");
//   - an executor address (rep.Address) other than the executor holding the run, or, for a
//     run no executor of this process holds, one no executor of the run's app registered
//     (ErrForeignExecutor): the address is what the run's record names as its executor.
//
// A field the result leaves empty is not checked (only an unbound token may leave the app
// empty). A run whose task is gone is refused as stale: nobody can tell whose it was.
func (e *Engine) checkReport(ctx context.Context, rep Report) error {
	if rep.App == "" && rep.Task == "" && rep.Address == "" {
		return nil
	}
	o := e.runs.ownerOf(rep.Ticket)
	var cb model.Callback
	switch {
	case o.t != nil:
		o.t.mu.Lock()
		cb = o.t.def.Callback
		o.t.mu.Unlock()
	case !o.held:
		run, err := e.store.GetRun(ctx, rep.Ticket)
		if err != nil {
			return nil // unknown ticket or store error: the report path answers it
		}
		pt, err := e.store.GetTaskByID(ctx, run.TaskID)
		if errors.Is(err, model.ErrTaskNotFound) {
			return fmt.Errorf("%w: run %s belongs to a deleted task", ErrStaleTicket, rep.Ticket)
		}
		if err != nil {
			return fmt.Errorf("cannot read the task of run %s: %w", rep.Ticket, err)
		}
		cb = pt.Def.Callback
		o.task = run.TaskName
		if cb.Type == model.CallbackExecutor && run.Executor != "" && e.registry.Get(cb.App, run.Executor) != nil {
			o.addr = run.Executor // the executor the run was sent to, lost ones included
		}
	}
	app := o.app
	if o.t != nil || !o.held {
		app = ""
		if cb.Type == model.CallbackExecutor {
			app = cb.App
		}
	}
	switch {
	case rep.App != "" && app != rep.App:
		return fmt.Errorf("%w: run %s is not a run of executor app %q", ErrForeignApp, rep.Ticket, rep.App)
	case rep.Task != "" && rep.Task != o.task:
		return fieldErr("task", "run %s is a run of task %q, not %q", rep.Ticket, o.task, protocol.ClipText(rep.Task, protocol.MaxNameBytes))
	case rep.Address == "":
	case o.addr != "":
		if rep.Address != o.addr {
			return fmt.Errorf("%w: run %s was sent to executor %s, not %s", ErrForeignExecutor, rep.Ticket, o.addr,
				protocol.ClipText(rep.Address, protocol.MaxAddressBytes))
		}
	case app == "" || e.registry.Get(app, rep.Address) == nil:
		return fmt.Errorf("%w: no executor of app %q registered at %s", ErrForeignExecutor, app,
			protocol.ClipText(rep.Address, protocol.MaxAddressBytes))
	}
	return nil
}

func failedReport(err error) ReportWait {
	return func(context.Context) (bool, error) { return false, err }
}

// reportUnheld answers a result for a run not in flight here: a duplicate of a recorded
// one, a late one for a run recorded lost, or one refused.
func (e *Engine) reportUnheld(ctx context.Context, rep Report) (duplicate bool, err error) {
	run, err := e.store.GetRun(ctx, rep.Ticket)
	if errors.Is(err, model.ErrRunNotFound) {
		e.refused.recordRefusedResult(ctx, model.Run{Ticket: rep.Ticket, TaskName: rep.Task}, rep, refusalUnknownTicket, "unknown ticket")
		return false, fmt.Errorf("%w: %s", err, rep.Ticket)
	}
	if err != nil {
		return false, err
	}
	if _, ready := e.own.State(model.ShardOf(run.TaskName)); !ready && run.Result == model.ResultRunning {
		// A run of a shard this node is taking over (its recovery adopts the run) or does
		// not schedule: the executor sends the result again, to the owner.
		return false, fmt.Errorf("result of %s: task %q: %w", rep.Ticket, run.TaskName, model.ErrShardNotHeld)
	}
	if run.Result == rep.Status ||
		(run.Result == model.ResultTimeout && rep.Status == model.ResultFailed && strings.HasPrefix(run.Error, deadlineReported)) {
		return true, nil // the same report again (one judged a timeout reads as recorded)
	}
	if run.Result == model.ResultLost {
		return false, e.recovery.recordLateResult(ctx, *run, rep) // recovery.go
	}
	if run.Result == model.ResultKilled && run.Output == "" && rep.Output != "" {
		// The handler's result after a kill carries what it printed before it was
		// cancelled: kept on the killed run, which stays killed.
		run.Output = tail(rep.Output, maxOutput)
		if err := e.write(ctx, &persist.Group{Runs: []model.Run{*run}}); err != nil {
			return false, fmt.Errorf("cannot keep the output of killed run %s: %w", rep.Ticket, err)
		}
		return true, nil
	}
	if run.Result == model.ResultRunning {
		// Still running in the store and not waiting here: its result was taken and not
		// recorded (the lease went, the write was refused), or it is being resolved right
		// now. Not a final refusal, which would end the executor's re-sends and leave the
		// run to time out under the scheduler that adopts it: the executor sends it again.
		e.refused.recordRefusedResult(ctx, *run, rep, refusalNotWaiting, "the run is not waiting for a result here")
		return false, fmt.Errorf("%w: run %s; send it again", ErrRunNotWaiting, rep.Ticket)
	}
	e.refused.recordRefusedResult(ctx, *run, rep, refusalEnded, "the run already ended as "+run.Result)
	return false, fmt.Errorf("%w: run %s already ended as %s", ErrStaleTicket, rep.Ticket, run.Result)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// killOnExecutor asks the executor running ticket to cancel it; best effort.
func (e *Engine) killOnExecutor(ticket string) { e.killSender(ticket)() }

// killSender returns how to ask the executor running ticket to cancel it, read while the run
// is in flight, to be called once its kill is on record: the handler's result after the kill
// (with the output it printed) then finds the run killed and is kept on it (reportUnheld).
// It does nothing for a run on no executor.
func (e *Engine) killSender(ticket string) func() {
	x, t := e.runs.executorAndTask(ticket)
	if x == nil {
		return func() {}
	}
	return func() { e.sendKill(x, t, ticket) }
}

func (e *Engine) sendKill(x *dispatch.Executor, t *task, ticket string) {
	k := protocol.Kill{Ticket: ticket}
	k.Epoch, k.Shard = e.own.runEpoch(t)
	_ = e.disp.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), offerTimeout)
		defer cancel()
		if err := e.disp.KillAt(ctx, x, k, e.cfg.ExecutorToken); err != nil {
			e.log.Warn("executor did not confirm kill", "address", x.Address, "ticket", ticket, "error", err)
		}
	})
}
