// Package workflows benchmarks workflows (docs/workflows.md, issue 44 item 8) end to end:
// real `axe serve` processes of this tree, their steps and tasks calling an HTTP sink in this
// process that keeps every request. Each phase measures workflows beside a baseline of
// one-shot HTTP tasks on the same daemon (or a twin started the same way) in the same run,
// and reports the ratio:
//
//   - handoff: the time from an upstream step's answer to its downstream's request arriving
//     at the sink, for the same run id (the step params' run_id), with Runs runs in flight:
//     the sink holds every run's first step until all of them arrived and then answers them
//     at once. Baseline: as many one-shot tasks due at one instant, their lateness at the
//     sink (arrival − scheduled_at).
//   - diamond: Runs runs of a 10-step diamond (a step, 8 steps needing it, a step needing
//     the 8) against 10 × Runs one-shot tasks due at one instant: step runs per second from
//     the first run asked to the last step's request, against tasks per second from their
//     due time to the last request.
//   - fanout: one run of split → each (a fan-out over split's Items items, parallelism
//     1,000) → join, against Items one-shot tasks due at one instant, each on a fresh
//     daemon: the time to the last request and the daemon's peak RSS (VmHWM).
//   - cpu: the daemons' CPU per step of diamond runs of 16 workflows (spread over the
//     shards) on 1 and 3 sharded nodes (`axe serve --ha`), against CPU per fire of one-shot
//     tasks on the same nodes.
//
// `axe-bench workflows` runs it; workflows_test.go runs it tiny.
package workflows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/axe-sched/axe/bench/internal/benchkit"
)

// Stores.
const (
	StoreSQLite = "sqlite"
	StoreMySQL  = "mysql"
)

// Phases.
const (
	PhaseHandoff = "handoff"
	PhaseDiamond = "diamond"
	PhaseFanOut  = "fanout"
	PhaseCPU     = "cpu"
)

