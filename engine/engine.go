// Package engine decides when every task runs. It is a firing core with services around
// it, in one package; the file names say which is which (docs/design.md, "Files").
//
// The firing core (core_*.go, *Engine) is the route of one fire (docs/design.md, "The route
// of one fire"): the wheel's ready queues are consumed and each due task, once the gates
// admit it, fired (core_fire.go); its transition is committed (commit, core_commit.go;
// core_submit.go; the state table core_states.go); the run is sent by the dispatcher or
// offered to an executor (core_execruns.go); it is held in flight (core_inflight.go,
// core_ending.go) until it ends (core_complete.go, with the pure decision
// core_transition.go) and the end is recorded. Beside it: the task in memory (core_task.go),
// overlap and catch-up (core_overlap.go), jitter (core_jitter.go), parallel runs
// (core_parallel.go), the breaker (core_breaker.go), refused fires and re-sends
// (core_recover.go) and the send and end of a backfill run (core_backfillruns.go).
//
// The ownership model (ownership.go) tells the core what this node owns and under which
// fence: one interface, answered for a single node and a primary (soleOwner) and for a node
// of a sharded cluster (shardOwner, core_shards.go, with the runs its shard gate held back,
// core_heldback.go). No other file asks which mode the engine runs in; the services that
// count what other nodes count too are told so at New. Time is read on Config.Clock only
// (docs/design.md, "Time", for the two reads on clock.Real).
//
// The services (service.go), each a type with a narrow interface to the core and, where it
// runs a loop, a lifecycle of its own: the gates (gates, gates.go: the rate gate
// core_rategate.go, the concurrency gate core_concgate.go, the slots across nodes
// core_clusterslots.go), the window loader and the residency of tasks in memory (Loader,
// loader.go, core_residency.go), the executor registry (Executors, executors.go,
// api_deregister.go, executor_bounds.go, with refused results refusals.go), retention
// (Retention, retention.go), alerts (Alerts, alerts.go, api_alerts.go), backfills
// (Backfills, backfills.go, api_backfill.go), dependents (Dependents, dependents.go) and
// recovery with the takeover of runs left in flight (Recovery, recovery.go,
// core_recover.go). Metrics and health (metrics.go, health.go) are the frame.
//
// What callers outside the engine use is API (api.go, Engine.API): the api_*.go operations
// (tasks, bulk, groups, limits, views), the kills (core_killrun.go), executors' results and
// the services it hands out. The request and response shapes are package wire's.
//
// The engine drives the wheel (timing), the dispatcher (sending) and the batched writer
// (durability), and is the only writer of task_runtime rows once a task exists.
//
// It must not speak HTTP to clients (admin/ does) and must not know SQL (persist/ does).
//
// # Invariants
//
//  1. A run is sent only after its SCHEDULED→RUNNING (or RETRYING→RUNNING) transition has committed
//     as a CAS on the runtime row's version (design.md, "Write path"). A conflict means the
//     in-memory view was stale: the trigger is dropped and the task reloaded. Two triggers for one
//     fire time therefore never both dispatch.
//  2. Every task whose next_trigger_time is below the horizon, in an armable state, is in
//     memory and armed; tasks at or beyond the horizon are not in memory unless a run or a
//     write is in flight for them. The loader moves the horizon forward every LoadInterval
//     and loads exactly the slice it uncovered. The one entry of a task not in an armable
//     state is that of a RUNNING cron task under overlap policy cancel_other: its next fire,
//     armed to kill the run in flight when it comes due (place, cancelOther).
//  3. A task leaves memory (evict) only when no write for it is pending, so a task read back
//     from the store is never older than what the engine last decided.
//  4. Lock order: task.mu, then the task map's stripe lock, then horizonMu. The loader takes
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

	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/model"
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
	// WriterLanesDefault: see Config.WriterLanes. Two lanes overlap one commit with the next
	// batch's, and one full queue does not block every consumer. More lanes committed no
	// faster once a fire wrote one row (B3: 76K transitions/s with two, 72K with four) and
	// cost the database more CPU per row in a burst, where their concurrent transactions
	// compete for the same index pages (BENCHMARKS.md, "The write path on a quiet machine").
	WriterLanesDefault = 2
	// WriterLanesMax bounds Config.WriterLanes.
	WriterLanesMax = 64
	// RetryBackoffCapDefault caps the doubling retry interval.
	RetryBackoffCapDefault = 10 * time.Minute
)

