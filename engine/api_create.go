package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

// Limits of CreateTasks (docs/bulk.md).
const (
	// BatchMaxTasks is the most tasks one CreateTasks call takes.
	BatchMaxTasks = 10000
)

// What CreateTasks does with a name that is already taken (?on_conflict=).
const (
	OnConflictError   = "error"   // the batch is refused, naming every taken name
	OnConflictSkip    = "skip"    // the existing task stays; the item counts as skipped
	OnConflictReplace = "replace" // the existing task is deleted and the item created anew
)

// ItemError is what is wrong with one item of a batch, by its index in the batch.
type ItemError struct {
	Index int
	Err   error
}

// BatchError refuses a batch: it names every bad item, and nothing of the batch was
// written. It unwraps to ErrInvalidTask, or to ErrTaskExists when every item is refused for
// a taken name only.
type BatchError struct {
	Items []ItemError
}

func (e *BatchError) Error() string {
	if len(e.Items) == 1 {
		return fmt.Sprintf("item %d: %v", e.Items[0].Index, e.Items[0].Err)
	}
	return fmt.Sprintf("%d bad items; the first, item %d: %v", len(e.Items), e.Items[0].Index, e.Items[0].Err)
}

// Unwrap lets the API map a refused batch to its status code.
func (e *BatchError) Unwrap() error {
	for _, it := range e.Items {
		if !errors.Is(it.Err, ErrTaskExists) {
			return ErrInvalidTask
		}
	}
	return ErrTaskExists
}

// newTaskCreate validates spec and builds what the store writes for it: the definition, the
// runtime and the action records. The creation is one record, from no state to the state the
// task starts in (SCHEDULED, WAITING or PAUSED), whose detail names the trigger and the
// first fire: the WAITING→SCHEDULED step of a new task is not a second record, so a one-shot
// task's life costs one create action beside its run row (docs/retention.md).
func (e *API) newTaskCreate(spec *wire.TaskSpec, actor string, now int64) (*task, *persist.TaskCreate, []model.Run, error) {
	def, runAt, err := e.normalizeCreate(spec)
	if err != nil {
		return nil, nil, nil, err
	}
	def.CreatedAt, def.UpdatedAt = now, now
	t := &task{def: &def, shard: uint8(model.ShardOf(def.Name))}
	if err := t.compile(); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %v", ErrInvalidTask, err)
	}
	rt, detail := e.initialRuntime(t, now)
	var runs []model.Run
	if runAt != 0 {
		rt, detail, runs = e.runAtRuntime(t, runAt, now)
	}
	if rt.State == model.StatePaused {
		rt.Note = spec.Note // a task created paused keeps its note, as a pause with one would
		rt.PausedBy = model.PausedByCreate
	}
	t.rt = rt
	tc := &persist.TaskCreate{Def: t.def, Runtime: rt}
	tc.Actions = []model.Action{e.action(t, "", ActCreate, "", rt.State, actor, createDetail(def.Trigger, rt.State, spec.Note, detail), now)}
	if len(runs) > 0 {
		// A run_at already past under misfire policy skip: the skipped fire is on record
		// as a run of its own, and the task never fires.
		tc.Actions = append(tc.Actions, e.action(t, runs[0].Ticket, ActMisfire, model.StateWaiting, model.StateWaiting,
			ActorScheduler, runs[0].Detail, now))
	}
	return t, tc, runs, nil
}

// createDetail is the detail of a create record: the trigger, "created paused" with the
// note of a task created paused, and what its runtime starts with (the first fire).
func createDetail(trigger string, state model.State, note, first string) string {
	parts := []string{trigger}
	if state == model.StatePaused {
		parts = append(parts, joinNote("created paused", note))
	}
	if first != "" {
		parts = append(parts, first)
	}
	return strings.Join(parts, "; ")
}

