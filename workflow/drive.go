package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// startsAtOnce bounds the starts of one run written at once.
const startsAtOnce = 64

// startTimeout bounds the write of one step attempt's start.
const startTimeout = 30 * time.Second

// stepRequest is the params of a step attempt's request: the workflow context.
type stepRequest struct {
	Workflow    string                     `json:"workflow"`
	RunID       string                     `json:"run_id"`
	Step        string                     `json:"step"`
	ScheduledAt int64                      `json:"scheduled_at"`
	Params      json.RawMessage            `json:"params,omitempty"`
	Inputs      map[string]json.RawMessage `json:"inputs"`
	// A fan-out item's "index", "items" and "item" follow, appended by startItem.
}

// start is one item attempt advance decided to start.
type start struct {
	step, idx, attempt int
	try                int
	after              time.Time // when the end that released it became durable; zero for none
}

// advance takes every decision the run's state allows now: steps whose upstreams ended
// are started or skipped, items started up to the fan-out's parallelism, and the run ended
// once every step has. It writes the decisions that need no start (a skip, a fan-out
// resolved or failed to, the run's end), then starts the attempts, each in its own write.
func (s *Service) advance(rs *runState) {
	for {
		rs.mu.Lock()
		if rs.gone || rs.ending || rs.run.State != model.WorkflowRunning {
			rs.mu.Unlock()
			return
		}
		now := s.clk.Now().UnixMilli()
		var rows []model.StepRun
		var starts []start
		for _, i := range rs.c.order {
			st := &rs.steps[i]
			def := &rs.c.def.Steps[i]
			if ended, _ := st.terminal(); ended {
				continue
			}
			if !st.resolved {
				run, decided := rs.condition(i)
				if !decided {
					continue
				}
				if !run {
					st.level = model.StepSkipped
					rows = append(rows, model.StepRun{RunID: rs.run.ID, Step: def.Name, Index: levelIndex, Attempt: st.base,
						State: model.StepSkipped, EndedAt: now, Error: "condition " + def.Condition + " does not hold"})
					continue
				}
				if def.FanOut == "" {
					st.resolved, st.items = true, []item{{}}
				} else {
					items, err := fanItems(def.FanOut, rs.run.Params, rs.upOutput)
					if err != nil {
						st.level, st.levelErr = model.StepFailed, err.Error()
						rows = append(rows, model.StepRun{RunID: rs.run.ID, Step: def.Name, Index: levelIndex, Attempt: st.base,
							State: model.StepFailed, EndedAt: now, Error: err.Error()})
						continue
					}
					st.resolved, st.items, st.fan, st.level = true, make([]item, len(items)), items, model.StepRunning
					rows = append(rows, model.StepRun{RunID: rs.run.ID, Step: def.Name, Index: levelIndex, Attempt: st.base,
						State: model.StepRunning, StartedAt: now, Items: len(items)})
				}
			}
			if def.FanOut != "" && st.fan == nil && len(st.items) > 0 {
				// Resolved before a restart: the items come again from the same source.
				items, err := fanItems(def.FanOut, rs.run.Params, rs.upOutput)
				if err != nil || len(items) != len(st.items) {
					s.log.Error("a fan-out resolves differently than it did; its items wait", "run", rs.run.ID, "step", def.Name)
					continue
				}
				st.fan = items
			}
			cap := len(st.items)
			if def.FanOut != "" {
				cap = def.Parallelism
			}
			flying := 0
			for j := range st.items {
				it := &st.items[j]
				if it.starting || it.state == model.StepRunning {
					flying++
				}
			}
			for j := range st.items {
				if flying >= cap {
					break
				}
				it := &st.items[j]
				if it.starting || it.state == model.StepRunning || it.state == model.StepSucceeded {
					continue
				}
				var a, try int
				switch {
				case it.state == "":
					a, try = max(st.base, it.attempt+1), max(st.base, it.attempt+1)
				case it.state == stepPending && (it.retryAt == 0 || it.retryAt <= now):
					a, try = it.attempt, it.attempt
				case it.retryAt > 0 && it.retryAt <= now:
					a, try = it.attempt+1, it.try
				default:
					s.wakeAt(rs, it.retryAt) // not due yet: the run's timer wakes it
					continue
				}
				it.starting, it.retryAt = true, 0
				flying++
				starts = append(starts, start{step: i, idx: j, attempt: a, try: try, after: rs.endSeen})
			}
		}
		end := ""
		if len(rows) == 0 && len(starts) == 0 {
			end = rs.endState()
			if end != "" {
				rs.ending = true
			}
		}
		rs.mu.Unlock()
		if len(rows) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
			err := s.eng.Steps().Write(ctx, rs.workflow, &persist.Group{StepRuns: rows})
			cancel()
			if err != nil {
				s.lost(rs, "cannot record a step's decision", err)
				return
			}
		}
		if end != "" {
			s.endRun(rs, end)
			return
		}
		if len(starts) == 0 {
			if len(rows) > 0 {
				continue // a skip or a resolution may free more
			}
			return
		}
		// Each start waits for its own write: they go together, so the writer commits them
		// in shared batches rather than one after another.
		var wg sync.WaitGroup
		sem := make(chan struct{}, startsAtOnce)
		for _, x := range starts {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				s.startItem(rs, x)
			}()
		}
		wg.Wait()
		// Starts that could not write (a limit) are retried when the run's timer fires
		// (wakeAt); a start that landed changes nothing here until its end.
		return
	}
}

