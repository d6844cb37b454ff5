package workflow

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// Action names of the workflow operations' records.
const (
	ActCreate   = "workflow_create"
	ActUpdate   = "workflow_update"
	ActDelete   = "workflow_delete"
	ActPause    = "workflow_pause"
	ActResume   = "workflow_resume"
	ActRunNow   = "workflow_run_now"
	ActCancel   = "workflow_cancel"
	ActRerun    = "workflow_rerun"
	ActSucceed  = "workflow_step_succeed"
	ActBackfill = "workflow_backfill"
)

func (s *Service) action(workflow, run, name, actor, detail string) model.Action {
	return model.Action{TaskName: workflow, Ticket: run, Action: name, Actor: actor, At: s.clk.Now().UnixMilli(), Detail: detail}
}

func (s *Service) owned(name string) error {
	if !s.eng.Steps().Owned(name) {
		return fmt.Errorf("workflow %q is in shard %d: %w", name, model.ShardOf(name), model.ErrShardNotHeld)
	}
	return nil
}

// nextFire is a cron workflow's first fire after now (Unix ms), a delay workflow's one
// fire delay_ms after now; 0 for none.
func nextFire(d *model.WorkflowDef, after time.Time) int64 {
	if d.Trigger == model.TriggerDelay {
		return after.UnixMilli() + d.DelayMS
	}
	if d.Trigger != model.TriggerCron {
		return 0
	}
	sc, err := cron.Parse(d.Cron)
	if err != nil {
		return 0
	}
	loc, err := time.LoadLocation(d.Timezone)
	if err != nil {
		loc = time.UTC
	}
	n := sc.Next(after, loc)
	if n.IsZero() {
		return 0
	}
	return n.UnixMilli()
}

// Create stores a new workflow and the tasks its steps run as.
func (s *Service) Create(ctx context.Context, d model.WorkflowDef, actor string) (*model.WorkflowDef, error) {
	if _, err := compile(&d); err != nil {
		return nil, err
	}
	if err := s.owned(d.Name); err != nil {
		return nil, err
	}
	now := s.clk.Now()
	d.Version, d.Paused, d.CreatedAt, d.UpdatedAt = 1, false, now.UnixMilli(), now.UnixMilli()
	b := &persist.Batch{WorkflowPuts: []persist.WorkflowPut{{Def: d, NextFire: nextFire(&d, now)}},
		Actions: []model.Action{s.action(d.Name, "", ActCreate, actor, "version 1")}}
	if err := s.stepTasks(ctx, b, &d); err != nil {
		return nil, err
	}
	s.forgetStepTasks(d.Name)
	if err := s.eng.Steps().ApplyBatch(ctx, d.Name, b); err != nil {
		if errors.Is(err, persist.ErrWorkflowExists) {
			return nil, fmt.Errorf("workflow %q exists: %w", d.Name, ErrConflict)
		}
		return nil, err
	}
	s.poke()
	return &d, nil
}

// stepTasks adds to b the step tasks of d: created where missing, their definitions
// replaced where they exist.
func (s *Service) stepTasks(ctx context.Context, b *persist.Batch, d *model.WorkflowDef) error {
	for i := range d.Steps {
		td := stepTaskDef(d, &d.Steps[i])
		td.CreatedAt, td.UpdatedAt = d.UpdatedAt, d.UpdatedAt
		old, err := s.st.GetTask(ctx, td.Name)
		switch {
		case err == nil:
			td.ID, td.CreatedAt = old.Def.ID, old.Def.CreatedAt
			b.DefUpdates = append(b.DefUpdates, *td)
		case errors.Is(err, model.ErrTaskNotFound):
			b.Creates = append(b.Creates, &persist.TaskCreate{Def: td, IfExists: persist.CreateSkip,
				Runtime: model.Runtime{State: model.StateWaiting}})
		default:
			return err
		}
	}
	return nil
}

// Get returns a workflow's current definition and its next fire.
func (s *Service) Get(ctx context.Context, name string) (*model.Workflow, error) {
	w, err := s.st.GetWorkflow(ctx, name)
	if errors.Is(err, persist.ErrWorkflowNotFound) {
		return nil, fmt.Errorf("workflow %q: %w", name, ErrNotFound)
	}
	return w, err
}