// Sentinel errors. The API maps them to HTTP codes in one place (admin).
var (
	// ErrInvalidTask wraps every validation failure of a task definition (*FieldError).
	ErrInvalidTask = errors.New("invalid task")
	// ErrTaskNotFound: no task has that name.
	ErrTaskNotFound = model.ErrTaskNotFound
	// ErrTaskExists: the name is taken.
	ErrTaskExists = model.ErrTaskExists
	// ErrInvalidTransition: an edge that is not in the state machine table.
	ErrInvalidTransition = errors.New("invalid state transition")
	// ErrConflict: the operation does not apply to the task's current state.
	ErrConflict = errors.New("conflict")
	// ErrNotRunning: the engine is not started or is stopping.
	ErrNotRunning = errors.New("engine not running")
	// ErrStoreStalled: the store has refused commits for a while (an outage, a full disk), so
	// a change that must be durable before it is answered cannot be taken now.
	ErrStoreStalled = errors.New("the store refuses writes")
	// ErrRunNotFound: no run has that ticket.
	ErrRunNotFound = model.ErrRunNotFound
	// ErrConcurrencyLimit: a run-now of a task whose group or concurrency key is at its limit
	// (a run-now does not wait for a slot).
	ErrConcurrencyLimit = errors.New("concurrency limit reached")
	// ErrLimitNotFound: no concurrency limit has that kind and name.
	ErrLimitNotFound = errors.New("concurrency limit not found")
	// ErrKeyNotRendered: a workflow step's concurrency_key template is not rendered by the
	// step's params (model.RenderKey); the attempt does not start.
	ErrKeyNotRendered = errors.New("concurrency key not rendered")
)

// Clock tells the time and arms timers: every time the engine reads and every timer it arms
// goes through Config.Clock, so tests advance a clock.Fake instead of sleeping.
type Clock = clock.Clock