// upOutput is the output of the step named step as the steps after it see it, and whether
// it succeeded (an output exists only then).
func (rs *runState) upOutput(step string) (json.RawMessage, bool) {
	i := rs.c.index[step]
	up := &rs.steps[i]
	if !up.succeeded() {
		return nil, false
	}
	return up.output(rs.c.def.Steps[i].FanOut != ""), true
}

// condition decides whether an unstarted step runs: decided is false while an upstream
// has not ended.
func (rs *runState) condition(i int) (run, decided bool) {
	def := &rs.c.def.Steps[i]
	okN, failN := 0, 0
	for _, n := range def.Needs {
		ended, ok := rs.steps[rs.c.index[n]].terminal()
		if !ended {
			return false, false
		}
		if ok {
			okN++
		} else {
			failN++
		}
	}
	switch def.Condition {
	case model.CondAllDone:
		return true, true
	case model.CondAnySucceeded:
		return okN > 0, true
	case model.CondAnyFailed:
		return failN > 0, true
	default:
		return failN == 0, true
	}
}

// endState is the run's end once every step ended ("" before): failed when a step failed
// (a step skipped because an upstream failed counts as that failure), else succeeded.
func (rs *runState) endState() string {
	failed := false
	for i := range rs.steps {
		ended, ok := rs.steps[i].terminal()
		if !ended {
			return ""
		}
		if !ok && rs.steps[i].level != model.StepSkipped {
			failed = true
		}
	}
	if failed {
		return model.WorkflowFailed
	}
	return model.WorkflowSucceeded
}

