// Package e2e is B4, axe's end-to-end benchmark (issue 5): tasks loaded from MariaDB into
// the engine, fired, dispatched over fasthttp to SDK executors running in a separate
// process, and every RUNNING and SUCCESS transition, run row and action record made durable
// in MariaDB. It reports fire lateness (from the run rows: dispatched_at − scheduled_at),
// CPU and RSS for a steady phase (tasks falling due evenly over a window) and a burst phase
// (tasks due within the same second), and beside the burst the raw fasthttp request rate of
// the same executor process measured in the same run.
//
// Run is what `axe-bench run` calls; bench/e2e/e2e_test.go runs it small. The package owns only
// the benchmark: it drives axe through engine, admin, persist and executor's public APIs,
// creates a scratch database per phase and drops it, and must not touch anything else on
// the server.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/engine"
)

// Defaults of Config. The defaults are a smoke-test size; the full size is
// Tasks 1e6 over Window 5m and Burst 2e5.
const (
	TasksDefault     = 2000
	WindowDefault    = 5 * time.Second
	BurstDefault     = 2000
	ExecutorsDefault = 1
	// ExecutorPoolSizeDefault is the handler pool of the benchmark's executors. The handlers
	// do nothing, so the pool only needs to outpace the HTTP server feeding it.
	ExecutorPoolSizeDefault = 64
	// ExecutorQueueSizeDefault lets an executor accept every run the dispatcher can have in
	// flight to it (1024 connections) several times over: a refused run would be a failed
	// task, and the benchmark measures the scheduler, not admission control.
	ExecutorQueueSizeDefault = 8192
	// RawConcurrencyDefault is how many requests the raw-rate measurement keeps in flight:
	// about what the dispatcher opens to one executor in a burst.
	RawConcurrencyDefault = 512
)

// Config.Callback values.
const (
	CallbackExecutor = "executor"
	CallbackHTTP     = "http"
)

// Sentinel errors.
var (
	// ErrIncomplete is returned when a phase ended without every task recorded as a success.
	ErrIncomplete = errors.New("not every task was recorded as a success")
	// ErrLeadTooShort is returned when the engine was not ready before the first task fell
	// due: the run would measure start-up, not scheduling. Raise Config.Lead.
	ErrLeadTooShort = errors.New("the first task fell due before the engine and executors were ready")
)

