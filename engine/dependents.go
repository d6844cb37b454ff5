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

// dependentsCore is what the dependents ask of the core: a released dependent is a
// transition of its task.
type dependentsCore interface {
	checkRunning() error
	acquire(ctx context.Context, id int64, o acquireOpts) (*task, error)
	release(t *task)
	action(t *task, ticket, name string, from, to model.State, actor, detail string, at int64) model.Action
	commit(ctx context.Context, t *task, nrt model.Runtime, o commitOpts) error
}

// Dependents is the service that releases dependency tasks (trigger "dependency") when
// their upstreams succeed: at once after a success recorded here (upstreamDone), when
// another node asks (Release), at start and recovery (load), and on a sharded engine in a
// sweep every LoadInterval (run).
type Dependents struct {
	base
	core      dependentsCore
	upstreams upstreamSet
	// sweeps: the waiting dependents are swept every LoadInterval (sharded).
	sweeps bool
	loop   loop
}

// Dependents is the dependents service, which another node's release reaches.
func (e *API) Dependents() *Dependents { return e.deps }

func (d *Dependents) start() error {
	if !d.sweeps {
		return nil
	}
	return d.loop.start(d.run)
}

func (d *Dependents) stop(ctx context.Context) error { return d.loop.stop(ctx) }

// load restores the upstream set and releases every dependency task whose
// upstreams succeeded while no scheduler ran (a release decided but not yet written when
// the previous process died).
func (d *Dependents) load(ctx context.Context) error {
	names, err := d.store.UpstreamNames(ctx)
	if err != nil {
		return err
	}
	d.upstreams.add(names...)
	for _, up := range names {
		d.releaseAll(ctx, up)
	}
	return nil
}

// upstreamDone runs after an upstream's success is durable: every downstream whose
// conditions are now met goes WAITING→SCHEDULED and into the wheel at once.
func (d *Dependents) upstreamDone(name string) {
	if !d.upstreams.has(name) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d.releaseAll(ctx, name)
}

func (d *Dependents) releaseAll(ctx context.Context, upstream string) {
	deps, err := d.store.Dependents(ctx, upstream)
	if err != nil {
		d.log.Error("cannot look up dependents", "upstream", upstream, "error", err)
		return
	}
	var elsewhere model.ShardSet
	for _, dep := range deps {
		if dep.Def.Trigger != model.TriggerDependency || dep.Runtime.State != model.StateWaiting || dep.Def.Paused {
			continue
		}
		if n := model.ShardOf(dep.Def.Name); !d.own.schedules(n) {
			// Another node schedules it: that node releases it, under its shard's fence.
			elsewhere.Add(n)
			continue
		}
		if err := d.maybeRelease(ctx, dep.Def.ID); err != nil {
			d.log.Error("cannot release dependent", "task", dep.Def.Name, "upstream", upstream, "error", err)
		}
	}
	if elsewhere.Len() > 0 && d.cfg.ReleaseElsewhere != nil {
		for _, n := range elsewhere.List() {
			d.cfg.ReleaseElsewhere(n, upstream)
		}
	}
}

// Release releases the dependents of upstream that this engine schedules, whose
// conditions are met: what the owner of a shard does when the node that recorded an
// upstream's success asks it (Config.ReleaseElsewhere). A release is a compare-and-swap of
// the dependent's WAITING state under its shard's fence, decided on the durable upstream
// runs, so asking twice releases once.
func (d *Dependents) Release(ctx context.Context, upstream string) error {
	if err := d.core.checkRunning(); err != nil {
		return err
	}
	d.upstreams.add(upstream)
	d.releaseAll(d.own.scheduling(ctx), upstream)
	return nil
}

// run is how a sharded engine looks at its waiting dependents itself, every
// LoadInterval: a release asked of it by another node (ReleaseElsewhere) may not arrive
// (that node died right after the upstream's success), and an upstream created on another
// node is learnt here.
func (d *Dependents) run(ctx context.Context) {
	d.every(ctx, d.cfg.LoadInterval, func() {
		sctx, cancel := context.WithTimeout(ctx, d.cfg.LoadInterval)
		defer cancel()
		if err := d.sweep(d.own.scheduling(sctx)); err != nil && ctx.Err() == nil {
			d.log.Warn("cannot sweep the waiting dependents", "error", err)
		}
	})
}

// sweep learns every upstream name and releases each waiting dependent of the
// shards in ctx's filter whose conditions are met.
func (d *Dependents) sweep(ctx context.Context) error {
	names, err := d.store.UpstreamNames(ctx)
	if err != nil {
		return err
	}
	d.upstreams.add(names...)
	var waiting []int64
	err = d.store.LoadByState(ctx, []model.State{model.StateWaiting}, func(pt *model.Task) error {
		if pt.Def.Trigger == model.TriggerDependency && !pt.Def.Paused {
			waiting = append(waiting, pt.Def.ID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range waiting {
		if err := d.maybeRelease(ctx, id); err != nil && !errors.Is(err, model.ErrTaskNotFound) && !errors.Is(err, model.ErrShardNotHeld) {
			d.log.Warn("cannot release a waiting dependent", "id", id, "error", err)
		}
	}
	return nil
}

// lastSuccess returns the newest successful run of a task, or nil.
func (d *Dependents) lastSuccess(ctx context.Context, name string) (*model.Run, error) {
	pt, err := d.store.GetTask(ctx, name)
	if err != nil {
		return nil, err
	}
	runs, err := d.store.ListRuns(ctx, pt.Def.ID, 50)
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
func (d *Dependents) maybeRelease(ctx context.Context, id int64) error {
	t, err := d.core.acquire(ctx, id, acquireOpts{})
	if err != nil {
		return err
	}
	defer d.core.release(t)
	if t.deleted || t.def.Paused || t.rt.State != model.StateWaiting || t.def.Trigger != model.TriggerDependency {
		return nil
	}
	// Successes count from the task's last run, or from its creation: a new downstream does
	// not fire for upstream runs that happened before it existed.
	since := max(t.rt.LastTriggerTime, t.def.CreatedAt)
	var released []string
	for _, up := range t.def.DependsOn {
		r, err := d.lastSuccess(ctx, up)
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
	now := d.nowMS()
	nrt := t.rt
	nrt.State = model.StateScheduled
	nrt.NextTriggerTime = now
	if err := checkTransition(t.rt.State, nrt.State); err != nil {
		return err
	}
	t.releasedBy = "released by " + strings.Join(released, ", ")
	act := d.core.action(t, "", ActSchedule, t.rt.State, nrt.State, ActorScheduler, t.releasedBy, now)
	return d.core.commit(ctx, t, nrt, commitOpts{wait: true, acts: []model.Action{act}})
}
