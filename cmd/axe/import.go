package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // the XXL-JOB admin database
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/executor/agent"
	"github.com/axe-sched/axe/internal/migrate"
	"github.com/axe-sched/axe/lib/cron"
)

// Conflict policies of an import: what to do with a task whose name exists.
const (
	onConflictSkip    = "skip"
	onConflictReplace = "replace"
)

func importCmd() *ffcli.Command {
	return &ffcli.Command{
		Name:        "import",
		ShortUsage:  "axe import crontab FILE --app APP | axe import xxl-job --dsn 'mysql:…'",
		ShortHelp:   "move jobs from crontab or XXL-JOB onto axe (dry run first, --yes applies)",
		Exec:        parentExec,
		Subcommands: []*ffcli.Command{importCrontabCmd(), importXXLJobCmd()},
	}
}

// importFlags are the flags every importer shares.
type importFlags struct {
	clientFlags
	yes        bool
	skipBad    bool
	onConflict string
	pauseAfter int
}

func (f *importFlags) register(fs *flag.FlagSet) {
	f.clientFlags.register(fs)
	fs.BoolVar(&f.yes, "yes", false, "apply: create the tasks (without it, only the dry run is shown) (AXE_YES)")
	fs.BoolVar(&f.skipBad, "skip-bad", false, "import what converts and skip the rest; without it nothing is created unless every job converts (AXE_SKIP_BAD)")
	fs.IntVar(&f.pauseAfter, "pause-after-failures", 0, "pause each task after this many consecutive failed runs; 0: never (AXE_PAUSE_AFTER_FAILURES)")
	fs.StringVar(&f.onConflict, "on-conflict", onConflictSkip, "a task that exists: skip it, or replace its definition (its paused state is kept) (AXE_ON_CONFLICT)")
}

func (f *importFlags) validate() error {
	if f.onConflict != onConflictSkip && f.onConflict != onConflictReplace {
		return fmt.Errorf("on-conflict: must be skip or replace, got %q", f.onConflict)
	}
	if f.pauseAfter < 0 || f.pauseAfter > engine.MaxPauseAfterFailures {
		return fmt.Errorf("pause-after-failures: must be 0..%d (0: never pause), got %d", engine.MaxPauseAfterFailures, f.pauseAfter)
	}
	return nil
}

// checkPlan prints the dry run and says whether to go on. check, when set, is what else
// the real run would refuse (the agent config it writes), asked in the dry run too.
func (f *importFlags) checkPlan(p *migrate.Plan, check func() error) (bool, error) {
	for i := range p.Items {
		p.Items[i].Task.PauseAfterFailures = f.pauseAfter
	}
	if err := p.WriteTable(os.Stdout); err != nil {
		return false, err
	}
	if err := p.Err(); err != nil && !f.skipBad {
		return false, fmt.Errorf("%w\nnothing was created; fix those jobs, or pass --skip-bad to import the rest", err)
	}
	if check != nil {
		if err := check(); err != nil {
			return false, fmt.Errorf("%w\nnothing was created", err)
		}
	}
	if !f.yes {
		fmt.Printf("dry run: %d task(s) would be created; nothing was changed. Run again with --yes to apply.\n", len(p.Items))
		return false, nil
	}
	return true, nil
}

