package engine

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/wire"
)

// executorsCore is what the executor registry asks of the core.
type executorsCore interface {
	// resolve ends a run in flight, taken from the runs in flight, with oc
	// (core_complete.go).
	resolve(t *task, run model.Run, oc outcome)
}

// Executors is the executor registry service: registrations, heartbeats and
// deregistrations (api_deregister.go) within their bounds (executor_bounds.go), the reaper
// that finds executors lost, and on a sharded engine the refresh of the registry from the
// store (the executors register and heartbeat with any node).
type Executors struct {
	base
	core executorsCore
	runs *runsInFlight // the runs sent and not ended, of which those on a lost executor end lost
	// refused records the refused results counted (refusals.go); its loop flushes them.
	refused *refusals
	reg     *dispatch.Registry
	alerts  *Alerts
	// refresh: the registry is read from the store every registryRefresh (sharded).
	refresh   bool
	reaper    loop
	refresher loop
	// sweptAt is when the reaper last dropped executors deleted from the store (ms; reaper
	// only), and gathered the executors lost or back not alerted yet (executor_bounds.go).
	sweptAt  int64
	gathered gatheredAlerts
}

// Executors is the executor registry service, which the API's executor endpoints call.
func (e *API) Executors() *Executors { return e.executors }

func (ex *Executors) start() error {
	if ex.refresh {
		if err := ex.refresher.start(ex.refreshLoop); err != nil {
			return err
		}
	}
	return ex.reaper.start(ex.run)
}

func (ex *Executors) stop(ctx context.Context) error {
	err := ex.reaper.stop(ctx)
	return errors.Join(err, ex.refresher.stop(ctx))
}

// registryRefresh is how often a sharded engine reads the executor registry from the store:
// executors register and heartbeat with any node, which writes their rows.
const registryRefresh = time.Second

// refreshLoop keeps a sharded engine's executor registry as the store has it.
func (ex *Executors) refreshLoop(ctx context.Context) {
	ex.every(ctx, registryRefresh, func() {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := ex.restore(rctx, true); err != nil && ctx.Err() == nil {
			ex.log.Warn("cannot read the executor registry from the store", "error", err)
		}
	})
}

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
	// ErrRunNotWaiting: a result for a run still running in the store that is not waiting
	// for one here: its result was taken and not recorded (the lease or the shard went, the
	// store refused the write), or the run is being resolved now. Not final: the executor
	// sends it again, to the scheduler that adopts the run or to this one later.
	ErrRunNotWaiting = errors.New("the run is not waiting for a result here")
	// ErrUnknownExecutor: a heartbeat from an executor that is not registered.
	ErrUnknownExecutor = dispatch.ErrUnknownExecutor
	// ErrForeignApp: a result naming an executor app that the run was not sent to.
	ErrForeignApp = errors.New("run of another executor app")
	// ErrForeignExecutor: a result naming an executor address that the run was not sent to,
	// or that no executor of the run's app registered.
	ErrForeignExecutor = errors.New("run of another executor")
)

