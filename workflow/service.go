// Package workflow runs workflows (docs/workflows.md): DAGs of steps run together for one
// logical time, with data passed between steps, reruns from the failed step, and every step
// exactly once across nodes. It is a service beside the engine: it decides which step runs
// when and keeps each run's state; the engine runs each step attempt as a run of the step's
// task (engine/steps.go) and tells the service of its end in the same write that records it.
//
// A run lives in memory on the node that schedules its workflow's shard, and in the store
// (persist/workflow.go): the run row, and one row per step attempt. What a node knows of a
// run is rebuilt from those rows when it takes the run up (start, a shard gained), so every
// decision the service makes is taken again, identically, by the next owner; what makes a
// step attempt start at most once is its fire record (engine/steps.go), whoever asks.
package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// Engine is what the service asks of the engine: its port for workflows (engine.Steps),
// a kill by ticket, and the metric set its series join.
type Engine interface {
	Steps() *engine.Steps
	KillRun(ctx context.Context, ticket, reason, actor string) (*model.Run, error)
	Metrics() *metrics.Set
}

// Store is what the service reads.
type Store interface {
	persist.WorkflowStore
	GetTask(ctx context.Context, name string) (*model.Task, error)
	ListTasks(ctx context.Context, f persist.TaskFilter) ([]model.Task, error)
}

// Config configures a Service.
type Config struct {
	Engine Engine
	Store  Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Poll is how often the service looks for runs and workflows it newly schedules (a
	// shard gained, a run created on another node) and for cron fires due. Defaults to
	// 250ms.
	Poll time.Duration
}

// Errors the API maps to statuses.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrRunNotFound = persist.ErrWorkflowRunNotFound
)

// Service is the workflow service.
type Service struct {
	cfg Config
	eng Engine
	st  Store
	clk clock.Clock
	log *slog.Logger
	lc  startstop.Lifecycle

	mu        sync.Mutex
	runs      map[string]*runState
	versions  map[string]*compiled               // "name@version"
	schedules map[string]*schedule               // workflows with a cron trigger this node schedules
	backfills map[string]*model.WorkflowBackfill // running backfills of the workflows this node schedules (loadBackfills)
	followed  map[string]bool                    // "workflow\x00upstream run id" already acted on (follow)
	tasks     map[string]*model.Task             // step tasks read before, by name (stepTaskOf)

	m wfMetrics

	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	// endWritten, when set (tests), is called once a run's end is durable and before this
	// node's memory follows it.
	endWritten func(id string)
}

// schedule is the trigger of a cron or delay workflow this node schedules: a delay's one
// fire is next, and sched is nil.
type schedule struct {
	trigger  string
	name     string
	version  int
	paused   bool
	next     int64
	sched    cron.Schedule
	loc      *time.Location
	misfire  string
	jitter   int64 // jitter_sec in ms
	inFlight bool
}

// runState is one open run this node drives.
type runState struct {
	// id, workflow and trigger are the run's, set once: read without mu (run is replaced
	// whole under mu when it ends).
	id, workflow, trigger string

	mu     sync.Mutex
	run    model.WorkflowRun
	c      *compiled
	steps  []stepState
	ending bool // the run's end is being written
	// endSeen is when the last step end of this run became durable here: the hand-off to
	// the steps it releases is measured from it.
	endSeen time.Time
	gone    bool // left memory (ended, or its shard went)
	// epoch is the epoch of the workflow's shard this node held when it took the run up.
	epoch int64
	// wake is the timer that advances the run when its earliest retry (or wait for a limit)
	// falls due (wakeAt, Unix ms); nil when none is armed.
	wake   clock.Timer
	wakeAt int64
}

// New makes a service and connects it to the engine's step ends.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	s := &Service{cfg: cfg, eng: cfg.Engine, st: cfg.Store, clk: cfg.Clock, log: cfg.Logger.With("service", "workflow"),
		runs: map[string]*runState{}, versions: map[string]*compiled{}, schedules: map[string]*schedule{},
		backfills: map[string]*model.WorkflowBackfill{}, followed: map[string]bool{}, tasks: map[string]*model.Task{}, wake: make(chan struct{}, 1)}
	s.m = newWFMetrics(cfg.Engine.Metrics())
	cfg.Engine.Steps().SetSink(s)
	return s
}

