package engine

// The concurrency limits as the API shows and changes them. The gate that holds fires back to
// them is in core_concgate.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

// MaxConcurrencyLimit bounds a limit's max: far more runs than one scheduler keeps in flight.
const MaxConcurrencyLimit = 1_000_000

// ActConcurrencyLimit records a limit set or removed (task 0, as a rate limit's record).
const ActConcurrencyLimit = "concurrency_limit"

// checkLimitRef validates a limit's kind and name.
func checkLimitRef(kind, name string) error {
	if kind != model.LimitGroup && kind != model.LimitKey {
		return fieldErr("kind", "must be group or key, got %q", kind)
	}
	if prefix, ok := model.KeyPattern(name); ok && kind == model.LimitKey {
		// A pattern: every key that starts with prefix and has no limit of its own.
		if prefix != "" && (!validName(prefix) || len(name) > model.KeyLen) {
			return fieldErr("name", "a pattern is a key's prefix followed by '*' (tenant:*), the prefix of letters, digits, '.', '_', ':' or '-', starting with a letter or digit")
		}
		return nil
	}
	if !validName(name) {
		return fieldErr("name", "must be 1-128 characters of letters, digits, '.', '_', ':' or '-', starting with a letter or digit (a key's limit may be a pattern: a prefix followed by '*')")
	}
	return nil
}

func (e *API) limitView(l model.ConcurrencyLimit) wire.ConcurrencyLimitView {
	return e.clusterView(l, nil)
}

// clusterView is the view of l: on a sharded node (counts not nil) the slots held across the
// cluster, as the store counts them, and the fires waiting on this node. A pattern limit's
// view lists its keys in use (core_keys.go).
func (e *API) clusterView(l model.ConcurrencyLimit, counts map[persist.SlotRef]int) wire.ConcurrencyLimitView {
	if _, ok := model.KeyPattern(l.Name); ok && l.Kind == model.LimitKey {
		return e.patternView(l, counts)
	}
	v := e.conc.view(limitRef{l.Kind, l.Name})
	out := wire.ConcurrencyLimitView{ConcurrencyLimit: l, InUse: v.used, Waiting: v.waiting}
	if counts != nil {
		out.InUse = counts[persist.SlotRef{Kind: l.Kind, Name: l.Name}]
	}
	return out
}

// patternView is the view of a pattern limit: its keys in use on this node, or across the
// cluster when counts are the store's.
func (e *API) patternView(l model.ConcurrencyLimit, counts map[persist.SlotRef]int) wire.ConcurrencyLimitView {
	byKey := map[string]*wire.KeyInUse{}
	for _, k := range e.conc.keysOf(l.Name) {
		byKey[k.key] = &wire.KeyInUse{Key: k.key, InUse: k.used, Waiting: k.waiting}
	}
	if counts != nil {
		for _, k := range byKey {
			k.InUse = 0 // the store's count, across the cluster
		}
		g := e.conc
		g.mu.Lock()
		for r, n := range counts {
			if r.Kind != model.LimitKey || n == 0 {
				continue
			}
			if s := g.st[limitRef{r.Kind, r.Name}]; s != nil && s.own {
				continue
			}
			if p, _ := g.patternLocked(r.Name); p != l.Name {
				continue
			}
			if byKey[r.Name] == nil {
				byKey[r.Name] = &wire.KeyInUse{Key: r.Name}
			}
			byKey[r.Name].InUse = n
		}
		g.mu.Unlock()
	}
	out := wire.ConcurrencyLimitView{ConcurrencyLimit: l, KeysInUse: len(byKey)}
	keys := make([]wire.KeyInUse, 0, len(byKey))
	for _, k := range byKey {
		out.InUse += k.InUse
		out.Waiting += k.Waiting
		keys = append(keys, *k)
	}
	slices.SortFunc(keys, func(a, b wire.KeyInUse) int { return strings.Compare(a.Key, b.Key) })
	if len(keys) > wire.MaxKeysShown {
		keys = keys[:wire.MaxKeysShown]
	}
	out.Keys = keys
	return out
}