// startItem writes one attempt's start and hands it to the engine.
func (s *Service) startItem(rs *runState, x start) {
	rs.mu.Lock()
	def := &rs.c.def.Steps[x.step]
	st := &rs.steps[x.step]
	params := rs.stepParams(x.step, x.idx)
	row := model.StepRun{RunID: rs.run.ID, Step: def.Name, Index: x.idx, Attempt: x.attempt}
	run := rs.run
	rs.mu.Unlock()
	ticket := Ticket(run.ID, def.Name, x.idx, x.attempt)
	tdef := stepTaskDef(&rs.c.def, def)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	call := engine.StepCall{Def: tdef, Task: s.stepTaskOf(ctx, tdef.Name), Ticket: ticket, Params: params, ScheduledAt: run.ScheduledAt,
		Row: row, Detail: stepDetail(&run, def.Name, x.idx)}
	err := s.eng.Steps().Start(ctx, call)
	cancel()
	rs.mu.Lock()
	it := &st.items[x.idx]
	it.starting = false
	var wait *engine.StepWaitError
	switch {
	case err == nil:
		s.m.steps.Inc()
		if !x.after.IsZero() && it.attempt == 0 && x.attempt == st.base {
			s.m.handoff.Update(s.clk.Now().Sub(x.after).Seconds())
		}
		// Its end may have been recorded meanwhile (StepRecorded): only an older row's
		// state gives way to running.
		if it.attempt < x.attempt || (it.attempt == x.attempt && it.endedAt == 0) {
			it.attempt, it.try, it.ticket, it.state, it.endedAt = x.attempt, x.try, ticket, model.StepRunning, 0
		}
		rs.mu.Unlock()
	case errors.Is(err, persist.ErrDuplicateFire):
		// Started before (a restart between the start and this node's knowing of it, or
		// another node): its rows will tell; read them again.
		rs.mu.Unlock()
		s.reload(rs)
	case errors.As(err, &wait):
		s.m.waits.Inc()
		it.retryAt = s.clk.Now().Add(wait.After).UnixMilli()
		s.wakeAt(rs, it.retryAt)
		if it.state == "" || it.state == stepPending {
			// Keep it startable at the same attempt: a pending marker in memory only.
			it.attempt, it.try, it.state = x.attempt, x.try, stepPending
		} else {
			it.attempt = x.attempt - 1
		}
		rs.mu.Unlock()
	case errors.Is(err, engine.ErrKeyNotRendered):
		// The attempt's params do not render its concurrency_key or rate_key: it fails,
		// recorded with the reason, and never runs outside its limit (docs/design.md, Keyed
		// limits). Its retries, if any, meet the same params.
		now := s.clk.Now().UnixMilli()
		row.State, row.StartedAt, row.EndedAt, row.Error = model.StepFailed, now, now, err.Error()
		rs.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		werr := s.eng.Steps().Write(ctx, run.Workflow, &persist.Group{StepRuns: []model.StepRun{row}})
		cancel()
		if werr != nil {
			s.lost(rs, "cannot record a step attempt whose key does not render", werr)
			return
		}
		rs.mu.Lock()
		if it := &rs.steps[x.step].items[x.idx]; row.Attempt >= it.attempt {
			*it = item{attempt: row.Attempt, try: max(x.try, 1), state: row.State, err: row.Error, endedAt: row.EndedAt}
			rs.armRetry(x.step, x.idx)
		}
		rs.mu.Unlock()
		go s.advance(rs)
	default:
		rs.mu.Unlock()
		if errors.Is(err, model.ErrTaskNotFound) {
			s.forgetStepTasks(run.Workflow) // read again at the next start
		}
		s.lost(rs, "cannot start step "+def.Name, err)
	}
}

// stepParams is the params of the attempts of item idx of step i: the workflow context (the
// run's params, the outputs of the step's needs) and, for a fan-out's item, its index, the
// number of items and the item. rs.mu is held; a fan-out's items are resolved already (st.fan).
// The step's shared part is made once (st.reqHead): a fan-out's items would otherwise each
// encode the upstreams' outputs again. It is a function of the run's rows alone, so that
// StepCallOf makes the same params again from them.
func (rs *runState) stepParams(i, idx int) []byte {
	def := &rs.c.def.Steps[i]
	st := &rs.steps[i]
	if st.reqHead == nil {
		req := stepRequest{Workflow: rs.run.Workflow, RunID: rs.run.ID, Step: def.Name, ScheduledAt: rs.run.ScheduledAt,
			Params: rs.run.Params, Inputs: map[string]json.RawMessage{}}
		for _, n := range def.Needs {
			if out, ok := rs.upOutput(n); ok {
				req.Inputs[n] = out
			} else {
				req.Inputs[n] = json.RawMessage("null")
			}
		}
		head, _ := json.Marshal(req)
		st.reqHead = head[:len(head)-1] // without its closing brace
	}
	params := append([]byte(nil), st.reqHead...)
	if def.FanOut != "" {
		params = append(params, `,"index":`...)
		params = strconv.AppendInt(params, int64(idx), 10)
		params = append(params, `,"items":`...)
		params = strconv.AppendInt(params, int64(len(st.items)), 10)
		params = append(params, `,"item":`...)
		params = append(params, st.fan[idx]...)
	}
	return append(params, '}')
}

// stepDetail is the run row's detail of an attempt of item idx of step of run.
func stepDetail(run *model.WorkflowRun, step string, idx int) string {
	return fmt.Sprintf("workflow %s run %s step %s item %d", run.Workflow, run.ID, step, idx)
}

