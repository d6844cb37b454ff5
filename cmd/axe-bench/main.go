// Command axe-bench runs axe's end-to-end benchmark (B4 of BENCHMARKS.md). It is a command of
// its own so that the scheduler binary, axe, links none of the benchmark harness.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/peterbourgon/ff/v3"
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/bench/e2e"
	"github.com/axe-sched/axe/bench/workflows"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "axe-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	root := &ffcli.Command{
		Name:        "axe-bench",
		ShortUsage:  "axe-bench <command> [flags]",
		ShortHelp:   "axe's end-to-end benchmark",
		FlagSet:     flag.NewFlagSet("axe-bench", flag.ContinueOnError),
		Subcommands: []*ffcli.Command{runCmd(), workflowsCmd(), executorCmd()},
		Exec: func(_ context.Context, args []string) error {
			if len(args) == 0 {
				return flag.ErrHelp
			}
			return fmt.Errorf("unknown command %q (see -h)", args[0])
		},
	}
	return root.ParseAndRun(ctx, args)
}

// envOpts makes every flag also read AXE_<FLAG> (dashes become underscores), as axe's do.
var envOpts = []ff.Option{ff.WithEnvVarPrefix("AXE")}

// runCmd runs the end-to-end benchmark: tasks due over a window and a burst due at one
// instant, dispatched to SDK executors in separate processes (this binary, re-executed as
// `axe-bench executor`), every transition, run and action durable in MySQL.
func runCmd() *ffcli.Command {
	fs := flag.NewFlagSet("axe-bench run", flag.ContinueOnError)
	var cfg e2e.Config
	fs.StringVar(&cfg.DSN, "db", "mysql:root:@tcp(127.0.0.1:3306)/", "MySQL server; each phase creates and drops its own database (AXE_DB)")
	fs.IntVar(&cfg.Tasks, "tasks", e2e.TasksDefault, "tasks falling due evenly over --window; -1 skips the phase")
	fs.DurationVar(&cfg.Window, "window", e2e.WindowDefault, "the span the steady phase's tasks fall due over")
	fs.IntVar(&cfg.Burst, "burst", e2e.BurstDefault, "tasks due at one instant; -1 skips the phase")
	fs.IntVar(&cfg.Executors, "executors", e2e.ExecutorsDefault, "executor processes")
	fs.DurationVar(&cfg.Lead, "lead", 0, "how long after a phase starts writing its fixture its first task falls due (0: 5s plus 40µs a task); raise it on a loaded machine")
	fs.StringVar(&cfg.ProfileDir, "profile", "", "write CPU profiles of the scheduler and the executors, and the scheduler's allocations, into this directory")
	fs.StringVar(&cfg.Callback, "callback", e2e.CallbackExecutor, "what the tasks call: executor (an SDK executor, runs offered in batches) or http (a plain fasthttp receiver, one POST a fire); the raw rate is measured against the same one")
	fs.BoolVar(&cfg.HA, "ha", false, "run the engine as axe serve --ha does, in --ha-mode (AXE_HA)")
	fs.StringVar(&cfg.HAMode, "ha-mode", e2e.HAModePrimary, "with --ha: primary (the primary of one lease) or shards (the one node of a sharded cluster, holding all 256 shards) (AXE_HA_MODE)")
	fs.StringVar(&cfg.Background, "background", e2e.BackgroundNone, "work beside the steady phase: bulk-pause (one bulk pause of --background-tasks other tasks) or prune (the pruner deleting --background-tasks old runs and twice as many actions)")
	fs.IntVar(&cfg.BackgroundTasks, "background-tasks", e2e.BackgroundTasksDefault, "size of --background")
	fs.DurationVar(&cfg.Timeline, "timeline", 0, "sample the writer this often while each phase drains and print its rows and commits per interval (0: no samples)")
	small := fs.Bool("small", false, "a smoke run: 2,000 tasks over 5 s and a 2,000 burst")
	return &ffcli.Command{
		Name:       "run",
		ShortUsage: "axe-bench run [--db mysql:…] [--tasks 1000000 --window 5m] [--burst 200000] [--small]",
		ShortHelp:  "run the end-to-end benchmark against MySQL and print its table",
		FlagSet:    fs,
		Options:    envOpts,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("run: unexpected argument %q", args[0])
			}
			if *small {
				cfg.Tasks, cfg.Window, cfg.Burst = e2e.TasksDefault, e2e.WindowDefault, e2e.BurstDefault
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("cannot find this binary to start executors: %w", err)
			}
			// "--" ends axe-bench's own flags: what Run appends goes to the executor untouched.
			cfg.ExecutorCommand = []string{self, "executor", "--"}
			start := time.Now()
			rep, err := e2e.Run(ctx, cfg)
			if err != nil {
				return err
			}
			fmt.Print(rep.Table())
			fmt.Printf("(took %s)\n", time.Since(start).Round(time.Second))
			return nil
		},
	}
}

