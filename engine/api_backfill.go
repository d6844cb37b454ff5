package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

// BackfillRequest asks for one run of a cron task per fire time of its schedule in
// [From, To] (backfills.go).
type BackfillRequest struct {
	From, To time.Time
	// Parallel is how many of its runs may be in flight at once, 1..BackfillParallelMax.
	Parallel int
}

// ErrBackfillNotFound is returned for an unknown backfill (or one of another task).
var ErrBackfillNotFound = model.ErrBackfillNotFound

func viewOf(row model.Backfill, running int64, inMemory bool) wire.BackfillView {
	loc, err := time.LoadLocation(row.Timezone)
	if err != nil {
		loc = time.UTC
	}
	if !inMemory {
		running = max(0, row.Started-row.Succeeded-row.Failed-row.Skipped)
		if row.Status != model.BackfillRunning && row.Low > row.To {
			running = 0
		}
	}
	v := wire.BackfillView{
		ID: row.ID, Task: row.TaskName, Parallel: row.Parallel, Cron: row.Cron, Timezone: row.Timezone,
		From:   time.UnixMilli(row.From).In(loc).Format(time.RFC3339Nano),
		To:     time.UnixMilli(row.To).In(loc).Format(time.RFC3339Nano),
		Status: row.Status, Total: row.Total, Started: row.Started, Succeeded: row.Succeeded,
		Failed: row.Failed, Skipped: row.Skipped, Running: running,
		Done:    row.Succeeded + row.Failed + row.Skipped,
		Pending: max(0, row.Total-row.Started), Actor: row.Actor, CreatedAt: row.CreatedAt,
		UpdatedAt: row.UpdatedAt, EndedAt: row.EndedAt, Note: row.Note,
	}
	if row.Next > 0 && row.Status == model.BackfillRunning {
		v.NextFireTime = time.UnixMilli(row.Next).In(loc).Format(time.RFC3339Nano)
	}
	return v
}

// view is b as it stands in memory.
func (b *backfill) view() wire.BackfillView {
	b.mu.Lock()
	defer b.mu.Unlock()
	return viewOf(b.row, int64(len(b.inflight)), true)
}

