package main

// `axe workflow`: workflows and their runs (docs/workflows.md), over package client.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/lib/visible"
	"github.com/axe-sched/axe/model"
)

// readWorkflowFile reads the definition of -f (a path, or - for standard input).
func readWorkflowFile(path string) ([]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("-f: a workflow JSON file is required (- for standard input)")
	}
	return readSpec(path)
}

func workflowCmd() *ffcli.Command {
	var createFile, updateFile, params, runKey, reason, rerunFrom, rerunStep, output, succeedNote, bfFrom, bfTo string
	var runsLimit, parallel int
	var asJSON, wait bool
	opCmd := func(op, help string) *ffcli.Command {
		var note string
		return clientCmd(op, "axe workflow "+op+" NAME [--note TEXT]", help, 1,
			func(fs *flag.FlagSet) { fs.StringVar(&note, "note", "", "kept in the action record") },
			func(ctx context.Context, c *client.Client, args []string) error {
				f := c.PauseWorkflow
				if op == "resume" {
					f = c.ResumeWorkflow
				}
				w, err := f(ctx, args[0], note)
				if err != nil {
					return err
				}
				fmt.Printf("%s: %s\n", w.Name, pausedWord(w.Paused))
				return nil
			})
	}
	return &ffcli.Command{
		Name:       "workflow",
		ShortUsage: "axe workflow <create|update|list|get|delete|pause|resume|run|runs|show|cancel|rerun|succeed|backfill|backfill-status> ...",
		ShortHelp:  "workflows: DAGs of steps run together for one logical time (docs/workflows.md)",
		Exec:       parentExec,
		Subcommands: []*ffcli.Command{
			clientCmd("create", "axe workflow create -f FILE.json", "create a workflow from a JSON definition", 0,
				func(fs *flag.FlagSet) { fs.StringVar(&createFile, "f", "", "workflow JSON file, - for stdin") },
				func(ctx context.Context, c *client.Client, _ []string) error {
					def, err := readWorkflowFile(createFile)
					if err != nil {
						return err
					}
					w, err := c.CreateWorkflow(ctx, def)
					if err != nil {
						return err
					}
					fmt.Printf("created workflow %s (version %d, %d steps, next fire %s)\n", w.Name, w.Version, len(w.Steps), fmtMS(w.NextFire))
					return nil
				}),
			clientCmdArgs("update", "axe workflow update [NAME] -f FILE.json", "store a new version of a workflow (NAME defaults to the file's name); runs in flight keep theirs", 0, 1,
				func(fs *flag.FlagSet) { fs.StringVar(&updateFile, "f", "", "workflow JSON file, - for stdin") },
				func(ctx context.Context, c *client.Client, args []string) error {
					def, err := readWorkflowFile(updateFile)
					if err != nil {
						return err
					}
					name := ""
					if len(args) == 1 {
						name = args[0]
					} else {
						var d struct {
							Name string `json:"name"`
						}
						if err := json.Unmarshal(def, &d); err != nil || d.Name == "" {
							return fmt.Errorf("NAME: give it, or a \"name\" in the file")
						}
						name = d.Name
					}
					w, err := c.UpdateWorkflow(ctx, name, def)
					if err != nil {
						return err
					}
					fmt.Printf("updated workflow %s (version %d, %d steps, next fire %s)\n", w.Name, w.Version, len(w.Steps), fmtMS(w.NextFire))
					return nil
				}),
			clientCmd("list", "axe workflow list", "list workflows", 0, nil,
				func(ctx context.Context, c *client.Client, _ []string) error {
					list, err := c.ListWorkflows(ctx)
					if err != nil {
						return err
					}
					w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(w, "NAME\tGROUP\tTRIGGER\tVERSION\tSTEPS\tSTATE\tNEXT FIRE")
					for _, v := range list {
						trig := v.Trigger
						if v.Trigger == "delay" {
							trig += " " + (time.Duration(v.DelayMS) * time.Millisecond).String()
						}
						if v.After != "" {
							trig += " after " + v.After
						}
						if v.Cron != "" {
							trig += " " + v.Cron
							if v.Timezone != "" {
								trig += " " + v.Timezone
							}
						}
						fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", v.Name, orDash(v.Group), trig, v.Version, len(v.Steps),
							pausedWord(v.Paused), fmtMS(v.NextFire))
					}
					return w.Flush()
				}),
			clientCmd("get", "axe workflow get NAME", "show a workflow's definition as JSON", 1, nil,
				func(ctx context.Context, c *client.Client, args []string) error {
					w, err := c.GetWorkflow(ctx, args[0])
					if err != nil {
						return err
					}
					return printJSON(w)
				}),
			clientCmd("delete", "axe workflow delete NAME", "delete a workflow and its step tasks (its runs and records stay; cancel runs in flight first)", 1, nil,
				func(ctx context.Context, c *client.Client, args []string) error {
					if err := c.DeleteWorkflow(ctx, args[0]); err != nil {
						return err
					}
					fmt.Println("deleted workflow", args[0])
					return nil
				}),
			opCmd("pause", "stop a workflow's trigger; runs in flight go on"),
			opCmd("resume", "start a paused workflow's trigger again"),
			clientCmd("run", "axe workflow run NAME [--params JSON] [--key KEY]", "start a run for the logical time now; prints its id", 1,
				func(fs *flag.FlagSet) {
					fs.StringVar(&params, "params", "", "params JSON of this run (default: the workflow's)")
					fs.StringVar(&runKey, "key", "", "names the run: run again with the same key, it starts nothing and prints the id of the run the key started")
				},
				func(ctx context.Context, c *client.Client, args []string) error {
					var p json.RawMessage
					if params != "" {
						if !json.Valid([]byte(params)) {
							return fmt.Errorf("--params: must be valid JSON")
						}
						p = json.RawMessage(params)
					}
					r, err := c.RunWorkflowWithKey(ctx, args[0], p, runKey)
					if err != nil {
						return flagNamedOf(err, "params", "key")
					}
					fmt.Println(r.ID)
					return nil
				}),
			clientCmd("runs", "axe workflow runs NAME [--limit N]", "a workflow's runs, newest logical time first", 1,
				func(fs *flag.FlagSet) { fs.IntVar(&runsLimit, "limit", 20, "at most this many (1-1000)") },
				func(ctx context.Context, c *client.Client, args []string) error {
					if runsLimit < 1 || runsLimit > 1000 {
						return fmt.Errorf("--limit: must be 1-1000, got %d", runsLimit)
					}
					runs, err := c.WorkflowRuns(ctx, args[0], 0, runsLimit)
					if err != nil {
						return err
					}
					w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(w, "ID\tSCHEDULED\tTRIGGER\tVERSION\tSTATE\tDURATION\tERROR")
					for _, r := range runs {
						fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, fmtMS(r.ScheduledAt), r.Trigger, r.Version, r.State,
							span(r.CreatedAt, r.EndedAt), orDash(visible.Line(r.Error)))
					}
					return w.Flush()
				}),
			clientCmd("show", "axe workflow show RUN_ID [--json]", "one run: its steps with state, items, attempts, duration, output and error", 1,
				func(fs *flag.FlagSet) { fs.BoolVar(&asJSON, "json", false, "the run as the API answers it") },
				func(ctx context.Context, c *client.Client, args []string) error {
					v, err := c.GetWorkflowRun(ctx, args[0])
					if err != nil {
						return err
					}
					if asJSON {
						return printJSON(v)
					}
					return printWorkflowRun(os.Stdout, v, time.Now())
				}),
			clientCmd("cancel", "axe workflow cancel RUN_ID [--reason TEXT]", "cancel a run: its running steps are killed", 1,
				func(fs *flag.FlagSet) {
					fs.StringVar(&reason, "reason", "", "why, kept on the run and in the action record")
				},
				func(ctx context.Context, c *client.Client, args []string) error {
					r, err := c.CancelWorkflowRun(ctx, args[0], reason)
					if err != nil {
						return err
					}
					fmt.Printf("%s: %s — %s\n", r.ID, r.State, visible.Line(r.Error))
					return nil
				}),
			clientCmd("rerun", "axe workflow rerun RUN_ID [--from failed | --step NAME]",
				"run an ended run again in place: from its failed steps (the default; what succeeded keeps its output), or one step and every step after it", 1,
				func(fs *flag.FlagSet) {
					fs.StringVar(&rerunFrom, "from", "", `"failed": rerun the steps that did not succeed (the default)`)
					fs.StringVar(&rerunStep, "step", "", "rerun this step and every step that follows it")
				},
				func(ctx context.Context, c *client.Client, args []string) error {
					var r *model.WorkflowRun
					var err error
					switch {
					case rerunFrom != "" && rerunStep != "":
						return fmt.Errorf("--from and --step: give one of them")
					case rerunStep != "":
						r, err = c.RerunWorkflowStep(ctx, args[0], rerunStep)
					case rerunFrom == "" || rerunFrom == "failed":
						r, err = c.RerunWorkflowFailed(ctx, args[0])
					default:
						return fmt.Errorf("--from: must be \"failed\", got %q", rerunFrom)
					}
					if err != nil {
						return flagNamedOf(err, "from", "step")
					}
					fmt.Printf("%s: %s again\n", r.ID, r.State)
					return nil
				}),
			clientCmd("succeed", "axe workflow succeed RUN_ID STEP [--output JSON|@FILE] [--note TEXT]",
				"mark a failed step of an ended run succeeded with an output, and run what follows it", 2,
				func(fs *flag.FlagSet) {
					fs.StringVar(&output, "output", "", "the step's output, JSON (what its downstream steps receive); @FILE reads it from FILE, @- from stdin")
					fs.StringVar(&succeedNote, "note", "", "kept on the step and in the action record")
				},
				func(ctx context.Context, c *client.Client, args []string) error {
					var out json.RawMessage
					if output != "" {
						raw := []byte(output)
						if f, ok := strings.CutPrefix(output, "@"); ok {
							// An output may be up to 1 MiB, past what one argument may hold.
							var err error
							if raw, err = readSpec(f); err != nil {
								return fmt.Errorf("--output: %w", errors.Unwrap(err))
							}
						}
						if !json.Valid(raw) {
							return fmt.Errorf("--output: must be valid JSON")
						}
						out = json.RawMessage(raw)
					}
					r, err := c.SucceedWorkflowStep(ctx, args[0], args[1], out, succeedNote)
					if err != nil {
						return flagNamedOf(err, "output")
					}
					fmt.Printf("%s: step %s marked succeeded; the run is %s\n", r.ID, args[1], r.State)
					return nil
				}),
			clientCmd("backfill", "axe workflow backfill NAME --from TIME --to TIME [--parallel N] [--wait]",
				"run a cron workflow once per fire time of its schedule in [from, to)", 1,
				func(fs *flag.FlagSet) {
					fs.StringVar(&bfFrom, "from", "", "first time considered, RFC 3339 (e.g. 2026-11-25T00:00:00Z)")
					fs.StringVar(&bfTo, "to", "", "end of the range (excluded), RFC 3339; at most now")
					fs.IntVar(&parallel, "parallel", 1, "runs of the backfill in flight at once (1-64)")
					fs.BoolVar(&wait, "wait", false, "print its progress until it ends")
				},
				func(ctx context.Context, c *client.Client, args []string) error {
					for _, f := range []struct{ name, v string }{{"from", bfFrom}, {"to", bfTo}} {
						if f.v == "" {
							return fmt.Errorf("--%s: is required (RFC 3339)", f.name)
						}
						if _, err := time.Parse(time.RFC3339, f.v); err != nil {
							return fmt.Errorf("--%s: must be an RFC 3339 time with a zone, got %q", f.name, f.v)
						}
					}
					st, err := c.BackfillWorkflow(ctx, args[0], bfFrom, bfTo, parallel)
					if err != nil {
						return flagNamed(err)
					}
					fmt.Printf("backfill of %s: %d fire times from %s to %s, %d at a time\n", st.Workflow, st.Times, bfFrom, bfTo, parallel)
					if !wait {
						fmt.Printf("progress: axe workflow backfill-status %s\n", st.Workflow)
						return nil
					}
					for {
						fmt.Println(workflowBackfillLine(st))
						if st.Done {
							return nil
						}
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-time.After(time.Second):
						}
						if st, err = c.WorkflowBackfill(ctx, args[0]); err != nil {
							return err
						}
					}
				}),
			clientCmd("backfill-status", "axe workflow backfill-status NAME", "the progress of a workflow's latest backfill", 1, nil,
				func(ctx context.Context, c *client.Client, args []string) error {
					st, err := c.WorkflowBackfill(ctx, args[0])
					if err != nil {
						return err
					}
					fmt.Println(workflowBackfillLine(st))
					return nil
				}),
		},
	}
}