// slotCounts returns the slots held in every limit across a sharded cluster, nil on an
// engine that is not sharded.
func (e *API) slotCounts(ctx context.Context) (map[persist.SlotRef]int, error) {
	if e.conc.cl == nil {
		return nil, nil
	}
	return e.conc.cl.clusterCounts(ctx)
}

// ConcurrencyLimits lists the stored limits with their counts, ordered by kind and name. It
// reads the store, so a backup answers it too.
func (e *API) ConcurrencyLimits(ctx context.Context) ([]wire.ConcurrencyLimitView, error) {
	ls, err := e.store.ListConcurrencyLimits(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := e.slotCounts(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]wire.ConcurrencyLimitView, 0, len(ls))
	for _, l := range ls {
		out = append(out, e.clusterView(l, counts))
	}
	return out, nil
}

// ConcurrencyLimit returns one limit, or ErrLimitNotFound.
func (e *API) ConcurrencyLimit(ctx context.Context, kind, name string) (wire.ConcurrencyLimitView, error) {
	if err := checkLimitRef(kind, name); err != nil {
		return wire.ConcurrencyLimitView{}, err
	}
	ls, err := e.store.ListConcurrencyLimits(ctx)
	if err != nil {
		return wire.ConcurrencyLimitView{}, err
	}
	for _, l := range ls {
		if l.Kind == kind && l.Name == name {
			counts, err := e.slotCounts(ctx)
			if err != nil {
				return wire.ConcurrencyLimitView{}, err
			}
			return e.clusterView(l, counts), nil
		}
	}
	return wire.ConcurrencyLimitView{}, fmt.Errorf("%w: %s %s", ErrLimitNotFound, kind, name)
}

// SetConcurrencyLimit sets the limit of a group or a concurrency key to max runs in flight at
// once, 1..MaxConcurrencyLimit. It is stored before it takes effect, and takes effect at once:
// a higher limit lets waiting fires start now, a lower one lets no new run start until the
// count falls under it (the runs in flight finish).
func (e *API) SetConcurrencyLimit(ctx context.Context, kind, name string, max int, actor string) (wire.ConcurrencyLimitView, error) {
	if err := checkLimitRef(kind, name); err != nil {
		return wire.ConcurrencyLimitView{}, err
	}
	if max < 1 || max > MaxConcurrencyLimit {
		return wire.ConcurrencyLimitView{}, fieldErr("max", "must be 1..%d runs in flight (DELETE removes a limit), got %d", MaxConcurrencyLimit, max)
	}
	if err := e.checkRunning(); err != nil {
		return wire.ConcurrencyLimitView{}, err
	}
	if !e.gates.keepsLimits() {
		return wire.ConcurrencyLimitView{}, fmt.Errorf("%w: concurrency limit %s %s: %s", ErrConflict, kind, name, errShardedLimits)
	}
	l := model.ConcurrencyLimit{Kind: kind, Name: name, Max: max, UpdatedAt: e.nowMS()}
	e.limitsMu.Lock()
	defer e.limitsMu.Unlock()
	if err := e.store.PutConcurrencyLimit(ctx, l); err != nil {
		return wire.ConcurrencyLimitView{}, err
	}
	e.conc.setMax(limitRef{kind, name}, max)
	e.gates.limitGauges(limitRef{kind, name}, true)
	if e.conc.cl != nil {
		e.conc.cl.limitSet(ctx, limitRef{kind, name}, max) // core_clusterslots.go
	}
	act := model.Action{Action: ActConcurrencyLimit, Actor: actor, At: l.UpdatedAt,
		Detail: "concurrency limit " + kind + " " + name + ": " + strconv.Itoa(max) + " run(s) in flight at once"}
	if err := e.write(ctx, &persist.Group{Actions: []model.Action{act}}); err != nil {
		return wire.ConcurrencyLimitView{}, err
	}
	counts, err := e.slotCounts(ctx)
	if err != nil {
		return wire.ConcurrencyLimitView{}, err
	}
	return e.clusterView(l, counts), nil
}

