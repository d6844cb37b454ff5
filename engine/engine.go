// Package engine decides when every task runs. It owns the state machine (states.go), the
// in-memory window of armed tasks, the window loader, misfire handling, retries and the
// reaction to results. It drives the wheel (timing), the dispatcher (sending) and the batched
// writer (durability), and is the only writer of task_runtime rows once a task exists.
//
// It must not speak HTTP to clients (admin/ does) and must not know SQL (persist/ does).
//
// # Invariants
//
//  1. A run is sent only after its SCHEDULED→RUNNING (or RETRYING→RUNNING) transition has
//     committed as a CAS on the runtime row's version (R2.3, R7.2). A conflict means the
//     in-memory view was stale: the trigger is dropped and the task reloaded. Two triggers for
//     one fire time therefore never both dispatch.
//  2. Every task whose next_trigger_time is below the horizon, in an armable state, is in
//     memory and armed; tasks at or beyond the horizon are not in memory unless a run or a
//     write is in flight for them. The loader moves the horizon forward every LoadInterval
//     and loads exactly the slice it uncovered.
//  3. A task leaves memory (evict) only when no write for it is pending, so a task read back
//     from the store is never older than what the engine last decided.
//  4. Lock order: task.mu, then the task map's shard lock, then horizonMu. The loader takes
//     horizonMu alone to move the horizon.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/engine/cron"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/ratelimit"
	"github.com/axe-sched/axe/wheel"
)

// Defaults for Config.
const (
	WindowDefault           = 5 * time.Minute
	LoadIntervalDefault     = 30 * time.Second
	TickDefault             = 10 * time.Millisecond
	MisfireThresholdDefault = 5 * time.Second
	// WriterLanesDefault: see Config.WriterLanes. Four lanes let MariaDB overlap commits:
	// a burst of 20,000 fires drained 10–60 % faster and its p99 lateness fell from seconds
	// (one writer's queue full, consumers blocked) to ~50 ms (bench/e2e, same machine, runs
	// alternated).
	WriterLanesDefault = 4
	// RetryBackoffCapDefault caps the doubling retry interval (R4.4).
	RetryBackoffCapDefault = 10 * time.Minute
)

// Sentinel errors. The API maps them to HTTP codes in one place (admin).
var (
	// ErrInvalidTask wraps every validation failure of a task definition (*FieldError).
	ErrInvalidTask = errors.New("invalid task")
	// ErrTaskNotFound: no task has that name.
	ErrTaskNotFound = persist.ErrTaskNotFound
	// ErrTaskExists: the name is taken.
	ErrTaskExists = persist.ErrTaskExists
	// ErrInvalidTransition: an edge that is not in the state machine table.
	ErrInvalidTransition = errors.New("invalid state transition")
	// ErrConflict: the operation does not apply to the task's current state.
	ErrConflict = errors.New("conflict")
	// ErrNotRunning: the engine is not started or is stopping.
	ErrNotRunning = errors.New("engine not running")
	// ErrRunNotFound: no run has that ticket.
	ErrRunNotFound = persist.ErrRunNotFound
)