// stepTaskDef is the task definition a step attempt runs with. Its overlap policy is
// allow_all: the attempts of one step in runs side by side (or a fan-out's items) are runs
// of their own, each its ticket, never an overlap of one task (an executor takes them in
// parallel rather than refusing the second one while the first runs).
func stepTaskDef(w *model.WorkflowDef, st *model.WorkflowStep) *model.TaskDef {
	return &model.TaskDef{
		Name: StepTask(w.Name, st.Name), Group: w.Group, Trigger: model.TriggerManual, Timezone: "UTC",
		TimeoutSec: st.TimeoutSec, Priority: st.Priority, Callback: st.Callback, MisfirePolicy: model.MisfireFireOnce,
		ConcurrencyKey: st.ConcurrencyKey, RateKey: st.RateKey, OverlapPolicy: model.OverlapAllowAll,
	}
}

// lost lets go of a run this node could not write about (its shard went, the database is
// away): whoever schedules it next takes it up from its rows.
func (s *Service) lost(rs *runState, what string, err error) {
	s.log.Warn(what+"; the run is taken up again from the store", "run", rs.id, "error", err)
	s.mu.Lock()
	if s.runs[rs.id] == rs {
		delete(s.runs, rs.id)
	}
	s.mu.Unlock()
	rs.mu.Lock()
	rs.gone = true
	rs.mu.Unlock()
}

// reload reads a run's rows again and drives it from them.
func (s *Service) reload(rs *runState) {
	s.lost(rs, "a step attempt was started elsewhere", errors.New("fire record exists"))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.takeUp(ctx, rs.workflow, rs.id); err != nil {
		s.log.Warn("cannot take up a workflow run", "run", rs.id, "error", err)
	}
}

// endRun records the run's end.
func (s *Service) endRun(rs *runState, state string) {
	rs.mu.Lock()
	run := rs.run
	run.State, run.EndedAt = state, s.clk.Now().UnixMilli()
	if state == model.WorkflowFailed {
		for i := range rs.steps {
			if ended, ok := rs.steps[i].terminal(); ended && !ok && rs.steps[i].level != model.StepSkipped {
				run.Error = "step " + rs.c.def.Steps[i].Name + " failed"
				break
			}
		}
	}
	rs.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	err := s.eng.Steps().Write(ctx, run.Workflow, &persist.Group{WorkflowRuns: []model.WorkflowRun{run}})
	cancel()
	if err != nil {
		rs.mu.Lock()
		rs.ending = false
		rs.mu.Unlock()
		s.lost(rs, "cannot record the run's end", err)
		return
	}
	if s.endWritten != nil {
		s.endWritten(run.ID)
	}
	rs.mu.Lock()
	rs.run, rs.ending, rs.gone = run, false, true
	rs.mu.Unlock()
	if c := s.m.ended[state]; c != nil {
		c.Inc()
	}
	s.mu.Lock()
	if s.runs[run.ID] == rs {
		delete(s.runs, run.ID)
	}
	if sc := s.schedules[run.Workflow]; sc != nil {
		sc.inFlight = false
	}
	s.mu.Unlock()
	s.log.Info("workflow run ended", "workflow", run.Workflow, "run", run.ID, "state", state)
	if state == model.WorkflowFailed {
		pctx, pcancel := context.WithTimeout(context.Background(), startTimeout)
		s.pauseAfterFailures(pctx, run.Workflow)
		pcancel()
	} else if state == model.WorkflowSucceeded {
		s.poke() // a workflow that follows this one starts sooner than the next scan
	}
	if run.Trigger == triggerBackfill {
		s.poke() // its backfill's next run
	}
}