// Config configures Run.
type Config struct {
	// DSN names the MySQL/MariaDB server, "mysql:USER:PASS@tcp(HOST:PORT)/" (a database in it
	// is ignored): each phase creates a database axe_e2e_<random> there and drops it.
	// Required.
	DSN string
	// Tasks is the steady phase's number of tasks, falling due evenly over Window. Negative
	// skips the phase. Defaults to TasksDefault.
	Tasks int
	// Window is the span the steady phase's tasks fall due over. Defaults to WindowDefault.
	Window time.Duration
	// Burst is the burst phase's number of tasks, all due at the same instant. Negative
	// skips the phase (and the raw-rate measurement). Defaults to BurstDefault.
	Burst int
	// Lead is how long after a phase starts writing its fixture its first task falls due:
	// the fixture is written, the engine loads its window and the executors register
	// meanwhile. Defaults to 5 s plus 40 µs per task (45 s for a million).
	Lead time.Duration
	// Executors is the number of executor processes. Defaults to ExecutorsDefault.
	Executors int
	// ExecutorCommand starts one executor process; Run appends "-scheduler URL" and the
	// process must behave like ExecutorMain. Defaults to building
	// bench/e2e/internal/benchexec with the go tool, which needs the axe source tree.
	ExecutorCommand []string
	// RawConcurrency is how many requests the raw-rate measurement keeps in flight.
	// Defaults to RawConcurrencyDefault.
	RawConcurrency int
	// Engine tunes the engine under test (writer batch size, dispatch pool, tick); Run sets
	// its Store and Logger. Defaults to the engine's own defaults.
	Engine engine.Config
	// Timeout bounds each phase. Defaults to 2 minutes plus ten times the phase's span plus
	// a millisecond per task.
	Timeout time.Duration
	// ProfileDir, when set, receives CPU profiles: scheduler-<phase>.pprof of this process
	// while each phase drains, and executor-<phase>-<i>.pprof of each executor process over
	// its whole life (in the burst phase, the raw-rate measurement included); and this
	// process's allocation counts before and after each drain,
	// scheduler-<phase>-allocs-{start,end}.pprof. Defaults to none.
	ProfileDir string
	// Logger receives progress and the engine's warnings. Defaults to slog.Default().
	Logger *slog.Logger
	// Background is work the steady phase runs beside its firing: BackgroundBulkPause or
	// BackgroundPrune (background.go). Defaults to BackgroundNone.
	Background string
	// BackgroundTasks sizes the background work. Defaults to BackgroundTasksDefault.
	BackgroundTasks int
	// HA runs each phase's engine as the primary of a lease, wired as `axe serve --ha` wires
	// it (fenced writes, the epoch on every dispatch, the gate before each send), to measure
	// what high availability costs. Defaults to false.
	HA bool
	// HAMode is how HA runs the engine: HAModePrimary (the primary of one lease) or
	// HAModeShards (the one node of a sharded cluster, holding all 256 shards, as `axe serve
	// --ha` runs by default). Defaults to HAModePrimary.
	HAMode string
	// Callback is what the tasks call: CallbackExecutor (an SDK executor's handler, runs
	// offered in batches over /axe/runs) or CallbackHTTP (a plain fasthttp endpoint in the
	// executor process, one POST a fire, the response the result). The raw rate beside the
	// burst is measured against the same receiver. Defaults to CallbackExecutor.
	Callback string
	// Timeline, when positive, samples the writer every Timeline from each phase's first due
	// time until it drains (Phase.Timeline): the rows and batches committed, the time the
	// lanes spent committing and the groups queued, which show which writes set the pace
	// of a drain and when. Defaults to 0 (no samples).
	Timeline time.Duration
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Tasks == 0 {
		c.Tasks = TasksDefault
	}
	if c.Window == 0 {
		c.Window = WindowDefault
	}
	if c.Burst == 0 {
		c.Burst = BurstDefault
	}
	if c.Executors == 0 {
		c.Executors = ExecutorsDefault
	}
	if c.RawConcurrency == 0 {
		c.RawConcurrency = RawConcurrencyDefault
	}
	if c.BackgroundTasks == 0 {
		c.BackgroundTasks = BackgroundTasksDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.HAMode == "" {
		c.HAMode = HAModePrimary
	}
	if c.Callback == "" {
		c.Callback = CallbackExecutor
	}
	return c
}

func (c Config) validate() error {
	if c.DSN != "" {
		if _, err := benchkit.Addr(c.DSN); err != nil {
			return fmt.Errorf("DSN: %w", err)
		}
	}
	switch {
	case c.DSN == "":
		return errors.New("DSN is required: a MySQL server, mysql:USER:PASS@tcp(HOST:PORT)/")
	case c.Tasks <= 0 && c.Burst <= 0:
		return errors.New("both phases are skipped: set Tasks or Burst")
	case c.Window <= 0:
		return fmt.Errorf("window must be positive, got %s", c.Window)
	case c.Lead < 0:
		return fmt.Errorf("lead must not be negative, got %s", c.Lead)
	case c.Executors < 1:
		return fmt.Errorf("executors must be at least 1, got %d", c.Executors)
	case c.RawConcurrency < 1:
		return fmt.Errorf("raw concurrency must be at least 1, got %d", c.RawConcurrency)
	case c.Timeout < 0:
		return fmt.Errorf("timeout must not be negative, got %s", c.Timeout)
	case c.HAMode != HAModePrimary && c.HAMode != HAModeShards:
		return fmt.Errorf("ha mode must be %q or %q, got %q", HAModePrimary, HAModeShards, c.HAMode)
	case c.Callback != CallbackExecutor && c.Callback != CallbackHTTP:
		return fmt.Errorf("callback must be %q or %q, got %q", CallbackExecutor, CallbackHTTP, c.Callback)
	case c.Timeline < 0:
		return fmt.Errorf("timeline interval must not be negative, got %s", c.Timeline)
	}
	return nil
}

// lead is the phase's lead time for n tasks.
func (c Config) lead(n int) time.Duration {
	if c.Lead > 0 {
		return c.Lead
	}
	return 5*time.Second + time.Duration(n)*40*time.Microsecond
}

// timeout bounds a phase of n tasks falling due over span.
func (c Config) timeout(n int, span time.Duration) time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 2*time.Minute + 10*span + time.Duration(n)*time.Millisecond
}