func pausedWord(paused bool) string {
	if paused {
		return "paused"
	}
	return "active"
}

func workflowBackfillLine(st *client.WorkflowBackfillStatus) string {
	state := "running"
	if st.Done {
		state = "done"
	}
	return fmt.Sprintf("backfill of %s %s: %d fire times, %d started, %d skipped (had a run), %d running",
		st.Workflow, state, st.Times, st.Started, st.Skipped, st.Running)
}

// span is the time from start to end (Unix ms), or since start when end is 0 (with "+":
// still going), "-" without a start.
func span(start, end int64) string {
	return spanAt(start, end, time.Now())
}

func spanAt(start, end int64, now time.Time) string {
	switch {
	case start <= 0:
		return "-"
	case end <= 0:
		return fmtDuration(now.Sub(time.UnixMilli(start))) + "+"
	default:
		return fmtDuration(time.Duration(end-start) * time.Millisecond)
	}
}

func fmtDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// outputCell is a step's output on one line: compact JSON, cut after 48 characters.
func outputCell(out json.RawMessage) string {
	if len(out) == 0 {
		return "-"
	}
	var b bytes.Buffer
	s := string(out)
	if json.Compact(&b, out) == nil {
		s = b.String()
	}
	if r := []rune(s); len(r) > 48 {
		s = string(r[:47]) + "…"
	}
	return visible.Line(s)
}