// Clock tells the time. Tests inject a fake one.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Config configures an Engine.
type Config struct {
	// Store is the durable state. Required.
	Store persist.Store
	// Clock defaults to the real clock.
	Clock Clock
	// Tick is the wheel's resolution. Defaults to TickDefault (10ms).
	Tick time.Duration
	// Shards is the number of wheel shards. Defaults to GOMAXPROCS (see wheel.Config).
	Shards int
	// Window is how far ahead tasks are held in memory (R3.3). Defaults to WindowDefault.
	Window time.Duration
	// LoadInterval is how often the loader moves the window. Defaults to LoadIntervalDefault.
	LoadInterval time.Duration
	// PromoteLead: tasks due later than this when the window is loaded are held as cold
	// references (48 B each) and read in full this long before they fire (cold.go).
	// Defaults to PromoteLeadDefault (10s), or half the window if that is shorter; it must be
	// shorter than Window.
	PromoteLead time.Duration
	// MisfireThreshold: a fire later than this is a misfire and follows the task's misfire
	// policy; a fire less late is simply sent late. Defaults to MisfireThresholdDefault.
	MisfireThreshold time.Duration
	// RetryBackoffCap caps doubling retry intervals. Defaults to RetryBackoffCapDefault.
	RetryBackoffCap time.Duration
	// DefaultTimezone is the zone of tasks that name none. Defaults to TimezoneDefault.
	DefaultTimezone string
	// Writer configures the batched writer.
	Writer persist.WriterConfig
	// WriterLanes is the number of batched writers, tasks spread over them by id: commits of
	// different tasks then overlap in the database. Defaults to WriterLanesDefault.
	WriterLanes int
	// Dispatch configures the dispatcher.
	Dispatch dispatch.Config
	// LostAfter: an executor silent this long gets no new dispatch and its runs in flight are
	// resolved as lost (R5.3). Defaults to LostAfterDefault.
	LostAfter time.Duration
	// HeartbeatInterval is what executors are told to heartbeat at. Defaults to
	// HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration
	// ExecutorToken, when set, is sent to executors as a bearer token.
	ExecutorToken string
	// RateLimit sets the token buckets of R4.3: a global one and one per downstream
	// (executor app, or callback host:port). Defaults to no limit; changeable at runtime.
	RateLimit ratelimit.Config
	// Breaker configures the per-task circuit breaker (R4.6).
	Breaker BreakerConfig
	// AlertWebhooks receive every alert as a JSON POST (R4.7).
	AlertWebhooks []string
	// NodeID names this scheduler in action records and logs. Defaults to "axe".
	NodeID string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Retention bounds what the store keeps (prune.go, docs/retention.md).
	Retention RetentionConfig
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Retention = c.Retention.WithDefaults()
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.Tick == 0 {
		c.Tick = TickDefault
	}
	if c.Window == 0 {
		c.Window = WindowDefault
	}
	if c.LoadInterval == 0 {
		c.LoadInterval = LoadIntervalDefault
	}
	if c.MisfireThreshold == 0 {
		c.MisfireThreshold = MisfireThresholdDefault
	}
	if c.PromoteLead == 0 {
		c.PromoteLead = min(PromoteLeadDefault, c.Window/2)
	}
	if c.RetryBackoffCap == 0 {
		c.RetryBackoffCap = RetryBackoffCapDefault
	}
	if c.DefaultTimezone == "" {
		c.DefaultTimezone = TimezoneDefault
	}
	if c.LostAfter == 0 {
		c.LostAfter = LostAfterDefault
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = HeartbeatIntervalDefault
	}
	if c.NodeID == "" {
		c.NodeID = "axe"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Breaker = c.Breaker.WithDefaults()
	if c.WriterLanes == 0 {
		c.WriterLanes = WriterLanesDefault
	}
	if c.Writer.Logger == nil {
		c.Writer.Logger = c.Logger
	}
	if c.Dispatch.Logger == nil {
		c.Dispatch.Logger = c.Logger
	}
	return c
}

func (c Config) validate() error {
	if err := c.Retention.validate(); err != nil {
		return err
	}
	if c.Store == nil {
		return errors.New("store is required")
	}
	if c.Tick < time.Millisecond {
		return fmt.Errorf("tick must be >= 1ms, got %s", c.Tick)
	}
	if c.Window < 2*c.LoadInterval {
		return fmt.Errorf("window (%s) must be at least twice the load interval (%s)", c.Window, c.LoadInterval)
	}
	if c.PromoteLead < c.Tick || c.PromoteLead >= c.Window {
		return fmt.Errorf("promote lead (%s) must be at least the tick (%s) and shorter than the window (%s)", c.PromoteLead, c.Tick, c.Window)
	}
	if c.LoadInterval < c.Tick {
		return fmt.Errorf("load interval (%s) must be >= tick (%s)", c.LoadInterval, c.Tick)
	}
	if c.LostAfter <= c.HeartbeatInterval {
		return fmt.Errorf("lost-after (%s) must be longer than the heartbeat interval (%s)", c.LostAfter, c.HeartbeatInterval)
	}
	if _, err := cron.LoadLocation(c.DefaultTimezone); err != nil {
		return fmt.Errorf("default timezone: %w", err)
	}
	return nil
}

// Engine is the scheduler core. Create with New, then Start; Stop drains it.
type Engine struct {
	cfg    Config
	store  persist.Store
	writer *persist.Lanes
	wheel  *wheel.Sharded[*task]
	disp   *dispatch.Dispatcher
	log    *slog.Logger
	m      *engineMetrics

	tasks     taskMap
	registry  *dispatch.Registry
	execRuns  execRuns
	gate      *rateGate
	brk       breakers
	upstreams upstreamSet
	promo     promoter
	alerts    *alerter

	horizonMu sync.RWMutex
	horizon   int64 // ms; tasks due before it are in memory

	runsWG runCounter // runs sent and not yet resolved

	lifeMu  sync.Mutex
	state   int // 0 new, 1 running, 2 stopped
	cancel  context.CancelFunc
	loopsWG sync.WaitGroup
	running atomic.Bool
}

// New builds an engine from cfg. Nothing runs until Start.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cannot create engine: %w", err)
	}
	w, err := persist.NewLanes(cfg.Store, cfg.Writer, cfg.WriterLanes)
	if err != nil {
		return nil, fmt.Errorf("cannot create engine: %w", err)
	}
	wh, err := wheel.New(wheel.Config[*task]{Shards: cfg.Shards, Tick: cfg.Tick, Clock: cfg.Clock})
	if err != nil {
		return nil, fmt.Errorf("cannot create engine: %w", err)
	}
	d, err := dispatch.New(cfg.Dispatch)
	if err != nil {
		return nil, fmt.Errorf("cannot create engine: %w", err)
	}
	e := &Engine{
		cfg:      cfg,
		store:    cfg.Store,
		writer:   w,
		wheel:    wh,
		disp:     d,
		log:      cfg.Logger,
		registry: dispatch.NewRegistry(),
	}
	e.tasks.init()
	e.promo.init()
	if cfg.RateLimit.Clock == nil {
		cfg.RateLimit.Clock = cfg.Clock
	}
	if e.gate, err = newRateGate(cfg.RateLimit); err != nil {
		return nil, fmt.Errorf("cannot create engine: rate limits: %w", err)
	}
	e.m = newEngineMetrics(e)
	e.alerts = newAlerter(cfg.AlertWebhooks, cfg.Logger,
		func() { e.m.alertDrops.Inc() }, func() { e.m.alertFails.Inc() })
	return e, nil
}