// Phase is what one phase measured.
type Phase struct {
	// Name is "steady" or "burst".
	Name string
	// Tasks is how many tasks fell due; Span is the time they fell due over (0: all at once).
	Tasks int
	Span  time.Duration
	// Load is how long engine.Start took: recovery plus loading the window.
	Load time.Duration
	// Finish is the time from the first task's due time until every task was recorded.
	Finish time.Duration
	// Overrun is Finish minus Span: how long after the last task fell due everything was
	// recorded. A scheduler that keeps up finishes within a few ticks of the last due time.
	Overrun time.Duration
	// Rate is Tasks / Finish, fully recorded tasks per second.
	Rate float64
	// LatenessP50, LatenessP99 and LatenessMax are fire lateness percentiles from the run
	// rows (dispatched_at − scheduled_at, millisecond resolution).
	LatenessP50, LatenessP99, LatenessMax time.Duration
	// SchedulerCPU is the CPU time of this process (the engine, its API server and the
	// benchmark's own polling) from the first due time to the end; ExecutorCPU that of the
	// executor processes; DatabaseCPU that of the MariaDB server, which other clients of the
	// server share (0 when it is not on this machine).
	SchedulerCPU, ExecutorCPU, DatabaseCPU time.Duration
	// SchedulerIdle is the scheduler's CPU a second (cores) over up to a second just before
	// the first due instant, everything started and nothing due: what a longer drain costs
	// it without firing anything. 0 when not measured (the lead left no time).
	SchedulerIdle float64
	// WriterCommits is how many batches the writer lanes committed during the phase, and
	// WriterBusy the time they spent in them, summed over the WriterLanes lanes: WriterBusy
	// close to Finish × WriterLanes means the writers set the pace.
	WriterCommits int
	WriterBusy    time.Duration
	WriterLanes   int
	// Allocs and AllocBytes count the heap objects and bytes this process allocated over
	// the same span as SchedulerCPU: unlike CPU, they do not move with the machine's load.
	Allocs, AllocBytes uint64
	// RSSGrowth is this process's RSS increase from before the engine was created to its
	// peak during the phase; PeakRSS is that peak.
	RSSGrowth, PeakRSS int64
	// Runs, Runtimes and Actions count what the audit trail holds at the end: successful run
	// rows, runtime rows in SUCCESS, and action records.
	Runs, Runtimes, Actions int
	// Failures summarises the runs that did not succeed, by result and error; empty when
	// every run succeeded.
	Failures string
	// Background is what the background work did (Config.Background); nil for none.
	Background *Background
	// Timeline holds the writer's samples (Config.Timeline), oldest first; nil when not
	// sampled.
	Timeline []WriterSample
}

// WriterSample is the writer's progress at At after a phase's first due time. Rows,
// Commits and Busy count from that time on (Busy summed over the lanes, and credited when a
// commit ends, so a short interval can show the lanes more than fully busy); Queued is the
// groups submitted and not yet committed at At.
type WriterSample struct {
	At            time.Duration
	Rows, Commits int
	Busy          time.Duration
	Queued        int
}

