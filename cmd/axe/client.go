package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/model"
)

// clientFlags are the flags every client command takes (README.md).
type clientFlags struct {
	server string
	token  string
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", "http://"+admin.AddrDefault, "comma-separated scheduler addresses; the first that answers is used (AXE_SERVER)")
	fs.StringVar(&f.token, "token", "", "bearer token (AXE_TOKEN)")
}

func (f *clientFlags) client() (*client.Client, error) {
	who := "cli"
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = "cli:" + u.Username
	}
	return client.New(f.server, f.token, who)
}

// parseInterspersed parses flags that come after positional arguments too
// ("axe task get NAME --server X"), which the flag package alone stops at.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// clientCmd builds a client command taking exactly nargs positional arguments.
func clientCmd(name, usage, help string, nargs int, setup func(fs *flag.FlagSet), exec func(ctx context.Context, c *client.Client, args []string) error) *ffcli.Command {
	return clientCmdArgs(name, usage, help, nargs, nargs, setup, exec)
}

// clientCmdArgs builds a client command taking minArgs to maxArgs positional arguments.
func clientCmdArgs(name, usage, help string, minArgs, maxArgs int, setup func(fs *flag.FlagSet), exec func(ctx context.Context, c *client.Client, args []string) error) *ffcli.Command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var cf clientFlags
	cf.register(fs)
	if setup != nil {
		setup(fs)
	}
	return &ffcli.Command{
		Name:       name,
		ShortUsage: usage,
		ShortHelp:  help,
		FlagSet:    fs,
		Options:    envOpts,
		Exec: func(ctx context.Context, args []string) error {
			pos, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			if len(pos) < minArgs || len(pos) > maxArgs {
				return fmt.Errorf("usage: %s", usage)
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			return exec(ctx, c, pos)
		},
	}
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func readSpec(path string) ([]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("-f: a task JSON file is required (- for standard input)")
	}
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-f: %w", err)
	}
	return data, nil
}

func fmtMS(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).Format("2006-01-02 15:04:05.000")
}

// optInt is an int flag that knows whether it was given.
type optInt struct {
	n   int
	set bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.Itoa(o.n)
}

func (o *optInt) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("not a whole number: %q", v)
	}
	o.n, o.set = n, true
	return nil
}

// optString is a string flag that knows whether it was given.
type optString struct {
	s   string
	set bool
}

func (o *optString) String() string {
	if o == nil {
		return ""
	}
	return o.s
}

func (o *optString) Set(v string) error {
	o.s, o.set = v, true
	return nil
}

// specFlags are the flags of task create and update: the file, and fields set over it.
type specFlags struct {
	file       string
	pauseAfter optInt
	overlap    optString
	catchup    optInt
}

func (f *specFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.file, "f", "", "task JSON file, - for stdin")
	fs.Var(&f.pauseAfter, "pause-after-failures",
		"pause the task after this many consecutive failed runs, 0: never; set over the file's pause_after_failures (AXE_PAUSE_AFTER_FAILURES)")
	fs.Var(&f.overlap, "overlap-policy",
		"cron fires due while the task's run is in flight: skip, buffer_one (default), buffer_all, cancel_other or allow_all; set over the file's overlap_policy (AXE_OVERLAP_POLICY)")
	fs.Var(&f.catchup, "catchup-window-sec",
		"after downtime or a pause, run each cron fire missed within this many seconds, oldest first; 0: none (misfire_policy decides); set over the file's catchup_window_sec (AXE_CATCHUP_WINDOW_SEC)")
}