// List returns every workflow.
func (s *Service) List(ctx context.Context) ([]model.Workflow, error) { return s.st.ListWorkflows(ctx) }

// Update stores a new version of a workflow; runs in flight keep the version they started
// with.
func (s *Service) Update(ctx context.Context, name string, d model.WorkflowDef, actor string) (*model.WorkflowDef, error) {
	if d.Name == "" {
		d.Name = name
	}
	if d.Name != name {
		return nil, &FieldError{Field: "name", Msg: fmt.Sprintf("cannot be changed (got %q for workflow %q)", d.Name, name)}
	}
	if _, err := compile(&d); err != nil {
		return nil, err
	}
	if err := s.owned(name); err != nil {
		return nil, err
	}
	old, err := s.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	now := s.clk.Now()
	d.Version, d.Paused, d.CreatedAt, d.UpdatedAt = old.Def.Version+1, old.Def.Paused, old.Def.CreatedAt, now.UnixMilli()
	next := old.NextFire
	switch {
	case d.Trigger != old.Def.Trigger || d.Cron != old.Def.Cron || d.Timezone != old.Def.Timezone:
		next = nextFire(&d, now)
	case d.Trigger == model.TriggerDelay:
		// Its one run is armed again only by a new delay; a run that started stays its one.
		if d.DelayMS != old.Def.DelayMS && next != 0 {
			next = nextFire(&d, now)
		}
	case next == 0:
		next = nextFire(&d, now)
	}
	b := &persist.Batch{WorkflowPuts: []persist.WorkflowPut{{Def: d, NextFire: next, ExpectVersion: old.Def.Version}},
		Actions: []model.Action{s.action(name, "", ActUpdate, actor, "version "+strconv.Itoa(d.Version))}}
	if err := s.stepTasks(ctx, b, &d); err != nil {
		return nil, err
	}
	s.forgetStepTasks(name)
	if err := s.eng.Steps().ApplyBatch(ctx, name, b); err != nil {
		if errors.Is(err, model.ErrVersionConflict) {
			return nil, fmt.Errorf("workflow %q changed meanwhile; read it and try again: %w", name, ErrConflict)
		}
		return nil, err
	}
	s.poke()
	return &d, nil
}

// Delete removes a workflow and its step tasks; its runs and their records stay. A workflow
// with runs in flight is refused: cancel them first.
func (s *Service) Delete(ctx context.Context, name, actor string) error {
	if err := s.owned(name); err != nil {
		return err
	}
	w, err := s.Get(ctx, name)
	if err != nil {
		return err
	}
	open, err := s.st.OpenWorkflowRuns(persist.WithShards(ctx, shardOf(name)))
	if err != nil {
		return err
	}
	for _, r := range open {
		if r.Workflow == name {
			return fmt.Errorf("workflow %q has run %s in flight: cancel it first: %w", name, r.ID, ErrConflict)
		}
	}
	b := &persist.Batch{WorkflowDeletes: []string{name}, Actions: []model.Action{s.action(name, "", ActDelete, actor, "version "+strconv.Itoa(w.Def.Version))}}
	for _, st := range w.Def.Steps {
		t, err := s.st.GetTask(ctx, StepTask(name, st.Name))
		if err == nil {
			b.Deletes = append(b.Deletes, t.Def.ID)
		}
	}
	s.forgetStepTasks(name)
	if err := s.eng.Steps().ApplyBatch(ctx, name, b); err != nil {
		return err
	}
	s.forgetStepTasks(name)
	s.mu.Lock()
	delete(s.schedules, name)
	s.mu.Unlock()
	return nil
}

func shardOf(name string) model.ShardSet {
	var set model.ShardSet
	set.Add(model.ShardOf(name))
	return set
}