// validateRegistration checks reg, filling in its default protocol.
func validateRegistration(reg *wire.ExecutorRegistration, guard *dispatch.Guard) error {
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
func (ex *Executors) Register(ctx context.Context, reg wire.ExecutorRegistration) error {
	if err := validateRegistration(&reg, ex.cfg.Dispatch.Guard); err != nil {
		return err
	}
	key, err := ex.dispatchKeyOf(reg)
	if err != nil {
		return err
	}
	now := ex.nowMS()
	x, created, revived, err := ex.registerBounded(ctx, reg, key, now) // executor_bounds.go
	if err != nil {
		return err
	}
	x.SetIncarnation(reg.Incarnation)
	row := &model.Executor{App: reg.App, Address: reg.Address, Protocol: reg.Protocol, Handlers: reg.Handlers,
		RegisteredAt: x.RegisteredAt, LastHeartbeat: now, Status: dispatch.StatusAlive, DispatchKey: hex.EncodeToString(key),
		Incarnation: reg.Incarnation}
	if err := ex.store.UpsertExecutor(ctx, row); err != nil {
		return fmt.Errorf("cannot record executor: %w", err)
	}
	switch {
	case created:
		ex.log.Info("executor registered", "app", reg.App, "address", reg.Address, "protocol", reg.Protocol, "handlers", reg.Handlers)
	case revived:
		ex.noteAlert(AlertExecutorBack, reg.App, reg.Address, now) // raised by the reaper (executor_bounds.go)
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
func (ex *Executors) dispatchKeyOf(reg wire.ExecutorRegistration) ([]byte, error) {
	switch {
	case reg.Auth == protocol.AuthSigned && reg.Token == "":
		return nil, fieldErr("auth", "signed calls are keyed by the executor's token, and it presented none")
	case reg.Auth == protocol.AuthSigned:
		return protocol.DispatchKey(reg.Token), nil
	case reg.Token != "" && ex.cfg.ExecutorToken == "":
		return nil, fieldErr("auth", predatesSigning, protocol.AuthSigned)
	}
	return nil, nil
}

// ExecutorHeartbeat records a heartbeat; token is the bearer token the executor presented
// ("" for none). An unknown executor gets ErrUnknownExecutor and registers again, and so
// does one registered without signed calls that presents a token while no
// Config.ExecutorToken is set (as it was before the scheduler was upgraded): its
// registration then tells it why it is refused.
func (ex *Executors) Heartbeat(ctx context.Context, app, addr, token string) error {
	if x := ex.reg.Get(app, addr); x != nil && token != "" && !x.Signed() && ex.cfg.ExecutorToken == "" {
		return ErrUnknownExecutor
	}
	now := ex.nowMS()
	revived, err := ex.reg.Heartbeat(app, addr, now)
	if err != nil {
		return err
	}
	if err := ex.store.Heartbeat(ctx, app, addr, now); err != nil {
		return ex.forgetDeleted(app, addr, err) // executor_bounds.go
	}
	if revived {
		ex.noteAlert(AlertExecutorBack, app, addr, now) // raised by the reaper (executor_bounds.go)
	}
	return nil
}

// ExecutorTimings returns the heartbeat interval executors are asked to keep and the silence
// after which they are lost.
func (ex *Executors) Timings() (heartbeat, lostAfter time.Duration) {
	return ex.cfg.HeartbeatInterval, ex.cfg.LostAfter
}

// Executors lists the registry.
func (ex *Executors) List() []model.Executor {
	snap := ex.reg.Snapshot()
	out := make([]model.Executor, 0, len(snap))
	for _, x := range snap {
		out = append(out, model.Executor{App: x.App, Address: x.Address, Protocol: x.Protocol, Handlers: x.Handlers,
			RegisteredAt: x.RegisteredAt, LastHeartbeat: x.LastHeartbeat, Status: executorStatus(x)})
	}
	return out
}

// restore loads the registry from the store at start. Executors keep their last
// heartbeat, so one that died with the previous scheduler is reaped after LostAfter. With
// merge (a sharded engine's refresh, core_shards.go) an executor held already keeps the
// newer heartbeat of the two (dispatch.Registry.Merge), and one whose key does not read is
// skipped rather than failing the refresh.
func (ex *Executors) restore(ctx context.Context, merge bool) error {
	readAt := dispatch.LocalGeneration() // before the read (RestoreIncarnation)
	list, err := ex.store.ListExecutors(ctx)
	if err != nil {
		return err
	}
	for _, x := range list {
		key, err := hex.DecodeString(x.DispatchKey)
		if err != nil && merge {
			ex.log.Warn("cannot read the dispatch key of an executor; keeping the one held", "app", x.App, "address", x.Address, "error", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("cannot read the dispatch key of executor %s@%s: %w", x.App, x.Address, err)
		}
		alive := x.Status != dispatch.StatusLost
		if merge {
			got, _ := ex.reg.Merge(x.App, x.Address, x.Protocol, x.Handlers, x.RegisteredAt, x.LastHeartbeat, alive)
			if !bytes.Equal(got.DispatchKey(), key) {
				got.SetDispatchKey(key)
			}
			got.RestoreIncarnation(x.Incarnation, x.Status == dispatch.StatusLeft, readAt)
			continue
		}
		ex.reg.Restore(x.App, x.Address, x.Protocol, x.Handlers, x.RegisteredAt, x.LastHeartbeat, alive)
		got := ex.reg.Get(x.App, x.Address)
		got.SetDispatchKey(key)
		got.RestoreIncarnation(x.Incarnation, x.Status == dispatch.StatusLeft, readAt)
	}
	return nil
}

// run marks silent executors lost.
func (ex *Executors) run(ctx context.Context) {
	ex.every(ctx, max(ex.cfg.LostAfter/10, 50*time.Millisecond), func() {
		ex.reap(ctx)
		ex.sweepDeleted(ctx, ex.nowMS())
		ex.refused.flushRefusals(ctx, false)
	})
	// The refusals counted since their windows opened, and the lost executors not alerted
	// yet, are recorded before the writer stops.
	fctx, cancel := context.WithTimeout(context.Background(), offerTimeout)
	defer cancel()
	ex.refused.flushRefusals(fctx, true)
	ex.raiseGathered(fctx, ex.nowMS(), true)
}

func (ex *Executors) reap(ctx context.Context) {
	now := ex.nowMS()
	lost := ex.reg.Reap(now - ex.cfg.LostAfter.Milliseconds())
	if ex.own.holdsShardZero() {
		// Every sharded node judges an executor by the heartbeats in the store and
		// resolves its own runs on it; the verdict is recorded, and alerted, once: by the
		// holder of shard 0 (core_shards.go). One alert per app for executors lost
		// together (executor_bounds.go); none for one that deregistered, drained and went.
		for _, x := range lost {
			if x.Left() {
				ex.log.Info("deregistered executor went silent", "app", x.App, "address", x.Address)
				continue
			}
			ex.noteAlert(AlertExecutorLost, x.App, x.Address, now)
		}
	}
	ex.raiseGathered(ctx, now, false)
	for _, x := range lost {
		// A deregistered executor's row stays "left" (every node judges it silent by its
		// heartbeats); its runs still in flight, if any, are lost below.
		if ex.own.holdsShardZero() && !x.Left() {
			if err := ex.store.SetExecutorStatus(ctx, x.App, x.Address, dispatch.StatusLost); err != nil {
				ex.log.Error("cannot record lost executor", "app", x.App, "address", x.Address, "error", err)
			}
		}
		ex.loseRunsOn(x)
	}
}

// loseRunsOn resolves as lost the runs in flight on x, an executor found lost.
func (ex *Executors) loseRunsOn(x *dispatch.Executor) {
	for _, ticket := range ex.runs.on(x) {
		ex.runs.take(ticket, func(f *flight) bool { return f.exec == x }, func(f *flight) {
			ex.core.resolve(f.t, f.run, outcome{result: model.ResultLost, executor: x.Address,
				errText: "executor " + x.Address + " was lost with the run in flight"})
		})
	}
}