func importCrontabCmd() *ffcli.Command {
	fs := flag.NewFlagSet("axe import crontab", flag.ContinueOnError)
	var f importFlags
	f.register(fs)
	app := fs.String("app", "", "executor app of the tasks, and the app of the agent config (AXE_APP)")
	group := fs.String("group", "", "group of the tasks (default: the app) (AXE_GROUP)")
	format := fs.String("format", "auto", "user, system (a user column, as /etc/crontab and /etc/cron.d), or auto: system for those paths and for content in that format (AXE_FORMAT)")
	zone := fs.String("timezone", "", "zone of lines without CRON_TZ/TZ (default: the machine's, from /etc/localtime) (AXE_TIMEZONE)")
	agentConfig := fs.String("agent-config", "agent.json", "the agent config to write; an existing one keeps its settings and gains the handlers (AXE_AGENT_CONFIG)")
	paused := fs.Bool("paused", false, "import every task paused (AXE_PAUSED)")
	timeout := fs.Duration("timeout", migrate.CrontabTimeoutDefault, "timeout of every task; cron has none (AXE_TIMEOUT)")
	const usage = "axe import crontab FILE --app APP [--format auto|user|system] [--agent-config agent.json] [--yes]"
	return &ffcli.Command{
		Name:       "crontab",
		ShortUsage: usage,
		ShortHelp:  "turn a crontab into tasks and an `axe agent` config",
		FlagSet:    fs,
		Options:    envOpts,
		Exec: func(ctx context.Context, args []string) error {
			pos, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			if len(pos) != 1 {
				return fmt.Errorf("usage: %s", usage)
			}
			if err := f.validate(); err != nil {
				return err
			}
			if *app == "" {
				return fmt.Errorf("app: required (the executor app of the agent that will run the commands)")
			}
			content, err := os.ReadFile(pos[0])
			if err != nil {
				return fmt.Errorf("cannot read crontab: %w", err)
			}
			system, why, err := crontabFormat(*format, pos[0], content)
			if err != nil {
				return err
			}
			z := *zone
			if z == "" {
				if z, err = machineZone(); err != nil {
					return err
				}
			}
			plan, err := migrate.ReadCrontab(bytes.NewReader(content), migrate.CrontabOptions{
				App: *app, Group: *group, System: system, Zone: z, Timeout: *timeout, Paused: *paused,
			})
			if err != nil {
				return err
			}
			if why != "" {
				plan.Notes = append([]string{"read as a system crontab (a user column; --format user to read it otherwise): " + why}, plan.Notes...)
			}
			// The dry run builds and checks the agent config the real run writes, so it
			// meets the same refusals.
			var cfgBytes []byte
			buildConfig := func() (err error) {
				cfgBytes, err = agentConfigBytes(*agentConfig, *app, strings.Split(f.server, ","), plan.Handlers)
				return err
			}
			if ok, err := f.checkPlan(&plan.Plan, buildConfig); !ok || err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			// The config first: a task that fires before its handler exists would fail.
			if err := writeFileAtomic(*agentConfig, cfgBytes); err != nil {
				return fmt.Errorf("agent-config: %w", err)
			}
			fmt.Printf("wrote %s: %d handler(s) for app %s; run it with: axe agent -c %s\n", *agentConfig, len(plan.Handlers), *app, *agentConfig)
			return applyPlan(ctx, c, &plan.Plan, f.onConflict)
		},
	}
}

// crontabFormat says whether the crontab at path, holding content, is read in the system
// format, and for a choice made from the content, why. auto picks it for /etc/crontab and
// /etc/cron.d, and for content in that format anywhere else (a copy of a system crontab):
// read the other way, every run would fail or lose its command's first word.
func crontabFormat(format, path string, content []byte) (bool, string, error) {
	switch format {
	case "user":
		return false, "", nil
	case "system":
		return true, "", nil
	case "auto":
		abs, err := filepath.Abs(path)
		if err != nil {
			return false, "", fmt.Errorf("cannot resolve %s: %w", path, err)
		}
		if abs == "/etc/crontab" || filepath.Dir(abs) == "/etc/cron.d" {
			return true, "", nil
		}
		return migrate.DetectCrontabFormat(content, isLocalUser)
	}
	return false, "", fmt.Errorf("format: must be auto, user or system, got %q", format)
}

// isLocalUser reports whether name is a user of this machine.
func isLocalUser(name string) bool {
	_, err := user.Lookup(name)
	return err == nil
}

// machineZone is the IANA name of this machine's zone: the target of the /etc/localtime
// link below a zoneinfo directory, else /etc/timezone.
func machineZone() (string, error) {
	if target, err := filepath.EvalSymlinks("/etc/localtime"); err == nil {
		if _, name, ok := strings.Cut(target, "zoneinfo/"); ok {
			if _, err := cron.LoadLocation(name); err == nil {
				return name, nil
			}
		}
	}
	if b, err := os.ReadFile("/etc/timezone"); err == nil {
		name := strings.TrimSpace(string(b))
		if _, err := cron.LoadLocation(name); err == nil {
			return name, nil
		}
	}
	return "", errors.New("timezone: cannot tell this machine's zone from /etc/localtime or /etc/timezone; pass --timezone")
}