// Start takes up the open runs and schedules of what this node schedules, and polls.
func (s *Service) Start(ctx context.Context) error {
	return s.lc.StartOnce(func() error {
		lctx, cancel := context.WithCancel(context.Background())
		s.cancel, s.done = cancel, make(chan struct{})
		go s.loop(lctx)
		return nil
	})
}

// Stop ends the poll loop; runs in flight stay recorded for the next start or owner.
func (s *Service) Stop(ctx context.Context) error {
	return s.lc.StopOnce(ctx, func(started bool) error {
		if !started {
			return nil
		}
		s.cancel()
		select {
		case <-s.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Service) loop(ctx context.Context) {
	defer close(s.done)
	t := s.clk.NewTicker(s.cfg.Poll)
	defer t.Stop()
	var lastScan time.Time
	for {
		now := s.clk.Now()
		if now.Sub(lastScan) >= 4*s.cfg.Poll || lastScan.IsZero() {
			if err := s.scan(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("cannot read the workflows and runs to schedule", "error", err)
			} else {
				lastScan = now
			}
		}
		s.fireDue(ctx)
		s.pumpBackfills(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-s.wake:
		}
	}
}

// scan reads the workflows and open runs this node schedules: it takes up what it does not
// hold yet and lets go of what another node schedules now.
func (s *Service) scan(ctx context.Context) error {
	sctx := s.eng.Steps().Scheduling(ctx)
	wfs, err := s.st.ListWorkflows(sctx)
	if err != nil {
		return err
	}
	open, err := s.st.OpenWorkflowRuns(sctx)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, w := range wfs {
		if !s.eng.Steps().Owned(w.Def.Name) {
			continue
		}
		seen[w.Def.Name] = true
		s.track(w)
		if w.Def.Trigger == model.TriggerWorkflow {
			s.follow(ctx, w)
		}
	}
	s.mu.Lock()
	for name := range s.schedules {
		if !seen[name] {
			delete(s.schedules, name)
		}
	}
	var drop []*runState
	for id, rs := range s.runs {
		// A run taken up at another epoch of its shard is dropped too and read again: the
		// shard left this node and came back (a freeze, a partition), and the node that held
		// it meanwhile moved the run on.
		if ep, ok := s.eng.Steps().Epoch(rs.workflow); !ok || ep != rs.epoch {
			drop = append(drop, rs)
			delete(s.runs, id)
		}
	}
	s.mu.Unlock()
	for _, rs := range drop {
		rs.mu.Lock()
		rs.gone = true
		rs.mu.Unlock()
	}
	for _, r := range open {
		if !s.eng.Steps().Owned(r.Workflow) {
			continue
		}
		s.mu.Lock()
		_, held := s.runs[r.ID]
		s.mu.Unlock()
		if !held {
			if err := s.takeUp(ctx, r.Workflow, r.ID); err != nil && ctx.Err() == nil {
				s.log.Warn("cannot take up a workflow run", "run", r.ID, "error", err)
			}
		}
	}
	// After the open runs: a backfill counts its runs in flight among those.
	return s.loadBackfills(sctx)
}

// track keeps the cron schedule of a workflow this node schedules.
func (s *Service) track(w model.Workflow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.Def.Trigger != model.TriggerCron && w.Def.Trigger != model.TriggerDelay {
		delete(s.schedules, w.Def.Name)
		return
	}
	sc := s.schedules[w.Def.Name]
	if sc != nil && sc.version == w.Def.Version && sc.paused == w.Def.Paused && sc.next == w.NextFire {
		return
	}
	var parsed cron.Schedule
	if w.Def.Trigger == model.TriggerCron {
		var err error
		if parsed, err = cron.Parse(w.Def.Cron); err != nil {
			s.log.Warn("stored workflow has a cron it cannot read", "workflow", w.Def.Name, "error", err)
			return
		}
	}
	loc, err := time.LoadLocation(w.Def.Timezone)
	if err != nil {
		loc = time.UTC
	}
	if sc == nil || !sc.inFlight {
		s.schedules[w.Def.Name] = &schedule{trigger: w.Def.Trigger, name: w.Def.Name, version: w.Def.Version, paused: w.Def.Paused, next: w.NextFire,
			sched: parsed, loc: loc, misfire: w.Def.MisfirePolicy, jitter: int64(w.Def.JitterSec) * 1000}
	}
}

// compiledVersion returns one version of a workflow, checked, from the cache or the store.
func (s *Service) compiledVersion(ctx context.Context, name string, version int) (*compiled, error) {
	key := name + "@" + strconv.Itoa(version)
	s.mu.Lock()
	c := s.versions[key]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	d, err := s.st.WorkflowVersion(ctx, name, version)
	if err != nil {
		return nil, err
	}
	c, err = compile(d)
	if err != nil {
		return nil, fmt.Errorf("stored version %d of %s does not check: %w", version, name, err)
	}
	s.mu.Lock()
	s.versions[key] = c
	s.mu.Unlock()
	return c, nil
}

// takeUp loads an open run from the store and drives it from where its rows say it is.
func (s *Service) takeUp(ctx context.Context, workflow, id string) error {
	// The epoch first, the rows after: a shard that moves between the two leaves a run at an
	// older epoch, which the next scan reads again.
	epoch, ok := s.eng.Steps().Epoch(workflow)
	if !ok {
		return nil
	}
	run, rows, err := s.st.GetWorkflowRun(ctx, id)
	if err != nil {
		return err
	}
	if run.State != model.WorkflowRunning {
		return nil
	}
	c, err := s.compiledVersion(ctx, run.Workflow, run.Version)
	if err != nil {
		return err
	}
	rs := &runState{id: run.ID, workflow: run.Workflow, trigger: run.Trigger, run: *run, c: c, steps: apply(c, rows), epoch: epoch}
	rs.armRetries()
	s.mu.Lock()
	if _, held := s.runs[id]; held {
		s.mu.Unlock()
		return nil
	}
	s.runs[id] = rs
	s.mu.Unlock()
	rs.mu.Lock()
	for i := range rs.steps {
		for j := range rs.steps[i].items {
			s.wakeAt(rs, rs.steps[i].items[j].retryAt)
		}
	}
	rs.mu.Unlock()
	go s.advance(rs)
	return nil
}

// wakeAt arms rs's timer to advance it at at (Unix ms) unless it is armed for then or
// sooner: a retry or a wait for a limit is a timer, not a poll. rs.mu is held. advance arms
// it again for the items not due yet when it fires.
func (s *Service) wakeAt(rs *runState, at int64) {
	if at <= 0 || rs.gone || (rs.wake != nil && rs.wakeAt <= at) {
		return
	}
	if rs.wake != nil {
		rs.wake.Stop()
	}
	rs.wakeAt = at
	rs.wake = s.clk.AfterFunc(time.Duration(max(at-s.clk.Now().UnixMilli(), 0))*time.Millisecond, func() {
		rs.mu.Lock()
		if rs.wakeAt == at {
			rs.wake, rs.wakeAt = nil, 0
		}
		rs.mu.Unlock()
		s.advance(rs)
	})
}

// armRetries sets the retry time of every item whose last attempt failed with attempts
// left in its try.
func (rs *runState) armRetries() {
	for i := range rs.steps {
		for j := range rs.steps[i].items {
			rs.armRetry(i, j)
		}
	}
}

func (rs *runState) armRetry(i, j int) {
	step := &rs.c.def.Steps[i]
	it := &rs.steps[i].items[j]
	it.retryAt = 0
	if it.state != model.StepFailed || rs.run.State != model.WorkflowRunning {
		return
	}
	try := max(it.try, 1)
	if it.attempt-try < step.RetryCount {
		it.retryAt = max(it.endedAt+int64(step.RetryIntervalSec)*1000, 1)
	}
}

// stepTaskOf returns the step task named name as read before, or reads it: a step start
// then builds the task's copy from it rather than reading the store (engine.StepCall.Task).
// nil when it cannot be read (the engine reads it by name then).
func (s *Service) stepTaskOf(ctx context.Context, name string) *model.Task {
	s.mu.Lock()
	t := s.tasks[name]
	s.mu.Unlock()
	if t != nil {
		return t
	}
	t, err := s.st.GetTask(ctx, name)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	if len(s.tasks) > 100_000 {
		clear(s.tasks)
	}
	s.tasks[name] = t
	s.mu.Unlock()
	return t
}

// forgetStepTasks drops the step tasks of workflow read before (its definition changed).
func (s *Service) forgetStepTasks(workflow string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.tasks {
		if w, _, _ := strings.Cut(name, "/"); w == workflow {
			delete(s.tasks, name)
		}
	}
}
