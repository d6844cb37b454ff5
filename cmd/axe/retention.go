package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/engine"
)

// retentionFlag is a retention period flag: Go duration syntax or days ("7d"); "off"
// keeps rows for ever.
type retentionFlag struct{ d *time.Duration }

func (f retentionFlag) String() string {
	if f.d == nil {
		return ""
	}
	if *f.d < 0 {
		return "off"
	}
	if *f.d%(24*time.Hour) == 0 && *f.d > 0 {
		return fmt.Sprintf("%dd", *f.d/(24*time.Hour))
	}
	return f.d.String()
}

func (f retentionFlag) Set(s string) error {
	if strings.EqualFold(s, "off") {
		*f.d = -1
		return nil
	}
	d, err := engine.ParseRetention(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// registerRetention adds axe serve's retention flags.
func registerRetention(fs *flag.FlagSet, rc *engine.RetentionConfig) {
	rc.History, rc.Finished = engine.RetainHistoryDefault, engine.RetainFinishedDefault
	fs.Var(retentionFlag{&rc.History}, "retain-history", "keep run and action rows this long, e.g. 7d, 36h; off keeps them (AXE_RETAIN_HISTORY)")
	fs.Var(retentionFlag{&rc.Finished}, "retain-finished", "keep finished one-shot tasks this long; off keeps them (AXE_RETAIN_FINISHED)")
	fs.DurationVar(&rc.Interval, "prune-interval", engine.PruneIntervalDefault, "time between two pruner passes (AXE_PRUNE_INTERVAL)")
}

// pruneCmd is axe prune: delete history and finished one-shot tasks older than a time now.
func pruneCmd() *ffcli.Command {
	var before string
	var dry bool
	return clientCmd("prune", "axe prune --before TIME|DURATION [--dry-run]",
		"delete runs, actions and finished one-shot tasks from before a time (RFC 3339) or older than a duration (7d, 36h)", 0,
		func(fs *flag.FlagSet) {
			fs.StringVar(&before, "before", "", "RFC 3339 time, or an age such as 7d or 36h (AXE_BEFORE)")
			fs.BoolVar(&dry, "dry-run", false, "count what would go, delete nothing (AXE_DRY_RUN)")
		},
		func(ctx context.Context, c *client.Client, _ []string) error {
			if before == "" {
				return fmt.Errorf("--before: a time or a duration is required")
			}
			res, err := c.Prune(ctx, before, dry)
			if err != nil {
				return err
			}
			verb := "pruned"
			if dry {
				verb = "would prune"
			}
			fmt.Printf("%s %d run(s), %d action(s), %d finished task(s)\n", verb, res.Runs, res.Actions, res.Finished)
			return nil
		})
}