// read returns the task JSON of the file with the flags' fields set over it. The server
// validates the result (a bound out of range is its 400 naming the field).
func (f *specFlags) read() ([]byte, error) {
	spec, err := readSpec(f.file)
	if err != nil || (!f.pauseAfter.set && !f.overlap.set && !f.catchup.set) {
		return spec, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(spec, &m); err != nil || m == nil {
		return nil, fmt.Errorf("-f: a task definition is a JSON object (%v)", err)
	}
	if f.pauseAfter.set {
		m["pause_after_failures"] = json.RawMessage(strconv.Itoa(f.pauseAfter.n))
	}
	if f.overlap.set {
		b, _ := json.Marshal(f.overlap.s)
		m["overlap_policy"] = b
	}
	if f.catchup.set {
		m["catchup_window_sec"] = json.RawMessage(strconv.Itoa(f.catchup.n))
	}
	return json.Marshal(m)
}

func taskCmd() *ffcli.Command {
	var group, state, note, params string
	var createFlags, updateFlags specFlags
	// One limit per command: flag.IntVar writes its default into the variable at
	// registration, so a shared variable would give every command the last default.
	var lsLimit, runsLimit, actionsLimit int
	return &ffcli.Command{
		Name:       "task",
		ShortUsage: "axe task <create|update|ls|get|rm|pause|resume|run|kill|runs|actions|import|bulk|backfill|backfills|backfill-cancel> ...",
		ShortHelp:  "manage tasks",
		Exec:       parentExec,
		Subcommands: append(append(writeCmds(),
			clientCmd("create", "axe task create -f task.json [--pause-after-failures N] [--overlap-policy P] [--catchup-window-sec N]", "create a task from a JSON definition", 0,
				createFlags.register,
				func(ctx context.Context, c *client.Client, _ []string) error {
					spec, err := createFlags.read()
					if err != nil {
						return err
					}
					t, err := c.CreateTask(ctx, spec)
					if err != nil {
						return err
					}
					fmt.Printf("created %s (%s, next fire %s)\n", t.Name, t.Runtime.State, orDash(t.Runtime.NextFireAt))
					return nil
				}),
			clientCmd("update", "axe task update NAME -f task.json [--pause-after-failures N] [--overlap-policy P] [--catchup-window-sec N]", "replace a task's definition", 1,
				updateFlags.register,
				func(ctx context.Context, c *client.Client, args []string) error {
					spec, err := updateFlags.read()
					if err != nil {
						return err
					}
					t, err := c.UpdateTask(ctx, args[0], spec)
					if err != nil {
						return err
					}
					fmt.Printf("updated %s (%s, next fire %s)\n", t.Name, t.Runtime.State, orDash(t.Runtime.NextFireAt))
					return nil
				}),
			clientCmd("ls", "axe task ls [--group G] [--state S]", "list tasks", 0,
				func(fs *flag.FlagSet) {
					fs.StringVar(&group, "group", "", "only this group")
					fs.StringVar(&state, "state", "", "only this state")
					fs.IntVar(&lsLimit, "limit", 100, "at most this many")
				},
				func(ctx context.Context, c *client.Client, _ []string) error {
					list, err := c.ListTasks(ctx, group, state, lsLimit)
					if err != nil {
						return err
					}
					w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(w, "NAME\tGROUP\tTRIGGER\tSTATE\tNEXT FIRE\tOK\tFAILED")
					for _, t := range list {
						trig := t.Trigger
						if t.Cron != "" {
							trig += " " + t.Cron
						}
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", t.Name, t.Group, trig, t.Runtime.State,
							orDash(t.Runtime.NextFireAt), t.Runtime.SuccessCount, t.Runtime.FailureCount)
					}
					return w.Flush()
				}),
			clientCmd("get", "axe task get NAME", "show a task's definition and runtime as JSON", 1, nil,
				func(ctx context.Context, c *client.Client, args []string) error {
					t, err := c.GetTask(ctx, args[0])
					if err != nil {
						return err
					}
					return printJSON(t)
				}),
			clientCmd("rm", "axe task rm NAME", "delete a task (its runs and actions stay)", 1, nil,
				func(ctx context.Context, c *client.Client, args []string) error {
					if err := c.DeleteTask(ctx, args[0]); err != nil {
						return err
					}
					fmt.Println("deleted", args[0])
					return nil
				}),
			taskOpCmd("pause", "stop future triggers; a running instance finishes", &note),
			taskOpCmd("resume", "re-enable a paused task", &note),
			clientCmd("kill", "axe task kill NAME [--reason TEXT]", "kill every run of the task in flight (periodic, run-now, allow_all, backfill)", 1,
				func(fs *flag.FlagSet) {
					fs.StringVar(&note, "reason", "", "why, kept on the runs and in the action records")
				},
				func(ctx context.Context, c *client.Client, args []string) error {
					t, err := c.KillTask(ctx, args[0], note)
					if err != nil {
						return err
					}
					fmt.Printf("%s: %s\n", t.Name, t.Runtime.State)
					return nil
				}),
			clientCmd("run", "axe task run NAME [--params JSON]", "run now: an independent instance with its own ticket", 1,
				func(fs *flag.FlagSet) { fs.StringVar(&params, "params", "", "params JSON for this run only") },
				func(ctx context.Context, c *client.Client, args []string) error {
					var p json.RawMessage
					if params != "" {
						if !json.Valid([]byte(params)) {
							return fmt.Errorf("--params: must be valid JSON")
						}
						p = json.RawMessage(params)
					}
					ticket, err := c.RunNow(ctx, args[0], p)
					if err != nil {
						return err
					}
					fmt.Println("started", args[0], "ticket", ticket)
					return nil
				}),
			clientCmd("runs", "axe task runs NAME [--limit N]", "recent runs, newest first", 1,
				func(fs *flag.FlagSet) { fs.IntVar(&runsLimit, "limit", 20, "at most this many") },
				func(ctx context.Context, c *client.Client, args []string) error {
					runs, err := c.Runs(ctx, args[0], runsLimit)
					if err != nil {
						return err
					}
					w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(w, "TICKET\tKIND\tATTEMPT\tSCHEDULED\tDISPATCHED\tRESULT\tDURATION\tEXECUTOR\tERROR")
					for _, r := range runs {
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%dms\t%s\t%s\n", r.Ticket, r.Kind, r.Attempt,
							fmtMS(r.ScheduledAt), fmtMS(r.DispatchedAt), r.Result, r.DurationMS, r.Executor, r.Error)
					}
					return w.Flush()
				}),
			clientCmd("actions", "axe task actions NAME [--limit N]", "the task's audit timeline, oldest first", 1,
				func(fs *flag.FlagSet) { fs.IntVar(&actionsLimit, "limit", 50, "the newest this many") },
				func(ctx context.Context, c *client.Client, args []string) error {
					acts, err := c.Actions(ctx, args[0], actionsLimit)
					if err != nil {
						return err
					}
					for i := len(acts) - 1; i >= 0; i-- {
						a := acts[i]
						move := ""
						if a.From != "" || a.To != "" {
							move = fmt.Sprintf(" %s→%s", orDash(string(a.From)), orDash(string(a.To)))
						}
						line := fmt.Sprintf("%s  %-9s%s  by %s", fmtMS(a.At), a.Action, move, a.Actor)
						if a.Ticket != "" {
							line += "  ticket " + a.Ticket
						}
						if a.Detail != "" {
							line += "  — " + a.Detail
						}
						fmt.Println(line)
					}
					return nil
				}),
		), backfillCmds()...), // backfill.go
	}
}