func (e *Engine) now() time.Time { return e.cfg.Clock.Now() }
func (e *Engine) nowMS() int64   { return e.cfg.Clock.Now().UnixMilli() }

// Start recovers runs left in flight by a previous process, loads the first window (applying
// misfire policies to fires that passed while no scheduler was active), and starts the wheel,
// the ready-queue consumers and the loader. It returns once they run.
func (e *Engine) Start(ctx context.Context) error {
	e.lifeMu.Lock()
	defer e.lifeMu.Unlock()
	if e.state != 0 {
		return fmt.Errorf("cannot start engine: %w", ErrNotRunning)
	}
	if err := e.writer.Start(ctx); err != nil {
		return fmt.Errorf("cannot start writer: %w", err)
	}
	if err := e.disp.Start(ctx); err != nil {
		return fmt.Errorf("cannot start dispatcher: %w", err)
	}
	e.running.Store(true)
	runCtx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel

	start := time.Now()
	now := e.nowMS()
	e.horizonMu.Lock()
	e.horizon = now + e.cfg.Window.Milliseconds()
	h := e.horizon
	e.horizonMu.Unlock()
	if err := e.restoreExecutors(ctx); err != nil {
		cancel()
		e.running.Store(false)
		return fmt.Errorf("cannot restore executors: %w", err)
	}
	if err := e.recoverInFlight(ctx); err != nil {
		cancel()
		e.running.Store(false)
		return fmt.Errorf("cannot recover in-flight runs: %w", err)
	}
	// The first window includes every fire in the past: misfires (R3.5).
	n, err := e.loadRange(ctx, 1, h, now)
	if err != nil {
		cancel()
		e.running.Store(false)
		return fmt.Errorf("cannot load the first window: %w", err)
	}
	e.log.Info("window loaded", "tasks", n, "window", e.cfg.Window, "took", time.Since(start))
	if err := e.loadDependencies(ctx); err != nil {
		cancel()
		e.running.Store(false)
		return fmt.Errorf("cannot load dependencies: %w", err)
	}

	if err := e.wheel.Start(runCtx); err != nil {
		cancel()
		return fmt.Errorf("cannot start wheel: %w", err)
	}
	for i := 0; i < e.wheel.Shards(); i++ {
		e.loopsWG.Add(1)
		go e.consume(runCtx, e.wheel.Ready(i))
	}
	e.alerts.start()
	e.loopsWG.Add(5)
	go e.pruneLoop(runCtx)
	go e.promoteLoop(runCtx)
	go e.loadLoop(runCtx)
	go e.reapLoop(runCtx)
	go e.gateLoop(runCtx)
	e.state = 1
	return nil
}

