package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// taskJSON is the part of `axe task get` output the tests read.
type taskJSON struct {
	ID      int64           `json:"id"`
	Name    string          `json:"name"`
	Group   string          `json:"group"`
	Cron    string          `json:"cron"`
	Paused  bool            `json:"paused"`
	Params  json.RawMessage `json:"params"`
	Runtime struct {
		State string `json:"state"`
	} `json:"runtime"`
}

func getTask(t *testing.T, env []string, name string) taskJSON {
	t.Helper()
	var v taskJSON
	out := axeOK(t, env, "task", "get", name)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("axe task get %s printed %q: %v", name, out, err)
	}
	return v
}

// tableRows returns the rows of a tabwriter table after its header, split on runs of
// spaces.
func tableRows(t *testing.T, out, header string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], header) {
		t.Fatalf("table does not start with %q:\n%s", header, out)
	}
	var rows [][]string
	for _, l := range lines[1:] {
		rows = append(rows, regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1))
	}
	return rows
}

func rowNames(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r[0])
	}
	return out
}

// TestCLI drives every client command against a real `axe serve`.
func TestCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--timezone", "UTC")
	if !strings.Contains(srv.banner, binVersion) || !strings.Contains(srv.banner, "(store sqlite:"+filepath.Join(dir, "axe.db")+")") {
		t.Errorf("banner %q does not name the version and the store", srv.banner)
	}
	h := newHook(t)
	flag := []string{"--server", srv.url}
	env := []string{"AXE_SERVER=" + srv.url} // the same, read from the environment

	cronFile := writeJSON(t, dir, "cron.json", map[string]any{
		"name": "cli-cron", "group": "cg", "cron": "*/1 * * * * *", "callback": map[string]string{"url": h.srv.URL + "/cron"},
	})
	manFile := writeJSON(t, dir, "manual.json", map[string]any{
		"name": "cli-man", "trigger": "manual", "params": map[string]int{"x": 0}, "callback": map[string]string{"url": h.srv.URL + "/man"},
	})

	t.Run("create", func(t *testing.T) {
		out := axeOK(t, nil, append([]string{"task", "create", "-f", cronFile}, flag...)...)
		if !strings.HasPrefix(out, "created cli-cron (SCHEDULED, next fire ") {
			t.Errorf("create printed %q", out)
		}
		if out = axeOK(t, env, "task", "create", "-f", manFile); out != "created cli-man (WAITING, next fire -)\n" {
			t.Errorf("create printed %q", out)
		}
		r := axeStdin(t, `{"name":"cli-stdin","trigger":"manual","callback":{"url":"`+h.srv.URL+`/stdin"}}`, env, "task", "create", "-f", "-")
		if r.code != 0 || r.stdout != "created cli-stdin (WAITING, next fire -)\n" {
			t.Errorf("create from stdin: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		axeOK(t, env, "task", "rm", "cli-stdin")
		r = axe(t, env, "task", "create", "-f", cronFile)
		if r.code == 0 || !strings.Contains(r.stderr, "exists") || !strings.Contains(r.stderr, "409") {
			t.Errorf("duplicate create: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("field errors", func(t *testing.T) {
		bad := writeJSON(t, dir, "bad.json", map[string]any{
			"name": "cli-bad", "trigger": "manual", "priority": 9, "callback": map[string]string{"url": h.srv.URL},
		})
		r := axe(t, env, "task", "create", "-f", bad)
		if r.code == 0 || !strings.Contains(r.stderr, "priority") || !strings.Contains(r.stderr, "400") {
			t.Errorf("create with priority 9: exit %d, stderr %q; want a non-zero exit naming priority", r.code, r.stderr)
		}
		r = axe(t, env, "task", "create")
		if r.code == 0 || !strings.Contains(r.stderr, "-f") {
			t.Errorf("create without -f: exit %d, stderr %q", r.code, r.stderr)
		}
		r = axe(t, env, "task", "create", "-f", filepath.Join(dir, "missing.json"))
		if r.code == 0 || !strings.Contains(r.stderr, "missing.json") {
			t.Errorf("create with a missing file: exit %d, stderr %q", r.code, r.stderr)
		}
		if names := rowNames(tableRows(t, axeOK(t, env, "task", "ls"), "NAME")); strings.Contains(strings.Join(names, ","), "cli-bad") {
			t.Errorf("rejected task was created: %v", names)
		}
	})

	t.Run("ls and get", func(t *testing.T) {
		rows := tableRows(t, axeOK(t, nil, append([]string{"task", "ls"}, flag...)...), "NAME")
		if got := rowNames(rows); len(got) != 2 || got[0] != "cli-cron" || got[1] != "cli-man" {
			t.Fatalf("ls names = %v", got)
		}
		if r := rows[0]; r[1] != "cg" || r[2] != "cron */1 * * * * *" {
			t.Errorf("ls row %q", r)
		}
		if got := rowNames(tableRows(t, axeOK(t, env, "task", "ls", "--group", "cg"), "NAME")); len(got) != 1 || got[0] != "cli-cron" {
			t.Errorf("ls --group cg = %v", got)
		}
		if got := rowNames(tableRows(t, axeOK(t, env, "task", "ls", "--state", "WAITING"), "NAME")); len(got) != 1 || got[0] != "cli-man" {
			t.Errorf("ls --state WAITING = %v", got)
		}
		// Flags after the positional argument work too.
		var v taskJSON
		out := axeOK(t, nil, "task", "get", "cli-cron", "--server", srv.url)
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.Name != "cli-cron" || v.Group != "cg" || v.Cron != "*/1 * * * * *" || v.Runtime.State == "" {
			t.Errorf("get printed %s (%v)", out, err)
		}
		// Several servers: the first is dead.
		if got := rowNames(tableRows(t, axeOK(t, nil, "task", "ls", "--server", "http://127.0.0.1:1,"+srv.url), "NAME")); len(got) != 2 {
			t.Errorf("ls through a server list = %v", got)
		}
	})

	t.Run("runs and actions", func(t *testing.T) {
		testwait.For(t, waitTimeout, "cli-cron to fire", func() bool { return len(h.callsOf("cli-cron")) > 0 })
		ticket := h.callsOf("cli-cron")[0].Ticket
		testwait.For(t, waitTimeout, "the run to show as success", func() bool {
			for _, r := range tableRows(t, axeOK(t, env, "task", "runs", "cli-cron"), "TICKET") {
				if r[0] == ticket && r[1] == "scheduled" && r[2] == "1" && r[5] == "success" {
					return true
				}
			}
			return false
		})
		out := axeOK(t, env, "task", "actions", "cli-cron")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if !strings.Contains(lines[0], "create") || !strings.Contains(lines[0], "by api:cli") {
			t.Errorf("first action line %q, want the create by the CLI user", lines[0])
		}
		if !strings.Contains(out, "dispatch") || !strings.Contains(out, "SCHEDULED→RUNNING  by scheduler  ticket "+ticket) {
			t.Errorf("actions lack the dispatch of %s:\n%s", ticket, out)
		}
	})

	t.Run("pause and resume", func(t *testing.T) {
		out := axeOK(t, env, "task", "pause", "cli-cron", "--note", "maintenance window")
		if out != "cli-cron: PAUSED\n" && out != "cli-cron: RUNNING\n" {
			t.Errorf("pause printed %q", out)
		}
		paused := time.Now().UnixMilli()
		testwait.For(t, waitTimeout, "cli-cron to be PAUSED", func() bool { return getTask(t, env, "cli-cron").Runtime.State == "PAUSED" })
		if out := axeOK(t, env, "task", "actions", "cli-cron"); !strings.Contains(out, "maintenance window") {
			t.Errorf("pause note missing from the actions:\n%s", out)
		}
		time.Sleep(2 * time.Second)
		for _, c := range h.callsOf("cli-cron") {
			if c.ScheduledAt > paused {
				t.Errorf("paused task fired for %d, after the pause at %d", c.ScheduledAt, paused)
			}
		}
		// The task fires every second, so it may already be running when resume answers.
		if out := axeOK(t, env, "task", "resume", "cli-cron"); out != "cli-cron: SCHEDULED\n" && out != "cli-cron: RUNNING\n" {
			t.Errorf("resume printed %q", out)
		}
		resumed := time.Now().UnixMilli()
		testwait.For(t, waitTimeout, "cli-cron to fire after resume", func() bool {
			for _, c := range h.callsOf("cli-cron") {
				if c.ScheduledAt > resumed {
					return true
				}
			}
			return false
		})
	})

	t.Run("group", func(t *testing.T) {
		if out := axeOK(t, env, "group", "pause", "cg", "--note", "all of cg"); out != "group cg: paused 1 task(s)\n" {
			t.Errorf("group pause printed %q", out)
		}
		if v := getTask(t, env, "cli-cron"); !v.Paused {
			t.Errorf("cli-cron not paused by group pause: %+v", v)
		}
		if v := getTask(t, env, "cli-man"); v.Paused {
			t.Errorf("cli-man of another group was paused")
		}
		if out := axeOK(t, env, "group", "resume", "cg"); out != "group cg: resumed 1 task(s)\n" {
			t.Errorf("group resume printed %q", out)
		}
		if v := getTask(t, env, "cli-cron"); v.Paused {
			t.Errorf("cli-cron still paused after group resume")
		}
	})

	t.Run("run now", func(t *testing.T) {
		out := axeOK(t, env, "task", "run", "cli-man", "--params", `{"x":1}`)
		m := regexp.MustCompile(`^started cli-man ticket (\S+)\n$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("run printed %q", out)
		}
		testwait.For(t, waitTimeout, "the run-now call", func() bool {
			for _, c := range h.callsOf("cli-man") {
				if c.Ticket == m[1] {
					if !bytes.Equal(c.Params, []byte(`{"x":1}`)) {
						t.Errorf("run-now params %s, want {\"x\":1}", c.Params)
					}
					return true
				}
			}
			return false
		})
		r := axe(t, env, "task", "run", "cli-man", "--params", `{x}`)
		if r.code == 0 || !strings.Contains(r.stderr, "--params") {
			t.Errorf("run with bad params: exit %d, stderr %q", r.code, r.stderr)
		}
		r = axe(t, env, "task", "kill", "cli-man")
		if r.code == 0 || !strings.Contains(r.stderr, "409") {
			t.Errorf("kill with nothing running: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("executors and cron", func(t *testing.T) {
		if rows := tableRows(t, axeOK(t, env, "executors"), "APP"); len(rows) != 0 {
			t.Errorf("executors = %v, want none registered", rows)
		}
		out := axeOK(t, env, "cron", "next", "0 0 * * *", "--tz", "Europe/Berlin", "-n", "3")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || lines[0] != "# 0 0 * * * in Europe/Berlin" {
			t.Fatalf("cron next printed %q", out)
		}
		for _, l := range lines[1:] {
			if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT00:00:00\+0[12]:00$`).MatchString(l) {
				t.Errorf("cron next line %q is not a Berlin midnight", l)
			}
		}
		r := axe(t, env, "cron", "next", "0 0 * * *", "--tz", "Atlantis/Capital")
		if r.code == 0 || !strings.Contains(r.stderr, "tz") {
			t.Errorf("cron next with a bad zone: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("rm", func(t *testing.T) {
		if out := axeOK(t, env, "task", "rm", "cli-man"); out != "deleted cli-man\n" {
			t.Errorf("rm printed %q", out)
		}
		r := axe(t, env, "task", "get", "cli-man")
		if r.code == 0 || !strings.Contains(r.stderr, "not found") || !strings.Contains(r.stderr, "404") {
			t.Errorf("get after rm: exit %d, stderr %q", r.code, r.stderr)
		}
		r = axe(t, env, "task", "get")
		if r.code == 0 || !strings.Contains(r.stderr, "usage") {
			t.Errorf("get without a name: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("default limits", func(t *testing.T) {
		// More tasks than the smallest default limit of any list command (runs: 20,
		// actions: 50): ls must still show up to its own default of 100.
		for i := range 60 {
			body := fmt.Sprintf(`{"name":"bulk-%02d","group":"bulk","trigger":"manual","callback":{"url":%q}}`, i, h.srv.URL)
			resp, err := http.Post(srv.url+"/api/v1/tasks", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("create bulk-%02d: %d", i, resp.StatusCode)
			}
		}
		http.DefaultClient.CloseIdleConnections()
		if n := len(tableRows(t, axeOK(t, env, "task", "ls", "--group", "bulk"), "NAME")); n != 60 {
			t.Errorf("ls --group bulk shows %d of 60 tasks (default limit is 100)", n)
		}
		if n := len(tableRows(t, axeOK(t, env, "task", "ls", "--group", "bulk", "--limit", "7"), "NAME")); n != 7 {
			t.Errorf("ls --limit 7 shows %d tasks", n)
		}
	})

	t.Run("version and usage", func(t *testing.T) {
		if out := axeOK(t, nil, "version"); out != "axe "+binVersion+"\n" {
			t.Errorf("version printed %q", out)
		}
		for _, args := range [][]string{{"bogus-command"}, {"task", "bogus"}, {"group", "stop", "cg"}} {
			r := axe(t, nil, args...)
			if r.code == 0 || !strings.Contains(r.stderr, "unknown command") {
				t.Errorf("axe %v: exit %d, stderr %q; want a failure naming the unknown command", args, r.code, r.stderr)
			}
		}
		if r := axe(t, nil); r.code != 0 || !strings.Contains(r.stderr, "SUBCOMMANDS") {
			t.Errorf("bare axe: exit %d, stderr %q; want the usage", r.code, r.stderr)
		}
	})
}

// TestCrashSafety kills the daemon with SIGKILL while a per-second cron task fires, restarts
// it on the same store, and checks that the task survives, keeps firing, and that no fire
// time is dispatched twice across the crash.
func TestCrashSafety(t *testing.T) {
	t.Parallel()
	stores := []struct {
		name string
		dsn  func(t *testing.T, dir string) string
	}{
		{persist.SchemeSQLite, func(t *testing.T, dir string) string { return "sqlite:" + filepath.Join(dir, "axe.db") }},
		{persist.SchemeMySQL, func(t *testing.T, _ string) string { return persisttest.MySQLSchemaDSN(t) }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			dsn := st.dsn(t, dir)
			h := newHook(t)
			args := []string{"--addr", "127.0.0.1:0", "--db", dsn}
			first := startServe(t, dir, nil, args...)
			// Each run takes 400 ms, so the kill below lands while a run is in flight.
			spec := writeJSON(t, dir, "crashy.json", map[string]any{
				"name": "crashy", "cron": "*/1 * * * * *", "callback": map[string]string{"url": h.srv.URL + "/crashy?ms=400"},
			})
			axeOK(t, nil, "task", "create", "-f", spec, "--server", first.url)
			testwait.For(t, waitTimeout, "two fires before the crash", func() bool { return len(h.callsOf("crashy")) >= 2 })

			var inFlight string
			testwait.For(t, waitTimeout, "a run in flight", func() bool {
				calls := h.callsOf("crashy")
				if last := calls[len(calls)-1]; last.Done.IsZero() && time.Since(last.At) < 200*time.Millisecond {
					inFlight = last.Ticket
					return true
				}
				return false
			})
			if err := first.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-first.exited
			before := len(h.callsOf("crashy"))

			second := startServe(t, dir, nil, args...)
			restarted := time.Now()
			testwait.For(t, waitTimeout, "three fires after the restart", func() bool {
				n := 0
				for _, c := range h.callsOf("crashy") {
					if c.At.After(restarted) {
						n++
					}
				}
				return n >= 3
			})
			env := []string{"AXE_SERVER=" + second.url}
			if v := getTask(t, env, "crashy"); v.Name != "crashy" || v.Cron != "*/1 * * * * *" {
				t.Errorf("task after the crash: %+v", v)
			}

			calls := h.callsOf("crashy")
			tickets := map[string]bool{}
			fires := map[int64]bool{}
			for _, c := range calls {
				if tickets[c.Ticket] {
					t.Errorf("ticket %s dispatched twice", c.Ticket)
				}
				tickets[c.Ticket] = true
				if fires[c.ScheduledAt] {
					t.Errorf("fire time %d dispatched twice", c.ScheduledAt)
				}
				fires[c.ScheduledAt] = true
			}
			if len(calls) <= before {
				t.Errorf("no new tickets after the restart (%d calls before, %d after)", before, len(calls))
			}
			// The run cut off by the crash is recorded as lost, not re-sent.
			var lost bool
			testwait.For(t, waitTimeout, "the cut-off run in the history", func() bool {
				for _, r := range tableRows(t, axeOK(t, env, "task", "runs", "crashy", "--limit", "100"), "TICKET") {
					if r[0] == inFlight {
						lost = r[5] == model.ResultLost
						return r[5] != model.ResultRunning
					}
				}
				return false
			})
			if !lost {
				t.Errorf("run %s, in flight at the crash, is not recorded as lost", inFlight)
			}
		})
	}
}

// TestSIGTERM starts `axe serve` with no flags (address from the environment, store in the
// working directory), sends SIGTERM while a run is in flight, and checks a clean exit with
// every shutdown step logged.
func TestSIGTERM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, []string{"AXE_ADDR=127.0.0.1:0"})
	if !strings.Contains(srv.banner, "(store sqlite:axe.db)") {
		t.Errorf("banner %q, want the default store sqlite:axe.db", srv.banner)
	}
	if _, err := os.Stat(filepath.Join(dir, "axe.db")); err != nil {
		t.Errorf("default store not created in the working directory: %v", err)
	}
	h := newHook(t)
	spec := writeJSON(t, dir, "slow.json", map[string]any{
		"name": "slow", "delay_ms": 0, "callback": map[string]string{"url": h.srv.URL + "/slow?ms=800"},
	})
	axeOK(t, []string{"AXE_SERVER=" + srv.url}, "task", "create", "-f", spec)
	testwait.For(t, waitTimeout, "the slow run to start", func() bool { return len(h.callsOf("slow")) == 1 })

	if code := srv.signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0\nstderr:\n%s", code, srv.stderr.String())
	}
	if c := h.callsOf("slow")[0]; c.Done.IsZero() {
		t.Error("the daemon exited before the run in flight answered")
	}
	logs := srv.stderr.String()
	steps := []string{
		`msg="shutting down"`,
		`msg="shutdown: not ready"`,
		`msg="engine stop: stop triggering"`,
		`msg="engine stop: drain in-flight runs"`,
		`msg="engine stop: flush writer"`,
		`msg="shutdown: stop engine (triggering, dispatch, writer)"`,
		`msg="shutdown: stop HTTP server"`,
		`msg="shutdown: close store"`,
	}
	at := 0
	for _, s := range steps {
		i := strings.Index(logs[at:], s)
		if i < 0 {
			t.Errorf("log lacks %s after the previous step\nstderr:\n%s", s, logs)
			continue
		}
		at += i
		line, _, _ := strings.Cut(logs[at:], "\n")
		if s != steps[0] && !strings.Contains(line, "took=") {
			t.Errorf("shutdown step logged without its duration: %q", line)
		}
		if strings.Contains(line, "level=ERROR") || (strings.Contains(line, "error=") && !strings.Contains(line, "error=<nil>")) {
			t.Errorf("shutdown step failed: %q", line)
		}
	}

	// Restarted on the same store: the run was recorded, not lost.
	again := startServe(t, dir, []string{"AXE_ADDR=127.0.0.1:0"})
	rows := tableRows(t, axeOK(t, []string{"AXE_SERVER=" + again.url}, "task", "runs", "slow"), "TICKET")
	if len(rows) != 1 || rows[0][5] != model.ResultSuccess {
		t.Errorf("runs after a graceful restart = %v, want one success", rows)
	}
}

// TestServeErrors checks that `axe serve` refuses bad flags and stores with a message that
// names the problem, and exits non-zero without listening.
func TestServeErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"serve", "--addr", "127.0.0.1:0", "--db", "postgres:x"}, nil, "scheme"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(dir, "a.db"), "--log-level", "loud"}, nil, "log-level"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(dir, "b.db")}, []string{"AXE_TIMEZONE=Mars/Base"}, "timezone"},
		{[]string{"serve", "--tick", "soon"}, nil, "tick"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(dir, "c.db"), "--writer-lanes", "0"}, nil, "writer-lanes: must be 1 to 64"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(dir, "d.db")}, []string{"AXE_WRITER_LANES=65"}, "writer-lanes: must be 1 to 64"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(dir, "e.db"), "--send-ahead", "-1"}, nil, "send-ahead: must be 0 (no bound) or more"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(dir, "f.db")}, []string{"AXE_SEND_AHEAD=-5"}, "send-ahead: must be 0 (no bound) or more"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(dir, "g.db"), "--max-conns-per-host", "0"}, nil, "max-conns-per-host: must be 1 or more"},
		{[]string{"serve", "extra-arg"}, nil, "extra-arg"},
	} {
		r := axe(t, c.env, c.args...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stdout, "listening") {
			t.Errorf("axe %v (env %v): exit %d, stdout %q, stderr %q; want a failure naming %q", c.args, c.env, r.code, r.stdout, r.stderr, c.want)
		}
	}
}

// TestCLIToken runs a daemon whose token comes from AXE_TOKEN and checks the client's
// --token flag and AXE_TOKEN variable.
func TestCLIToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, []string{"AXE_TOKEN=t0ps3cret-0123456789", "AXE_DB=sqlite:" + filepath.Join(dir, "tok.db")}, "--addr", "127.0.0.1:0")
	if !strings.Contains(srv.banner, "tok.db") {
		t.Errorf("banner %q: AXE_DB was not read", srv.banner)
	}
	env := []string{"AXE_SERVER=" + srv.url}
	r := axe(t, env, "task", "ls")
	if r.code == 0 || !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "token") {
		t.Errorf("ls without a token: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := axe(t, env, "task", "ls", "--token", "wrong"); r.code == 0 || !strings.Contains(r.stderr, "401") {
		t.Errorf("ls with a wrong token: exit %d, stderr %q", r.code, r.stderr)
	}
	axeOK(t, env, "task", "ls", "--token", "t0ps3cret-0123456789")
	axeOK(t, append(env, "AXE_TOKEN=t0ps3cret-0123456789"), "executors")
}