func taskOpCmd(op, help string, note *string) *ffcli.Command {
	usage := "axe task " + op + " NAME"
	var setup func(fs *flag.FlagSet)
	if note != nil {
		usage += " [--note TEXT]"
		setup = func(fs *flag.FlagSet) { fs.StringVar(note, "note", "", "kept in the action record") }
	}
	return clientCmd(op, usage, help, 1, setup, func(ctx context.Context, c *client.Client, args []string) error {
		n := ""
		if note != nil {
			n = *note
		}
		t, err := c.TaskOp(ctx, args[0], op, n)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %s\n", t.Name, t.Runtime.State)
		return nil
	})
}

func groupCmd() *ffcli.Command {
	var note string
	op := func(name string) *ffcli.Command {
		return clientCmd(name, "axe group "+name+" GROUP [--note TEXT]", name+" every task of a group", 1,
			func(fs *flag.FlagSet) { fs.StringVar(&note, "note", "", "kept in the action records") },
			func(ctx context.Context, c *client.Client, args []string) error {
				a, err := c.GroupOp(ctx, args[0], name, note)
				if err != nil {
					return err
				}
				printGroupAnswer(os.Stdout, name, a)
				return nil
			})
	}
	return &ffcli.Command{
		Name:        "group",
		ShortUsage:  "axe group pause|resume GROUP [--note TEXT]",
		ShortHelp:   "pause or resume a whole group",
		Exec:        parentExec,
		Subcommands: []*ffcli.Command{op("pause"), op("resume")},
	}
}

