package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/conformance"
)

func conformanceCmd() *ffcli.Command {
	return &ffcli.Command{
		Name:        "conformance",
		ShortUsage:  "axe conformance executor [flags]",
		ShortHelp:   "check that an executor speaks the axe executor protocol",
		Subcommands: []*ffcli.Command{conformanceExecutorCmd()},
		Exec:        parentExec,
	}
}

// conformanceExecutorCmd takes no AXE_* environment for its flags: it sets AXE_SCHEDULERS,
// AXE_LISTEN, AXE_TOKEN and AXE_APP for the executor it starts, which must not configure the
// suite as well.
func conformanceExecutorCmd() *ffcli.Command {
	fs := flag.NewFlagSet("axe conformance executor", flag.ContinueOnError)
	execCmd := fs.String("exec", "", "start the executor under test with this command (run by /bin/sh as exec CMD), passing AXE_SCHEDULERS, AXE_LISTEN, AXE_TOKEN and AXE_APP")
	url := fs.String("url", "", "the base URL (http://host:port) of an executor started by hand, pointed at --listen")
	listen := fs.String("listen", conformance.ListenDefault, "address of the suite's scheduler, which the executor registers with")
	token := fs.String("token", "", "the executor's token (empty: no signatures, signature cases skipped)")
	app := fs.String("app", conformance.AppDefault, "the app the executor registers")
	runRe := fs.String("run", "", "run only the cases whose name matches this regular expression")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("v", false, "copy the started executor's output to standard error")
	registerTimeout := fs.Duration("register-timeout", conformance.RegisterTimeoutDefault, "how long to wait for the executor to register")
	waitTimeout := fs.Duration("wait-timeout", conformance.WaitTimeoutDefault, "how long to wait for a result, a heartbeat or a deregistration")
	return &ffcli.Command{
		Name:       "executor",
		ShortUsage: "axe conformance executor (--exec CMD | --url URL) [--token T] [--app A] [--run REGEX] [--json]",
		ShortHelp:  "drive an executor through every case of the executor protocol and print which pass",
		LongHelp: "The suite plays the scheduler and drives the executor's echo handler (see docs/conformance.md).\n" +
			"With --exec it starts the executor itself; with --url it waits for an executor started by hand\n" +
			"with AXE_SCHEDULERS set to the address it prints. Exit status 1 when any case fails.\n\n" +
			"Cases: " + strings.Join(conformance.Names(), ", "),
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("conformance executor: unexpected argument %q", args[0])
			}
			cfg := conformance.Config{
				Exec: *execCmd, URL: *url, Listen: *listen, Token: *token, App: *app,
				RegisterTimeout: *registerTimeout, WaitTimeout: *waitTimeout,
			}
			if *runRe != "" {
				re, err := regexp.Compile(*runRe)
				if err != nil {
					return fmt.Errorf("--run: %w", err)
				}
				cfg.Run = re
			}
			if *verbose {
				cfg.Output = os.Stderr
			}
			if *url != "" {
				cfg.OnListen = func(u string) {
					fmt.Fprintf(os.Stderr, "axe conformance: scheduler at %s; start the executor with AXE_SCHEDULERS=%s, app %q, listening at %s\n",
						u, u, cfg.App, strings.TrimPrefix(*url, "http://"))
				}
			}
			rep, err := conformance.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if *asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else if err := conformance.WriteTable(os.Stdout, rep); err != nil {
				return err
			}
			if !rep.OK() {
				return fmt.Errorf("%d of %d conformance cases failed", rep.Failed, len(rep.Cases))
			}
			return nil
		},
	}
}