// DeleteConcurrencyLimit removes a limit: every fire waiting for it alone starts at once.
func (e *API) DeleteConcurrencyLimit(ctx context.Context, kind, name, actor string) error {
	if err := checkLimitRef(kind, name); err != nil {
		return err
	}
	if err := e.checkRunning(); err != nil {
		return err
	}
	e.limitsMu.Lock()
	defer e.limitsMu.Unlock()
	ok, err := e.store.DeleteConcurrencyLimit(ctx, kind, name)
	if err != nil {
		return err
	}
	if !ok && (e.conc.cl == nil || e.conc.maxOf(limitRef{kind, name}) == 0) {
		return fmt.Errorf("%w: %s %s", ErrLimitNotFound, kind, name)
	}
	// On a sharded cluster every node is asked at once, and another may have deleted the
	// row first: a node that still enforces the limit drops it too.
	e.conc.setMax(limitRef{kind, name}, 0)
	e.gates.limitGauges(limitRef{kind, name}, false)
	if e.conc.cl != nil {
		e.conc.cl.limitSet(ctx, limitRef{kind, name}, 0) // its waiters go now
	}
	act := model.Action{Action: ActConcurrencyLimit, Actor: actor, At: e.nowMS(),
		Detail: "concurrency limit " + kind + " " + name + " removed"}
	return e.write(ctx, &persist.Group{Actions: []model.Action{act}})
}

// errShardedLimits says why a sharded engine whose store cannot hold slots
// (persist.SlotStore; every SQL store can) takes no concurrency limit: each node counts the
// runs it starts, so a limit of n would let every node run n. Rather than keep a limit it
// cannot keep, axe refuses it. Sharded engines keep their limits in the store
// (core_clusterslots.go).
var errShardedLimits = errors.New("concurrency limits are kept by one scheduler counting every run, and nodes that each schedule their own shards cannot keep them; " +
	"use --ha-mode primary (one primary schedules everything) for tasks that need them")

// keepsLimits reports whether this node can keep a concurrency limit: it counts every run
// under it itself, or the runs are counted across nodes in the store.
func (e *gates) keepsLimits() bool { return !e.acrossNodes || e.conc.cl != nil }

// loadLimits reads the stored limits into the gate, at start before anything fires. A
// sharded engine refuses to start over stored limits (errShardedLimits), naming them.
func (e *gates) loadLimits(ctx context.Context) error {
	ls, err := e.store.ListConcurrencyLimits(ctx)
	if err != nil {
		return fmt.Errorf("cannot load concurrency limits: %w", err)
	}
	if !e.keepsLimits() && len(ls) > 0 {
		names := make([]string, 0, len(ls))
		for _, l := range ls {
			names = append(names, fmt.Sprintf("%s %s (max %d)", l.Kind, l.Name, l.Max))
		}
		return fmt.Errorf("cannot schedule by shard with the stored concurrency limits %s: %w; delete them from a single node or a primary (DELETE /api/v1/concurrency-limits/KIND/NAME) first",
			strings.Join(names, ", "), errShardedLimits)
	}
	e.conc.setAll(ls)
	for _, l := range ls {
		e.limitGauges(limitRef{l.Kind, l.Name}, true)
		if e.conc.cl != nil {
			e.conc.cl.track(limitRef{l.Kind, l.Name})
		}
	}
	return nil
}

// limitGauges registers (or drops) the gauges of one limit. Their labels are bounded by the
// limits an operator set, not by tasks.
func (e *gates) limitGauges(r limitRef, on bool) {
	labels := fmt.Sprintf(`{kind=%q,name=%q}`, r.kind, r.name)
	names := []string{"axe_concurrency_limit_in_use" + labels, "axe_concurrency_limit_waiting" + labels, "axe_concurrency_limit_max" + labels}
	if !on {
		for _, n := range names {
			e.m.set.UnregisterMetric(n)
		}
		return
	}
	e.m.set.GetOrCreateGauge(names[0], func() float64 { return float64(e.conc.view(r).used) })
	e.m.set.GetOrCreateGauge(names[1], func() float64 { return float64(e.conc.view(r).waiting) })
	e.m.set.GetOrCreateGauge(names[2], func() float64 { return float64(e.conc.maxOf(r)) })
}