// Stop shuts the engine down in this order, logging how long each step took:
//
//  1. stop triggering: the loader and the wheel stop, consumers exit; armed entries stay
//     armed in the store (their next_trigger_time is durable) and fire after a restart;
//  2. drain dispatch: runs already sent are waited for until ctx expires — their results are
//     recorded; a run still in flight when ctx expires stays RUNNING in the store and is
//     resolved as "lost" by the next Start (never re-sent, so never run twice);
//  3. flush the batched writer.
//
// The store is the caller's to close afterwards. Stop is idempotent and safe without Start.
func (e *Engine) Stop(ctx context.Context) error {
	e.lifeMu.Lock()
	defer e.lifeMu.Unlock()
	if e.state == 2 {
		return nil
	}
	wasRunning := e.state == 1
	e.state = 2
	e.running.Store(false)
	var errs []error
	step := func(name string, fn func() error) {
		t := time.Now()
		err := fn()
		e.log.Info("engine stop: "+name, "took", time.Since(t), "error", err)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if wasRunning {
		step("stop triggering", func() error {
			e.cancel()
			err := e.wheel.Stop(ctx)
			e.loopsWG.Wait()
			return err
		})
		step("drain in-flight runs", func() error {
			if err := e.runsWG.Wait(ctx); err != nil {
				return fmt.Errorf("cannot drain in-flight runs (%d left): %w", e.runsWG.Count(), err)
			}
			return nil
		})
	}
	step("stop dispatcher", func() error { return e.disp.Stop(ctx) })
	step("flush writer", func() error { return e.writer.Stop(ctx) })
	step("deliver alerts", func() error { e.alerts.stop(ctx); return nil })
	return errors.Join(errs...)
}

// Running reports whether the engine is started and not stopping.
func (e *Engine) Running() bool { return e.running.Load() }

// loadLoop moves the window forward every LoadInterval (R3.3).
func (e *Engine) loadLoop(ctx context.Context) {
	defer e.loopsWG.Done()
	t := time.NewTicker(e.cfg.LoadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := e.loadSlice(ctx); err != nil && ctx.Err() == nil {
				e.log.Error("cannot load the next window slice; retrying next interval", "error", err)
			}
		}
	}
}

// armableStates are the states whose next_trigger_time means "fire then".
var armableStates = []persist.State{persist.StateScheduled, persist.StateRetrying}

func armable(s persist.State) bool {
	return s == persist.StateScheduled || s == persist.StateRetrying
}

// loadSlice uncovers [old horizon, now+Window) and loads it.
func (e *Engine) loadSlice(ctx context.Context) error {
	now := e.nowMS()
	e.horizonMu.Lock()
	from := e.horizon
	to := now + e.cfg.Window.Milliseconds()
	if to <= from {
		e.horizonMu.Unlock()
		return nil
	}
	e.horizon = to
	e.horizonMu.Unlock()
	t := time.Now()
	n, err := e.loadRange(ctx, from, to, now)
	e.m.loadDuration.UpdateDuration(t)
	if err != nil {
		return err
	}
	e.log.Debug("window slice loaded", "tasks", n, "took", time.Since(t))
	return nil
}