// Config configures Run.
type Config struct {
	// Bin is the axe binary to run; empty builds this tree's into Dir.
	Bin string
	// Store is StoreSQLite or StoreMySQL, the store of the handoff, diamond and fanout
	// phases (cpu always runs on MySQL: sharding needs it).
	Store string
	// MySQL names the MySQL/MariaDB server, "mysql:USER:PASS@tcp(HOST:PORT)/": each cluster
	// creates a database axe_wfbench_<random> there and drops it.
	MySQL string
	// Dir holds the SQLite files, the daemons' logs and a built binary. Defaults to a
	// temporary directory, removed at the end.
	Dir string
	// Phases to run; defaults to all four.
	Phases []string
	// HandoffRuns is the handoff phase's runs in flight (default 1,000); DiamondRuns the
	// diamond phase's runs (default 10,000), FanOutItems the fan-out's width (default
	// 10,000) and CPURuns the cpu phase's runs per node count (default 1,000).
	HandoffRuns, DiamondRuns, FanOutItems, CPURuns int
	// Concurrency is how many run requests are in flight while runs are started (default
	// 32).
	Concurrency int
	// ProfileDir, when set, receives a CPU profile of the (first) daemon over the first
	// ProfileSeconds (default 20) of each phase's workflow side (of the handoff phase: from
	// its start, baselines included): <phase>-<store>.pprof, cpu-<N>nodes.pprof.
	ProfileDir     string
	ProfileSeconds int
	// PhaseTimeout bounds the wait for each side of a phase (default 5 minutes).
	PhaseTimeout time.Duration
	// LeaseTTL is the sharded nodes' --lease-ttl (their --lease-renew a fifth of it).
	// Defaults to 15 s: long enough that a loaded machine's late renewals do not move shards
	// in the middle of the cpu phase, which measures steady work, not takeovers.
	LeaseTTL time.Duration
	// KeepLogs keeps the daemons' logs in Dir.
	KeepLogs bool
	Logger   *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Store == "" {
		c.Store = StoreSQLite
	}
	if len(c.Phases) == 0 {
		c.Phases = []string{PhaseHandoff, PhaseDiamond, PhaseFanOut, PhaseCPU}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.HandoffRuns, 1000)
	def(&c.DiamondRuns, 10000)
	def(&c.FanOutItems, 10000)
	def(&c.CPURuns, 1000)
	def(&c.Concurrency, 32)
	def(&c.ProfileSeconds, 20)
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 15 * time.Second
	}
	if c.PhaseTimeout == 0 {
		c.PhaseTimeout = 5 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Result is one line of the report: a phase's workflow side beside its baseline.
type Result struct {
	Phase, Store string
	// Size says what ran, e.g. "1000 runs × 3 steps"; Baseline what the baseline ran.
	Size, Baseline string
	// Metric names the figure compared; Workflow and Base are its values, Ratio
	// Workflow / Base; Target what issue 44 asks of it and Met whether the figure meets it.
	Metric         string
	Workflow, Base float64
	Ratio          float64
	Target         string
	Met            bool
	// Detail holds the phase's other figures.
	Detail string
	// Load is the machine's load average when the phase ended.
	Load string
	// Took is the phase's wall time.
	Took time.Duration
}

// Report is what Run measured.
type Report struct {
	CPUs    int
	Results []Result
}

// Table renders the report.
func (r Report) Table() string {
	var b strings.Builder
	t := benchkit.NewTable("phase", "store", "size", "baseline", "figure", "workflow", "baseline", "ratio", "target", "met", "load", "took")
	for _, x := range r.Results {
		met := "no"
		switch {
		case x.Target == "" || x.Target == "—":
			met = "—" // no target of its own (a row the next one is judged against)
		case x.Met:
			met = "yes"
		}
		t.Row(x.Phase, x.Store, x.Size, x.Baseline, x.Metric, benchkit.Num(x.Workflow), benchkit.Num(x.Base),
			fmt.Sprintf("%.2f", x.Ratio), x.Target, met, x.Load, x.Took.Round(time.Second).String())
	}
	fmt.Fprintf(&b, "axe workflows (issue 44 item 8): %d CPUs\n%s", r.CPUs, t.String())
	for _, x := range r.Results {
		if x.Detail != "" {
			fmt.Fprintf(&b, "%s/%s: %s\n", x.Phase, x.Store, x.Detail)
		}
	}
	return b.String()
}

// Run runs cfg's phases one after the other and reports them. A phase that fails ends the
// run with the results so far.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.withDefaults()
	rep := Report{CPUs: numCPU()}
	for _, p := range cfg.Phases {
		if !slices.Contains([]string{PhaseHandoff, PhaseDiamond, PhaseFanOut, PhaseCPU}, p) {
			return rep, fmt.Errorf("unknown phase %q", p)
		}
	}
	if (cfg.Store == StoreMySQL || slices.Contains(cfg.Phases, PhaseCPU)) && cfg.MySQL == "" {
		return rep, errors.New("a MySQL server is required (Config.MySQL) for the mysql store and the cpu phase")
	}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "axe-wfbench-")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return rep, err
		}
	}
	if cfg.Bin == "" {
		bin, err := buildAxe(ctx, cfg.Dir)
		if err != nil {
			return rep, err
		}
		cfg.Bin = bin
	}
	for _, p := range cfg.Phases {
		start := time.Now()
		var rs []Result
		var err error
		switch p {
		case PhaseHandoff:
			rs, err = runHandoff(ctx, cfg)
		case PhaseDiamond:
			rs, err = runDiamond(ctx, cfg)
		case PhaseFanOut:
			rs, err = runFanOut(ctx, cfg)
		case PhaseCPU:
			rs, err = runCPU(ctx, cfg)
		}
		for i := range rs {
			rs[i].Load = benchkit.LoadAverage()
			rs[i].Took = time.Since(start)
		}
		rep.Results = append(rep.Results, rs...)
		if err != nil {
			return rep, fmt.Errorf("phase %s: %w", p, err)
		}
		cfg.Logger.Info("phase done", "phase", p, "took", time.Since(start).Round(time.Millisecond), "load", benchkit.LoadAverage())
	}
	return rep, nil
}