// createGrouped is CreateTask: the definition, runtime and action records go to the batched
// writer as one group, committed with other groups in one transaction. When the writer is
// saturated the create is refused with persist.ErrWriterBusy rather than queued.
func (e *API) createGrouped(ctx context.Context, spec *wire.TaskSpec, actor string) (*model.Task, error) {
	if err := e.checkRunning(); err != nil {
		return nil, err
	}
	now := e.nowMS()
	t, tc, runs, err := e.newTaskCreate(spec, actor, now)
	if err != nil {
		return nil, err
	}
	if _, err := e.own.apiFences([]string{t.def.Name}); err != nil {
		return nil, fmt.Errorf("cannot create task: %w", err)
	}
	if err := e.checkDeps(ctx, t.def); err != nil {
		return nil, err
	}
	if err := e.WriteStalled(); err != nil {
		return nil, fmt.Errorf("cannot create task %q: %w: %v", t.def.Name, ErrStoreStalled, err)
	}
	done := make(chan error, 1)
	g := &persist.Group{Creates: []*persist.TaskCreate{tc}, Done: func(err error) { done <- err }}
	if err := e.submit(context.Background(), g, submitOffer); err != nil {
		return nil, fmt.Errorf("cannot create task %q: %w", t.def.Name, err)
	}
	// Wait for the commit, but not through a store outage: the writer retries without end,
	// and the caller is better told now. The create stays queued, so it may still land when
	// the store recovers; a client retrying it then gets 409 for a taken name.
	stallCheck := e.cfg.Clock.NewTicker(WriteStallReady / 4)
	defer stallCheck.Stop()
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-stallCheck.C():
			if serr := e.WriteStalled(); serr != nil {
				return nil, fmt.Errorf("cannot create task %q: %w: %v", t.def.Name, ErrStoreStalled, serr)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("cannot wait for task %q to be durable: %w", t.def.Name, ctx.Err())
		}
	}
	if err != nil {
		if errors.Is(err, model.ErrTaskExists) {
			return nil, fmt.Errorf("cannot create task %q: %w", t.def.Name, ErrTaskExists)
		}
		return nil, fmt.Errorf("cannot create task %q: %w", t.def.Name, err)
	}
	// The answer is the task as created: once adopted it may fire, and t is then read only
	// under its lock.
	out := &model.Task{Def: *tc.Def, Runtime: tc.Runtime}
	e.created(t, tc, runs, now)
	return out, nil
}

// created takes a durable create into memory: it arms the task when it is due within the
// window, and records a skipped run_at fire.
func (e *API) created(t *task, tc *persist.TaskCreate, runs []model.Run, now int64) {
	t.id = tc.Def.ID
	t.rt = tc.Runtime
	e.deps.upstreams.add(t.def.DependsOn...)
	if len(runs) > 0 {
		for i := range runs {
			runs[i].TaskID = t.id
			runs[i].Ticket = skipTicket(t.id, runs[i].ScheduledAt)
		}
		if err := e.submit(context.Background(), &persist.Group{Runs: runs}, submitWait); err != nil {
			e.log.Warn("skipped run_at fire not recorded: writer closed", "task", t.def.Name, "error", err)
		}
	}
	e.adopt(t, now)
}

// skipTicket names the run row of a run_at fire skipped at creation.
func skipTicket(id, due int64) string {
	return "skip-" + strconv.FormatInt(id, 10) + "-" + strconv.FormatInt(due, 10)
}

// CreateTasks creates a batch of tasks in one transaction (docs/bulk.md): all of them, or,
// when any item is bad, none, with a *BatchError naming every bad item. Names must be unique
// within the batch; depends_on may name tasks of the same batch, in any order, and cycles
// are refused. onConflict says what a name taken by an existing task does (OnConflict*).
// A nil spec is an item the caller already found bad (it did not decode): the others are
// still checked, so that every bad item is named, and nothing is written.
func (e *API) CreateTasks(ctx context.Context, specs []*wire.TaskSpec, onConflict, actor string, opts ...CreateOption) (wire.BatchResult, error) {
	var res wire.BatchResult
	if err := e.checkRunning(); err != nil {
		return res, err
	}
	var o createOptions
	for _, opt := range opts {
		opt(&o)
	}
	now := e.nowMS()
	tasks, creates, runs, err := e.prepareBatch(ctx, specs, onConflict, actor, now, !o.upstreamsChecked)
	if err != nil {
		return res, err
	}
	names := make([]string, len(creates))
	for i, tc := range creates {
		names[i] = tc.Def.Name
	}
	fences, err := e.own.apiFences(names)
	if err != nil {
		return res, fmt.Errorf("cannot create %d tasks: %w", len(creates), err)
	}
	b := &persist.Batch{Creates: creates, Shards: fences}
	if err := e.store.ApplyBatch(ctx, b); err != nil {
		var ce *persist.ConflictError
		if errors.As(err, &ce) && len(ce.Creates) > 0 {
			var bad []ItemError
			for _, i := range ce.Creates {
				bad = append(bad, ItemError{Index: i, Err: fmt.Errorf("name %q: %w", creates[i].Def.Name, ErrTaskExists)})
			}
			return res, &BatchError{Items: bad}
		}
		return res, fmt.Errorf("cannot create %d tasks: %w", len(creates), err)
	}
	for i, tc := range creates {
		switch tc.Outcome {
		case persist.CreateSkipped:
			res.Skipped++
			continue
		case persist.CreateReplaced:
			res.Replaced++
			e.forgetReplaced(tc.ReplacedID)
		default:
			res.Created++
		}
		e.created(tasks[i], tc, runs[i], now)
	}
	return res, nil
}