// loadRange loads the tasks due in [from, to): in full those due within PromoteLead of
// now (and every past fire, for the misfire policy), as cold references the rest.
func (e *Engine) loadRange(ctx context.Context, from, to, now int64) (int, error) {
	n := 0
	hot := min(to, now+e.cfg.PromoteLead.Milliseconds())
	if from < hot {
		var err error
		if n, err = e.loadFull(ctx, from, hot, now); err != nil {
			return n, err
		}
	}
	if hot < to {
		m := 0
		err := e.store.LoadDueRefs(ctx, max(from, hot), to, armableStates, func(r persist.DueRef) error {
			m++
			if e.tasks.get(r.TaskID) == nil {
				e.armCold(r.TaskID, r.NextTriggerTime)
			}
			return nil
		})
		e.m.loaded.Add(m)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// loadFull loads the tasks due in [from, to) in full.
func (e *Engine) loadFull(ctx context.Context, from, to, now int64) (int, error) {
	n := 0
	err := e.store.LoadDue(ctx, from, to, armableStates, func(pt *persist.Task) error {
		n++
		t, err := newTask(pt)
		if err != nil {
			// A definition that no longer parses (e.g. an unknown zone after a tzdata
			// change) must not stop the loader: log it and leave the row as it is.
			e.log.Error("cannot load task", "task", pt.Def.Name, "error", err)
			return nil
		}
		e.adopt(t, now)
		return nil
	})
	e.m.loaded.Add(n)
	return n, err
}

// adopt puts a task read from the store into memory unless a newer copy is already there,
// applying the misfire policy to a fire already too late at now (now 0: no policy).
func (e *Engine) adopt(t *task, now int64) {
	if !e.tasks.insertIfAbsent(t) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if now > 0 && t.rt.State == persist.StateScheduled && t.rt.NextTriggerTime < now-e.cfg.MisfireThreshold.Milliseconds() {
		e.misfire(t, now)
	}
	e.settle(t)
}

// settle arms or disarms t according to its state and the horizon, and evicts it from memory
// when nothing needs it there (invariants 2 and 3). Caller holds t.mu.
func (e *Engine) settle(t *task) {
	if t.evicted {
		return
	}
	want := !t.deleted && armable(t.rt.State) && t.rt.NextTriggerTime > 0
	if want {
		e.horizonMu.RLock()
		want = t.rt.NextTriggerTime < e.horizon
		e.horizonMu.RUnlock()
	}
	if want {
		if t.ent == nil || t.ent.When != t.rt.NextTriggerTime {
			e.disarm(t)
			t.ent = &wheel.Entry[*task]{When: t.rt.NextTriggerTime, Key: uint64(t.id), Priority: uint8(t.def.Priority), Value: t}
			e.wheel.Add(t.ent)
		}
		return
	}
	e.disarm(t)
	if t.pending == 0 && t.run == nil && t.manual == 0 {
		t.evicted = true
		e.tasks.remove(t)
	}
}

// disarm takes t's entry out of the wheel. An entry already moved to a ready queue cannot be
// cancelled; fire recognises it as stale because t.ent no longer points at it.
func (e *Engine) disarm(t *task) {
	if t.ent != nil {
		e.wheel.Cancel(t.ent)
		t.ent = nil
	}
}

// acquire returns the task with id locked, loading it from the store when it is not in
// memory. The caller must call release.
func (e *Engine) acquire(ctx context.Context, id int64) (*task, error) {
	for {
		if t := e.tasks.get(id); t != nil {
			t.mu.Lock()
			if !t.evicted {
				return t, nil
			}
			t.mu.Unlock()
			continue
		}
		pt, err := e.store.GetTaskByID(ctx, id)
		if err != nil {
			return nil, err
		}
		t, err := newTask(pt)
		if err != nil {
			return nil, fmt.Errorf("cannot load task %q: %w", pt.Def.Name, err)
		}
		if e.tasks.insertIfAbsent(t) {
			t.mu.Lock()
			return t, nil
		}
	}
}

// release settles and unlocks a task obtained from acquire.
func (e *Engine) release(t *task) {
	e.settle(t)
	t.mu.Unlock()
}

// InMemory reports how many tasks are held in memory in full and how many entries are armed
// (cold references included).
func (e *Engine) InMemory() (tasks, armed int) { return e.tasks.len(), e.wheel.Len() }

// Horizon returns the time up to which tasks are held in memory.
func (e *Engine) Horizon() time.Time {
	e.horizonMu.RLock()
	defer e.horizonMu.RUnlock()
	return time.UnixMilli(e.horizon)
}

// runCounter counts runs in flight; Stop waits for it to reach zero without leaving a
// goroutine behind when its deadline passes first.
type runCounter struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0 while someone waits
}

func (c *runCounter) Add(d int) {
	c.mu.Lock()
	c.n += d
	if c.n == 0 && c.zero != nil {
		close(c.zero)
		c.zero = nil
	}
	c.mu.Unlock()
}

func (c *runCounter) Done() { c.Add(-1) }

func (c *runCounter) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Wait returns when the count is zero or ctx is done.
func (c *runCounter) Wait(ctx context.Context) error {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return nil
	}
	if c.zero == nil {
		c.zero = make(chan struct{})
	}
	ch := c.zero
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrStopping is returned by writes attempted while the engine stops.
var errStopping = fmt.Errorf("%w: stopping", ErrNotRunning)

func (e *Engine) checkRunning() error {
	if !e.running.Load() {
		return errStopping
	}
	return nil
}