// Config configures an Engine.
type Config struct {
	// Store is the durable state. Required.
	Store persist.Store
	// Clock is the engine's only time source: fire times, deadlines, timeouts, retries,
	// the breaker's window, the rate gate, the loader and the promoter. Defaults to the
	// real clock.
	Clock Clock
	// Tick is the wheel's resolution. Defaults to TickDefault (10ms).
	Tick time.Duration
	// WheelPartitions is the number of partitions of the timing wheel (wheel.Config.Partitions).
	// Defaults to GOMAXPROCS. Unrelated to the ownership shards (Sharded, model.ShardCount).
	WheelPartitions int
	// Window is how far ahead tasks are held in memory (design.md, "Window and cold entries").
	// Defaults to WindowDefault.
	Window time.Duration
	// LoadInterval is how often the loader moves the window. Defaults to LoadIntervalDefault.
	LoadInterval time.Duration
	// PromoteLead: tasks due later than this when the window is loaded are held as cold
	// references (48 B each) and read in full this long before they fire (loader.go).
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
	// different tasks then overlap in the database. Defaults to WriterLanesDefault; at most
	// WriterLanesMax. More lanes pay where each commit waits on the database rather than on
	// its CPU, as across a network to a server of its own.
	WriterLanes int
	// Dispatch configures the dispatcher.
	Dispatch dispatch.Config
	// SendAhead bounds the fires whose record is committed (or being committed) and whose
	// request is not yet handed to the dispatcher's HTTP client, or whose executor call has
	// not begun: the fire loop waits for room (core_pace.go), and one downstream takes at
	// most three quarters of it (a fire over that share waits parked with its downstream).
	// It bounds what a crash leaves in doubt that never left. Defaults to SendAheadDefault;
	// negative: no bound.
	SendAhead int
	// LostAfter: an executor silent this long gets no new dispatch and its runs in flight are
	// resolved as lost. Defaults to LostAfterDefault.
	LostAfter time.Duration
	// HeartbeatInterval is what executors are told to heartbeat at. Defaults to
	// HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration
	// MaxExecutorsPerApp is the most executors one app may have registered, lost ones
	// included; a registration over it takes the place of the app's longest-lost idle
	// executor, or is refused (ErrTooManyExecutors). Defaults to MaxExecutorsPerAppDefault.
	MaxExecutorsPerApp int
	// MaxExecutorsPerToken is the most executors registered with one token (one dispatch
	// key), whatever their apps, bounded as MaxExecutorsPerApp. Defaults to
	// MaxExecutorsPerTokenDefault.
	MaxExecutorsPerToken int
	// RefusalWindow is how long the refused results of one executor app, reason and task
	// are folded into one summary record after the first (refusals.go). Defaults to
	// RefusalWindowDefault.
	RefusalWindow time.Duration
	// ExecutorToken, when set, is sent as a bearer token to the executors that registered
	// without signed calls (they predate them), and lets such executors register while they
	// present a token. Executors that verify signatures never receive it. Defaults to empty:
	// an executor that presents a token must ask for signed calls.
	ExecutorToken string
	// RateLimit sets the token buckets of the rate gate: a global one and one per downstream
	// (executor app, or callback host:port). Defaults to no limit; changeable at runtime.
	RateLimit ratelimit.Config
	// Breaker configures the per-task circuit breaker.
	Breaker BreakerConfig
	// AlertWebhooks receive every alert as a JSON POST.
	AlertWebhooks []string
	// NodeID names this scheduler in action records and logs. Defaults to "axe".
	NodeID string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Epoch is the lease epoch this engine dispatches under (docs/ha.md, "Fencing"), carried in
	// every run body; the daemon builds one engine per term as primary. Its Store should be fenced
	// by the same epoch (persist.Fenced), and Writer and Dispatch given it too. Start then records
	// each recovery step as an action: the promotion of docs/ha.md, "Promotion". Defaults to 0 (no
	// HA).
	Epoch int64
	// CronDialect is the dialect of tasks that name none: "unix" or "quartz" when the
	// operator chose one (--cron-dialect). Defaults to "": unix, and a task whose expression
	// unix cron and Quartz read differently must name its dialect (see NormalizeIn).
	CronDialect string
	// Retention bounds what the store keeps (retention.go, docs/retention.md).
	Retention RetentionConfig
	// Sharded makes the engine schedule only the shards it is given (Ownership().Gain), each write
	// about a task fenced by its shard's epoch (core_shards.go, docs/scale-out.md). Start
	// then recovers nothing but the executor registry: every shard gained is recovered
	// when it is. Defaults to false: every task, as one node or the primary.
	Sharded bool
	// RateShareByShards makes a sharded engine give itself the share of every rate limit its
	// shards are of all, as before rate demand was exchanged (core_rateshares.go): for
	// comparison in tests and benchmarks. Defaults to false: downstreams' rates are shared by
	// the nodes' demand.
	RateShareByShards bool
	// ShardGate, on a sharded engine, is asked before each fire and just before each send of
	// a task of shard at epoch: nil while this node holds the shard's lease at epoch and its
	// local deadline has not passed (ha.Shards.Holds). Defaults to nil: the engine's own view
	// of its shards decides.
	ShardGate func(shard int, epoch int64) error
	// ReleaseElsewhere, on a sharded engine, asks the node that schedules shard to release
	// the dependents of upstream in it (Dependents.Release there): the success of upstream
	// was recorded here. Best effort: every sharded engine also sweeps its own waiting
	// dependents every LoadInterval. Defaults to nil: the sweep alone.
	ReleaseElsewhere func(shard int, upstream string)
	// Metrics is the set the engine's series are registered in (metrics.go), and its
	// writer's and dispatcher's unless Writer.Metrics or Dispatch.Metrics name another; the
	// daemon writes it on /metrics while the engine serves. One set per engine: the engine's
	// gauges read the engine itself, so a second engine cannot register in the same set.
	// Defaults to a new set.
	Metrics *metrics.Set
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Retention = c.Retention.WithDefaults()
	if c.Clock == nil {
		c.Clock = clock.Real
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
	if c.MaxExecutorsPerApp == 0 {
		c.MaxExecutorsPerApp = MaxExecutorsPerAppDefault
	}
	if c.MaxExecutorsPerToken == 0 {
		c.MaxExecutorsPerToken = MaxExecutorsPerTokenDefault
	}
	if c.RefusalWindow == 0 {
		c.RefusalWindow = RefusalWindowDefault
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
	if c.SendAhead == 0 {
		c.SendAhead = SendAheadDefault
	}
	if c.Writer.Logger == nil {
		c.Writer.Logger = c.Logger
	}
	if c.Dispatch.Logger == nil {
		c.Dispatch.Logger = c.Logger
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	if c.Writer.Metrics == nil {
		c.Writer.Metrics = c.Metrics
	}
	if c.Dispatch.Metrics == nil {
		c.Dispatch.Metrics = c.Metrics
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
	if c.WriterLanes < 1 || c.WriterLanes > WriterLanesMax {
		return fmt.Errorf("writer lanes must be 1 to %d, got %d", WriterLanesMax, c.WriterLanes)
	}
	if c.MaxExecutorsPerApp < 1 || c.MaxExecutorsPerToken < 1 {
		return fmt.Errorf("max executors per app (%d) and per token (%d) must be at least 1", c.MaxExecutorsPerApp, c.MaxExecutorsPerToken)
	}
	if c.RefusalWindow < 0 {
		return fmt.Errorf("refusal window must not be negative, got %s", c.RefusalWindow)
	}
	if c.LostAfter <= c.HeartbeatInterval {
		return fmt.Errorf("lost-after (%s) must be longer than the heartbeat interval (%s)", c.LostAfter, c.HeartbeatInterval)
	}
	if _, err := cron.LoadLocation(c.DefaultTimezone); err != nil {
		return fmt.Errorf("default timezone: %w", err)
	}
	if _, err := cron.ParseDialect(c.CronDialect); err != nil {
		return fmt.Errorf("cron dialect: %w", err)
	}
	return nil
}

// Engine is the scheduler core. Create with New, then Start; Stop drains it.
type Engine struct {
	// base is what the core shares with the services (service.go): the clock's now, nowMS and
	// since are its.
	base
	cfg    Config
	store  persist.Store
	writer *persist.Lanes
	// completions runs the writer's Done callbacks off the writer goroutines (core_submit.go).
	completions completions
	wheel       *wheel.Sharded[*task]
	disp        *dispatch.Dispatcher
	log         *slog.Logger
	m           *engineMetrics

	tasks    taskMap
	steps    Steps                       // the port of the workflow service (steps.go)
	shards   [model.ShardCount]shardSlot // the shards held, on a sharded engine (core_shards.go)
	own      ownership                   // what this node owns (ownership.go)
	registry *dispatch.Registry
	runs     runsInFlight    // every run sent and not yet ended
	pace     sendPace        // fires recorded and not yet handed to the wire (core_pace.go)
	stopping <-chan struct{} // closed when Stop begins: a fire waiting on pace gives up
	refires  atomic.Int64    // runs held back unsent by a shard's previous owner, sent here
	gate     *rateGate
	gates    *gates      // the rate and concurrency gates as the core asks them (gates.go)
	rshare   *rateShares // a sharded node's demand exchange (core_rateshares.go); nil otherwise
	conc     *concGate   // concurrency limits (core_concgate.go)
	limitsMu sync.Mutex  // orders the limits' changes: the store's order is the gate's
	brk      breakers
	promo    promoter
	alerts   *Alerts // alerts.go

	// The services around the core (service.go), started in this order once the core runs
	// and stopped in the reverse order first when it stops.
	retention *Retention
	executors *Executors  // executors.go
	deps      *Dependents // dependents.go
	backfills *Backfills  // backfills.go
	loader    *Loader     // loader.go
	recovery  *Recovery   // recovery.go
	services  []service

	api *API // the operations callers outside the engine use (api.go)

	life    startstop.Lifecycle
	cancel  context.CancelFunc
	loopsWG sync.WaitGroup
	running atomic.Bool
	// stoppedAt is when Stop began (ms), from which nothing fires any more: the hand-over
	// point of every shard a graceful stop releases (core_shards.go, invariant 6). 0 until.
	stoppedAt atomic.Int64
	// ending remembers executor results that ended runs in memory and not yet durable
	// (core_ending.go).
	ending endingResults
	// refused aggregates the records of refused results (refusals.go).
	refused refusals
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
	wh, err := wheel.New(wheel.Config[*task]{Partitions: cfg.WheelPartitions, Tick: cfg.Tick, Clock: cfg.Clock})
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
	e.base = base{cfg: &e.cfg, store: cfg.Store, clk: cfg.Clock, log: cfg.Logger}
	e.api = &API{Engine: e}
	e.tasks.init()
	e.pace.init(cfg.SendAhead)
	e.steps.e = e
	e.conc = newConcGate(cfg.Clock)
	e.runs.init(cfg.Clock, e.conc)
	e.completions.init(cfg.WriterLanes)
	if cfg.RateLimit.Clock == nil {
		cfg.RateLimit.Clock = cfg.Clock
	}
	if e.gate, err = newRateGate(cfg.RateLimit, cfg.Clock); err != nil {
		_ = d.Stop(context.Background()) // releases the worker pool dispatch.New started
		return nil, fmt.Errorf("cannot create engine: rate limits: %w", err)
	}
	e.m = newEngineMetrics(e)
	e.own = newOwnership(e)
	e.base.m, e.base.own = e.m, e.own
	b := e.base
	// Other nodes schedule beside this one: what it counts alone (the runs under a limit, the
	// tokens of a downstream) is counted across the nodes, through the store.
	acrossNodes := e.own.Sharded()
	e.rshare = newRateShares(e, acrossNodes)
	// What the gates admit fires once it has room in the pace of records to sends (core_pace.go).
	fire := func(ent *wheel.Entry[*task], adm admission) {
		e.pace.admit(ent.Value, ent.Priority, e.stopping, func(pm *permit) { e.fire(ent, adm, pm) })
	}
	e.gates = &gates{base: b, fire: fire, gate: e.gate, conc: e.conc, runs: &e.runs, loopsWG: &e.loopsWG, acrossNodes: acrossNodes}
	e.gates.initClusterSlots()
	e.alerts = newAlerts(b, e, cfg.AlertWebhooks, cfg.Dispatch.Guard,
		func() { e.m.alertDrops.Inc() }, func() { e.m.alertFails.Inc() })
	e.retention = &Retention{base: b, core: e.api, busy: w.Busy}
	e.refused.base, e.refused.submit = b, e.submit
	e.executors = &Executors{base: b, core: e, runs: &e.runs, refused: &e.refused, reg: e.registry, alerts: e.alerts, refresh: acrossNodes}
	e.deps = &Dependents{base: b, core: e, sweeps: acrossNodes}
	e.backfills = &Backfills{base: b, core: e, gates: e.gates}
	e.backfills.set.init()
	e.loader = &Loader{base: b, core: e, wheel: wh, tasks: &e.tasks, conc: e.conc}
	e.loader.promo.init()
	e.recovery = &Recovery{base: b, core: e, gates: e.gates, runs: &e.runs, executors: e.executors, loader: e.loader, deps: e.deps, backfills: e.backfills, steps: &e.steps}
	e.backfills.recovery, e.backfills.loader = e.recovery, e.loader
	e.services = []service{e.loader, e.executors, e.deps, e.backfills, e.retention}
	return e, nil
}

// startUndoTimeout bounds how long a failed Start spends stopping what it had started
// (flushing the writer): the failure is often the store's, which a flush cannot outwait.
const startUndoTimeout = 10 * time.Second

// Start recovers runs left in flight by a previous process, loads the first window (applying
// misfire policies to fires that passed while no scheduler was active), and starts the wheel,
// the ready-queue consumers and the loader. It returns once they run. An engine starts once;
// a Start that fails stops again what it had started (writer, dispatcher, wheel) and leaves
// the engine stopped.
func (e *Engine) Start(ctx context.Context) error {
	err := e.life.StartOnce(func() error { return e.start(ctx) })
	if errors.Is(err, startstop.ErrStarted) || errors.Is(err, startstop.ErrStopped) {
		return fmt.Errorf("cannot start engine: %w", ErrNotRunning)
	}
	return err
}

func (e *Engine) start(ctx context.Context) (err error) {
	var undo startstop.Undo
	defer func() {
		if err == nil {
			return
		}
		e.running.Store(false)
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startUndoTimeout)
		defer cancel()
		if uerr := undo.Run(uctx, e.log, e.cfg.Clock, "engine start failed, undo: "); uerr != nil {
			e.log.Error("cannot undo a failed engine start", "error", uerr)
		}
	}()
	// The writer and the dispatcher are stopped by the undo even when their own Start fails
	// or is never reached: some lanes may have started before one failed, and a dispatcher
	// that never started still holds the worker pool dispatch.New made; Stop on one never
	// started closes it. This first push runs last, and finds the dispatcher stopped already
	// when "stop dispatcher" below was pushed.
	undo.Push("release dispatch pool", e.disp.Stop)
	e.completions.start()
	undo.Push("deliver write completions", e.completions.stop)
	undo.Push("flush writer", e.writer.Stop)
	if err := e.writer.Start(ctx); err != nil {
		return fmt.Errorf("cannot start writer: %w", err)
	}
	undo.Push("stop dispatcher", e.disp.Stop)
	if err := e.disp.Start(ctx); err != nil {
		return fmt.Errorf("cannot start dispatcher: %w", err)
	}
	e.running.Store(true)
	runCtx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.stopping = runCtx.Done()
	undo.Push("stop loops", func(context.Context) error { cancel(); return nil })

	now := e.nowMS()
	e.loader.horizonMu.Lock()
	e.loader.horizon = now + e.cfg.Window.Milliseconds()
	h := e.loader.horizon
	e.loader.horizonMu.Unlock()
	// The limits, then recovery, which counts the runs it finds in flight in them, before the
	// wheel starts and so before any dispatch (core_recover.go; docs/ha.md, "Promotion").
	if err := e.gates.loadLimits(ctx); err != nil {
		return err
	}
	if err := e.own.start(ctx, now, h); err != nil {
		return err
	}
	if e.conc.cl != nil {
		// The concurrency slots across nodes (core_clusterslots.go): a sharded node's loop.
		e.loopsWG.Add(1)
		go e.conc.cl.loop(runCtx)
	}
	if e.rshare != nil {
		// Rate limits shared by demand across nodes (core_rateshares.go).
		e.loopsWG.Add(1)
		go e.rshare.loop(runCtx)
	}
	// The wheel's driver is one of the engine's loops: it has no lifecycle of its own, and
	// runCtx ends it with the others.
	e.loopsWG.Add(1)
	go func() { defer e.loopsWG.Done(); e.wheel.Drive(runCtx) }()
	for i := 0; i < e.wheel.Partitions(); i++ {
		e.loopsWG.Add(1)
		go e.consume(runCtx, e.wheel.Ready(i))
	}
	_ = e.alerts.start() // starts once, here
	e.loopsWG.Add(2)
	go e.gates.concLoop(runCtx)
	go e.gates.gateLoop(runCtx)
	for _, sv := range e.services {
		if err := sv.start(); err != nil {
			return err
		}
	}
	return nil
}

// Stop shuts the engine down in this order, logging how long each step took:
//
//  1. stop triggering: the services stop (service.go), in the reverse of their start order,
//     then the wheel and the gates, and consumers exit; armed entries stay armed in the
//     store (their next_trigger_time is durable) and fire after a restart;
//  2. drain dispatch: runs already sent are waited for until ctx expires — their results are
//     recorded; a run still in flight when ctx expires stays RUNNING in the store and is
//     resolved as "lost" by the next Start (never re-sent, so never run twice);
//  3. flush the batched writer;
//  4. run the completions of the writes it flushed (core_submit.go): the last Done callbacks.
//
// The store is the caller's to close afterwards. Stop is idempotent and safe without Start;
// a second Stop waits for the first.
func (e *Engine) Stop(ctx context.Context) error {
	return e.life.StopOnce(ctx, func(started bool) error {
		e.stoppedAt.CompareAndSwap(0, e.nowMS())
		e.running.Store(false)
		var steps []startstop.Step
		if started {
			steps = append(steps,
				startstop.Step{Name: "stop triggering", Run: func(ctx context.Context) error {
					for i := len(e.services) - 1; i >= 0; i-- {
						_ = e.services[i].stop(ctx) // a service's stop fails not
					}
					e.cancel()
					e.loopsWG.Wait()
					return nil
				}},
				startstop.Step{Name: "drain in-flight runs", Run: func(ctx context.Context) error {
					// Runs still in flight at the bound are the next owner's (resolved as
					// their results come); the writer's flush after this must still have time.
					ctx, cancel := startstop.Reserve(ctx, 2*time.Second)
					defer cancel()
					if err := e.runs.wait(ctx); err != nil {
						return fmt.Errorf("cannot drain in-flight runs (%d left): %w", e.runs.count(), err)
					}
					if e.conc.cl != nil {
						e.conc.cl.flush() // the slots of the runs drained (core_clusterslots.go)
					}
					return nil
				}})
		}
		steps = append(steps,
			startstop.Step{Name: "stop dispatcher", Run: e.disp.Stop},
			startstop.Step{Name: "flush writer", Run: e.writer.Stop},
			startstop.Step{Name: "deliver write completions", Run: e.completions.stop},
			startstop.Step{Name: "deliver alerts", Run: e.alerts.stop})
		return startstop.Steps(ctx, e.log, e.cfg.Clock, "engine stop: ", steps...)
	})
}

// Running reports whether the engine is started and not stopping.
func (e *API) Running() bool { return e.running.Load() }

// armableStates are the states whose next_trigger_time means "fire then".
var armableStates = []model.State{model.StateScheduled, model.StateRetrying}

func armable(s model.State) bool {
	return s == model.StateScheduled || s == model.StateRetrying
}

// adopt puts a task read from the store into memory unless a newer copy is already there,
// applying the misfire policy to a fire already too late at now (now 0: no policy).
func (e *Engine) adopt(t *task, now int64) {
	if in, err := e.own.insert(t, false); err != nil {
		return // its shard is not held (any more): its owner loads it
	} else if !in {
		e.loader.placeHeld(t.id)
		return
	}
	t.mu.Lock()
	defer e.unlock(t) // a misfire's write
	// A fire is late by the time it was meant to leave, its nominal time plus its jitter: a
	// restart within a jittered fire's delay arms it at the same instant as before.
	// A task with a catch-up window catches up on every fire missed, however little late:
	// each runs once with its own time (core_overlap.go).
	late := now - e.cfg.MisfireThreshold.Milliseconds()
	if t.catchupWindow() > 0 {
		late = now
	}
	if now > 0 && e.handOverCatchup(t, now) {
		e.loader.place(t)
		return
	}
	if now > 0 && t.rt.State == model.StateScheduled &&
		t.rt.NextTriggerTime+t.jitterOf(t.rt.State, t.rt.NextTriggerTime) < late {
		e.misfire(t, now)
	}
	e.loader.place(t)
}

// handOverCatchup decides the fire of t, loaded at now, of a shard being recovered after a
// graceful hand-over (core_shards.go, invariant 6). A hand-over is no misfire: a scheduler
// held the shard up to the hand-over point and one holds it again now, and a fire held in a
// scheduler's window is only ever late, never a misfire (even when the giver was late for it,
// catching up an earlier hand-over of its own). So a fire due is the start of a catch-up of
// every fire due since, each run once with its own time, oldest first; while it runs the
// fires that come due join it (catchupFollow) rather than meet the overlap policy, until it
// has caught up or for twice as long as it was late plus the misfire threshold. It reports
// whether it decided (else the misfire policy decides as usual). Caller holds t.mu.
func (e *Engine) handOverCatchup(t *task, now int64) bool {
	if e.own.handedOver(t.shard) == 0 || t.rt.State != model.StateScheduled || t.rt.NextTriggerTime <= 0 {
		return false
	}
	due := t.rt.NextTriggerTime
	leaves := due + t.jitterOf(t.rt.State, due)
	if t.def.Trigger == model.TriggerCron && t.sched != nil && leaves <= now {
		t.catchupFrom, t.catchupUntil = due, now
		t.catchupFollow = now + 2*(now-leaves) + e.cfg.MisfireThreshold.Milliseconds()
	}
	return true
}

// acquireOpts says which task acquire finds, and for whom.
type acquireOpts struct {
	// api: a call of the API asks. On a sharded engine a task not in memory whose shard is
	// not scheduled here, or is being recovered or handed over, is refused with
	// model.ErrShardNotHeld (the call goes to the shard's owner, or is tried again); a task
	// deleted meanwhile is refused with ErrTaskNotFound. Without it (the engine's own work: a
	// release, a recovery, a backfill) a task of a shard being recovered is loaded too.
	api bool
	// name, when set, finds the task by name (the id is then unused); implies api.
	name string
	// row, when set, is the task's row just read (eachSelected): a task not in memory is
	// built from it instead of being read again. Should that row be stale by now, its
	// version is, and the write conflicts instead of landing (bulkApply then tries again).
	row *model.Task
}

// acquire returns the task with id locked, loading it from the store when it is not in
// memory, as o says: the one way to hold a task. The caller must call release.
func (e *Engine) acquire(ctx context.Context, id int64, o acquireOpts) (*task, error) {
	if o.name != "" {
		var err error
		if id, err = e.lookup(ctx, o.name); err != nil {
			return nil, err
		}
		o.api = true
	}
	load := func() (*model.Task, error) { return e.store.GetTaskByID(ctx, id) }
	if o.row != nil {
		load = func() (*model.Task, error) { return o.row, nil }
	}
	var t *task
	for t == nil {
		if in := e.tasks.get(id); in != nil {
			in.mu.Lock()
			if !in.evicted {
				t = in
				break
			}
			in.mu.Unlock()
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		pt, err := load()
		if err != nil {
			return nil, err
		}
		nt, err := newTask(pt)
		if err != nil {
			return nil, fmt.Errorf("cannot load task %q: %w", pt.Def.Name, err)
		}
		in, err := e.own.insert(nt, o.api)
		if err != nil {
			return nil, err
		}
		if in {
			nt.mu.Lock()
			t = nt
		}
	}
	if o.api {
		return live(t, nil)
	}
	return t, nil
}

// live unlocks and refuses a task acquired while it was being deleted.
func live(t *task, err error) (*task, error) {
	if err != nil {
		return nil, err
	}
	if t.deleted {
		t.mu.Unlock()
		return nil, ErrTaskNotFound
	}
	return t, nil
}

// release places and unlocks a task obtained from acquire.
func (e *Engine) release(t *task) {
	e.loader.place(t)
	e.unlock(t)
}

// InMemory reports how many tasks are held in memory in full and how many entries are armed
// (cold references included).
func (e *API) InMemory() (tasks, armed int) { return e.tasks.len(), e.wheel.Len() }

// Horizon returns the time up to which tasks are held in memory.
func (l *Loader) Horizon() time.Time {
	l.horizonMu.RLock()
	defer l.horizonMu.RUnlock()
	return time.UnixMilli(l.horizon)
}

// errStopping is returned by writes attempted while the engine stops.
var errStopping = fmt.Errorf("%w: stopping", ErrNotRunning)

func (e *Engine) checkRunning() error {
	if !e.running.Load() {
		return errStopping
	}
	return nil
}
