package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wire"
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
func (ex *Executors) registerBounded(ctx context.Context, reg wire.ExecutorRegistration, key []byte, now int64) (x *dispatch.Executor, created, revived bool, err error) {
	x, created, revived, evicted, err := ex.reg.RegisterBounded(reg.App, reg.Address, reg.Protocol, reg.Handlers, now, key,
		dispatch.Bounds{PerApp: ex.cfg.MaxExecutorsPerApp, PerKey: ex.cfg.MaxExecutorsPerToken})
	for _, old := range evicted {
		ex.log.Info("executor forgotten to make room for a new one", "app", old.App, "address", old.Address, "for", reg.Address)
		if derr := ex.store.DeleteExecutor(ctx, old.App, old.Address); derr != nil {
			ex.log.Warn("cannot forget executor", "app", old.App, "address", old.Address, "error", derr)
		}
	}
	return x, created, revived, err
}

// forgetDeleted answers a heartbeat whose executor the store no longer holds (an operator
// deleted its row): it leaves the registry too, and the executor is told to register again.
func (ex *Executors) forgetDeleted(app, addr string, err error) error {
	if !errors.Is(err, model.ErrExecutorNotFound) {
		return fmt.Errorf("cannot record heartbeat: %w", err)
	}
	ex.reg.Remove(app, addr)
	ex.log.Info("executor no longer in the store; asked to register again", "app", app, "address", addr)
	return ErrUnknownExecutor
}

// sweepDeleted drops from the registry the lost executors whose rows were deleted from the
// store, once every LostAfter (the reaper's; alive ones leave at their next heartbeat).
func (ex *Executors) sweepDeleted(ctx context.Context, now int64) {
	if now-ex.sweptAt < ex.cfg.LostAfter.Milliseconds() {
		return
	}
	ex.sweptAt = now
	list, err := ex.store.ListExecutors(ctx)
	if err != nil {
		ex.log.Warn("cannot list executors to drop deleted ones", "error", err)
		return
	}
	stored := make(map[[2]string]bool, len(list))
	for _, x := range list {
		stored[[2]string{x.App, x.Address}] = true
	}
	for _, x := range ex.reg.DropAbsent(func(app, addr string) bool { return stored[[2]string{app, addr}] }) {
		ex.log.Info("executor deleted from the store; dropped from the registry", "app", x.App, "address", x.Address)
	}
}

// gatheredAlerts holds the executors found lost, or back, per kind and app, until a reap
// finds no more of them: executors lost together (a host down, a flood of fake
// registrations) or back together, found over several reaps or calls, make one alert.
type gatheredAlerts struct {
	mu      sync.Mutex
	pending map[gatherKey]*gatherBatch
}

type gatherKey struct{ kind, app string }

type gatherBatch struct {
	addrs []string // the first maxGathered noted
	n     int      // how many were noted
	since int64    // ms: when the first was noted
	grew  bool     // noted to since the last reap
}

// noteAlert gathers one executor's loss or return (AlertExecutorLost, AlertExecutorBack)
// for the reaper to raise.
func (ex *Executors) noteAlert(kind, app, addr string, now int64) {
	g := &ex.gathered
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending == nil {
		g.pending = map[gatherKey]*gatherBatch{}
	}
	k := gatherKey{kind, app}
	b := g.pending[k]
	if b == nil {
		b = &gatherBatch{since: now}
		g.pending[k] = b
	}
	if len(b.addrs) < maxGathered {
		b.addrs = append(b.addrs, addr)
	}
	b.n++
	b.grew = true
}

// maxGathered bounds the addresses one gathered alert keeps; beyond, they are counted.
const maxGathered = 4096

// raiseGathered raises the alert of every kind and app whose batch did not grow since the
// last reap, or has waited LostAfter; all raises every one (at stop). One alert names a few
// addresses and counts the rest.
func (ex *Executors) raiseGathered(ctx context.Context, now int64, all bool) {
	g := &ex.gathered
	g.mu.Lock()
	type due struct {
		gatherKey
		addrs []string
		n     int
	}
	var out []due
	for k, b := range g.pending {
		if all || !b.grew || now-b.since >= ex.cfg.LostAfter.Milliseconds() {
			out = append(out, due{k, b.addrs, b.n})
			delete(g.pending, k)
			continue
		}
		b.grew = false
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].kind != out[j].kind {
			return out[i].kind < out[j].kind
		}
		return out[i].app < out[j].app
	})
	for _, d := range out {
		ex.alerts.raise(ctx, d.kind, gatheredMessage(d.kind, d.app, d.addrs, d.n, ex.cfg.LostAfter))
	}
}

// gatheredMessage says which executors of app were lost or came back: n of them, of which
// addrs are known by address.
func gatheredMessage(kind, app string, addrs []string, n int, lostAfter time.Duration) string {
	sort.Strings(addrs)
	if n == 1 {
		if kind == AlertExecutorLost {
			return fmt.Sprintf("executor %s at %s silent for more than %s: no new dispatch to it", app, addrs[0], lostAfter)
		}
		return fmt.Sprintf("executor %s at %s is back: it registered or heartbeat again", app, addrs[0])
	}
	named := addrs[:min(len(addrs), lostAlertAddresses)]
	list := strings.Join(named, ", ")
	if n > len(named) {
		list += fmt.Sprintf(" and %d more", n-len(named))
	}
	if kind == AlertExecutorLost {
		return fmt.Sprintf("%d executors of %s silent for more than %s: no new dispatch to them (%s)", n, app, lostAfter, list)
	}
	return fmt.Sprintf("%d executors of %s are back: they registered or heartbeat again (%s)", n, app, list)
}
