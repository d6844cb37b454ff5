package engine

// Workflow steps (docs/workflows.md). The workflow service (package workflow) decides which
// step runs when; the engine runs each attempt as it runs a run-now instance of a task: the
// step's task (WORKFLOW/STEP, in the workflow's shard: model.ShardKey), the same send path
// (HTTP or executor, timeout, executor protocol), counted in its group's and key's
// concurrency limits and its downstream's rate limit, killable by ticket, re-attached after
// a restart or a failover as run-now instances are (recoverManualRuns).
//
// Exactly once. An attempt's ticket is deterministic in (run, step, item, attempt) and its
// run row is written as a fire record (fire.go) in one group with the step run's row, so the
// database refuses a second start of the same attempt, whoever asks. Its end is written in
// one group with the step run's end (StepSink.StepEnded), and the service acts on it only
// once that is durable (StepSink.StepRecorded).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// StepOutputMax bounds the output of a step kept whole (an HTTP step's response body, an
// executor's reported output).
const StepOutputMax = 1 << 20

// ErrStepWait reports a step attempt that could not start now because a concurrency limit
// is full or its downstream's rate limit has no token: the service tries again after the
// *StepWaitError's After.
var ErrStepWait = errors.New("the step waits for a limit")

// StepWaitError is ErrStepWait with how long to wait and on what.
type StepWaitError struct {
	After time.Duration
	On    string
}

func (e *StepWaitError) Error() string { return "waits for " + e.On }
func (e *StepWaitError) Unwrap() error { return ErrStepWait }

// StepCall is one attempt of one item of a workflow step.
type StepCall struct {
	// Def is the step as the run's version defines it, named WORKFLOW/STEP: callback,
	// timeout, group, concurrency key. It replaces the step task's definition in memory.
	Def *model.TaskDef
	// Task, when set, is the step task as the caller read it before: a copy not in memory
	// is built from it instead of being read again (a step task's runtime never changes,
	// and Def replaces its definition). Its name must be Def's.
	Task *model.Task
	// Ticket names the attempt; Params is its request's params (the workflow context).
	Ticket string
	Params json.RawMessage
	// ScheduledAt is the run's logical time.
	ScheduledAt int64
	// Row is the step run's row, written with the fire record.
	Row model.StepRun
	// Detail goes into the run row (which run, step and item).
	Detail string
}

// StepSink is the workflow service as the engine sees it.
type StepSink interface {
	// StepEnded returns the row recording the end of the step attempt run (ended, its
	// error and result set), given the attempt's whole output; it is written in one group
	// with the run's end. ok false writes the run's end alone (an attempt the service does
	// not know: its workflow run was deleted).
	StepEnded(run model.Run, output string) (row model.StepRun, ok bool)
	// StepRecorded tells how writing that end went: nil once it is durable. It must not
	// block.
	StepRecorded(run model.Run, row model.StepRun, err error)
	// StepCallOf makes the call of the step attempt run, in flight, again from what is
	// stored (Def and Params as Start was given them): the shard's next owner sends an
	// attempt its previous owner held back unsent with it (core_heldback.go). An error
	// when the attempt is no longer in flight in its workflow run's rows.
	StepCallOf(ctx context.Context, run model.Run) (StepCall, error)
}

// IsStepTask reports whether name is a workflow step's task (WORKFLOW/STEP).
func IsStepTask(name string) bool { return strings.IndexByte(name, '/') > 0 }

// Steps is the engine's port for the workflow service: what it asks of the core (start a
// step attempt, write its rows under the workflow's fence, whether this node schedules a
// workflow) and where the core tells it of an attempt's end (the sink).
type Steps struct {
	e    *Engine
	sink StepSink
}

// Steps is the engine's port for the workflow service.
func (e *API) Steps() *Steps { return &e.steps }

// SetSink connects the workflow service. Set before the engine starts.
func (s *Steps) SetSink(k StepSink) { s.sink = k }