// agentConfigBytes returns the agent config to write at path with handlers added: an
// existing file keeps its settings (listen, schedulers, token) and other handlers, and must
// be for app. The result is checked as `axe agent` loads it (agent.Parse), so a config the
// agent would refuse is an error here, in the dry run as in the real one, and never reaches
// the disk.
func agentConfigBytes(path, app string, schedulers []string, handlers map[string]agent.Command) ([]byte, error) {
	cfg := agent.Config{App: app, Listen: agent.ListenDefault, Schedulers: schedulers}
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		cfg = agent.Config{}
		if err := dec.Decode(&cfg); err != nil {
			return nil, fmt.Errorf("agent-config: cannot read %s: %w", path, err)
		}
		if cfg.App != app {
			return nil, fmt.Errorf("agent-config: %s is the config of app %q, not %q; name another file", path, cfg.App, app)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("agent-config: %w", err)
	}
	if cfg.Handlers == nil {
		cfg.Handlers = map[string]agent.Command{}
	}
	for name, h := range handlers {
		cfg.Handlers[name] = h
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("cannot encode the agent config: %w", err)
	}
	out = append(out, '\n')
	if _, err := agent.Parse(out, path); err != nil {
		return nil, fmt.Errorf("agent-config: the config for %s would not load: %w", path, err)
	}
	return out, nil
}

// writeFileAtomic replaces path with data: written to a temporary file beside it, synced,
// then renamed over it, so a reader (or a crash) sees the old file or the new one, never
// part of one; the temporary file is removed on any failure.
func writeFileAtomic(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return nil
}

// applyPlan creates the plan's tasks, in order (an upstream before its dependents), and
// prints what happened to each.
func applyPlan(ctx context.Context, c *client.Client, p *migrate.Plan, onConflict string) error {
	tasks := make([]migrate.Task, len(p.Items))
	for i, it := range p.Items {
		tasks[i] = it.Task
	}
	res, err := createTasks(ctx, c, tasks, onConflict, os.Stdout)
	fmt.Printf("%d created, %d replaced, %d skipped (already there)\n", res.created, res.replaced, res.skipped)
	return err
}

type importResult struct{ created, replaced, skipped int }

// createTasks creates tasks one POST /api/v1/tasks at a time, in order. A name that exists
// is skipped, or with onConflict replace updated by PUT without its paused state (so a task
// already resumed stays resumed). This is the one place an import talks to the task API: it
// can become one call of the bulk create API (POST /api/v1/tasks/batch?on_conflict=…) with
// the same arguments and result.
func createTasks(ctx context.Context, c *client.Client, tasks []migrate.Task, onConflict string, progress io.Writer) (importResult, error) {
	if onConflict == onConflictSkip {
		return createTasksBulk(ctx, c, tasks, progress)
	}
	// replace goes task by task: it must keep each existing task's paused state, which a
	// batch replace would overwrite with the import's.
	var res importResult
	for i, t := range tasks {
		body, err := json.Marshal(t)
		if err != nil {
			return res, fmt.Errorf("cannot encode task %s: %w", t.Name, err)
		}
		_, err = c.CreateTask(ctx, body)
		var apiErr *client.APIError
		switch {
		case err == nil:
			res.created++
			fmt.Fprintf(progress, "[%d/%d] created %s\n", i+1, len(tasks), t.Name)
			continue
		case !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict:
			return res, fmt.Errorf("cannot create task %s: %w", t.Name, err)
		case onConflict == onConflictSkip:
			res.skipped++
			fmt.Fprintf(progress, "[%d/%d] skipped %s (exists)\n", i+1, len(tasks), t.Name)
			continue
		}
		var def map[string]any
		if err := json.Unmarshal(body, &def); err != nil {
			return res, fmt.Errorf("cannot encode task %s: %w", t.Name, err)
		}
		delete(def, "paused")
		delete(def, "note")
		put, err := json.Marshal(def)
		if err != nil {
			return res, fmt.Errorf("cannot encode task %s: %w", t.Name, err)
		}
		if _, err := c.UpdateTask(ctx, t.Name, put); err != nil {
			return res, fmt.Errorf("cannot replace task %s: %w", t.Name, err)
		}
		res.replaced++
		fmt.Fprintf(progress, "[%d/%d] replaced %s\n", i+1, len(tasks), t.Name)
	}
	return res, nil
}

// importChunk is how many tasks one bulk create carries: the batch API's limit.
const importChunk = admin.BatchMaxTasks