// forgetReplaced drops the in-memory copy of a task a batch replaced: its armed entry is
// cancelled. A write of it still queued fails as a conflict (its runtime row is gone).
func (e *API) forgetReplaced(id int64) {
	t := e.tasks.get(id)
	if t == nil {
		return
	}
	t.mu.Lock()
	t.deleted = true
	e.loader.disarm(t)
	e.brk.forget(id)
	e.loader.place(t)
	t.mu.Unlock()
}

// checkBatchDeps checks the depends_on of a batch's tasks: each upstream is an item of the
// batch or an existing task, and the edges (those of the batch over those stored) make no
// cycle. It returns one ItemError per bad item.
func (e *API) checkBatchDeps(ctx context.Context, tasks []*task, byName map[string]int) ([]ItemError, error) {
	stored := map[string][]string{} // depends_on of existing tasks, nil for none
	exists := map[string]bool{}
	lookup := func(name string) ([]string, bool, error) {
		if i, ok := byName[name]; ok {
			return tasks[i].def.DependsOn, true, nil
		}
		if ok, seen := exists[name]; seen {
			return stored[name], ok, nil
		}
		pt, err := e.store.GetTask(ctx, name)
		if errors.Is(err, model.ErrTaskNotFound) {
			exists[name] = false
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("cannot check dependencies: %w", err)
		}
		exists[name], stored[name] = true, pt.Def.DependsOn
		return pt.Def.DependsOn, true, nil
	}
	var bad []ItemError
	// state: 1 on the current path, 2 done and acyclic.
	state := map[string]int{}
	var visit func(name string) (string, error)
	visit = func(name string) (string, error) {
		switch state[name] {
		case 1:
			return name, nil
		case 2:
			return "", nil
		}
		state[name] = 1
		deps, _, err := lookup(name)
		if err != nil {
			return "", err
		}
		for _, up := range deps {
			if c, err := visit(up); err != nil || c != "" {
				return c, err
			}
		}
		state[name] = 2
		return "", nil
	}
	for i, t := range tasks {
		if t == nil || len(t.def.DependsOn) == 0 {
			continue
		}
		var itemErr error
		for _, up := range t.def.DependsOn {
			_, ok, err := lookup(up)
			if err != nil {
				return nil, err
			}
			if !ok {
				itemErr = fieldErr("depends_on", "unknown task %q (neither stored nor in the batch)", up)
				break
			}
		}
		if itemErr == nil {
			c, err := visit(t.def.Name)
			if err != nil {
				return nil, err
			}
			if c != "" {
				itemErr = fieldErr("depends_on", "would create a dependency cycle through %q", c)
				// Leave the cycle's names unvisited so every task on it is named.
				for n, st := range state {
					if st == 1 {
						delete(state, n)
					}
				}
			}
		}
		if itemErr != nil {
			bad = append(bad, ItemError{Index: i, Err: itemErr})
		}
	}
	return bad, nil
}

func sortItems(items []ItemError) {
	for i := 1; i < len(items); i++ {
		for j := i; j > 0 && items[j].Index < items[j-1].Index; j-- {
			items[j], items[j-1] = items[j-1], items[j]
		}
	}
}