// printGroupAnswer prints what a group's pause or resume did: a resume names the tasks it
// left paused because something other than the group's pause paused them.
func printGroupAnswer(w io.Writer, op string, a client.GroupAnswer) {
	if op == "pause" {
		fmt.Fprintf(w, "group %s: paused %d task(s)", a.Group, a.Tasks)
		if a.AlreadyPaused > 0 {
			fmt.Fprintf(w, "; %d were paused already and keep their pause", a.AlreadyPaused)
		}
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, "group %s: resumed %d task(s)\n", a.Group, a.Tasks)
	if a.LeftPausedCount == 0 {
		return
	}
	fmt.Fprintf(w, "left paused, not paused by the group's pause: %d task(s)\n", a.LeftPausedCount)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPAUSED BY\tNOTE")
	for _, p := range a.LeftPaused {
		by := p.PausedBy
		if by == "" {
			by = "(before origins were kept)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, by, p.Note)
	}
	_ = tw.Flush()
	if n := a.LeftPausedCount - len(a.LeftPaused); n > 0 {
		fmt.Fprintf(w, "... and %d more; resume them with axe task resume NAME\n", n)
	}
}

// limitCmd is `axe limit`: the concurrency limits per group and per concurrency key.
func limitCmd() *ffcli.Command {
	printLimits := func(ls ...client.ConcurrencyLimit) error {
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "KIND\tNAME\tMAX\tIN USE\tWAITING")
		for _, l := range ls {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\n", l.Kind, l.Name, l.Max, l.InUse, l.Waiting)
			// A pattern (tenant:*): its keys in use, each limited to max separately.
			for _, k := range l.Keys {
				fmt.Fprintf(w, "\t  %s\t%d\t%d\t%d\n", k.Key, l.Max, k.InUse, k.Waiting)
			}
			if l.KeysInUse > len(l.Keys) {
				fmt.Fprintf(w, "\t  (%d more keys in use)\t\t\t\n", l.KeysInUse-len(l.Keys))
			}
		}
		return w.Flush()
	}
	kindOf := func(args []string) error {
		if args[0] != model.LimitGroup && args[0] != model.LimitKey {
			return fmt.Errorf("kind: must be group or key, got %q", args[0])
		}
		return nil
	}
	return &ffcli.Command{
		Name:       "limit",
		ShortUsage: "axe limit ls | get group|key NAME | set group|key NAME MAX | rm group|key NAME  (a key's NAME may be a pattern: 'tenant:*')",
		ShortHelp:  "concurrency limits: runs in flight at once per group or per concurrency_key",
		Exec:       parentExec,
		Subcommands: []*ffcli.Command{
			clientCmd("ls", "axe limit ls", "list the limits with their runs in flight and waiting fires", 0, nil,
				func(ctx context.Context, c *client.Client, _ []string) error {
					ls, err := c.ConcurrencyLimits(ctx)
					if err != nil {
						return err
					}
					return printLimits(ls...)
				}),
			clientCmd("get", "axe limit get group|key NAME", "show one limit", 2, nil,
				func(ctx context.Context, c *client.Client, args []string) error {
					if err := kindOf(args); err != nil {
						return err
					}
					l, err := c.GetConcurrencyLimit(ctx, args[0], args[1])
					if err != nil {
						return err
					}
					return printLimits(*l)
				}),
			clientCmd("set", "axe limit set group|key NAME MAX", "set a limit; it takes effect at once", 3, nil,
				func(ctx context.Context, c *client.Client, args []string) error {
					if err := kindOf(args); err != nil {
						return err
					}
					max, err := strconv.Atoi(args[2])
					if err != nil {
						return fmt.Errorf("max: must be an integer, got %q", args[2])
					}
					l, err := c.SetConcurrencyLimit(ctx, args[0], args[1], max)
					if err != nil {
						return err
					}
					return printLimits(*l)
				}),
			clientCmd("rm", "axe limit rm group|key NAME", "remove a limit: its waiting fires start", 2, nil,
				func(ctx context.Context, c *client.Client, args []string) error {
					if err := kindOf(args); err != nil {
						return err
					}
					if err := c.DeleteConcurrencyLimit(ctx, args[0], args[1]); err != nil {
						return err
					}
					fmt.Printf("limit %s %s removed\n", args[0], args[1])
					return nil
				}),
		},
	}
}