// SetPaused pauses or resumes a workflow's trigger: no cron run starts while paused (run
// now still does); runs in flight go on.
func (s *Service) SetPaused(ctx context.Context, name string, paused bool, note, actor string) (*model.Workflow, error) {
	if err := s.owned(name); err != nil {
		return nil, err
	}
	w, err := s.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	act := ActResume
	next := w.NextFire
	if paused {
		act = ActPause
	} else if w.Def.Trigger == model.TriggerCron {
		next = nextFire(&w.Def, s.clk.Now()) // fires missed while paused are not made up
	} else if w.Def.Trigger == model.TriggerDelay && next != 0 {
		next = nextFire(&w.Def, s.clk.Now()) // the delay counts from the resume; once started, never again
	}
	w.Def.Paused, w.NextFire = paused, next
	b := &persist.Batch{WorkflowPuts: []persist.WorkflowPut{{Def: w.Def, NextFire: next, ExpectVersion: w.Def.Version}},
		Actions: []model.Action{s.action(name, "", act, actor, note)}}
	if err := s.eng.Steps().ApplyBatch(ctx, name, b); err != nil {
		return nil, err
	}
	s.poke()
	return w, nil
}

func newRunID() string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return "m" + hex.EncodeToString(r[:])
}

// timeRunID names the run of a logical time of a workflow: every trigger of that time
// (its cron fire, a backfill) names the same run, and the store refuses a second.
func timeRunID(workflow string, at int64) string {
	h := sha256.Sum256([]byte(workflow + "\x00" + strconv.FormatInt(at, 10)))
	return "t" + hex.EncodeToString(h[:10])
}

// KeyMax bounds a run start's key (RunNow).
const KeyMax = 128

// keyRunID names the run a start with key starts: a start sent again with the key names the
// same run, and the store refuses a second.
func keyRunID(workflow, key string) string {
	h := sha256.Sum256([]byte(workflow + "\x00" + key))
	return "k" + hex.EncodeToString(h[:10])
}

// RunNow starts a run of the workflow with params (the workflow's own when none), for the
// logical time now. With a key, the run is the key's: when the key started one already,
// nothing starts, and that run is returned with started false (its params are its own).
func (s *Service) RunNow(ctx context.Context, name string, params json.RawMessage, key, actor string) (run *model.WorkflowRun, started bool, err error) {
	if err := checkParams("params", params); err != nil {
		return nil, false, err
	}
	if len(key) > KeyMax || !utf8.ValidString(key) || strings.ContainsFunc(key, unicode.IsControl) {
		return nil, false, fieldErr("key", "must be at most %d bytes of UTF-8 text without control characters", KeyMax)
	}
	if err := s.owned(name); err != nil {
		return nil, false, err
	}
	w, err := s.Get(ctx, name)
	if err != nil {
		return nil, false, err
	}
	id := newRunID()
	if key != "" {
		id = keyRunID(name, key)
	}
	now := s.clk.Now().UnixMilli()
	run, err = s.create(ctx, w, id, now, "manual", params, actor, ActRunNow)
	if key != "" && errors.Is(err, persist.ErrWorkflowRunExists) {
		had, _, gerr := s.st.GetWorkflowRun(ctx, id)
		if gerr != nil {
			return nil, false, gerr
		}
		return had, false, nil
	}
	return run, err == nil, err
}

// create writes a new run and takes it up.
func (s *Service) create(ctx context.Context, w *model.Workflow, id string, at int64, trigger string, params json.RawMessage, actor, act string) (*model.WorkflowRun, error) {
	if len(params) == 0 || string(params) == "null" {
		params = w.Def.Params
	}
	run := model.WorkflowRun{ID: id, Workflow: w.Def.Name, Version: w.Def.Version, ScheduledAt: at, Trigger: trigger,
		Params: params, State: model.WorkflowRunning, CreatedAt: s.clk.Now().UnixMilli()}
	b := &persist.Batch{NewWorkflowRuns: []model.WorkflowRun{run},
		Actions: []model.Action{s.action(w.Def.Name, id, act, actor, trigger+" run of "+time.UnixMilli(at).UTC().Format(time.RFC3339))}}
	if err := s.eng.Steps().ApplyBatch(ctx, w.Def.Name, b); err != nil {
		return nil, err
	}
	if c := s.m.started[trigger]; c != nil {
		c.Inc()
	}
	if err := s.takeUp(ctx, w.Def.Name, id); err != nil {
		s.log.Warn("cannot take up a new workflow run; the next scan will", "run", id, "error", err)
	}
	return &run, nil
}

