package engine

import (
	"context"
	"encoding/hex"
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

// Executor protocol defaults (docs/protocol.md).
const (
	HeartbeatIntervalDefault = 10 * time.Second
	LostAfterDefault         = 30 * time.Second
	// offerTimeout bounds the POST /axe/run call itself: the executor answers 202 at once
	// and reports the result later, so a slow answer means a sick executor.
	offerTimeout = 5 * time.Second
	// timeoutGrace lets the executor's own deadline result (the second timeout layer)
	// arrive before the scheduler declares the run timed out.
	timeoutGrace = 500 * time.Millisecond
)

// Errors of the executor protocol.
var (
	// ErrStaleTicket: a result for a run that already ended another way (timed out, killed,
	// lost) or with another result.
	ErrStaleTicket = errors.New("stale ticket")
	// ErrUnknownExecutor: a heartbeat from an executor that is not registered.
	ErrUnknownExecutor = dispatch.ErrUnknownExecutor
	// ErrForeignApp: a result naming an executor app that the run was not sent to.
	ErrForeignApp = errors.New("run of another executor app")
	// ErrForeignExecutor: a result naming an executor address that the run was not sent to,
	// or that no executor of the run's app registered.
	ErrForeignExecutor = errors.New("run of another executor")
)

// ExecutorRegistration is the body of POST /api/v1/executors/register.
type ExecutorRegistration struct {
	App      string   `json:"app"`
	Address  string   `json:"address"`
	Protocol string   `json:"protocol"`
	Handlers []string `json:"handlers"`
	// Auth is protocol.AuthSigned for an executor that verifies signed calls.
	Auth string `json:"auth"`
	// Token is the bearer token the executor presented with the registration ("" for
	// none); the dispatch key of a signed executor is derived from it. Never decoded.
	Token string `json:"-"`
}

func (reg *ExecutorRegistration) validate(guard *dispatch.Guard) error {
	if reg.App == "" {
		return fieldErr("app", "is required")
	}
	if !validName(reg.App) {
		return fieldErr("app", "invalid app name %q", reg.App)
	}
	if reg.Address == "" {
		return fieldErr("address", "is required")
	}
	if len(reg.Address) > 255 {
		return fieldErr("address", "longer than 255 bytes")
	}
	// The address becomes the URL runs are posted to: judged as callbacks are, before the
	// scheduler ever dials it (and again at every dial).
	if err := guard.CheckExecutorAddress(reg.Address); err != nil {
		return fieldErr("address", "%q: %v", reg.Address, err)
	}
	if reg.Protocol == "" {
		reg.Protocol = protocol.ProtocolHTTP
	}
	if reg.Protocol != protocol.ProtocolHTTP && reg.Protocol != protocol.ProtocolHTTPS {
		return fieldErr("protocol", "must be http or https, got %q", reg.Protocol)
	}
	if reg.Auth != "" && reg.Auth != protocol.AuthSigned {
		return fieldErr("auth", "must be %q or absent, got %q", protocol.AuthSigned, reg.Auth)
	}
	if len(reg.Handlers) == 0 {
		return fieldErr("handlers", "at least one handler is required")
	}
	stored := 2 // the handlers are stored as one JSON array, in a TEXT column
	for _, h := range reg.Handlers {
		if !validName(h) {
			return fieldErr("handlers", "invalid handler name %q", protocol.ClipText(h, 64))
		}
		stored += len(h) + 3
	}
	if stored > maxHandlersBytes {
		return fieldErr("handlers", "their names take %d bytes, over the %d the registry stores", stored, maxHandlersBytes)
	}
	return nil
}

// maxHandlersBytes is the size of the executor table's handlers column (TEXT).
const maxHandlersBytes = 65535

// RegisterExecutor registers an executor, idempotent by (app, address) (docs/protocol.md).
func (e *Engine) RegisterExecutor(ctx context.Context, reg ExecutorRegistration) error {
	if err := reg.validate(e.cfg.Dispatch.Guard); err != nil {
		return err
	}
	key, err := e.dispatchKeyOf(reg)
	if err != nil {
		return err
	}
	now := e.nowMS()
	x, created, revived := e.registry.Register(reg.App, reg.Address, reg.Protocol, reg.Handlers, now)
	x.SetDispatchKey(key)
	row := &model.Executor{App: reg.App, Address: reg.Address, Protocol: reg.Protocol, Handlers: reg.Handlers,
		RegisteredAt: x.RegisteredAt, LastHeartbeat: now, Status: dispatch.StatusAlive, DispatchKey: hex.EncodeToString(key)}
	if err := e.store.UpsertExecutor(ctx, row); err != nil {
		return fmt.Errorf("cannot record executor: %w", err)
	}
	switch {
	case created:
		e.log.Info("executor registered", "app", reg.App, "address", reg.Address, "protocol", reg.Protocol, "handlers", reg.Handlers)
	case revived:
		e.alert(ctx, AlertExecutorBack, fmt.Sprintf("executor %s at %s registered again", reg.App, reg.Address))
	}
	return nil
}

// predatesSigning refuses the registration of an executor that expects the scheduler to
// send it a token: axe sends executors no token unless the operator gives one for them.
const predatesSigning = "this executor predates signed calls and expects axe to send it a token; " +
	"upgrade it (the SDK and axe agent of this version verify axe's signature and send auth %q), " +
	"or, while upgrading, start axe with --executor-token set to the executor's scheduler_token"

// dispatchKeyOf is the key calls to the registering executor are signed with: derived from
// the token it presented when it asks for signed calls (protocol.AuthSigned), none when it
// does not. An executor that presented a token without asking expects the legacy bearer
// token, and is refused unless Config.ExecutorToken is set.
func (e *Engine) dispatchKeyOf(reg ExecutorRegistration) ([]byte, error) {
	switch {
	case reg.Auth == protocol.AuthSigned && reg.Token == "":
		return nil, fieldErr("auth", "signed calls are keyed by the executor's token, and it presented none")
	case reg.Auth == protocol.AuthSigned:
		return protocol.DispatchKey(reg.Token), nil
	case reg.Token != "" && e.cfg.ExecutorToken == "":
		return nil, fieldErr("auth", predatesSigning, protocol.AuthSigned)
	}
	return nil, nil
}

// ExecutorHeartbeat records a heartbeat; token is the bearer token the executor presented
// ("" for none). An unknown executor gets ErrUnknownExecutor and registers again, and so
// does one registered without signed calls that presents a token while no
// Config.ExecutorToken is set (as it was before the scheduler was upgraded): its
// registration then tells it why it is refused.
func (e *Engine) ExecutorHeartbeat(ctx context.Context, app, addr, token string) error {
	if x := e.registry.Get(app, addr); x != nil && token != "" && !x.Signed() && e.cfg.ExecutorToken == "" {
		return ErrUnknownExecutor
	}
	now := e.nowMS()
	revived, err := e.registry.Heartbeat(app, addr, now)
	if err != nil {
		return err
	}
	if err := e.store.Heartbeat(ctx, app, addr, now); err != nil && !errors.Is(err, model.ErrExecutorNotFound) {
		return fmt.Errorf("cannot record heartbeat: %w", err)
	}
	if revived {
		e.alert(ctx, AlertExecutorBack, fmt.Sprintf("executor %s at %s heartbeats again", app, addr))
	}
	return nil
}

// ExecutorTimings returns the heartbeat interval executors are asked to keep and the silence
// after which they are lost.
func (e *Engine) ExecutorTimings() (heartbeat, lostAfter time.Duration) {
	return e.cfg.HeartbeatInterval, e.cfg.LostAfter
}

// Executors lists the registry.
func (e *Engine) Executors() []model.Executor {
	snap := e.registry.Snapshot()
	out := make([]model.Executor, 0, len(snap))
	for _, x := range snap {
		st := dispatch.StatusAlive
		if !x.Alive {
			st = dispatch.StatusLost
		}
		out = append(out, model.Executor{App: x.App, Address: x.Address, Protocol: x.Protocol, Handlers: x.Handlers,
			RegisteredAt: x.RegisteredAt, LastHeartbeat: x.LastHeartbeat, Status: st})
	}
	return out
}

// restoreExecutors loads the registry from the store at start. Executors keep their last
// heartbeat, so one that died with the previous scheduler is reaped after LostAfter.
func (e *Engine) restoreExecutors(ctx context.Context) error {
	list, err := e.store.ListExecutors(ctx)
	if err != nil {
		return err
	}
	for _, x := range list {
		key, err := hex.DecodeString(x.DispatchKey)
		if err != nil {
			return fmt.Errorf("cannot read the dispatch key of executor %s@%s: %w", x.App, x.Address, err)
		}
		e.registry.Restore(x.App, x.Address, x.Protocol, x.Handlers, x.RegisteredAt, x.LastHeartbeat, x.Status != dispatch.StatusLost)
		e.registry.Get(x.App, x.Address).SetDispatchKey(key)
	}
	return nil
}

// reapLoop marks silent executors lost.
func (e *Engine) reapLoop(ctx context.Context) {
	defer e.loopsWG.Done()
	every := e.cfg.LostAfter / 10
	if every < 50*time.Millisecond {
		every = 50 * time.Millisecond
	}
	t := e.cfg.Clock.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			e.reap(ctx)
		}
	}
}