// Start records a step attempt's fire record and step row in one group and sends it.
// It reports persist.ErrDuplicateFire when the attempt was started before (by this node or
// any other), a *StepWaitError when a limit keeps it from starting now, and
// model.ErrShardNotHeld when this node does not schedule the workflow's shard.
func (s *Steps) Start(ctx context.Context, c StepCall) error {
	e := s.e
	if err := e.checkRunning(); err != nil {
		return err
	}
	if c.Def == nil || !IsStepTask(c.Def.Name) {
		return fmt.Errorf("not a workflow step")
	}
	var t *task
	var err error
	if c.Task != nil && c.Task.Def.Name == c.Def.Name && c.Task.Def.ID > 0 {
		t, err = live(e.acquire(ctx, c.Task.Def.ID, acquireOpts{api: true, row: c.Task}))
		if err == nil && t.def.Name != c.Def.Name {
			e.release(t)
			err = fmt.Errorf("step task %q: %w", c.Def.Name, model.ErrTaskNotFound)
		}
	} else {
		t, err = live(e.acquire(ctx, 0, acquireOpts{name: c.Def.Name}))
	}
	if err != nil {
		return err
	}
	if err := e.own.shardGate(t.shard, t.sepoch, true); err != nil {
		e.release(t)
		return err
	}
	def := t.useStepDef(c.Def)
	// A step's key is rendered over its own params, known only now: one that does not
	// render fails the attempt, with the reason, rather than run it outside its limit.
	key, kerr := model.RenderKey(def.ConcurrencyKey, c.Params)
	if kerr != nil {
		e.release(t)
		return fmt.Errorf("%w: concurrency_key %q: %v", ErrKeyNotRendered, def.ConcurrencyKey, kerr)
	}
	if _, err := model.RenderKey(def.RateKey, c.Params); err != nil {
		e.release(t)
		return fmt.Errorf("%w: rate_key %q: %v", ErrKeyNotRendered, def.RateKey, err)
	}
	slot, full, used, most, ok := e.conc.tryAcquire(def.Group, key)
	if !ok {
		e.release(t)
		return &StepWaitError{After: time.Second, On: fmt.Sprintf("concurrency limit %s (%d of %d runs in flight)", full, used, most)}
	}
	if e.gate.limited.Load() {
		rk := rateKeyOf(def, c.Params)
		if ok, wait := e.gate.lim.Take(rk); !ok {
			e.conc.release(slot)
			e.release(t)
			return &StepWaitError{After: max(wait, 10*time.Millisecond), On: "rate limit of " + rk}
		}
	}
	now := e.nowMS()
	run := model.Run{
		Ticket: c.Ticket, TaskID: t.id, TaskName: def.Name, Kind: model.RunManual,
		Attempt: c.Row.Attempt, ScheduledAt: c.ScheduledAt, DispatchedAt: now, Result: model.ResultRunning,
		Executor: downstreamOf(def), Detail: c.Detail,
	}
	row := c.Row
	row.Ticket, row.State, row.StartedAt = c.Ticket, model.StepRunning, now
	t.flying++ // keeps t in memory while the records are written
	t.mu.Unlock()
	if err := e.write(ctx, &persist.Group{Fires: []model.Run{run}, StepRuns: []model.StepRun{row}}); err != nil {
		e.conc.release(slot)
		t.mu.Lock()
		t.flying--
		e.release(t)
		return err
	}
	e.runs.add(t, run, slot)
	e.m.triggers.Inc()
	e.send(t, def, run, c.Params)
	return nil
}

// useStepDef makes d, the step as its workflow run's version defines it, t's definition in
// memory; the stored row keeps its id and times. Caller holds t.mu.
func (t *task) useStepDef(d *model.TaskDef) *model.TaskDef {
	def := *d
	def.ID, def.CreatedAt, def.UpdatedAt = t.def.ID, t.def.CreatedAt, t.def.UpdatedAt
	t.def = &def
	return &def
}

// heldCall is the call of a step attempt its shard's previous owner held back unsent, made
// again by the workflow service (StepSink.StepCallOf); nil when it cannot be (no service,
// the attempt no longer in flight in its run's rows, a store error), and the attempt is
// then resolved per on_lost as a run in doubt is.
func (s *Steps) heldCall(ctx context.Context, run model.Run) *StepCall {
	if s.sink == nil {
		return nil
	}
	c, err := s.sink.StepCallOf(ctx, run)
	if err == nil && (c.Def == nil || c.Def.Name != run.TaskName || c.Ticket != run.Ticket) {
		err = fmt.Errorf("the call made again is of %q, not of the attempt", c.Ticket)
	}
	if err != nil {
		s.e.log.Warn("cannot make a held-back step attempt's call again; it is resolved as a run in doubt",
			"ticket", run.Ticket, "error", err)
		return nil
	}
	return &c
}