// printWorkflowRun writes a run as a header and a table of its steps in definition order.
func printWorkflowRun(out io.Writer, v *client.WorkflowRunView, now time.Time) error {
	fmt.Fprintf(out, "run %s of %s (version %d), %s run for %s: %s", v.ID, v.Workflow, v.Version, v.Trigger, fmtMS(v.ScheduledAt), v.State)
	if v.EndedAt > 0 {
		fmt.Fprintf(out, " after %s", spanAt(v.CreatedAt, v.EndedAt, now))
	}
	fmt.Fprintln(out)
	if len(v.Params) > 0 {
		fmt.Fprintf(out, "params: %s\n", outputCell(v.Params))
	}
	if v.Error != "" {
		fmt.Fprintf(out, "error: %s\n", visible.Line(v.Error))
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "STEP\tSTATE\tITEMS\tATTEMPTS\tDURATION\tOUTPUT\tERROR")
	for _, s := range v.Steps {
		items := "-"
		if s.Items > 0 {
			items = fmt.Sprintf("%d/%d ok", s.Succeeded, s.Items)
			if s.Failed > 0 {
				items += fmt.Sprintf(", %d failed", s.Failed)
			}
			if s.Running > 0 {
				items += fmt.Sprintf(", %d running", s.Running)
			}
		}
		sent := 0
		for _, a := range s.Attempts {
			if a.Ticket != "" { // the others are the step's pending, skipped or marked rows
				sent++
			}
		}
		errText := s.Error
		if errText == "" {
			errText = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Name, s.State, items, sent, spanAt(s.StartedAt, s.EndedAt, now),
			outputCell(s.Output), visible.Line(errText))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if v.State == model.WorkflowFailed {
		fmt.Fprintf(out, "rerun from the failed steps: axe workflow rerun %s --from failed\n", v.ID)
	}
	return nil
}