// Report is the result of Run.
type Report struct {
	// CPUs and MemoryBytes describe the machine; DBVersion and FlushLogAtTrxCommit the
	// database server; LoadAverage the machine's load when Run ended.
	CPUs                           int
	MemoryBytes                    int64
	DBVersion, FlushLogAtTrxCommit string
	LoadAverage                    string
	// Steady and Burst are the phases that ran.
	Steady, Burst *Phase
	// Callback is Config.Callback: what the tasks called.
	Callback string
	// RawRate is the rate, in requests/s, at which the executor process accepted runs posted
	// straight to it over fasthttp (to its HTTP receiver for CallbackHTTP), with nothing
	// scheduled or recorded (0 when the burst phase was skipped). BurstVsRaw is
	// Burst.Rate / RawRate.
	RawRate, BurstVsRaw float64
}

// Table renders the report as a short text table.
func (r Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "axe end to end (B4), %s callbacks: %d CPUs, %.1f GiB, MariaDB %s with innodb_flush_log_at_trx_commit=%s, load average %s\n",
		r.Callback, r.CPUs, float64(r.MemoryBytes)/(1<<30), r.DBVersion, r.FlushLogAtTrxCommit, r.LoadAverage)
	t := benchkit.NewTable("phase", "tasks", "failed", "due over", "load s", "finish s", "overrun ms", "recorded/s",
		"p50 ms", "p99 ms", "max ms", "sched CPU s", "exec CPU s", "DB CPU s", "sched µs/fire", "net of idle", "exec µs/fire", "DB µs/fire", "commits", "lanes busy", "RSS +MB", "peak RSS MB", "allocs/fire", "B/fire")
	for _, p := range []*Phase{r.Steady, r.Burst} {
		if p == nil {
			continue
		}
		span := p.Span.String()
		if p.Span == 0 {
			span = "one instant"
		}
		t.Row(p.Name, fmt.Sprint(p.Tasks), fmt.Sprint(p.Tasks-p.Runs), span, benchkit.Num(p.Load.Seconds()), benchkit.Num(p.Finish.Seconds()),
			fmt.Sprint(p.Overrun.Milliseconds()), benchkit.Num(p.Rate),
			fmt.Sprint(p.LatenessP50.Milliseconds()), fmt.Sprint(p.LatenessP99.Milliseconds()), fmt.Sprint(p.LatenessMax.Milliseconds()),
			benchkit.Num(p.SchedulerCPU.Seconds()), benchkit.Num(p.ExecutorCPU.Seconds()), benchkit.Num(p.DatabaseCPU.Seconds()),
			perFire(p.SchedulerCPU, p.Tasks), perFire(p.SchedulerCPU-time.Duration(p.SchedulerIdle*float64(p.Finish)), p.Tasks),
			perFire(p.ExecutorCPU, p.Tasks), perFire(p.DatabaseCPU, p.Tasks),
			fmt.Sprint(p.WriterCommits), fmt.Sprintf("%.0f%%", 100*p.WriterBusy.Seconds()/p.Finish.Seconds()/float64(max(p.WriterLanes, 1))),
			benchkit.Num(float64(p.RSSGrowth)/(1<<20)), benchkit.Num(float64(p.PeakRSS)/(1<<20)),
			benchkit.Num(float64(p.Allocs)/float64(max(p.Tasks, 1))), benchkit.Num(float64(p.AllocBytes)/float64(max(p.Tasks, 1))))
	}
	b.WriteString(t.String())
	for _, p := range []*Phase{r.Steady, r.Burst} {
		if p != nil && p.Failures != "" {
			fmt.Fprintf(&b, "%s failures: %s\n", p.Name, p.Failures)
		}
		if p != nil && p.Background != nil {
			fmt.Fprintf(&b, "%s beside %s: %d rows in %s\n", p.Name, p.Background.Kind, p.Background.Rows, p.Background.Took.Round(time.Millisecond))
		}
	}
	for _, p := range []*Phase{r.Steady, r.Burst} {
		if p != nil && len(p.Timeline) > 0 {
			b.WriteString(p.timelineTable())
		}
	}
	if r.RawRate > 0 {
		target := "POST /axe/run to the same executor process"
		if r.Callback == CallbackHTTP {
			target = "POST to the same HTTP receiver"
		}
		fmt.Fprintf(&b, "raw fasthttp %s: %s req/s; burst recorded/s ÷ raw = %.2f\n",
			target, benchkit.Num(r.RawRate), r.BurstVsRaw)
	}
	return b.String()
}