// createTasksBulk creates the tasks through the batch API (POST /api/v1/tasks/batch) in
// chunks of importChunk, skipping names that exist, so a large import is a few transactions
// and a re-run is idempotent. The importers order parents before children, so a dependency
// always names a task of its own chunk or of an earlier one.
func createTasksBulk(ctx context.Context, c *client.Client, tasks []migrate.Task, progress io.Writer) (importResult, error) {
	var res importResult
	for start := 0; start < len(tasks); start += importChunk {
		chunk := tasks[start:min(start+importChunk, len(tasks))]
		specs := make([]json.RawMessage, len(chunk))
		for i, t := range chunk {
			body, err := json.Marshal(t)
			if err != nil {
				return res, fmt.Errorf("cannot encode task %s: %w", t.Name, err)
			}
			specs[i] = body
		}
		br, err := c.CreateTasks(ctx, specs, onConflictSkip)
		if err != nil {
			var apiErr *client.APIError
			if errors.As(err, &apiErr) && len(apiErr.Items) > 0 {
				msgs := make([]string, 0, len(apiErr.Items))
				for _, it := range apiErr.Items {
					name := "?"
					if it.Index >= 0 && it.Index < len(chunk) {
						name = chunk[it.Index].Name
					}
					msgs = append(msgs, fmt.Sprintf("%s: %s", name, it.Error))
				}
				return res, fmt.Errorf("cannot create tasks %d-%d: %s", start+1, start+len(chunk), strings.Join(msgs, "; "))
			}
			return res, fmt.Errorf("cannot create tasks %d-%d: %w", start+1, start+len(chunk), err)
		}
		res.created += br.Created
		res.skipped += br.Skipped
		// The batch answers counts, not names: a name is created or skipped for sure only
		// when the whole chunk went one way.
		verb := "created or skipped"
		switch {
		case br.Skipped == 0:
			verb = "created"
		case br.Created == 0:
			verb = "skipped (exists)"
		}
		for i, t := range chunk {
			fmt.Fprintf(progress, "[%d/%d] %s %s\n", start+i+1, len(tasks), verb, t.Name)
		}
	}
	return res, nil
}

// importTimeout bounds reading an import source.
const importTimeout = 5 * time.Minute

func importXXLJobCmd() *ffcli.Command {
	fs := flag.NewFlagSet("axe import xxl-job", flag.ContinueOnError)
	var f importFlags
	f.register(fs)
	dsn := fs.String("dsn", "", "the XXL-JOB admin database: mysql:USER:PASS@tcp(HOST:3306)/DB (AXE_DSN)")
	zone := fs.String("timezone", "", "the zone XXL-JOB's server computed schedules in (default: the axe server's default zone) (AXE_TIMEZONE)")
	paused := fs.Bool("paused", true, "import every task paused, so XXL-JOB and axe never both fire; resume a group with axe group resume (AXE_PAUSED)")
	timeout := fs.Duration("timeout", migrate.CrontabTimeoutDefault, "timeout of jobs that have none (executor_timeout 0) (AXE_TIMEOUT)")
	const usage = "axe import xxl-job --dsn 'mysql:USER:PASS@tcp(HOST:3306)/DB' [--timezone ZONE] [--paused=true] [--yes]"
	return &ffcli.Command{
		Name:       "xxl-job",
		ShortUsage: usage,
		ShortHelp:  "turn the jobs of an XXL-JOB admin database into tasks (quartz dialect)",
		FlagSet:    fs,
		Options:    envOpts,
		Exec: func(ctx context.Context, args []string) error {
			pos, err := parseInterspersed(fs, args)
			if err != nil {
				return err
			}
			if len(pos) != 0 {
				return fmt.Errorf("usage: %s", usage)
			}
			if err := f.validate(); err != nil {
				return err
			}
			raw, ok := strings.CutPrefix(*dsn, "mysql:")
			if !ok || raw == "" {
				return fmt.Errorf("dsn: required, as mysql:USER:PASS@tcp(HOST:3306)/DB")
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			z := *zone
			if z == "" {
				// The server's default zone is what a preview without a zone uses.
				if _, z, err = c.CronNextIn(ctx, "@hourly", "", "", 1); err != nil {
					return fmt.Errorf("timezone: cannot ask the axe server for its zone (pass --timezone): %w", err)
				}
			}
			db, err := sql.Open("mysql", raw)
			if err != nil {
				return fmt.Errorf("dsn: %w", err)
			}
			defer db.Close()
			rctx, cancel := context.WithTimeout(ctx, importTimeout)
			defer cancel()
			plan, err := migrate.ReadXXLJob(rctx, db, migrate.XXLOptions{Zone: z, Paused: *paused, Timeout: *timeout})
			if err != nil {
				return err
			}
			if ok, err := f.checkPlan(plan, nil); !ok || err != nil {
				return err
			}
			if err := applyPlan(ctx, c, plan, f.onConflict); err != nil {
				return err
			}
			if *paused {
				fmt.Println("every task is paused. Cut over one group at a time: stop its jobs in XXL-JOB, then axe group resume GROUP")
			}
			return nil
		},
	}
}