// runAtRuntime is the runtime of a one-shot task given an absolute time (run_at). A time in
// the past fires at once under fire_once (the misfire path of adopt handles one more than
// MisfireThreshold late); under skip the fire is recorded as a skipped run, and the task
// rests finished without firing.
func (e *API) runAtRuntime(t *task, runAt, now int64) (model.Runtime, string, []model.Run) {
	rt := model.Runtime{State: model.StateScheduled, Version: 1, NextTriggerTime: runAt}
	when := time.UnixMilli(runAt).In(t.loc).Format(time.RFC3339Nano)
	late := runAt < now-e.cfg.MisfireThreshold.Milliseconds()
	if late && t.def.MisfirePolicy == model.MisfireSkip {
		rt.State, rt.NextTriggerTime = model.StateWaiting, 0
		rt.LastTriggerTime, rt.LastEndTime = runAt, now
		detail := "run_at " + when + " is past (misfire: skip): not fired"
		run := model.Run{TaskName: t.def.Name, Kind: model.RunScheduled, Attempt: 1,
			ScheduledAt: runAt, EndedAt: now, Result: model.ResultSkipped, Detail: detail}
		return rt, detail, []model.Run{run}
	}
	if t.def.Paused {
		rt.State = model.StatePaused
	}
	return rt, "next fire " + when, nil
}

// normalizeCreate is Normalize for a new task, with what only a create takes: run_at (an
// absolute one-shot time, returned as Unix ms; 0 for none) and the retention overrides.
func (e *API) normalizeCreate(spec *wire.TaskSpec) (model.TaskDef, int64, error) {
	var runAt int64
	if spec.RunAt != "" {
		if spec.DelayMS != nil {
			return model.TaskDef{}, 0, fieldErr("run_at", "and delay_ms are exclusive: give one")
		}
		if spec.Trigger != "" && spec.Trigger != model.TriggerDelay {
			return model.TaskDef{}, 0, fieldErr("run_at", "is only valid with trigger delay")
		}
		var err error
		if runAt, err = parseRunAt(spec.RunAt); err != nil {
			return model.TaskDef{}, 0, err
		}
		if runAt <= 0 {
			return model.TaskDef{}, 0, fieldErr("run_at", "must be after 1970-01-01T00:00:00Z, got %q", spec.RunAt)
		}
		// Normalize checks every other field of a delay task; the delay itself is unused.
		s := *spec
		zero := int64(0)
		s.DelayMS, s.Trigger = &zero, model.TriggerDelay
		spec = &s
	}
	def, err := normalizeAt(spec, e.cfg.DefaultTimezone, e.cfg.CronDialect, e.now())
	if err != nil {
		return def, 0, err
	}
	if err := e.checkCallback(&def); err != nil {
		return def, 0, err
	}
	if def.RetainHistoryMS, err = parseRetention("retain_history", spec.RetainHistory); err != nil {
		return def, 0, err
	}
	if def.RetainFinishedMS, err = parseRetention("retain_finished", spec.RetainFinished); err != nil {
		return def, 0, err
	}
	return def, runAt, nil
}

// parseRunAt reads run_at: RFC 3339 with a zone (a Z or an offset).
func parseRunAt(s string) (int64, error) {
	ts, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return 0, fieldErr("run_at", "must be an RFC 3339 time with a zone, e.g. 2026-01-02T15:04:05Z or 2026-01-02T15:04:05+08:00; got %q", s)
	}
	return ts.UnixMilli(), nil
}

// parseRetention reads a per-task retention override: a duration in Go syntax or a number
// of days ("7d"); "" is none (0).
func parseRetention(field, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	d, err := ParseRetention(s)
	if err != nil {
		return 0, fieldErr(field, "%v", err)
	}
	return d.Milliseconds(), nil
}

// ParseRetention parses a retention period: Go duration syntax ("36h", "90m") or whole and
// fractional days with a d suffix ("7d", "1.5d"). It must be positive.
func ParseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		f, err := strconv.ParseFloat(days, 64)
		if err != nil || math.IsNaN(f) || f > 100*365 {
			return 0, fmt.Errorf("must be a duration such as 7d, 36h or 90m, got %q", s)
		}
		d = time.Duration(f * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("must be a duration such as 7d, 36h or 90m, got %q", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %q", s)
	}
	return d, nil
}

