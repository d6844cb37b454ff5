package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

// The operations below are what the REST API and the CLI call. Each one validates first and
// changes nothing on bad input; each one leaves action records with its actor; each one
// returns after its writes are durable.

// initialRuntime is the runtime of a new task.
func (e *API) initialRuntime(t *task, now int64) (model.Runtime, string) {
	rt := model.Runtime{State: model.StateWaiting, Version: 1}
	next := int64(0)
	switch t.def.Trigger {
	case model.TriggerCron:
		next = t.nextCron(now)
	case model.TriggerDelay:
		next = now + t.def.DelayMS
	}
	if next == 0 {
		if t.def.Paused {
			rt.State = model.StatePaused
		}
		return rt, ""
	}
	rt.NextTriggerTime = next
	rt.State = model.StateScheduled
	if t.def.Paused {
		// Kept while paused so that resume knows which fire was due (misfire policy).
		rt.State = model.StatePaused
	}
	return rt, "next fire " + time.UnixMilli(next).In(t.loc).Format(time.RFC3339Nano)
}

// CreateTask validates spec and stores the task, its runtime and its action records as one
// group of the batched writer, then arms it when it is due within the window. When the writer
// is saturated it fails at once with persist.ErrWriterBusy (the API answers 429).
func (e *API) CreateTask(ctx context.Context, spec *wire.TaskSpec, actor string) (*model.Task, error) {
	return e.createGrouped(ctx, spec, actor)
}

