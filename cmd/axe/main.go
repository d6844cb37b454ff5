// Command axe is the scheduler daemon (`axe serve`) and its command-line client. This file
// only wires flags to the admin package, where the logic lives.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/peterbourgon/ff/v3"
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/lib/visible"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		// An error may quote a crontab line, a database row or a server's answer: shown
		// with its control characters escaped, it cannot rewrite the terminal.
		fmt.Fprintln(os.Stderr, "axe:", visible.Text(err.Error()))
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	root := &ffcli.Command{
		Name:       "axe",
		ShortUsage: "axe <command> [flags] [args]",
		ShortHelp:  "a job scheduler: one process decides when every task runs",
		FlagSet:    flag.NewFlagSet("axe", flag.ContinueOnError),
		Subcommands: []*ffcli.Command{
			serveCmd(),
			agentCmd(),
			conformanceCmd(),
			taskCmd(),
			groupCmd(),
			runCmd(),      // runs.go
			workflowCmd(), // workflow.go
			executorsCmd(),
			limitCmd(),
			cronCmd(),
			importCmd(),
			versionCmd(),
			pruneCmd(),
		},
		Exec: parentExec,
	}
	return root.ParseAndRun(ctx, args)
}

// parentExec runs when a command that only groups subcommands is called without a known
// one: bare, it prints the usage; with an argument, that argument is an unknown command,
// which must fail (exit 1) rather than look like success to a script.
func parentExec(_ context.Context, args []string) error {
	if len(args) == 0 {
		return flag.ErrHelp
	}
	return fmt.Errorf("unknown command %q (see -h)", args[0])
}

// envOpts makes every flag also read AXE_<FLAG> (dashes become underscores).
var envOpts = []ff.Option{ff.WithEnvVarPrefix("AXE")}

func versionCmd() *ffcli.Command {
	return &ffcli.Command{
		Name:       "version",
		ShortUsage: "axe version",
		ShortHelp:  "print the version",
		Exec: func(context.Context, []string) error {
			fmt.Println("axe", version)
			return nil
		},
	}
}