func executorsCmd() *ffcli.Command {
	return clientCmd("executors", "axe executors", "list registered executors and their heartbeats", 0, nil,
		func(ctx context.Context, c *client.Client, _ []string) error {
			list, err := c.Executors(ctx)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "APP\tADDRESS\tSTATUS\tLAST HEARTBEAT\tHANDLERS")
			for _, e := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.App, e.Address, e.Status, fmtMS(e.LastHeartbeat), strings.Join(e.Handlers, ","))
			}
			return w.Flush()
		})
}

func cronCmd() *ffcli.Command {
	var tz, dialect, task string
	var n, jitter int
	const usage = "axe cron next 'EXPR' [--tz ZONE] [--dialect unix|quartz] [-n 10] [--jitter SEC --task NAME]"
	return &ffcli.Command{
		Name:       "cron",
		ShortUsage: usage,
		ShortHelp:  "preview cron expressions",
		Exec:       parentExec,
		Subcommands: []*ffcli.Command{
			clientCmd("next", usage, "the next fire times of an expression", 1,
				func(fs *flag.FlagSet) {
					fs.StringVar(&tz, "tz", "", "IANA zone (default: the server's)")
					fs.StringVar(&dialect, "dialect", "", "cron dialect: unix (0/7 = SUN) or quartz (1 = SUN); default: the server's (AXE_DIALECT)")
					fs.IntVar(&n, "n", 10, "how many")
					fs.IntVar(&jitter, "jitter", 0, "a jitter_sec bound: also print when each fire leaves, delayed as the task --task would be")
					fs.StringVar(&task, "task", "", "the task name the jitter derives from (with --jitter)")
				},
				func(ctx context.Context, c *client.Client, args []string) error {
					if jitter != 0 {
						fires, zone, err := c.CronNextJitter(ctx, args[0], tz, dialect, n, task, jitter)
						if err != nil {
							return err
						}
						fmt.Printf("# %s in %s, jitter_sec %d for task %s: nominal time, jitter, leaves at\n", args[0], zone, jitter, task)
						w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
						for _, f := range fires {
							var ms int64 // set on every fire of a jittered preview
							if f.JitterMS != nil {
								ms = *f.JitterMS
							}
							fmt.Fprintf(w, "%s\t+%d ms\t%s\n", f.At, ms, f.FireAt)
						}
						return w.Flush()
					}
					if task != "" {
						return fmt.Errorf("--task: only with --jitter")
					}
					times, zone, err := c.CronNextIn(ctx, args[0], tz, dialect, n)
					if err != nil {
						return err
					}
					fmt.Printf("# %s in %s\n", args[0], zone)
					for _, t := range times {
						fmt.Println(t)
					}
					return nil
				}),
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