// checkDeps verifies that every upstream exists and that the edges make no cycle.
func (e *API) checkDeps(ctx context.Context, def *model.TaskDef) error {
	if len(def.DependsOn) == 0 {
		return nil
	}
	// Walk upstream edges from def's upstreams; reaching def.Name is a cycle.
	seen := map[string]bool{}
	queue := append([]string(nil), def.DependsOn...)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if name == def.Name {
			return fieldErr("depends_on", "would create a dependency cycle through %q", def.Name)
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		pt, err := e.store.GetTask(ctx, name)
		if errors.Is(err, model.ErrTaskNotFound) {
			if contains(def.DependsOn, name) {
				return fieldErr("depends_on", "unknown task %q", name)
			}
			continue // an edge to a deleted task further up: it cannot close a cycle
		}
		if err != nil {
			return fmt.Errorf("cannot check dependencies: %w", err)
		}
		queue = append(queue, pt.Def.DependsOn...)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// lookup finds a task's id by name.
func (e *base) lookup(ctx context.Context, name string) (int64, error) {
	pt, err := e.store.GetTask(ctx, name)
	if err != nil {
		return 0, err
	}
	return pt.Def.ID, nil
}

func snapshot(t *task) *model.Task {
	return &model.Task{Def: *t.def, Runtime: t.rt}
}

// UpdateTask replaces a task's definition. The trigger type cannot change (delete and
// re-create instead). A changed schedule re-arms the in-memory entry at once; a run in
// flight finishes under the old definition.
func (e *API) UpdateTask(ctx context.Context, name string, spec *wire.TaskSpec, actor string) (*model.Task, error) {
	if err := e.checkRunning(); err != nil {
		return nil, err
	}
	if spec.Name == "" {
		spec.Name = name
	}
	if spec.Name != name {
		return nil, fieldErr("name", "cannot be changed (got %q for task %q)", spec.Name, name)
	}
	if spec.Note != "" {
		return nil, fieldErr("note", "is only valid on create; pause with a note instead")
	}
	def, runAt, err := e.normalizeCreate(spec)
	if err != nil {
		return nil, err
	}
	if err := e.checkDeps(ctx, &def); err != nil {
		return nil, err
	}
	t, err := e.acquire(ctx, 0, acquireOpts{name: name})
	if err != nil {
		return nil, err
	}
	defer e.release(t)
	old := t.def
	if def.Trigger != old.Trigger {
		return nil, fieldErr("trigger", "cannot change from %s to %s; delete and re-create the task", old.Trigger, def.Trigger)
	}
	now := e.nowMS()
	def.ID, def.CreatedAt, def.UpdatedAt = old.ID, old.CreatedAt, now
	pauseChange := spec.Paused != nil && *spec.Paused != old.Paused
	def.Paused = old.Paused // pause and resume below go through their own paths
	nt := &task{def: &def}
	if err := nt.compile(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidTask, err)
	}
	if runAt != 0 {
		def.DelayMS = old.DelayMS // unused with run_at; unchanged, it leaves the fire to run_at
	}
	e.deps.upstreams.add(def.DependsOn...)
	oldSched, oldLoc, oldRT := t.sched, t.loc, t.rt
	t.def, t.sched, t.loc = &def, nt.sched, nt.loc

	nrt := t.rt
	detail := "definition replaced"
	reschedule := old.Cron != def.Cron || old.CronDialect != def.CronDialect || old.Timezone != def.Timezone || old.DelayMS != def.DelayMS || runAt != 0
	// A paused task keeps its next fire too: resume starts from it.
	if reschedule && (t.rt.State == model.StateScheduled || t.rt.State == model.StatePaused) {
		switch def.Trigger {
		case model.TriggerCron:
			nrt.NextTriggerTime = t.nextCron(now)
		case model.TriggerDelay:
			// A changed delay counts from the edit: the task was waiting for its one fire.
			nrt.NextTriggerTime = now + def.DelayMS
			if runAt != 0 {
				nrt.NextTriggerTime = runAt
			}
		}
		detail += "; next fire " + time.UnixMilli(nrt.NextTriggerTime).In(t.loc).Format(time.RFC3339Nano)
	}
	if old.Priority != def.Priority && t.ent != nil {
		e.loader.disarm(t) // place re-arms it with the new priority
	}
	act := e.action(t, "", ActUpdate, t.rt.State, t.rt.State, actor, detail+"; "+defDiff(old, &def), now)
	if err := e.commit(ctx, t, nrt, commitOpts{wait: true, def: &def, acts: []model.Action{act}}); err != nil {
		// The edit failed whole (a refused one fails alone, persist.RejectedError) and the
		// store kept the old row: memory goes back to it, unless something has changed the
		// task since. A wait cut short by ctx proves nothing: the edit may still land.
		if ctx.Err() == nil && t.def == &def && t.rt.Version == oldRT.Version+1 {
			t.def, t.sched, t.loc, t.rt = old, oldSched, oldLoc, oldRT
			e.loader.place(t)
		}
		return nil, err
	}
	if pauseChange {
		if *spec.Paused {
			err = e.pauseLocked(ctx, t, "", model.PausedByTask, actor)
		} else {
			err = e.resumeLocked(ctx, t, "", actor)
		}
		if err != nil {
			return nil, err
		}
	}
	return snapshot(t), nil
}

// DeleteTask removes a task. Its armed entry is cancelled at once; a run in flight finishes
// and its result is recorded in the run history only. Runs and actions stay.
func (e *API) DeleteTask(ctx context.Context, name, actor string) error {
	return e.deleteTask(ctx, name, "", actor)
}

// deleteTask is DeleteTask with an operator note for the action record.
func (e *API) deleteTask(ctx context.Context, name, note, actor string) error {
	if err := e.checkRunning(); err != nil {
		return err
	}
	t, err := e.acquire(ctx, 0, acquireOpts{name: name})
	if err != nil {
		return err
	}
	defer e.release(t)
	now := e.nowMS()
	act := e.action(t, "", ActDelete, t.rt.State, "", actor, note, now)
	// The definition, runtime, edges and the action record go in one group. The task is
	// marked deleted first, so that no fire is decided while the group is in flight; a
	// write of it already queued conflicts once the rows are gone.
	t.deleted = true
	e.loader.disarm(t)
	e.brk.forget(t.id)
	t.mu.Unlock()
	err = e.write(ctx, &persist.Group{Deletes: []int64{t.id}, Actions: []model.Action{act}})
	t.mu.Lock()
	return err
}

// overlay replaces the stored runtime with the in-memory one, which may be a few
// milliseconds ahead of what is durable.
func (e *API) overlay(pt *model.Task) {
	e.overlayHeld(pt)
}

// overlayHeld is overlay; it reports whether the task is held in memory (pt is then that
// copy).
func (e *API) overlayHeld(pt *model.Task) bool {
	if t := e.tasks.get(pt.Def.ID); t != nil {
		t.mu.Lock()
		held := !t.evicted && !t.deleted
		if held {
			pt.Def = *t.def
			pt.Runtime = t.rt
		}
		t.mu.Unlock()
		if held {
			return true
		}
	}
	e.overlayOpenFire(pt)
	return false
}

// overlayOpenFire shows a task read from the store by an engine that is not running (a
// backup's reader), or by a sharded engine that does not schedule its shard, as RUNNING when
// its fire record is
// open: the runtime row says RUNNING only once the run's end is written (core_fire.go).
func (e *API) overlayOpenFire(pt *model.Task) {
	rt := &pt.Runtime
	if held, _ := e.own.State(model.ShardOf(pt.Def.Name)); held && e.running.Load() {
		// A running engine holds every run in flight of its shards in memory
		// (core_recover.go); a sharded one reads another node's tasks as a backup does.
		return
	}
	if !armable(rt.State) || rt.NextTriggerTime <= 0 || rt.NextTriggerTime > e.nowMS()+openFireMargin.Milliseconds() {
		return
	}
	attempt := 1
	if rt.State == model.StateRetrying {
		attempt = rt.Attempt
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	run, err := e.store.GetRun(ctx, scheduledTicket(pt.Def.ID, rt.NextTriggerTime, attempt))
	if err != nil || run.Result != model.ResultRunning {
		return
	}
	rt.State = model.StateRunning
	rt.CurrentTicket = run.Ticket
	rt.Attempt = run.Attempt
	rt.LastTriggerTime = run.DispatchedAt
}

// GetTask returns a task's definition and runtime.
func (e *API) GetTask(ctx context.Context, name string) (*model.Task, error) {
	for try := 0; ; try++ {
		gen := e.loader.evictions.Load()
		pt, err := e.store.GetTask(ctx, name)
		if err != nil {
			return nil, err
		}
		// A copy evicted while the row was read (once its last write was durable, maybe
		// after the read) leaves an older row than memory showed a moment ago: read again.
		if e.overlayHeld(pt) || e.loader.evictions.Load() == gen || try == 2 {
			return pt, nil
		}
	}
}

// ListTasks lists tasks, filtered by group and state.
func (e *API) ListTasks(ctx context.Context, f persist.TaskFilter) ([]model.Task, error) {
	// The store filters by the durable state; the overlay may be a few milliseconds newer,
	// so the filter is applied again to what is shown.
	state := f.State
	list, err := e.store.ListTasks(ctx, f)
	if err != nil {
		return nil, err
	}
	out := list[:0]
	for i := range list {
		e.overlay(&list[i])
		if state == "" || list[i].Runtime.State == state {
			out = append(out, list[i])
		}
	}
	return out, nil
}

// Runs returns a task's recent runs, newest first.
func (e *API) Runs(ctx context.Context, name string, limit int) ([]model.Run, error) {
	id, err := e.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	return e.store.ListRuns(ctx, id, limit)
}

// Actions returns a task's timeline, newest first: its action records merged with the
// dispatch and success events its run rows carry (persist.Timeline), which a fire no longer
// writes as action records of their own (design.md, "Write path").
func (e *API) Actions(ctx context.Context, name string, limit int) ([]model.Action, error) {
	id, err := e.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	acts, err := e.store.ListActions(ctx, id, limit)
	if err != nil {
		return nil, err
	}
	runs, err := e.store.ListRuns(ctx, id, limit)
	if err != nil {
		return nil, err
	}
	return persist.Timeline(acts, runs, limit), nil
}

// Run returns one run by ticket.
func (e *API) Run(ctx context.Context, ticket string) (*model.Run, error) {
	run, err := e.store.GetRun(ctx, ticket)
	if run != nil {
		e.runs.showHolder(run)
	}
	return run, err
}

// NextFireTimes previews a cron expression: the next n fires after now in zone tz (the
// server's default zone when empty), read in dialect (the server's when empty, with the same
// ambiguity rule as a task's). It is PreviewFires without the DST marks.
func (e *API) NextFireTimes(expr, tz, dialect string, n int) ([]time.Time, *time.Location, error) {
	fires, loc, err := e.PreviewFires(expr, tz, dialect, time.Time{}, n)
	if err != nil {
		return nil, nil, err
	}
	times := make([]time.Time, len(fires))
	for i, f := range fires {
		times[i] = f.At
	}
	return times, loc, nil
}

// Pause stops a task's future triggers at once, including an entry already armed. A
// run in flight finishes; the task then rests in PAUSED. note is kept in the action record
// and on the task. Pausing a paused task changes nothing.
func (e *API) Pause(ctx context.Context, name, note, actor string) (*model.Task, error) {
	return e.withTask(ctx, name, func(t *task) error { return e.pauseLocked(ctx, t, note, model.PausedByTask, actor) })
}

// withTask runs op on the named task under its lock and returns the task as op left it.
func (e *API) withTask(ctx context.Context, name string, op func(t *task) error) (*model.Task, error) {
	if err := e.checkRunning(); err != nil {
		return nil, err
	}
	t, err := e.acquire(ctx, 0, acquireOpts{name: name})
	if err != nil {
		return nil, err
	}
	defer e.release(t)
	if err := op(t); err != nil {
		return nil, err
	}
	return snapshot(t), nil
}

// pauseLocked pauses t for by (a pause origin, model.PausedBy*). A task paused already stays
// as it is, but for a task's own pause of a task something else paused (a group, a bulk
// pause, pause-after-failures): that makes the pause the task's own, with its note, so that
// a group's resume no longer resumes it. Caller holds t.mu.
func (e *API) pauseLocked(ctx context.Context, t *task, note, by, actor string) error {
	if t.def.Paused {
		if by != model.PausedByTask || t.rt.PausedBy == model.PausedByTask {
			return nil
		}
		nrt := t.rt
		nrt.PausedBy = by
		if note != "" {
			nrt.Note = note
		}
		detail := "paused already by " + pausedByText(t.rt.PausedBy) + "; now paused by the task's own pause"
		act := e.action(t, "", ActPause, t.rt.State, t.rt.State, actor, joinNote(detail, note), e.nowMS())
		return e.commit(ctx, t, nrt, commitOpts{wait: true, acts: []model.Action{act}})
	}
	def := *t.def
	def.Paused = true
	def.UpdatedAt = e.nowMS()
	t.def = &def
	now := e.nowMS()
	nrt := t.rt
	nrt.Note = note
	nrt.PausedBy = by
	from := t.rt.State
	detail := note
	if from == model.StateRunning {
		detail = joinNote("takes effect when run "+t.rt.CurrentTicket+" ends", note)
		act := e.action(t, t.rt.CurrentTicket, ActPause, from, from, actor, detail, now)
		return e.commit(ctx, t, nrt, commitOpts{wait: true, def: &def, acts: []model.Action{act}})
	}
	if from != model.StatePaused {
		if err := checkTransition(from, model.StatePaused); err != nil {
			return err
		}
		nrt.State = model.StatePaused
		if from == model.StateRetrying {
			// The pending retry is abandoned; resume starts from the next cycle.
			nrt.Attempt = 0
			nrt.NextTriggerTime = t.nextCron(now)
		}
	}
	e.loader.disarm(t)
	act := e.action(t, "", ActPause, from, nrt.State, actor, detail, now)
	return e.commit(ctx, t, nrt, commitOpts{wait: true, def: &def, acts: []model.Action{act}})
}

// paramsGivenNote is what a run-now's action record says of the params it was given: that
// it had some, and an object's top-level keys (never a value: a key may be sensitive).
func paramsGivenNote(params json.RawMessage) string {
	var obj map[string]json.RawMessage
	if json.Unmarshal(params, &obj) != nil || len(obj) == 0 {
		return "params given, stored on the run"
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return "params given (" + strings.Join(keys, ", ") + "), stored on the run"
}

func joinNote(a, note string) string {
	if note == "" {
		return a
	}
	return a + "; note: " + note
}

// Resume re-enables a paused task. Its next fire is computed from now; fires missed while it
// was paused follow its catch-up window when it has one (each missed fire within the window
// runs once, oldest first, with its own time; older ones are skipped), else its misfire
// policy (fire_once: one fire now; skip: the next one after now).
func (e *API) Resume(ctx context.Context, name, note, actor string) (*model.Task, error) {
	return e.withTask(ctx, name, func(t *task) error { return e.resumeLocked(ctx, t, note, actor) })
}

func (e *API) resumeLocked(ctx context.Context, t *task, note, actor string) error {
	if !t.def.Paused && t.rt.State != model.StatePaused {
		return nil
	}
	def := *t.def
	def.Paused = false
	def.UpdatedAt = e.nowMS()
	t.def = &def
	now := e.nowMS()
	nrt := t.rt
	nrt.Note = ""
	nrt.PausedBy = ""
	nrt.ConsecutiveFailures = 0 // a resumed task gets pause_after_failures failures again
	from := t.rt.State
	detail := ""
	if from == model.StatePaused {
		switch def.Trigger {
		case model.TriggerCron:
			due := t.rt.NextTriggerTime
			if due == 0 {
				due = t.nextCron(now)
			}
			if w := t.catchupWindow(); w > 0 && due != 0 && t.fireAt(due) <= now {
				// Fires missed while paused run one by one within the window
				// (core_overlap.go); the decision is the resume's detail.
				p := decideCatchup(catchupInput{Span: t.span(), WindowSec: w, Due: due, Now: now})
				if p.Next != due {
					e.m.misfires.Inc()
				}
				t.catchupFrom, t.catchupUntil, t.catchupFollow = p.CatchupFrom, p.CatchupUntil, 0
				due, detail = p.Next, " ("+p.Detail+")"
			} else if due != 0 && due <= now {
				next, d := e.nextFire(t, due-1, now)
				// A missed fire is always late by more than a tick; resume treats any
				// missed fire as a misfire so the policy decides, not the threshold.
				if t.def.MisfirePolicy == model.MisfireSkip {
					next, d = t.nextCron(now), " (misfire: fires missed while paused skipped)"
				} else if next < now-e.cfg.MisfireThreshold.Milliseconds() || next <= now {
					next, d = now, " (misfire: fire_once, fires missed while paused coalesced into one now)"
				}
				due = next
				detail = d
			}
			if due == 0 {
				nrt.State = model.StateWaiting
			} else {
				nrt.State = model.StateScheduled
				nrt.NextTriggerTime = due
				detail = "next fire " + time.UnixMilli(due).In(t.loc).Format(time.RFC3339Nano) + detail
			}
		case model.TriggerDelay:
			if t.rt.LastTriggerTime == 0 && t.rt.NextTriggerTime > 0 {
				// Its one fire has not happened: a missed one fires now.
				nrt.State = model.StateScheduled
				if nrt.NextTriggerTime < now {
					nrt.NextTriggerTime = now
				}
				detail = "next fire " + time.UnixMilli(nrt.NextTriggerTime).In(t.loc).Format(time.RFC3339Nano)
			} else {
				nrt.State = model.StateWaiting
				nrt.NextTriggerTime = 0
			}
		default:
			nrt.State = model.StateWaiting
			nrt.NextTriggerTime = 0
		}
		if err := checkTransition(from, nrt.State); err != nil {
			return err
		}
	}
	act := e.action(t, "", ActResume, from, nrt.State, actor, joinNote(detail, note), now)
	return e.commit(ctx, t, nrt, commitOpts{wait: true, def: &def, acts: []model.Action{act}})
}

// RunNow starts an independent instance of a task with its own ticket. It does not
// touch the periodic state machine: it works while the periodic run is RUNNING and while the
// task is PAUSED. params, when given, replace the task's params for this run only. It returns
// once the run is durably recorded and handed to the dispatcher.
func (e *API) RunNow(ctx context.Context, name string, params json.RawMessage, actor string) (*model.Run, error) {
	return e.runNow(ctx, name, params, "", actor)
}

// runNow is RunNow with an operator note for the action record.
func (e *API) runNow(ctx context.Context, name string, params json.RawMessage, note, actor string) (*model.Run, error) {
	if err := e.checkRunning(); err != nil {
		return nil, err
	}
	if len(params) > maxParamsBytes {
		return nil, fieldErr("params", "must be at most %d bytes of JSON, got %d", maxParamsBytes, len(params))
	}
	if len(params) > 0 && (!json.Valid(params) || !utf8.Valid(params)) {
		return nil, fieldErr("params", "must be valid JSON in UTF-8")
	}
	t, err := e.acquire(ctx, 0, acquireOpts{name: name})
	if err != nil {
		return nil, err
	}
	if err := e.own.shardGate(t.shard, t.sepoch, true); err != nil {
		e.release(t) // its shard is being handed over: the next owner runs it
		return nil, err
	}
	now := e.nowMS()
	def := t.def
	// Params given are stored on the run and named by its action record; without them the
	// run gets the task's, which its definition holds.
	what := "independent instance"
	var given model.RunParams
	if len(params) > 0 {
		given = model.RunParams(params)
		what += "; " + paramsGivenNote(params)
	} else {
		params = def.Params
	}
	run := model.Run{
		Ticket: manualTicket(t.id, now), TaskID: t.id, TaskName: def.Name, Kind: model.RunManual,
		Attempt: 1, ScheduledAt: now, DispatchedAt: now, Result: model.ResultRunning,
		Executor: downstreamOf(def), Params: given,
	}
	// A run-now counts in its group's and key's limits as any run does, and does not wait:
	// it is an operator's "now", answered at once, and a waiting one would have to survive a
	// restart (docs/design.md, Concurrency limits).
	// Its key is rendered over the params it runs with: a template they do not render is
	// refused here, before anything is written (docs/design.md, Keyed limits).
	key, kerr := model.RenderKey(def.ConcurrencyKey, params)
	if kerr != nil {
		e.release(t)
		return nil, fieldErr("params", "do not render the task's concurrency_key %q: %v", def.ConcurrencyKey, kerr)
	}
	slot, full, used, max, ok := e.gates.tryAcquireRun(def.Group, key, run.Ticket, t.shard, t.sepoch)
	if !ok {
		e.release(t)
		return nil, fmt.Errorf("%w: concurrency limit %s is full (%d of %d runs in flight); a run-now does not wait, try again when one ends",
			ErrConcurrencyLimit, full, used, max)
	}
	act := e.action(t, run.Ticket, ActRunNow, t.rt.State, t.rt.State, actor, joinNote(what, note), now)
	t.flying++ // keeps t in memory while the row is written
	t.mu.Unlock()
	if err := e.write(ctx, &persist.Group{Runs: []model.Run{run}, Actions: []model.Action{act}}); err != nil {
		e.conc.release(slot)
		t.mu.Lock()
		t.flying--
		e.release(t)
		return nil, err
	}
	e.runs.add(t, run, slot)
	e.m.triggers.Inc()
	e.send(t, def, run, params)
	return &run, nil
}