// Runs lists a workflow's runs, newest logical time first.
func (s *Service) Runs(ctx context.Context, name string, before int64, limit int) ([]model.WorkflowRun, error) {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	return s.st.ListWorkflowRuns(ctx, name, before, limit)
}

// RunView is a run with its steps as the API shows them.
type RunView struct {
	Run   model.WorkflowRun
	Def   *model.WorkflowDef
	Steps []StepView
}

// StepView is one step of a run: its state, items and attempts.
type StepView struct {
	Name      string
	State     string // pending, running, succeeded, failed, skipped, cancelled
	Needs     []string
	Items     int // a fan-out's items, 0 without one
	Succeeded int // items succeeded
	Failed    int
	Running   int
	StartedAt int64
	EndedAt   int64
	Output    json.RawMessage
	Error     string
	Attempts  []model.StepRun // every row of the step, oldest first
}

// GetRun returns a run, its definition's version and every step's state and rows.
func (s *Service) GetRun(ctx context.Context, id string) (*RunView, error) {
	run, rows, err := s.st.GetWorkflowRun(ctx, id)
	if err != nil {
		return nil, err
	}
	c, err := s.compiledVersion(ctx, run.Workflow, run.Version)
	if err != nil {
		return nil, err
	}
	states := apply(c, rows)
	v := &RunView{Run: *run, Def: &c.def}
	by := map[string][]model.StepRun{}
	for _, r := range rows {
		by[r.Step] = append(by[r.Step], r)
	}
	for i, def := range c.def.Steps {
		st := &states[i]
		sv := StepView{Name: def.Name, Needs: def.Needs, Attempts: by[def.Name]}
		ended, ok := st.terminal()
		switch {
		case st.level == model.StepSkipped:
			sv.State = model.StepSkipped
		case ended && ok:
			sv.State = model.StepSucceeded
		case ended:
			sv.State = model.StepFailed
			if st.level == model.StepCancelled || st.allCancelled() {
				sv.State = model.StepCancelled
			}
		case st.resolved:
			sv.State = model.StepRunning
		default:
			sv.State = "pending"
		}
		if def.FanOut != "" && st.resolved {
			sv.Items = len(st.items)
		}
		for _, it := range st.items {
			switch it.state {
			case model.StepSucceeded:
				sv.Succeeded++
			case model.StepFailed, model.StepCancelled:
				sv.Failed++
				if sv.Error == "" {
					sv.Error = it.err
				}
			case model.StepRunning:
				sv.Running++
			}
		}
		if st.levelErr != "" {
			sv.Error = st.levelErr
		}
		for _, r := range by[def.Name] {
			if r.Attempt < st.base {
				continue
			}
			if r.StartedAt > 0 && (sv.StartedAt == 0 || r.StartedAt < sv.StartedAt) {
				sv.StartedAt = r.StartedAt
			}
			sv.EndedAt = max(sv.EndedAt, r.EndedAt)
		}
		if ended && ok {
			sv.Output = st.output(def.FanOut != "")
		}
		v.Steps = append(v.Steps, sv)
	}
	return v, nil
}