// Create starts a backfill of the cron task name: one run per fire time its schedule
// (in its time zone) produced in [req.From, req.To], each with that nominal time as its
// scheduled_at, at most req.Parallel at once. The range must lie in the past (To at most
// now) and hold 1..BackfillRunsMax fire times. It returns once the backfill is stored; its
// runs start in the background. Fire times that have a run already are skipped, so asking
// twice for a range, or for overlapping ranges, runs nothing twice.
func (bf *Backfills) Create(ctx context.Context, name string, req BackfillRequest, actor string) (*wire.BackfillView, error) {
	if err := bf.core.checkRunning(); err != nil {
		return nil, err
	}
	switch {
	case req.Parallel < 1 || req.Parallel > BackfillParallelMax:
		return nil, fieldErr("parallel", "must be 1..%d, got %d", BackfillParallelMax, req.Parallel)
	case req.From.IsZero():
		return nil, fieldErr("from", "is required (RFC 3339)")
	case req.To.IsZero():
		return nil, fieldErr("to", "is required (RFC 3339)")
	case req.To.Before(req.From):
		return nil, fieldErr("to", "must not be before from")
	}
	now := bf.nowMS()
	if req.To.UnixMilli() > now {
		return nil, fieldErr("to", "must not be in the future (now is %s): a backfill runs fire times that have passed",
			time.UnixMilli(now).UTC().Format(time.RFC3339))
	}
	t, err := bf.core.acquire(ctx, 0, acquireOpts{name: name})
	if err != nil {
		return nil, err
	}
	def, id, sched, loc := t.def, t.id, t.sched, t.loc
	gate := bf.own.shardGate(t.shard, t.sepoch, true)
	bf.core.release(t)
	if gate != nil {
		return nil, gate // its shard is being handed over: start it on the next owner
	}
	if def.Trigger != model.TriggerCron || sched == nil {
		return nil, fieldErr("name", "task %q is a %s task; only cron tasks can be backfilled", name, def.Trigger)
	}
	from, to := req.From.UnixMilli(), req.To.UnixMilli()
	first := fireAfterMS(sched, loc, from-1)
	var total int64
	for x := first; x != 0 && x <= to; x = fireAfterMS(sched, loc, x) {
		total++
		if total > BackfillRunsMax {
			return nil, fieldErr("to", "the range holds more than %d fire times of %q", BackfillRunsMax, def.Cron)
		}
		if total&0xffff == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	if total == 0 {
		return nil, fieldErr("from", "the range holds no fire time of %q in %s", def.Cron, def.Timezone)
	}
	row := model.Backfill{
		TaskID: id, TaskName: def.Name, From: from, To: to, Parallel: req.Parallel,
		Cron: def.Cron, CronDialect: def.CronDialect, Timezone: def.Timezone, Total: total,
		Next: first, Low: first, Status: model.BackfillRunning, Actor: actor, CreatedAt: now, UpdatedAt: now,
	}
	fctx, err := bf.own.fencedFor(ctx, def.Name) // written under the task's shard's fence
	if err != nil {
		return nil, err
	}
	if err := bf.store.CreateBackfill(fctx, &row); err != nil {
		return nil, err
	}
	b, err := newBackfill(row)
	if err != nil {
		return nil, err
	}
	act := model.Action{TaskID: id, TaskName: def.Name, Action: ActBackfillStart, Actor: actor, At: now,
		Detail: fmt.Sprintf("%s: %d fire times of %q (%s) from %s to %s, %d at a time", b.detail, total, def.Cron,
			def.Timezone, time.UnixMilli(from).In(loc).Format(time.RFC3339), time.UnixMilli(to).In(loc).Format(time.RFC3339), req.Parallel)}
	if err := bf.core.write(ctx, &persist.Group{Actions: []model.Action{act}}); err != nil {
		bf.log.Warn("cannot record the start of a backfill", "backfill", row.ID, "error", err)
	}
	bf.set.add(b)
	v := b.view()
	return &v, nil
}

// Get returns a backfill of the task name.
func (bf *Backfills) Get(ctx context.Context, name string, id int64) (*wire.BackfillView, error) {
	if b := bf.set.get(id); b != nil {
		v := b.view()
		if v.Task != name {
			return nil, fmt.Errorf("%w: task %q has no backfill %d", ErrBackfillNotFound, name, id)
		}
		return &v, nil
	}
	row, err := bf.store.GetBackfill(ctx, id)
	if err != nil {
		return nil, err
	}
	if row.TaskName != name {
		return nil, fmt.Errorf("%w: task %q has no backfill %d", ErrBackfillNotFound, name, id)
	}
	v := viewOf(*row, 0, false)
	return &v, nil
}

// List returns the task's backfills, newest first, at most limit (0: 100).
func (bf *Backfills) List(ctx context.Context, name string, limit int) ([]wire.BackfillView, error) {
	id, err := bf.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	rows, err := bf.store.ListBackfills(ctx, id, limit)
	if err != nil {
		return nil, err
	}
	out := make([]wire.BackfillView, 0, len(rows))
	for _, row := range rows {
		if b := bf.set.get(row.ID); b != nil {
			out = append(out, b.view())
			continue
		}
		out = append(out, viewOf(row, 0, false))
	}
	return out, nil
}

// Cancel cancels a running backfill of the task name: no run of it starts any more;
// its runs in flight finish (they are not killed) and are counted. Canceling a backfill
// that has ended changes nothing and returns it as it is.
func (bf *Backfills) Cancel(ctx context.Context, name string, id int64, actor string) (*wire.BackfillView, error) {
	if err := bf.core.checkRunning(); err != nil {
		return nil, err
	}
	v, err := bf.Get(ctx, name, id)
	if err != nil {
		return nil, err
	}
	b := bf.set.get(id)
	if b == nil || v.Status != model.BackfillRunning {
		return v, nil
	}
	b.mu.Lock()
	if b.row.Status == model.BackfillRunning {
		bf.endLocked(b, model.BackfillCanceled, actor, "canceled by "+actor)
	}
	b.mu.Unlock()
	bf.save(ctx, b, true)
	nv := b.view()
	return &nv, nil
}
