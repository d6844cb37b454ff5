package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/client"
)

// runCmd is `axe run`: one run, by its ticket.
func runCmd() *ffcli.Command {
	var reason string
	return &ffcli.Command{
		Name:       "run",
		ShortUsage: "axe run get TICKET | kill TICKET [--reason TEXT]",
		ShortHelp:  "one run by its ticket: show it, or kill it (run-now, allow_all and backfill runs alike)",
		Exec:       parentExec,
		Subcommands: []*ffcli.Command{
			clientCmd("get", "axe run get TICKET", "the run's record as JSON", 1, nil,
				func(ctx context.Context, c *client.Client, args []string) error {
					r, err := c.GetRun(ctx, args[0])
					if err != nil {
						return err
					}
					enc := json.NewEncoder(os.Stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(r)
				}),
			clientCmd("kill", "axe run kill TICKET [--reason TEXT]", "kill one run in flight; it is recorded KILLED with the reason", 1,
				func(fs *flag.FlagSet) {
					fs.StringVar(&reason, "reason", "", "why, kept on the run and in the action record")
				},
				func(ctx context.Context, c *client.Client, args []string) error {
					r, err := c.KillRun(ctx, args[0], reason)
					if err != nil {
						return err
					}
					fmt.Printf("%s (%s of %s): %s — %s\n", r.Ticket, r.Kind, r.TaskName, r.Result, r.Error)
					return nil
				}),
		},
	}
}