// StepCallOf makes the call of a step attempt in flight again from its run's stored rows
// (engine.StepSink): the step as the run's version defines it and the params startItem
// built for the attempt, which are a function of those rows (the run's params, the outputs
// of the step's needs, a fan-out's items). The shard's next owner sends a step attempt its
// previous owner held back unsent with it (engine/core_heldback.go). An error when the
// rows no longer have the attempt in flight (the run ended, the step was reset).
func (s *Service) StepCallOf(ctx context.Context, run model.Run) (engine.StepCall, error) {
	id, step, idx, attempt, ok := ParseTicket(run.Ticket)
	if !ok {
		return engine.StepCall{}, fmt.Errorf("%s is not a step attempt's ticket", run.Ticket)
	}
	wr, rows, err := s.st.GetWorkflowRun(ctx, id)
	if err != nil {
		return engine.StepCall{}, err
	}
	if wr.State != model.WorkflowRunning {
		return engine.StepCall{}, fmt.Errorf("workflow run %s is %s", id, wr.State)
	}
	c, err := s.compiledVersion(ctx, wr.Workflow, wr.Version)
	if err != nil {
		return engine.StepCall{}, err
	}
	i, ok := c.index[step]
	if !ok {
		return engine.StepCall{}, fmt.Errorf("version %d of %s has no step %s", wr.Version, wr.Workflow, step)
	}
	rs := &runState{id: wr.ID, workflow: wr.Workflow, trigger: wr.Trigger, run: *wr, c: c, steps: apply(c, rows)}
	st, def := &rs.steps[i], &c.def.Steps[i]
	if idx >= len(st.items) || st.items[idx].attempt != attempt || st.items[idx].state != model.StepRunning ||
		st.items[idx].ticket != run.Ticket {
		return engine.StepCall{}, fmt.Errorf("the rows of run %s do not have attempt %s in flight", id, run.Ticket)
	}
	if def.FanOut != "" {
		items, err := fanItems(def.FanOut, wr.Params, rs.upOutput)
		if err != nil || len(items) != len(st.items) {
			return engine.StepCall{}, fmt.Errorf("the fan-out of step %s of run %s resolves differently than it did (%v)", step, id, err)
		}
		st.fan = items
	}
	return engine.StepCall{Def: stepTaskDef(&c.def, def), Ticket: run.Ticket, Params: rs.stepParams(i, idx),
		ScheduledAt: wr.ScheduledAt, Row: model.StepRun{RunID: id, Step: step, Index: idx, Attempt: attempt},
		Detail: stepDetail(wr, step, idx)}, nil
}

// StepEnded is the row recording a step attempt's end (engine.StepSink).
func (s *Service) StepEnded(run model.Run, output string) (model.StepRun, bool) {
	id, step, idx, attempt, ok := ParseTicket(run.Ticket)
	if !ok {
		return model.StepRun{}, false
	}
	row := model.StepRun{RunID: id, Step: step, Index: idx, Attempt: attempt, Ticket: run.Ticket,
		StartedAt: run.DispatchedAt, EndedAt: run.EndedAt, Error: run.Error}
	switch run.Result {
	case model.ResultSuccess:
		row.State = model.StepSucceeded
		row.Output = outputJSON(output)
		if len(row.Output) > OutputMax {
			row.State, row.Output = model.StepFailed, nil
			row.Error = fmt.Sprintf("output is %d bytes, at most %d", len(output), OutputMax)
		}
	case model.ResultKilled:
		row.State = model.StepCancelled
	default:
		row.State = model.StepFailed
		if row.Error == "" {
			row.Error = run.Result
		} else if run.Result != model.ResultFailed {
			row.Error = run.Result + ": " + row.Error
		}
	}
	return row, true
}

// StepRecorded acts on a step attempt's end once it is durable (engine.StepSink).
func (s *Service) StepRecorded(run model.Run, row model.StepRun, err error) {
	if err != nil {
		return // not recorded: the run's next owner meets the attempt again
	}
	s.mu.Lock()
	rs := s.runs[row.RunID]
	s.mu.Unlock()
	if rs == nil {
		return
	}
	rs.mu.Lock()
	i, ok := rs.c.index[row.Step]
	if !ok || row.Index >= len(rs.steps[i].items) {
		rs.mu.Unlock()
		return
	}
	it := &rs.steps[i].items[row.Index]
	rs.endSeen = s.clk.Now()
	if row.Attempt >= it.attempt {
		try := it.try
		*it = item{attempt: row.Attempt, try: max(try, 1), state: row.State, output: row.Output, err: row.Error, ticket: row.Ticket, endedAt: row.EndedAt}
		rs.armRetry(i, row.Index)
		s.wakeAt(rs, it.retryAt)
	}
	rs.mu.Unlock()
	go s.advance(rs)
}