// perFire renders cpu spent over n fires in µs a fire.
func perFire(cpu time.Duration, n int) string {
	if n <= 0 {
		return "-"
	}
	return benchkit.Num(float64(cpu.Microseconds()) / float64(n))
}

// timelineTable renders p.Timeline as the writer's rates between consecutive samples.
func (p *Phase) timelineTable() string {
	t := benchkit.NewTable("t s", "rows/s", "commits/s", "rows a commit", "lanes busy", "queued")
	var prev WriterSample
	for _, s := range p.Timeline {
		d := (s.At - prev.At).Seconds()
		rows, commits := s.Rows-prev.Rows, s.Commits-prev.Commits
		perCommit := "-"
		if commits > 0 {
			perCommit = benchkit.Num(float64(rows) / float64(commits))
		}
		busy := "-"
		if d > 0 {
			busy = fmt.Sprintf("%.0f%%", 100*(s.Busy-prev.Busy).Seconds()/d/float64(max(p.WriterLanes, 1)))
		}
		t.Row(benchkit.Num(s.At.Seconds()), benchkit.Num(float64(rows)/d), benchkit.Num(float64(commits)/d), perCommit, busy, fmt.Sprint(s.Queued))
		prev = s
	}
	return fmt.Sprintf("%s writer timeline (%d lanes):\n%s", p.Name, p.WriterLanes, t.String())
}

// Run runs the phases of cfg one after the other, each on a fresh database, engine, API
// server and executor processes, and reports what they measured. It fails with
// ErrIncomplete when a phase did not record every task as a success.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, fmt.Errorf("cannot run the end-to-end benchmark: %w", err)
	}
	rep := Report{CPUs: runtime.NumCPU(), MemoryBytes: memTotal(), Callback: cfg.Callback}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return rep, fmt.Errorf("cannot create the profile directory: %w", err)
		}
	}
	command := cfg.ExecutorCommand
	if len(command) == 0 {
		dir, cleanup, err := tempDir()
		if err != nil {
			return rep, err
		}
		defer cleanup()
		if command, err = buildExecutor(ctx, dir); err != nil {
			return rep, err
		}
	}
	// A phase that recorded failures is reported and the run goes on: the figures of both
	// phases are still worth having, and the error says what went wrong.
	var incomplete []error
	if cfg.Tasks > 0 {
		p, err := runPhase(ctx, cfg, command, "steady", cfg.Tasks, cfg.Window, &rep)
		rep.Steady = p
		if err != nil && !errors.Is(err, ErrIncomplete) || p == nil {
			return rep, err
		}
		if err != nil {
			incomplete = append(incomplete, err)
		}
	}
	if cfg.Burst > 0 {
		// All at the same instant: the most any second can hold.
		p, err := runPhase(ctx, cfg, command, "burst", cfg.Burst, 0, &rep)
		rep.Burst = p
		if err != nil && !errors.Is(err, ErrIncomplete) || p == nil {
			return rep, err
		}
		if err != nil {
			incomplete = append(incomplete, err)
		}
		if rep.RawRate > 0 {
			rep.BurstVsRaw = p.Rate / rep.RawRate
		}
	}
	rep.LoadAverage = benchkit.LoadAverage()
	return rep, errors.Join(incomplete...)
}