func (e *Engine) reap(ctx context.Context) {
	lost := e.registry.Reap(e.nowMS() - e.cfg.LostAfter.Milliseconds())
	for _, x := range lost {
		msg := fmt.Sprintf("executor %s at %s silent for more than %s: no new dispatch to it", x.App, x.Address, e.cfg.LostAfter)
		e.alert(ctx, AlertExecutorLost, msg)
		if err := e.store.SetExecutorStatus(ctx, x.App, x.Address, dispatch.StatusLost); err != nil {
			e.log.Error("cannot record lost executor", "app", x.App, "address", x.Address, "error", err)
		}
		for _, ticket := range e.runs.on(x) {
			e.runs.settle(ticket, func(f *flight) bool { return f.exec == x }, func(f *flight) {
				e.resolve(f.t, f.run, outcome{result: model.ResultLost, executor: x.Address,
					errText: "executor " + x.Address + " was lost with the run in flight"})
			})
		}
	}
}

// sendToExecutor offers a durable run to the executors of its app, in the order its route
// prefers, until one accepts. It runs on a dispatch worker.
func (e *Engine) sendToExecutor(t *task, def *model.TaskDef, run model.Run, body []byte, deadline time.Time) {
	cands := e.registry.Candidates(def.Callback.App, def.Callback.Handler, def.Callback.Route, def.Name)
	if len(cands) == 0 {
		e.settleRun(t, run, outcome{result: model.ResultFailed,
			errText: "no alive executor of app " + def.Callback.App + " serves handler " + def.Callback.Handler})
		return
	}
	var refusals []string
	for _, x := range cands {
		offerBy := e.now().Add(offerTimeout)
		if deadline.Before(offerBy) {
			offerBy = deadline
		}
		// Assign the run before offering it: the executor may call back before Post returns.
		if !e.runs.assign(run.Ticket, x) {
			return // killed meanwhile
		}
		o := e.disp.Offer(x, &dispatch.Request{
			Task: def.Name, Ticket: run.Ticket, Attempt: run.Attempt,
			Body: body, Deadline: offerBy, Token: e.cfg.ExecutorToken,
		})
		if o.Err == nil && (o.Status == 202 || o.Status == 200) {
			e.armExecTimeout(run.Ticket, deadline, x.Address)
			return
		}
		if !e.runs.unassign(run.Ticket, x) {
			// Resolved meanwhile (a result raced the refusal): nothing more to do.
			return
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
		refusals = append(refusals, x.Address+": "+why)
	}
	e.settleRun(t, run, outcome{result: model.ResultFailed,
		errText: "no executor accepted the run (" + strings.Join(refusals, "; ") + ")"})
}

// armExecTimeout sets the scheduler's timeout of a run an executor holds (at addr): the
// run's deadline plus timeoutGrace, so the executor's own deadline result (the second
// timeout layer) arrives first when the executor is alive.
func (e *Engine) armExecTimeout(ticket string, deadline time.Time, addr string) {
	e.runs.arm(ticket, deadline.Add(timeoutGrace), func(f *flight) {
		e.resolve(f.t, f.run, outcome{result: model.ResultTimeout, executor: addr,
			errText: "no result within timeout_sec"})
	})
}

// Report is the body of POST /api/v1/callback: an executor's result for a ticket.
type Report = protocol.Result

// maxOutput bounds the output tail kept in a run record.
const maxOutput = 8 << 10

// ReportResult records an executor's result (docs/protocol.md). It is idempotent by ticket: a repeated
// report of the recorded result returns duplicate=true and changes nothing; a report for a
// run that ended another way returns ErrStaleTicket; an unknown ticket ErrRunNotFound.
func (e *Engine) ReportResult(ctx context.Context, rep Report) (duplicate bool, err error) {
	return e.BeginReport(ctx, rep)(ctx)
}

// ReportWait waits for a result that BeginReport accepted to be recorded.
type ReportWait func(ctx context.Context) (duplicate bool, err error)

// BeginReport starts settling an executor's result and returns how to wait for it: a result
// for a run in flight here is acknowledged only once its end is durable, so many results of
// one batch call are begun together and share group commits. The wait returns an error when
// the end could not be recorded (the executor then re-sends it) or ctx ends first.
func (e *Engine) BeginReport(ctx context.Context, rep Report) ReportWait {
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
	var sentElsewhere *dispatch.Executor
	// The result is noted as ending while the flight is taken, under the same lock, so a
	// duplicate delivery that finds the flight gone finds the note. The executor is compared
	// there too: the run may have moved to another executor since checkReport looked.
	settled := e.runs.settle(rep.Ticket, func(f *flight) bool {
		if !waitingReport(f) {
			return false
		}
		if f.exec != nil && rep.Address != "" && rep.Address != f.exec.Address {
			sentElsewhere = f.exec
			return false
		}
		e.ending.add(rep.Ticket, rep.Status, e.now())
		return true
	}, func(r *flight) {
		oc := outcome{result: rep.Status, errText: rep.Error, output: tail(rep.Output, maxOutput), executor: r.run.Executor}
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
		oc.durable = func(err error) { recorded <- err }
		e.resolve(r.t, r.run, oc)
	})
	if settled {
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
	dup, err := e.reportUnheld(ctx, rep)
	return func(context.Context) (bool, error) { return dup, err }
}

// checkReport refuses a result whose claims about its run are not the run's:
//   - an executor app (rep.App) other than the one the run belongs to: the executor it was
//     offered to, or the task's callback app for a run adopted after a restart or no longer
//     in flight (ErrForeignApp). The API lets a token bound to apps report only as one of
//     them, so together no executor can settle another app's run;
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
	if e.ending.has(rep.Ticket, rep.Status) {
		// The same result, delivered again before its record is durable (an executor that
		// reports twice, a network that duplicates a request): the store still says running.
		return true, nil
	}
	run, err := e.store.GetRun(ctx, rep.Ticket)
	if errors.Is(err, model.ErrRunNotFound) {
		e.recordRefusedResult(ctx, model.Run{Ticket: rep.Ticket, TaskName: rep.Task}, rep, "unknown ticket")
		return false, fmt.Errorf("%w: %s", err, rep.Ticket)
	}
	if err != nil {
		return false, err
	}
	if run.Result == rep.Status {
		return true, nil
	}
	if run.Result == model.ResultLost {
		return false, e.recordLateResult(ctx, *run, rep) // ha.go
	}
	if run.Result == model.ResultRunning {
		// Sent by a previous scheduler process and still unresolved here: the run was
		// recovered as lost at start, or is being resolved right now.
		e.recordRefusedResult(ctx, *run, rep, "the run is not waiting for a result here")
		return false, fmt.Errorf("%w: run %s is not waiting for a result here", ErrStaleTicket, rep.Ticket)
	}
	e.recordRefusedResult(ctx, *run, rep, "the run already ended as "+run.Result)
	return false, fmt.Errorf("%w: run %s already ended as %s", ErrStaleTicket, rep.Ticket, run.Result)
}

// recordRefusedResult leaves an action record for a result that was not accepted, on the
// run's task when it is known: an executor reporting into the void is worth seeing.
func (e *Engine) recordRefusedResult(ctx context.Context, run model.Run, rep Report, why string) {
	act := model.Action{TaskID: run.TaskID, TaskName: run.TaskName, Ticket: rep.Ticket, Action: ActRefusedResult,
		Actor: "executor:" + rep.Address, At: e.nowMS(), Detail: fmt.Sprintf("%s result from %s refused: %s", rep.Status, rep.Address, why)}
	if err := e.submit(ctx, &persist.Group{Actions: []model.Action{act}}, submitWait); err != nil {
		e.log.Warn("cannot record refused result", "ticket", rep.Ticket, "error", err)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// killOnExecutor asks the executor running ticket to cancel it; best effort.
func (e *Engine) killOnExecutor(ticket string) {
	x := e.runs.executorOf(ticket)
	if x == nil {
		return
	}
	_ = e.disp.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), offerTimeout)
		defer cancel()
		if err := e.disp.Kill(ctx, x, ticket, e.cfg.ExecutorToken); err != nil {
			e.log.Warn("executor did not confirm kill", "address", x.Address, "ticket", ticket, "error", err)
		}
	})
}