// workflowsCmd runs the workflow benchmarks (BENCHMARKS.md "Workflows"): real axe serve
// processes, each phase beside a baseline of one-shot tasks in the same run.
func workflowsCmd() *ffcli.Command {
	fs := flag.NewFlagSet("axe-bench workflows", flag.ContinueOnError)
	var cfg workflows.Config
	fs.StringVar(&cfg.Bin, "axe", "", "the axe binary to run (default: build this source tree's with the go tool)")
	fs.StringVar(&cfg.Store, "store", workflows.StoreSQLite, "store of the handoff, diamond and fanout phases: sqlite or mysql")
	fs.StringVar(&cfg.MySQL, "mysql", "mysql:root:@tcp(127.0.0.1:3306)/", "MySQL server for --store mysql and the cpu phase; each cluster creates and drops its own database")
	phases := fs.String("phases", "handoff,diamond,fanout,cpu", "comma-separated phases: handoff, diamond, fanout, cpu")
	fs.IntVar(&cfg.HandoffRuns, "handoff-runs", 1000, "runs in flight in the handoff phase")
	fs.IntVar(&cfg.DiamondRuns, "diamond-runs", 10000, "runs of the 10-step diamond (the baseline is ten times as many one-shot tasks)")
	fs.IntVar(&cfg.FanOutItems, "fanout-items", 10000, "width of the fan-out (and one-shot tasks of its baseline)")
	fs.IntVar(&cfg.CPURuns, "cpu-runs", 1000, "diamond runs of the cpu phase, per node count")
	fs.IntVar(&cfg.Concurrency, "concurrency", 32, "run requests in flight while runs are started")
	fs.StringVar(&cfg.ProfileDir, "profile", "", "write a CPU profile of the daemon over each phase's workflow side into this directory")
	fs.IntVar(&cfg.ProfileSeconds, "profile-seconds", 20, "length of each profile")
	fs.DurationVar(&cfg.PhaseTimeout, "phase-timeout", 5*time.Minute, "bound on each side of a phase")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", 15*time.Second, "the cpu phase's sharded nodes' --lease-ttl (--lease-renew a fifth of it)")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for SQLite files and daemon logs (default: a temporary one, removed)")
	fs.BoolVar(&cfg.KeepLogs, "keep-logs", false, "keep the daemons' logs in --dir")
	return &ffcli.Command{
		Name:       "workflows",
		ShortUsage: "axe-bench workflows [--store sqlite|mysql] [--phases handoff,diamond,fanout,cpu] [--diamond-runs 10000] …",
		ShortHelp:  "benchmark workflows against one-shot tasks in the same run and print the ratios",
		FlagSet:    fs,
		Options:    envOpts,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("workflows: unexpected argument %q", args[0])
			}
			cfg.Phases = strings.Split(*phases, ",")
			start := time.Now()
			rep, err := workflows.Run(ctx, cfg)
			fmt.Print(rep.Table())
			fmt.Printf("(took %s)\n", time.Since(start).Round(time.Second))
			return err
		},
	}
}

// executorCmd is the executor process `axe-bench run` starts; not for people.
func executorCmd() *ffcli.Command {
	return &ffcli.Command{
		Name:       "executor",
		ShortUsage: "axe-bench executor -scheduler URL",
		ShortHelp:  "(internal) the no-op executor process of axe-bench run",
		FlagSet:    flag.NewFlagSet("axe-bench executor", flag.ContinueOnError),
		Exec: func(ctx context.Context, args []string) error {
			return e2e.ExecutorMain(ctx, args, os.Stdin, os.Stdout)
		},
	}
}
