package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/migrate/xxltest"

	"github.com/axe-sched/axe/internal/test/testwait"
)

// importedTask is the part of `axe task get` an import test reads.
type importedTask struct {
	Name        string          `json:"name"`
	Group       string          `json:"group"`
	Cron        string          `json:"cron"`
	CronDialect string          `json:"cron_dialect"`
	Timezone    string          `json:"timezone"`
	Paused      bool            `json:"paused"`
	Trigger     string          `json:"trigger"`
	DependsOn   []string        `json:"depends_on"`
	DependsMode string          `json:"depends_mode"`
	Params      json.RawMessage `json:"params"`
	Callback    struct {
		App, Handler, Route string
	} `json:"callback"`
	Runtime struct {
		State           string `json:"state"`
		Note            string `json:"note"`
		NextTriggerTime int64  `json:"next_trigger_time"`
	} `json:"runtime"`
}

func getImported(t *testing.T, env []string, name string) importedTask {
	t.Helper()
	var v importedTask
	out := axeOK(t, env, "task", "get", name)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("axe task get %s printed %q: %v", name, out, err)
	}
	return v
}

// TestImportCrontab imports a real crontab file into a real `axe serve`, runs the agent on
// the config it wrote and checks the agent runs the line's command with the crontab's
// environment and cron's % standard input.
func TestImportCrontab(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--timezone", "UTC",
		"--heartbeat-interval", "400ms")
	env := []string{"AXE_SERVER=" + srv.url}
	out1, out2 := filepath.Join(dir, "out1"), filepath.Join(dir, "out2")
	tab := filepath.Join(dir, "crontab")
	body := fmt.Sprintf(`# the ops crontab
MAILTO=ops@example.com
SHELL=/bin/sh
GREETING="hello there"
CRON_TZ=Asia/Tokyo
# every weekday at 09:30 Tokyo
30 9 * * 1-5 echo "$GREETING $SHELL $PATH" > %s; date +\%%Y >> %s
@hourly cat > %s%%first line%%second line
@reboot /usr/bin/never
`, out1, out1, out2)
	if err := os.WriteFile(tab, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	// An agent config with its own listen address: the import keeps it and adds handlers.
	agentPath := writeJSON(t, dir, "agent.json", map[string]any{"app": "ops", "listen": "127.0.0.1:0", "schedulers": []string{srv.url}})

	// A bad line: the dry run names it and nothing is created.
	r := axe(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", agentPath, "--yes")
	if r.code == 0 || !strings.Contains(r.stderr, "line 9: @reboot") || !strings.Contains(r.stderr, "nothing was created") {
		t.Fatalf("import with @reboot: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if ls := axeOK(t, env, "task", "ls"); strings.Contains(ls, "cron-ops-") {
		t.Fatalf("tasks created despite a bad line:\n%s", ls)
	}
	// The dry run: a table, and nothing changed.
	dry := axeOK(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", agentPath, "--skip-bad")
	for _, want := range []string{"SOURCE", "line 7", "30 9 * * 1-5", "Asia/Tokyo", "line 8", "@hourly", "MAILTO (line 2)", "dry run: 2 task(s)"} {
		if !strings.Contains(dry, want) {
			t.Errorf("dry run lacks %q:\n%s", want, dry)
		}
	}
	if ls := axeOK(t, env, "task", "ls"); strings.Contains(ls, "cron-ops-") {
		t.Fatalf("the dry run created tasks:\n%s", ls)
	}
	applied := axeOK(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", agentPath, "--skip-bad", "--yes")
	if !strings.Contains(applied, "2 created, 0 replaced, 0 skipped") {
		t.Fatalf("apply printed:\n%s", applied)
	}
	// Idempotent: the same file again creates nothing.
	again := axeOK(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", agentPath, "--skip-bad", "--yes")
	if !strings.Contains(again, "0 created, 0 replaced, 2 skipped") {
		t.Fatalf("re-import printed:\n%s", again)
	}
	var names []string
	for _, l := range strings.Split(applied, "\n") {
		if _, name, ok := strings.Cut(l, "] created "); ok {
			names = append(names, name)
		}
	}
	if len(names) != 2 {
		t.Fatalf("created %v", names)
	}
	weekday, hourly := getImported(t, env, names[0]), getImported(t, env, names[1])
	if weekday.Cron != "30 9 * * 1-5" || weekday.CronDialect != "unix" || weekday.Timezone != "Asia/Tokyo" || weekday.Callback.App != "ops" ||
		weekday.Callback.Handler != weekday.Name || weekday.Paused {
		t.Errorf("weekday task = %+v", weekday)
	}
	next := time.UnixMilli(weekday.Runtime.NextTriggerTime).In(mustLocT(t, "Asia/Tokyo"))
	if next.Hour() != 9 || next.Minute() != 30 || next.Weekday() == time.Saturday || next.Weekday() == time.Sunday {
		t.Errorf("weekday task next fire %s", next)
	}
	if hourly.Cron != "@hourly" {
		t.Errorf("hourly task = %+v", hourly)
	}
	// --on-conflict replace updates the definitions in place and keeps the paused state.
	axeOK(t, env, "task", "pause", names[1])
	if err := os.WriteFile(tab, []byte(strings.Replace(body, "CRON_TZ=Asia/Tokyo", "CRON_TZ=Europe/Paris", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	replaced := axeOK(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", agentPath, "--skip-bad", "--yes", "--on-conflict", "replace")
	if !strings.Contains(replaced, "0 created, 2 replaced, 0 skipped") {
		t.Fatalf("replace printed:\n%s", replaced)
	}
	if w, h := getImported(t, env, names[0]), getImported(t, env, names[1]); w.Timezone != "Europe/Paris" || w.Paused || h.Timezone != "Europe/Paris" || !h.Paused {
		t.Errorf("after replace: %+v / %+v; want Europe/Paris, the second still paused", w, h)
	}
	axeOK(t, env, "task", "resume", names[1])

	startAgent(t, agentPath)
	testwait.For(t, waitTimeout, "the agent registered", func() bool {
		return strings.Contains(axeOK(t, env, "executors"), "alive")
	})
	for _, n := range names {
		axeOK(t, env, "task", "run", n)
	}
	testwait.For(t, waitTimeout, "both commands ran", func() bool {
		a, b := apiRuns(t, srv.url, names[0]), apiRuns(t, srv.url, names[1])
		return len(a) == 1 && a[0].Result == "success" && len(b) == 1 && b[0].Result == "success"
	})
	got1, _ := os.ReadFile(out1)
	if want := fmt.Sprintf("hello there /bin/sh /usr/bin:/bin\n%d\n", time.Now().Year()); string(got1) != want {
		t.Errorf("command 1 wrote %q, want %q", got1, want)
	}
	if got2, _ := os.ReadFile(out2); string(got2) != "first line\nsecond line\n" {
		t.Errorf("command 2 read %q from its standard input", got2)
	}
}

// TestImportXXLJob imports a 2.3-generation XXL-JOB database into a real `axe serve`: the
// tasks appear paused with the next fires XXL-JOB would compute, a re-run changes nothing,
// and resuming the group cuts over.
func TestImportXXLJob(t *testing.T) {
	t.Parallel()
	dsn, db := xxltest.Database(t, xxltest.Gen23)
	nextRate := time.Now().Add(45 * time.Second).Truncate(time.Second)
	xxltest.Exec(t, db,
		`INSERT INTO xxl_job_group (id, app_name, title, address_type) VALUES (1, 'orders', 'Orders', 0)`,
		`INSERT INTO xxl_job_info (id, job_group, job_desc, author, alarm_email, schedule_type, schedule_conf,
			misfire_strategy, executor_route_strategy, executor_handler, executor_param, executor_block_strategy,
			executor_timeout, executor_fail_retry_count, glue_type, child_jobid, trigger_status, trigger_next_time) VALUES
			(1, 1, 'monday report', 'alice', '', 'CRON', '0 0 12 ? * 2', 'FIRE_ONCE_NOW', 'ROUND', 'report', 'eu',
			 'SERIAL_EXECUTION', 60, 1, 'BEAN', '3', 1, 0),
			(2, 1, 'poll', '', '', 'FIX_RATE', '90', 'DO_NOTHING', 'FAILOVER', 'poll', '', 'SERIAL_EXECUTION', 0, 0,
			 'BEAN', '', 1, `+fmt.Sprint(nextRate.UnixMilli())+`),
			(3, 1, 'after the report', '', '', 'NONE', '', 'DO_NOTHING', 'ROUND', 'cleanup', '', 'SERIAL_EXECUTION',
			 0, 0, 'BEAN', '', 0, 0),
			(4, 1, 'a script', '', '', 'CRON', '0 * * * * ?', 'DO_NOTHING', 'ROUND', '', '', 'SERIAL_EXECUTION',
			 0, 0, 'GLUE_GROOVY', '', 1, 0),
			(5, 1, 'stopped long ago', '', '', 'CRON', '0 0 3 * * ?', 'DO_NOTHING', 'SHARDING_BROADCAST', 'old', '',
			 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', 0, 0)`)
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--timezone", "Asia/Shanghai")
	env := []string{"AXE_SERVER=" + srv.url, "AXE_DSN=" + dsn}

	r := axe(t, env, "import", "xxl-job", "--yes")
	if r.code == 0 || !strings.Contains(r.stderr, "job 4: a GLUE script (GLUE_GROOVY)") {
		t.Fatalf("import with a GLUE job: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	dry := axeOK(t, env, "import", "xxl-job", "--skip-bad")
	for _, want := range []string{"xxl-orders-1", "0 0 12 ? * 2 (quartz)", "Asia/Shanghai", "after xxl-orders-1", "dry run: 4 task(s)",
		"RUNS DIFFERENTLY IN AXE", "job 5 (xxl-orders-5): SHARDING_BROADCAST", "stopped in XXL-JOB"} {
		if !strings.Contains(dry, want) {
			t.Errorf("dry run lacks %q:\n%s", want, dry)
		}
	}
	applied := axeOK(t, env, "import", "xxl-job", "--skip-bad", "--yes")
	if !strings.Contains(applied, "4 created") || !strings.Contains(applied, "axe group resume") {
		t.Fatalf("apply printed:\n%s", applied)
	}
	if again := axeOK(t, env, "import", "xxl-job", "--skip-bad", "--yes"); !strings.Contains(again, "0 created, 0 replaced, 4 skipped") {
		t.Fatalf("re-import printed:\n%s", again)
	}
	sh := mustLocT(t, "Asia/Shanghai")
	report := getImported(t, env, "xxl-orders-1")
	next := time.UnixMilli(report.Runtime.NextTriggerTime).In(sh)
	if !report.Paused || report.Runtime.State != "PAUSED" || report.CronDialect != "quartz" || report.Timezone != "Asia/Shanghai" ||
		next.Weekday() != time.Monday || next.Hour() != 12 || report.Runtime.Note != "XXL-JOB job 1: monday report; author alice" ||
		string(report.Params) != `"eu"` || report.Callback.Handler != "report" || report.Callback.Route != "round_robin" {
		t.Errorf("report task = %+v, next %s", report, next)
	}
	poll := getImported(t, env, "xxl-orders-2")
	if poll.Runtime.NextTriggerTime != nextRate.UnixMilli() || !strings.HasPrefix(poll.Cron, "@every 90s from ") {
		t.Errorf("poll task = %+v; next %d, want XXL-JOB's %d", poll, poll.Runtime.NextTriggerTime, nextRate.UnixMilli())
	}
	child := getImported(t, env, "xxl-orders-3")
	if child.Trigger != "dependency" || strings.Join(child.DependsOn, ",") != "xxl-orders-1" || child.DependsMode != "any" ||
		!child.Paused || child.Group != "orders" {
		t.Errorf("child task = %+v", child)
	}
	if old := getImported(t, env, "xxl-orders-5"); !old.Paused || old.Group != "orders.stopped" || !strings.Contains(old.Runtime.Note, "stopped in XXL-JOB") {
		t.Errorf("stopped task = %+v", old)
	}
	// Cut-over as docs/migrating.md says: resume the group. The fixed rate keeps XXL-JOB's
	// phase; the NONE child (trigger_status 0, as XXL-JOB keeps every NONE job) runs after
	// its parent again; the job stopped in XXL-JOB stays stopped.
	axeOK(t, env, "group", "resume", "orders")
	poll = getImported(t, env, "xxl-orders-2")
	if poll.Paused || poll.Runtime.State != "SCHEDULED" || poll.Runtime.NextTriggerTime != nextRate.UnixMilli() {
		t.Errorf("poll after resume = %+v, want SCHEDULED at %d", poll, nextRate.UnixMilli())
	}
	if child := getImported(t, env, "xxl-orders-3"); child.Paused || child.Runtime.State != "WAITING" {
		t.Errorf("child after resume = %+v, want WAITING for its parent", child)
	}
	if old := getImported(t, env, "xxl-orders-5"); !old.Paused || old.Runtime.State != "PAUSED" {
		t.Errorf("stopped task after the group's resume = %+v, want still PAUSED", old)
	}
	// Starting it is a choice made by name.
	axeOK(t, env, "task", "resume", "xxl-orders-5")
	if old := getImported(t, env, "xxl-orders-5"); old.Paused || old.Runtime.State != "SCHEDULED" {
		t.Errorf("stopped task resumed by name = %+v", old)
	}
}

// TestImportCrontabSystemCopy: a copy of a system crontab under another path is read in the
// system format from its content (the user column is not run as the command), and a file
// that could be either is refused with a message asking for --format.
func TestImportCrontabSystemCopy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--timezone", "UTC")
	env := []string{"AXE_SERVER=" + srv.url}
	tab := filepath.Join(dir, "crontab.copy")
	if err := os.WriteFile(tab, []byte("SHELL=/bin/sh\n# m h dom mon dow user\tcommand\n17 *\t* * *\troot\tcd / && run-parts --report /etc/cron.hourly\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dry := axeOK(t, env, "import", "crontab", tab, "--app", "sys", "--agent-config", filepath.Join(dir, "agent.json"))
	if !strings.Contains(dry, "read as a system crontab") || !strings.Contains(dry, "cd / && run-parts") || strings.Contains(dry, "root cd /") ||
		!strings.Contains(dry, "user root (line 3)") {
		t.Errorf("dry run of a system crontab copy:\n%s", dry)
	}
	mixed := filepath.Join(dir, "mixed")
	if err := os.WriteFile(mixed, []byte("0 * * * * root run\n0 1 * * * /bin/other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := axe(t, env, "import", "crontab", mixed, "--app", "sys", "--agent-config", filepath.Join(dir, "agent.json"))
	if r.code == 0 || !strings.Contains(r.stderr, "give --format system or --format user") {
		t.Errorf("mixed crontab: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if again := axeOK(t, env, "import", "crontab", mixed, "--app", "sys", "--format", "user", "--agent-config", filepath.Join(dir, "agent.json")); !strings.Contains(again, "dry run: 2 task(s)") {
		t.Errorf("mixed crontab read as a user crontab:\n%s", again)
	}
}

// TestCronNextDialect: the preview CLI honours --dialect, and without it refuses the
// ambiguous expression with a message naming both readings.
func TestCronNextDialect(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--timezone", "UTC")
	env := []string{"AXE_SERVER=" + srv.url}
	out := axeOK(t, env, "cron", "next", "0 0 12 ? * 2", "--dialect", "quartz", "-n", "3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("cron next printed %q", out)
	}
	for _, l := range lines[1:] {
		ft, err := time.Parse(time.RFC3339, l)
		if err != nil || ft.Weekday() != time.Monday {
			t.Errorf("quartz 2 fires %q, not a Monday", l)
		}
	}
	r := axe(t, env, "cron", "next", "0 0 12 ? * 2")
	if r.code == 0 || !strings.Contains(r.stderr, "2 is Tuesday in unix cron but Monday in Quartz") {
		t.Errorf("ambiguous preview: exit %d, stderr %q", r.code, r.stderr)
	}
	// A server told its dialect (here through the environment) refuses nothing.
	dir2 := t.TempDir()
	srv2 := startServe(t, dir2, []string{"AXE_CRON_DIALECT=quartz"}, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir2, "axe.db"), "--timezone", "UTC")
	out = axeOK(t, []string{"AXE_SERVER=" + srv2.url}, "cron", "next", "0 0 12 ? * 2", "-n", "1")
	if l := strings.Split(strings.TrimSpace(out), "\n"); len(l) != 2 || !strings.Contains(l[1], "T12:00:00Z") {
		t.Errorf("quartz server preview %q", out)
	} else if ft, _ := time.Parse(time.RFC3339, l[1]); ft.Weekday() != time.Monday {
		t.Errorf("quartz server preview %q is not a Monday", out)
	}
}

func TestServerDialect(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{{nil, ""}, {[]string{"--cron-dialect", "unix"}, "unix"}, {[]string{"--cron-dialect", "quartz"}, "quartz"}} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		v := fs.String("cron-dialect", "unix", "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got, err := serverDialect(fs, *v); err != nil || got != c.want {
			t.Errorf("%v: %q, %v; want %q", c.args, got, err, c.want)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	v := fs.String("cron-dialect", "unix", "")
	_ = fs.Parse([]string{"--cron-dialect", "vixie"})
	if _, err := serverDialect(fs, *v); err == nil || !strings.Contains(err.Error(), "cron-dialect") {
		t.Errorf("vixie: %v", err)
	}
}

// startAgent runs `axe agent -c path` until the test ends.
func startAgent(t *testing.T, path string) {
	t.Helper()
	agent := exec.Command(axeBin, "agent", "-c", path)
	agent.Env = cleanEnv()
	var out syncBuffer
	agent.Stdout, agent.Stderr = &out, &out
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.Process.Kill()
		_, _ = agent.Process.Wait()
		if t.Failed() {
			t.Logf("agent output:\n%s", out.String())
		}
	})
}

func mustLocT(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
