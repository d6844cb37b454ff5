package engine

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/axe-sched/axe/model"
)

// upstreamSet is the set of task names some task depends on. A success of a task outside it
// costs nothing; only upstreams look their dependents up. Names are added when a dependency
// task is created or edited and never removed while running: a stale name only costs one
// empty lookup.
type upstreamSet struct {
	mu sync.RWMutex
	m  map[string]struct{}
}

func (u *upstreamSet) add(names ...string) {
	u.mu.Lock()
	if u.m == nil {
		u.m = make(map[string]struct{})
	}
	for _, n := range names {
		u.m[n] = struct{}{}
	}
	u.mu.Unlock()
}

func (u *upstreamSet) has(name string) bool {
	u.mu.RLock()
	defer u.mu.RUnlock()
	_, ok := u.m[name]
	return ok
}

// loadDependencies restores the upstream set and releases every dependency task whose
// upstreams succeeded while no scheduler ran (a release decided but not yet written when
// the previous process died).
func (e *Engine) loadDependencies(ctx context.Context) error {
	names, err := e.store.UpstreamNames(ctx)
	if err != nil {
		return err
	}
	e.upstreams.add(names...)
	for _, up := range names {
		e.releaseDependents(ctx, up)
	}
	return nil
}

// upstreamDone runs after an upstream's success is durable: every downstream whose
// conditions are now met goes WAITING→SCHEDULED and into the wheel at once.
func (e *Engine) upstreamDone(name string) {
	if !e.upstreams.has(name) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.releaseDependents(ctx, name)
}

func (e *Engine) releaseDependents(ctx context.Context, upstream string) {
	deps, err := e.store.Dependents(ctx, upstream)
	if err != nil {
		e.log.Error("cannot look up dependents", "upstream", upstream, "error", err)
		return
	}
	var elsewhere model.ShardSet
	for _, d := range deps {
		if d.Def.Trigger != model.TriggerDependency || d.Runtime.State != model.StateWaiting || d.Def.Paused {
			continue
		}
		if n := model.ShardOf(d.Def.Name); e.cfg.Sharded && e.shards[n].phase.Load() == shardOff {
			// Another node schedules it: that node releases it, under its shard's fence.
			elsewhere.Add(n)
			continue
		}
		if err := e.maybeRelease(ctx, d.Def.ID); err != nil {
			e.log.Error("cannot release dependent", "task", d.Def.Name, "upstream", upstream, "error", err)
		}
	}
	if elsewhere.Len() > 0 && e.cfg.ReleaseElsewhere != nil {
		for _, n := range elsewhere.List() {
			e.cfg.ReleaseElsewhere(n, upstream)
		}
	}
}

// ReleaseDependents releases the dependents of upstream that this engine schedules, whose
// conditions are met: what the owner of a shard does when the node that recorded an
// upstream's success asks it (Config.ReleaseElsewhere). A release is a compare-and-swap of
// the dependent's WAITING state under its shard's fence, decided on the durable upstream
// runs, so asking twice releases once.
func (e *Engine) ReleaseDependents(ctx context.Context, upstream string) error {
	if err := e.checkRunning(); err != nil {
		return err
	}
	e.upstreams.add(upstream)
	e.releaseDependents(e.scheduling(ctx), upstream)
	return nil
}

// depLoop is how a sharded engine looks at its waiting dependents itself, every
// LoadInterval: a release asked of it by another node (ReleaseElsewhere) may not arrive
// (that node died right after the upstream's success), and an upstream created on another
// node is learnt here.
func (e *Engine) depLoop(ctx context.Context) {
	defer e.loopsWG.Done()
	e.every(ctx, e.cfg.LoadInterval, func() {
		sctx, cancel := context.WithTimeout(ctx, e.cfg.LoadInterval)
		defer cancel()
		if err := e.sweepDependents(e.scheduling(sctx)); err != nil && ctx.Err() == nil {
			e.log.Warn("cannot sweep the waiting dependents", "error", err)
		}
	})
}

// sweepDependents learns every upstream name and releases each waiting dependent of the
// shards in ctx's filter whose conditions are met.
func (e *Engine) sweepDependents(ctx context.Context) error {
	names, err := e.store.UpstreamNames(ctx)
	if err != nil {
		return err
	}
	e.upstreams.add(names...)
	var waiting []int64
	err = e.store.LoadByState(ctx, []model.State{model.StateWaiting}, func(pt *model.Task) error {
		if pt.Def.Trigger == model.TriggerDependency && !pt.Def.Paused {
			waiting = append(waiting, pt.Def.ID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range waiting {
		if err := e.maybeRelease(ctx, id); err != nil && !errors.Is(err, model.ErrTaskNotFound) && !errors.Is(err, model.ErrShardNotHeld) {
			e.log.Warn("cannot release a waiting dependent", "id", id, "error", err)
		}
	}
	return nil
}

// lastSuccess returns the newest successful run of a task, or nil.
func (e *Engine) lastSuccess(ctx context.Context, name string) (*model.Run, error) {
	pt, err := e.store.GetTask(ctx, name)
	if err != nil {
		return nil, err
	}
	runs, err := e.store.ListRuns(ctx, pt.Def.ID, 50)
	if err != nil {
		return nil, err
	}
	var best *model.Run
	for i := range runs {
		r := &runs[i]
		if r.Result == model.ResultSuccess && (best == nil || r.EndedAt > best.EndedAt) {
			best = r
		}
	}
	return best, nil
}

// maybeRelease schedules a WAITING dependency task when its upstreams have succeeded since
// its last run: all of them (depends_mode all, the default: fan-in) or any one.
func (e *Engine) maybeRelease(ctx context.Context, id int64) error {
	t, err := e.acquire(ctx, id, acquireOpts{})
	if err != nil {
		return err
	}
	defer e.release(t)
	if t.deleted || t.def.Paused || t.rt.State != model.StateWaiting || t.def.Trigger != model.TriggerDependency {
		return nil
	}
	// Successes count from the task's last run, or from its creation: a new downstream does
	// not fire for upstream runs that happened before it existed.
	since := max(t.rt.LastTriggerTime, t.def.CreatedAt)
	var released []string
	for _, up := range t.def.DependsOn {
		r, err := e.lastSuccess(ctx, up)
		if err != nil && err != model.ErrTaskNotFound {
			return err
		}
		if r != nil && r.EndedAt > since {
			released = append(released, up+" ("+r.Ticket+")")
		}
	}
	need := len(t.def.DependsOn)
	if t.def.DependsMode == "any" {
		need = 1
	}
	if len(released) < need || len(released) == 0 {
		return nil
	}
	sort.Strings(released)
	now := e.nowMS()
	nrt := t.rt
	nrt.State = model.StateScheduled
	nrt.NextTriggerTime = now
	if err := checkTransition(t.rt.State, nrt.State); err != nil {
		return err
	}
	t.releasedBy = "released by " + strings.Join(released, ", ")
	act := e.action(t, "", ActSchedule, t.rt.State, nrt.State, ActorScheduler, t.releasedBy, now)
	return e.commit(ctx, t, nrt, commitOpts{wait: true, acts: []model.Action{act}})
}
