package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/executor/agent"
)

func agentCmd() *ffcli.Command {
	fs := flag.NewFlagSet("axe agent", flag.ContinueOnError)
	config := fs.String("c", "agent.json", "agent config file: handler names mapped to command lines (AXE_C)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error (AXE_LOG_LEVEL)")
	return &ffcli.Command{
		Name:       "agent",
		ShortUsage: "axe agent -c agent.json",
		ShortHelp:  "run an executor that runs the shell commands of its own config (for crontab users)",
		LongHelp: "The agent registers with the scheduler as an executor app and runs only the commands of its\n" +
			"config file; the scheduler names a handler, never a command. Params reach the command as\n" +
			"the AXE_PARAMS environment variable. Exit code, duration and the output tail are recorded.\n" +
			"AXE_OUTPUT names a fresh empty file for each run: when the command exits 0 having written to\n" +
			"it, what it wrote (at most 1 MiB; more fails the run) is the run's output instead of the\n" +
			"output tail, whole: a workflow step's output, passed to the steps after it.",
		FlagSet: fs,
		Options: envOpts,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("agent: unexpected argument %q", args[0])
			}
			log, err := newLogger(*logLevel, "text")
			if err != nil {
				return err
			}
			cfg, err := agent.Load(*config)
			if err != nil {
				return err
			}
			cfg.Logger = log
			a, err := agent.New(cfg)
			if err != nil {
				return err
			}
			if err := a.Start(ctx); err != nil {
				return err
			}
			fmt.Printf("axe agent %s serving %d handler(s) at %s\n", cfg.App, len(cfg.Handlers), a.Addr())
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return a.Stop(sctx)
		},
	}
}
