package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/model"
)

// What a caller holding an executor token can make axe keep, and write, is bounded: the
// executors it registers (per app and per token), the lost alerts they raise (one per app
// per reap), and the registry entries of executors deleted from the store.

// Registration bounds (Config.MaxExecutorsPerApp, Config.MaxExecutorsPerToken).
const (
	// MaxExecutorsPerAppDefault bounds the executors of one app: well above the replicas
	// of one service, far below what fills the registry and the alerts.
	MaxExecutorsPerAppDefault = 256
	// MaxExecutorsPerTokenDefault bounds the executors of one token across its apps.
	MaxExecutorsPerTokenDefault = 1024
)

// ErrTooManyExecutors is the error of a registration over a bound (the API answers 429).
var ErrTooManyExecutors = dispatch.ErrTooManyExecutors

// lostAlertAddresses is how many addresses one lost alert names before "and N more".
const lostAlertAddresses = 5

// registerBounded registers reg within the configured bounds, and forgets in the store the
// executors it took the place of.
func (e *Engine) registerBounded(ctx context.Context, reg ExecutorRegistration, key []byte, now int64) (x *dispatch.Executor, created, revived bool, err error) {
	x, created, revived, evicted, err := e.registry.RegisterBounded(reg.App, reg.Address, reg.Protocol, reg.Handlers, now, key,
		dispatch.Bounds{PerApp: e.cfg.MaxExecutorsPerApp, PerKey: e.cfg.MaxExecutorsPerToken})
	for _, old := range evicted {
		e.log.Info("executor forgotten to make room for a new one", "app", old.App, "address", old.Address, "for", reg.Address)
		if derr := e.store.DeleteExecutor(ctx, old.App, old.Address); derr != nil {
			e.log.Warn("cannot forget executor", "app", old.App, "address", old.Address, "error", derr)
		}
	}
	return x, created, revived, err
}

// forgetDeleted answers a heartbeat whose executor the store no longer holds (an operator
// deleted its row): it leaves the registry too, and the executor is told to register again.
func (e *Engine) forgetDeleted(app, addr string, err error) error {
	if !errors.Is(err, model.ErrExecutorNotFound) {
		return fmt.Errorf("cannot record heartbeat: %w", err)
	}
	e.registry.Remove(app, addr)
	e.log.Info("executor no longer in the store; asked to register again", "app", app, "address", addr)
	return ErrUnknownExecutor
}

// sweepDeleted drops from the registry the lost executors whose rows were deleted from the
// store, once every LostAfter (the reaper's; alive ones leave at their next heartbeat).
func (e *Engine) sweepDeleted(ctx context.Context, now int64) {
	if now-e.sweptAt < e.cfg.LostAfter.Milliseconds() {
		return
	}
	e.sweptAt = now
	list, err := e.store.ListExecutors(ctx)
	if err != nil {
		e.log.Warn("cannot list executors to drop deleted ones", "error", err)
		return
	}
	stored := make(map[[2]string]bool, len(list))
	for _, x := range list {
		stored[[2]string{x.App, x.Address}] = true
	}
	for _, x := range e.registry.DropAbsent(func(app, addr string) bool { return stored[[2]string{app, addr}] }) {
		e.log.Info("executor deleted from the store; dropped from the registry", "app", x.App, "address", x.Address)
	}
}

// lostAlerts gathers the executors found lost, per app, until a reap finds no more of
// that app: executors lost together (a host down, a flood of fake registrations) reaped over
// several passes make one alert. Reaper only.
type lostAlerts struct {
	pending map[string]*lostBatch
}

type lostBatch struct {
	addrs []string
	since int64 // ms: the first reap that found one
	grew  bool  // this pass added to it
}

// alertLost notes the executors one reap found lost, then raises the alert of every app
// whose batch did not grow in this pass or has waited LostAfter: one alert per app, naming
// a few addresses and counting the rest. all raises every pending one (at stop).
func (e *Engine) alertLost(ctx context.Context, lost []*dispatch.Executor, now int64, all bool) {
	l := &e.lostAlerts
	if l.pending == nil {
		l.pending = map[string]*lostBatch{}
	}
	for _, x := range lost {
		b := l.pending[x.App]
		if b == nil {
			b = &lostBatch{since: now}
			l.pending[x.App] = b
		}
		b.addrs = append(b.addrs, x.Address)
		b.grew = true
	}
	apps := make([]string, 0, len(l.pending))
	for app, b := range l.pending {
		if all || !b.grew || now-b.since >= e.cfg.LostAfter.Milliseconds() {
			apps = append(apps, app)
		}
		b.grew = false
	}
	sort.Strings(apps)
	for _, app := range apps {
		addrs := l.pending[app].addrs
		delete(l.pending, app)
		sort.Strings(addrs)
		if len(addrs) == 1 {
			e.alert(ctx, AlertExecutorLost, fmt.Sprintf("executor %s at %s silent for more than %s: no new dispatch to it", app, addrs[0], e.cfg.LostAfter))
			continue
		}
		named := strings.Join(addrs[:min(len(addrs), lostAlertAddresses)], ", ")
		if len(addrs) > lostAlertAddresses {
			named += fmt.Sprintf(" and %d more", len(addrs)-lostAlertAddresses)
		}
		e.alert(ctx, AlertExecutorLost, fmt.Sprintf("%d executors of %s silent for more than %s: no new dispatch to them (%s)", len(addrs), app, e.cfg.LostAfter, named))
	}
}
