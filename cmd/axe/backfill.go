package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/client"
)

// backfillCmds are the task subcommands of backfills: start one, list them with their
// progress, cancel one.
func backfillCmds() []*ffcli.Command {
	var from, to string
	var parallel, limit int
	var wait bool
	var id int64
	return []*ffcli.Command{
		clientCmd("backfill", "axe task backfill NAME --from TIME --to TIME [--parallel N] [--wait]",
			"run a cron task once per fire time its schedule had in a past range", 1,
			func(fs *flag.FlagSet) {
				fs.StringVar(&from, "from", "", "first fire time considered, RFC 3339 (e.g. 2026-01-01T00:00:00Z)")
				fs.StringVar(&to, "to", "", "last fire time considered, RFC 3339; at most now")
				fs.IntVar(&parallel, "parallel", 1, "runs of the backfill in flight at once")
				fs.BoolVar(&wait, "wait", false, "print its progress until it ends")
			},
			func(ctx context.Context, c *client.Client, args []string) error {
				for _, f := range []struct{ name, v string }{{"from", from}, {"to", to}} {
					if f.v == "" {
						return fmt.Errorf("--%s: is required (RFC 3339)", f.name)
					}
					if _, err := time.Parse(time.RFC3339Nano, f.v); err != nil {
						return fmt.Errorf("--%s: must be an RFC 3339 time with a zone, got %q", f.name, f.v)
					}
				}
				v, err := c.CreateBackfill(ctx, args[0], from, to, parallel)
				if err != nil {
					return flagNamed(err)
				}
				fmt.Printf("backfill %d of %s: %d fire times of %q (%s) from %s to %s, %d at a time\n",
					v.ID, v.Task, v.Total, v.Cron, v.Timezone, v.From, v.To, v.Parallel)
				if !wait {
					fmt.Printf("progress: axe task backfills %s --id %d\n", v.Task, v.ID)
					return nil
				}
				for {
					fmt.Println(progressLine(v))
					if v.Status != "running" && v.Running == 0 {
						return nil
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(2 * time.Second):
					}
					if v, err = c.Backfill(ctx, args[0], v.ID); err != nil {
						return err
					}
				}
			}),
		clientCmd("backfills", "axe task backfills NAME [--id N] [--limit N]", "a task's backfills and their progress, newest first", 1,
			func(fs *flag.FlagSet) {
				fs.Int64Var(&id, "id", 0, "only this backfill, as JSON")
				fs.IntVar(&limit, "limit", 20, "at most this many")
			},
			func(ctx context.Context, c *client.Client, args []string) error {
				if id != 0 {
					v, err := c.Backfill(ctx, args[0], id)
					if err != nil {
						return err
					}
					return printJSON(v)
				}
				list, err := c.Backfills(ctx, args[0], limit)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tSTATUS\tFROM\tTO\tPARALLEL\tTOTAL\tDONE\tFAILED\tSKIPPED\tRUNNING\tNEXT FIRE")
				for _, v := range list {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", v.ID, v.Status, v.From, v.To, v.Parallel,
						v.Total, v.Done, v.Failed, v.Skipped, v.Running, orDash(v.NextFireTime))
				}
				return w.Flush()
			}),
		clientCmd("backfill-cancel", "axe task backfill-cancel NAME ID", "cancel a backfill: no new run starts; runs in flight finish", 2, nil,
			func(ctx context.Context, c *client.Client, args []string) error {
				n, err := strconv.ParseInt(args[1], 10, 64)
				if err != nil || n <= 0 {
					return fmt.Errorf("ID: must be a backfill id (a positive integer), got %q", args[1])
				}
				v, err := c.CancelBackfill(ctx, args[0], n)
				if err != nil {
					return err
				}
				fmt.Println(progressLine(v))
				return nil
			}),
	}
}

func progressLine(v *client.BackfillView) string {
	return fmt.Sprintf("backfill %d %s: %d/%d done (%d succeeded, %d failed, %d skipped), %d running, next %s",
		v.ID, v.Status, v.Done, v.Total, v.Succeeded, v.Failed, v.Skipped, v.Running, orDash(v.NextFireTime))
}

// flagNamed names the flag of a field the server refused: its message starts with the
// field, which is the flag's name.
func flagNamed(err error) error { return flagNamedOf(err, "from", "to", "parallel") }

// flagNamedOf is flagNamed for a command whose flags are fields.
func flagNamedOf(err error, fields ...string) error {
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 {
		return err
	}
	for _, f := range fields {
		if strings.HasPrefix(ae.Message, f+": ") {
			return fmt.Errorf("--%s (HTTP 400)", ae.Message)
		}
	}
	return err
}
