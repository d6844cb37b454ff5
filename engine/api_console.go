package engine

import (
	"context"
	"errors"
	"time"

	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

// This file holds the read-only views the operator console needs beyond the task API: fire
// previews with DST marks, counts by group, executors with their runs in flight, and the
// counters the console charts. None of them changes state.

// ErrNoGroupCounts is returned by GroupCounts when the store cannot count by group.
var ErrNoGroupCounts = errors.New("the store cannot count tasks by group")

// Fire is one previewed fire time and its DST mark (cron.DSTGap, cron.DSTRepeat or "").
type Fire struct {
	At  time.Time
	DST string
	// Jitter is the fire's delay past At for a jittered task (ApplyJitter): it leaves at
	// At plus Jitter.
	Jitter time.Duration
}

// ApplyJitter sets each fire's Jitter as the task named task with a jitter_sec of jitterSec
// would be delayed (JitterOffset), after checking jitterSec as a create would against expr in
// zone tz (the default zone when empty): 0..MaxJitterSec and below the smallest gap between
// fires. The offsets derive from the name, so task is required with a bound.
func (e *API) ApplyJitter(task string, jitterSec int, expr, tz, dialect string, fires []Fire) error {
	if jitterSec == 0 {
		return nil
	}
	if task == "" {
		return fieldErr("task", "is required with jitter_sec: the offsets derive from the task's name")
	}
	if !validName(task) {
		return fieldErr("task", "invalid task name %q", task)
	}
	if tz == "" {
		tz = e.cfg.DefaultTimezone
	}
	d, err := resolveDialect(dialect, e.cfg.CronDialect)
	if err != nil {
		return fieldErr("dialect", "must be unix or quartz, got %q", dialect)
	}
	def := model.TaskDef{Name: task, Trigger: model.TriggerCron, Cron: expr, CronDialect: string(d), Timezone: tz, JitterSec: jitterSec}
	if err := checkJitter(&def, e.now()); err != nil {
		return err
	}
	for i := range fires {
		fires[i].Jitter = time.Duration(JitterOffset(task, fires[i].At.UnixMilli(), jitterSec)) * time.Millisecond
	}
	return nil
}

// PreviewFires is NextFireTimes from any instant, with each fire's DST mark: the next n
// fires of expr strictly after from, in zone tz (the default zone when empty).
func (e *API) PreviewFires(expr, tz, dialect string, from time.Time, n int) ([]Fire, *time.Location, error) {
	if tz == "" {
		tz = e.cfg.DefaultTimezone
	}
	d, err := resolveDialect(dialect, e.cfg.CronDialect)
	if err != nil {
		return nil, nil, fieldErr("dialect", "must be unix or quartz, got %q", dialect)
	}
	if dialect == "" && e.cfg.CronDialect == "" {
		if err := cron.CheckAmbiguous(expr); err != nil {
			return nil, nil, fieldErr("expr", "%v", err)
		}
	}
	loc, err := cron.LoadLocation(tz)
	if err != nil {
		return nil, nil, fieldErr("tz", "unknown zone %q", tz)
	}
	if n < 1 || n > cron.NextNMax {
		return nil, nil, fieldErr("n", "must be 1..%d, got %d", cron.NextNMax, n)
	}
	if from.IsZero() {
		from = e.now()
	}
	s, err := cron.ParseIn(expr, d)
	if err != nil {
		return nil, nil, fieldErr("expr", "%v", err)
	}
	times, err := cron.NextNIn(expr, d, loc, from, n)
	if err != nil {
		return nil, nil, fieldErr("expr", "%v", err)
	}
	out := make([]Fire, len(times))
	for i, t := range times {
		out[i] = Fire{At: t, DST: cron.DSTMark(s, t, loc)}
	}
	return out, loc, nil
}

// GroupCounts counts the tasks by group and durable state.
func (e *API) GroupCounts(ctx context.Context) ([]persist.GroupCount, error) {
	gc, ok := e.store.(persist.GroupCounter)
	if !ok {
		return nil, ErrNoGroupCounts
	}
	return gc.GroupCounts(ctx)
}

// ExecutorViews lists the registry with each executor's runs in flight.
func (e *API) ExecutorViews() []wire.ExecutorView {
	snap := e.registry.Snapshot()
	out := make([]wire.ExecutorView, 0, len(snap))
	for _, x := range snap {
		out = append(out, wire.ExecutorView{Executor: model.Executor{App: x.App, Address: x.Address, Protocol: x.Protocol,
			Handlers: x.Handlers, RegisteredAt: x.RegisteredAt, LastHeartbeat: x.LastHeartbeat, Status: executorStatus(x)},
			Inflight: x.Inflight})
	}
	return out
}

// Counts are running totals since the engine started, for per-minute charts.
type Counts struct {
	Fires    uint64 // triggers: scheduled fires and run-now
	Failures uint64 // results failed, timed out or lost
}

// Totals returns the engine's running totals; two readings a minute apart give that
// minute's fires and failures.
func (e *API) Totals() Counts {
	r := e.m.results
	return Counts{
		Fires: e.m.triggers.Get(),
		Failures: r.result(model.ResultFailed).Get() + r.result(model.ResultTimeout).Get() +
			r.result(model.ResultLost).Get(),
	}
}

// BreakersOpen is the number of tasks whose circuit breaker is open.
func (e *API) BreakersOpen() int { return e.brk.openCount() }

// BreakerOpen reports whether task id's circuit breaker is open.
func (e *API) BreakerOpen(id int64) bool {
	e.brk.mu.Lock()
	defer e.brk.mu.Unlock()
	b := e.brk.m[id]
	return b != nil && b.open
}

// LastRuns returns the newest run of each task id that has one (one index read per task on
// idx_task_run_task), for a page of the task list.
func (e *API) LastRuns(ctx context.Context, ids []int64) (map[int64]model.Run, error) {
	out := make(map[int64]model.Run, len(ids))
	for _, id := range ids {
		runs, err := e.store.ListRuns(ctx, id, 1)
		if err != nil {
			return nil, err
		}
		if len(runs) > 0 {
			out[id] = runs[0]
		}
	}
	return out, nil
}

// NodeID is this scheduler's name.
func (e *API) NodeID() string { return e.cfg.NodeID }

// DefaultTimezone is the zone of a task created without one (the server's --timezone).
func (e *API) DefaultTimezone() string { return e.cfg.DefaultTimezone }

// ListTasksPage is ListTasks for one page of f.Limit rows: with them it returns the last
// row the store read (nil when the store had no more than these), from which the next
// page's cursor is made. The state filter is applied again to the in-memory runtime and
// may drop rows, so a page can be short and still be followed by another.
func (e *API) ListTasksPage(ctx context.Context, f persist.TaskFilter) ([]model.Task, *model.Task, error) {
	state := f.State
	list, err := e.store.ListTasks(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	var last *model.Task
	if f.Limit > 0 && len(list) >= f.Limit {
		cp := list[len(list)-1]
		last = &cp
	}
	out := list[:0]
	for i := range list {
		e.overlay(&list[i])
		if state == "" || list[i].Runtime.State == state {
			out = append(out, list[i])
		}
	}
	return out, last, nil
}