// CreateOption changes how CreateTasks takes a batch.
type CreateOption func(*createOptions)

type createOptions struct {
	upstreamsChecked bool
}

// UpstreamsChecked tells CreateTasks that the batch's depends_on were checked already,
// against a larger batch this one is part of: a sharded node's API splits a batch by the
// node that schedules each item's shard, and an upstream may be an item of another part.
func UpstreamsChecked() CreateOption { return func(o *createOptions) { o.upstreamsChecked = true } }

// prepareBatch checks and prepares the creates of a batch, as CreateTasks takes them: every
// bad item is named in a *BatchError, and nothing is returned then.
func (e *API) prepareBatch(ctx context.Context, specs []*wire.TaskSpec, onConflict, actor string, now int64, checkUpstreams bool) ([]*task, []*persist.TaskCreate, [][]model.Run, error) {
	ifExists := persist.CreateFail
	switch onConflict {
	case "", OnConflictError:
	case OnConflictSkip:
		ifExists = persist.CreateSkip
	case OnConflictReplace:
		ifExists = persist.CreateReplace
	default:
		return nil, nil, nil, fieldErr("on_conflict", "must be error, skip or replace; got %q", onConflict)
	}
	if len(specs) > BatchMaxTasks {
		return nil, nil, nil, fieldErr("batch", "at most %d tasks per batch, got %d", BatchMaxTasks, len(specs))
	}
	if len(specs) == 0 {
		return nil, nil, nil, nil
	}
	var bad []ItemError
	tasks := make([]*task, len(specs))
	creates := make([]*persist.TaskCreate, len(specs))
	runs := make([][]model.Run, len(specs))
	byName := make(map[string]int, len(specs))
	refused := false // a nil spec: the caller found the item bad
	for i, spec := range specs {
		if spec == nil {
			refused = true
			continue
		}
		t, tc, skipped, err := e.newTaskCreate(spec, actor, now)
		if err != nil {
			bad = append(bad, ItemError{Index: i, Err: err})
			continue
		}
		runs[i] = skipped
		if j, dup := byName[t.def.Name]; dup {
			bad = append(bad, ItemError{Index: i, Err: fieldErr("name", "%q is also item %d of the batch", t.def.Name, j)})
			continue
		}
		byName[t.def.Name] = i
		tc.IfExists = ifExists
		tasks[i], creates[i] = t, tc
	}
	if checkUpstreams {
		depErrs, err := e.checkBatchDeps(ctx, tasks, byName)
		if err != nil {
			return nil, nil, nil, err
		}
		bad = append(bad, depErrs...)
	}
	if len(bad) > 0 || refused {
		sortItems(bad)
		return nil, nil, nil, &BatchError{Items: bad}
	}
	return tasks, creates, runs, nil
}

// CheckTasks checks a batch as CreateTasks would (every item valid, names unique in it,
// upstreams known, no cycle) and, with onConflict "" or error, that no item's name is taken,
// and writes nothing: a *BatchError names every item refused. A sharded node checks a batch
// so before it splits it among the nodes that schedule its items.
func (e *API) CheckTasks(ctx context.Context, specs []*wire.TaskSpec, onConflict string) error {
	if err := e.checkRunning(); err != nil {
		return err
	}
	if len(specs) > BatchMaxTasks {
		return fieldErr("batch", "at most %d tasks per batch, got %d", BatchMaxTasks, len(specs))
	}
	_, creates, _, err := e.prepareBatch(ctx, specs, onConflict, "", e.nowMS(), true)
	if err != nil || (onConflict != "" && onConflict != OnConflictError) {
		return err
	}
	var bad []ItemError
	for i, tc := range creates {
		_, err := e.store.GetTask(ctx, tc.Def.Name)
		switch {
		case err == nil:
			bad = append(bad, ItemError{Index: i, Err: fmt.Errorf("name %q: %w", tc.Def.Name, ErrTaskExists)})
		case !errors.Is(err, model.ErrTaskNotFound):
			return fmt.Errorf("cannot check the names of the batch: %w", err)
		}
	}
	if len(bad) > 0 {
		return &BatchError{Items: bad}
	}
	return nil
}