// held returns the run in this node's memory, taking it up from the store if need be;
// model.ErrShardNotHeld when another node schedules its workflow.
func (s *Service) held(ctx context.Context, id string) (*runState, error) {
	run, _, err := s.st.GetWorkflowRun(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := s.owned(run.Workflow); err != nil {
		return nil, err
	}
	s.mu.Lock()
	rs := s.runs[id]
	s.mu.Unlock()
	if rs != nil && run.State != model.WorkflowRunning {
		// The store has the run ended while memory still holds it: its end committed and
		// memory has not followed yet (endRun between its write and the rest), or it left
		// memory since. The store is the truth then: operate on the ended run, as a read of
		// it shows it. A run memory holds running again (a rerun after that read) is kept.
		rs.mu.Lock()
		stale := rs.ending || rs.gone
		rs.mu.Unlock()
		if stale {
			rs = nil
		}
	}
	if rs != nil {
		return rs, nil
	}
	if run.State == model.WorkflowRunning {
		if err := s.takeUp(ctx, run.Workflow, id); err != nil {
			return nil, err
		}
		s.mu.Lock()
		rs = s.runs[id]
		s.mu.Unlock()
		if rs != nil {
			return rs, nil
		}
	}
	// An ended run: loaded to be operated on (a rerun), not driven yet.
	c, err := s.compiledVersion(ctx, run.Workflow, run.Version)
	if err != nil {
		return nil, err
	}
	_, rows, err := s.st.GetWorkflowRun(ctx, id)
	if err != nil {
		return nil, err
	}
	return &runState{id: run.ID, workflow: run.Workflow, trigger: run.Trigger, run: *run, c: c, steps: apply(c, rows)}, nil
}

// Cancel ends a run cancelled: steps not started never start, running ones are killed.
func (s *Service) Cancel(ctx context.Context, id, reason, actor string) (*model.WorkflowRun, error) {
	rs, err := s.held(ctx, id)
	if err != nil {
		return nil, err
	}
	rs.mu.Lock()
	if rs.run.State != model.WorkflowRunning {
		state := rs.run.State
		rs.mu.Unlock()
		return nil, fmt.Errorf("run %s has ended (%s): %w", id, state, ErrConflict)
	}
	run := rs.run
	run.State, run.EndedAt, run.Error = model.WorkflowCancelled, s.clk.Now().UnixMilli(), joinNote("cancelled by "+actor, reason)
	var kill []string
	for i := range rs.steps {
		for _, it := range rs.steps[i].items {
			if it.state == model.StepRunning && it.ticket != "" {
				kill = append(kill, it.ticket)
			}
		}
	}
	rs.run.State = model.WorkflowCancelled // no decision from here on
	rs.mu.Unlock()
	g := &persist.Group{WorkflowRuns: []model.WorkflowRun{run}, Actions: []model.Action{s.action(run.Workflow, id, ActCancel, actor, reason)}}
	if err := s.eng.Steps().Write(ctx, run.Workflow, g); err != nil {
		rs.mu.Lock()
		rs.run.State = model.WorkflowRunning
		rs.mu.Unlock()
		return nil, err
	}
	rs.mu.Lock()
	rs.run, rs.gone = run, true
	rs.mu.Unlock()
	s.mu.Lock()
	if s.runs[id] == rs {
		delete(s.runs, id)
	}
	s.mu.Unlock()
	for _, t := range kill {
		if _, err := s.eng.KillRun(ctx, t, "workflow run cancelled", actor); err != nil {
			s.log.Info("cannot kill a step of a cancelled run (it may have ended)", "ticket", t, "error", err)
		}
	}
	return &run, nil
}

func joinNote(a, b string) string {
	if b == "" {
		return a
	}
	return a + ": " + b
}

// Rerun runs a run again in place: from = "failed" reruns every step that did not succeed
// (succeeded steps keep their outputs and do not run again); step = NAME reruns that step
// and every step that follows it.
func (s *Service) Rerun(ctx context.Context, id, from, step, actor string) (*model.WorkflowRun, error) {
	if (from == "") == (step == "") {
		return nil, &FieldError{Field: "from", Msg: `give either "from": "failed" or "step": NAME`}
	}
	if from != "" && from != "failed" {
		return nil, &FieldError{Field: "from", Msg: fmt.Sprintf(`must be "failed", got %q`, from)}
	}
	rs, err := s.held(ctx, id)
	if err != nil {
		return nil, err
	}
	rs.mu.Lock()
	if rs.run.State == model.WorkflowRunning {
		rs.mu.Unlock()
		return nil, fmt.Errorf("run %s is still running: cancel it or wait for its end: %w", id, ErrConflict)
	}
	var reset []int
	detail := "from the failed steps"
	if step != "" {
		i, ok := rs.c.index[step]
		if !ok {
			rs.mu.Unlock()
			return nil, &FieldError{Field: "step", Msg: fmt.Sprintf("run %s has no step %q", id, step)}
		}
		reset, detail = rs.c.descendants(i), "from step "+step
	} else {
		for i := range rs.steps {
			if !rs.steps[i].succeeded() {
				reset = append(reset, i)
			}
		}
	}
	if len(reset) == 0 {
		rs.mu.Unlock()
		return nil, fmt.Errorf("run %s has no failed step to rerun: %w", id, ErrConflict)
	}
	rows := rs.resetRows(reset, step == "")
	run := rs.run
	run.State, run.EndedAt, run.Error = model.WorkflowRunning, 0, ""
	rs.mu.Unlock()
	return s.reopen(ctx, run, rows, s.action(run.Workflow, id, ActRerun, actor, detail))
}

// resetRows are the pending rows that make steps run again: a whole step from a new
// attempt (whole), or only its failed items (a rerun from the failed steps).
func (rs *runState) resetRows(steps []int, onlyFailed bool) []model.StepRun {
	var rows []model.StepRun
	for _, i := range steps {
		st := &rs.steps[i]
		name := rs.c.def.Steps[i].Name
		next := st.maxAttempt() + 1
		if onlyFailed && st.resolved && st.level != model.StepSkipped && st.level != model.StepFailed && st.level != model.StepCancelled {
			for j, it := range st.items {
				if it.state != model.StepSucceeded && it.state != "" {
					rows = append(rows, model.StepRun{RunID: rs.run.ID, Step: name, Index: j, Attempt: it.attempt + 1, State: stepPending})
				}
			}
			continue
		}
		rows = append(rows, model.StepRun{RunID: rs.run.ID, Step: name, Index: levelIndex, Attempt: next, State: stepPending})
	}
	return rows
}

// reopen writes a run running again with rows, and takes it up.
func (s *Service) reopen(ctx context.Context, run model.WorkflowRun, rows []model.StepRun, act model.Action) (*model.WorkflowRun, error) {
	g := &persist.Group{WorkflowRuns: []model.WorkflowRun{run}, StepRuns: rows, Actions: []model.Action{act}}
	if err := s.eng.Steps().Write(ctx, run.Workflow, g); err != nil {
		return nil, err
	}
	s.mu.Lock()
	delete(s.runs, run.ID)
	s.mu.Unlock()
	if err := s.takeUp(ctx, run.Workflow, run.ID); err != nil {
		s.log.Warn("cannot take up a reopened workflow run; the next scan will", "run", run.ID, "error", err)
	}
	return &run, nil
}

// Succeed marks a failed (or skipped) step of an ended run succeeded with output, and runs
// the steps after it that did not succeed.
func (s *Service) Succeed(ctx context.Context, id, step string, output json.RawMessage, note, actor string) (*model.WorkflowRun, error) {
	if len(output) > 0 && !json.Valid(output) {
		return nil, &FieldError{Field: "output", Msg: "must be JSON"}
	}
	if len(output) > OutputMax {
		return nil, &FieldError{Field: "output", Msg: fmt.Sprintf("at most %d bytes", OutputMax)}
	}
	rs, err := s.held(ctx, id)
	if err != nil {
		return nil, err
	}
	rs.mu.Lock()
	i, ok := rs.c.index[step]
	switch {
	case !ok:
		rs.mu.Unlock()
		return nil, &FieldError{Field: "step", Msg: fmt.Sprintf("run %s has no step %q", id, step)}
	case rs.run.State == model.WorkflowRunning:
		rs.mu.Unlock()
		return nil, fmt.Errorf("run %s is still running: cancel it or wait for its end: %w", id, ErrConflict)
	case rs.steps[i].succeeded():
		rs.mu.Unlock()
		return nil, fmt.Errorf("step %s of run %s succeeded already: %w", step, id, ErrConflict)
	}
	rows := []model.StepRun{{RunID: id, Step: step, Index: levelIndex, Attempt: rs.steps[i].maxAttempt() + 1,
		State: model.StepSucceeded, Output: output, EndedAt: s.clk.Now().UnixMilli(), Error: joinNote("marked succeeded by "+actor, note)}}
	var after []int
	for _, j := range rs.c.descendants(i)[1:] {
		if !rs.steps[j].succeeded() {
			after = append(after, j)
		}
	}
	rows = append(rows, rs.resetRows(after, false)...)
	run := rs.run
	run.State, run.EndedAt, run.Error = model.WorkflowRunning, 0, ""
	rs.mu.Unlock()
	return s.reopen(ctx, run, rows, s.action(run.Workflow, id, ActSucceed, actor, joinNote("step "+step, note)))
}