// complete records the end of a step attempt with the step run's end, as completeManual
// records a run-now's: no action record (the workflow run is the record), no circuit
// breaker, no dependents.
func (s *Steps) complete(t *task, run model.Run, oc outcome) {
	e := s.e
	now := e.nowMS()
	output := oc.output
	oc.output = tail(output, maxOutput)
	run = endedRun(run, oc, now)
	e.m.results.result(oc.result).Inc()
	if oc.result == model.ResultTimeout {
		e.m.timeouts.Inc()
	}
	if oc.killedBy != "" {
		e.m.kills.Inc()
		run.Error = joinNote("killed by "+oc.killedBy, oc.killReason)
	}
	t.mu.Lock()
	t.runLeft(run.Ticket)
	e.loader.place(t)
	t.mu.Unlock()
	row, ok := s.sink.StepEnded(run, output)
	g := &persist.Group{Runs: []model.Run{run}, Done: func(err error) {
		if ok {
			s.sink.StepRecorded(run, row, err)
		}
		oc.notify(err)
	}}
	if ok {
		g.StepRuns = []model.StepRun{row}
	}
	if err := e.submit(context.Background(), g, submitWait); err != nil {
		e.log.Warn("step result not recorded: writer closed", "ticket", run.Ticket, "error", err)
		if ok {
			s.sink.StepRecorded(run, row, err)
		}
		oc.notify(err)
	}
}

// Write writes a group of workflow rows (runs, step runs) about workflow and waits
// until it is durable, fenced by the workflow's shard on a sharded engine.
func (s *Steps) Write(ctx context.Context, workflow string, g *persist.Group) error {
	e := s.e
	fs, err := e.own.apiFences([]string{workflow})
	if err != nil {
		return err
	}
	if len(fs) > 0 {
		g.Fence = fs[0]
	}
	return e.write(ctx, g)
}

// ApplyBatch applies a batch of workflow definitions and their step tasks in one
// transaction of its own, fenced by the workflow's shard on a sharded engine (and by the
// lease epoch through the engine's store as primary). Step tasks it updated or deleted
// leave memory, to be read again when next used.
func (s *Steps) ApplyBatch(ctx context.Context, workflow string, b *persist.Batch) error {
	e := s.e
	if err := e.checkRunning(); err != nil {
		return err
	}
	fs, err := e.own.apiFences([]string{workflow})
	if err != nil {
		return err
	}
	b.Shards = fs
	if err := e.store.ApplyBatch(ctx, b); err != nil {
		return err
	}
	for _, d := range b.DefUpdates {
		s.forgetTask(d.ID)
	}
	for _, id := range b.Deletes {
		s.forgetTask(id)
	}
	return nil
}

// forgetTask drops a step task's copy from memory unless a run of it is in flight
// (then the next Start replaces its definition anyway).
func (s *Steps) forgetTask(id int64) {
	e := s.e
	t := e.tasks.get(id)
	if t == nil {
		return
	}
	t.mu.Lock()
	if t.flying == 0 && t.pending == 0 {
		t.deleted = true
		e.loader.disarm(t)
		e.tasks.remove(t)
	}
	t.mu.Unlock()
}

// Owned reports whether this node schedules workflow now: while the engine runs
// on a single node or a primary, else while the workflow's shard is held here and ready.
func (s *Steps) Owned(workflow string) bool {
	ready, _ := s.e.own.serves(workflow)
	return ready && s.e.checkRunning() == nil
}

// Epoch reports whether this node schedules workflow now (Owned) and the epoch at which
// it holds the workflow's shard (0 on a single node or a primary). What the service knows
// of a run taken up at one epoch is stale at another: the shard went and came back, and
// another node may have moved the run on meanwhile.
func (s *Steps) Epoch(workflow string) (epoch int64, ok bool) {
	if !s.Owned(workflow) {
		return 0, false
	}
	fs, err := s.e.own.apiFences([]string{workflow})
	if err != nil {
		return 0, false
	}
	if len(fs) == 0 {
		return 0, true
	}
	return fs[0].Epoch, true
}

// Scheduling is ctx with the shard filter of what this engine schedules, for the
// workflow service's reads of the workflows and runs it drives.
func (s *Steps) Scheduling(ctx context.Context) context.Context { return s.e.own.scheduling(ctx) }
