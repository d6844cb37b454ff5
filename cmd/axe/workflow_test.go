package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wire"
)

// etlEndpoint plays the ETL endpoint of docs/workflows.md's walk-through: /sync answers the
// path of the day's file (the run's day param, or the Berlin day of its logical time),
// /clean answers the cleaned file of the path sync gave it (and 500 for its first
// failClean calls), /report answers what it was given. It records every request by step.
type etlEndpoint struct {
	srv       *httptest.Server
	mu        sync.Mutex
	failClean int
	calls     map[string][]stepCall // step → requests, in arrival order
}

type stepCall struct {
	Ticket      string
	RunID       string                     `json:"run_id"`
	ScheduledAt int64                      `json:"scheduled_at"`
	Params      map[string]any             `json:"params"`
	Inputs      map[string]json.RawMessage `json:"inputs"`
}

func newETL(t *testing.T, failClean int) *etlEndpoint {
	t.Helper()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	e := &etlEndpoint{failClean: failClean, calls: map[string][]stepCall{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Ticket string          `json:"ticket"`
			Params json.RawMessage `json:"params"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		var c stepCall
		_ = json.Unmarshal(body.Params, &c)
		c.Ticket = body.Ticket
		step := strings.TrimPrefix(r.URL.Path, "/")
		e.mu.Lock()
		e.calls[step] = append(e.calls[step], c)
		fail := step == "clean" && e.failClean > 0
		if fail {
			e.failClean--
		}
		e.mu.Unlock()
		if fail {
			http.Error(w, "disk full", http.StatusInternalServerError)
			return
		}
		input := func(from string) string {
			var in struct {
				Path string `json:"path"`
			}
			_ = json.Unmarshal(c.Inputs[from], &in)
			return in.Path
		}
		w.Header().Set("Content-Type", "application/json")
		switch step {
		case "sync":
			day, _ := c.Params["day"].(string)
			if day == "" {
				day = time.UnixMilli(c.ScheduledAt).In(berlin).Format("2006-01-02")
			}
			fmt.Fprintf(w, `{"path":"/data/%s/orders.json"}`, day)
		case "clean":
			fmt.Fprintf(w, `{"path":%q}`, strings.Replace(input("sync"), "/data/", "/data/clean/", 1))
		case "report":
			fmt.Fprintf(w, `{"report":%q}`, "rows of "+input("clean"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *etlEndpoint) callsOf(step string) []stepCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]stepCall(nil), e.calls[step]...)
}

// duplicates returns the tickets that reached the endpoint more than once.
func (e *etlEndpoint) duplicates() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := map[string]int{}
	var dup []string
	for _, cs := range e.calls {
		for _, c := range cs {
			if seen[c.Ticket]++; seen[c.Ticket] == 2 {
				dup = append(dup, c.Ticket)
			}
		}
	}
	return dup
}

// docBlocks returns the fenced blocks of the markdown section that starts with heading, by
// info string ("json", "sh", "" for a bare fence), in order.
func docBlocks(t *testing.T, path, heading string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s has no section %q", path, heading)
	}
	sec := doc[i+len(heading)+2:]
	if j := strings.Index(sec, "\n## "); j >= 0 {
		sec = sec[:j]
	}
	blocks := map[string][]string{}
	lines := strings.Split(sec, "\n")
	for k := 0; k < len(lines); k++ {
		if !strings.HasPrefix(lines[k], "```") {
			continue
		}
		info := strings.TrimPrefix(lines[k], "```")
		var b []string
		for k++; k < len(lines) && lines[k] != "```"; k++ {
			b = append(b, lines[k])
		}
		blocks[info] = append(blocks[info], strings.Join(b, "\n"))
	}
	return blocks
}

// shellWords splits a command line as sh would for the quoting the docs use: words apart
// by blanks, '…' literal, "…" literal but for $VAR, $VAR expanded from vars outside
// single quotes. A # starting a word begins a comment.
func shellWords(t *testing.T, line string, vars map[string]string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	expand := func(s string, i int) (string, int) { // s[i] == '$'
		j := i + 1
		for j < len(s) && (s[j] == '_' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
			j++
		}
		v, ok := vars[s[i+1:j]]
		if !ok {
			t.Fatalf("%q: $%s is not set", line, s[i+1:j])
		}
		return v, j
	}
	for i := 0; i < len(line); {
		ch := line[i]
		switch {
		case ch == ' ' || ch == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
			i++
		case ch == '#' && !inWord:
			i = len(line)
		case ch == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				t.Fatalf("%q: unterminated '", line)
			}
			cur.WriteString(line[i+1 : i+1+j])
			inWord, i = true, i+j+2
		case ch == '"':
			j := strings.IndexByte(line[i+1:], '"')
			if j < 0 {
				t.Fatalf("%q: unterminated \"", line)
			}
			s := line[i+1 : i+1+j]
			for k := 0; k < len(s); {
				if s[k] == '$' {
					v, n := expand(s, k)
					cur.WriteString(v)
					k = n
					continue
				}
				cur.WriteByte(s[k])
				k++
			}
			inWord, i = true, i+j+2
		case ch == '$':
			v, n := expand(line, i)
			cur.WriteString(v)
			inWord, i = true, n
		default:
			cur.WriteByte(ch)
			inWord, i = true, i+1
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// axeIn runs the CLI in dir and requires exit status 0.
func axeIn(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout+2*waitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, axeBin, args...)
	cmd.Dir = dir
	cmd.Env = cleanEnv(env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("axe %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// showRows returns the step rows of `axe workflow show`'s table: name → its cells.
func showRows(t *testing.T, out string) map[string][]string {
	t.Helper()
	i := strings.Index(out, "STEP ")
	if i < 0 {
		t.Fatalf("no steps table in:\n%s", out)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(strings.TrimRight(out[i:], "\n"), "\n")[1:] {
		if strings.HasPrefix(l, "rerun from") {
			continue
		}
		f := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1)
		rows[f[0]] = f
	}
	return rows
}

// TestWorkflowWalkThrough runs the commands of docs/workflows.md's walk-through, as they are
// written there, against `axe serve` on SQLite: the definition is the section's orders.json
// with this test's endpoint in the place of http://etl:8080, and the daemon listens on a
// free port the CLI is given in AXE_SERVER. sync's file path reaches clean and clean's
// reaches report; clean fails, report does not run, and the rerun from the failed steps
// runs clean and report without calling sync again; the week's backfill runs seven runs of
// the cron workflow, one per 02:00 Berlin, each with the path of its own day. No attempt
// reaches the endpoint twice.
func TestWorkflowWalkThrough(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t, filepath.Join("..", "..", "docs", "workflows.md"), "## Walk-through: a pipeline")
	if len(blocks["json"]) != 1 || len(blocks["sh"]) != 1 || len(blocks[""]) != 1 {
		t.Fatalf("the walk-through has %d json, %d sh and %d plain blocks, want one each", len(blocks["json"]), len(blocks["sh"]), len(blocks[""]))
	}
	dir := t.TempDir()
	etl := newETL(t, 1)
	def := strings.ReplaceAll(blocks["json"][0], "http://etl:8080", etl.srv.URL)
	if def == blocks["json"][0] {
		t.Fatal("orders.json names no http://etl:8080 endpoint")
	}
	if err := os.WriteFile(filepath.Join(dir, "orders.json"), []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}

	var env []string
	var c *client.Client
	vars := map[string]string{}
	var runID, firstShow string
	shows := 0
	assign := regexp.MustCompile(`^([A-Z_]+)=\$\((.*)\)(\s+#.*)?$`)
	for _, line := range strings.Split(blocks["sh"][0], "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		target := ""
		cmdline := line
		if m := assign.FindStringSubmatch(line); m != nil {
			target, cmdline = m[1], m[2]
		}
		words := shellWords(t, cmdline, vars)
		if len(words) < 2 || words[0] != "axe" {
			t.Fatalf("walk-through line %q is not an axe command", line)
		}
		if words[1] == "serve" {
			if words[len(words)-1] != "&" {
				t.Fatalf("%q: want the daemon in the background", line)
			}
			srv := startServe(t, dir, nil, append(words[2:len(words)-1], "--addr", "127.0.0.1:0")...)
			env = []string{"AXE_SERVER=" + srv.url}
			var err error
			if c, err = client.New(srv.url, "", "test"); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if c == nil {
			t.Fatalf("%q comes before axe serve", line)
		}
		out := axeIn(t, dir, env, words[1:]...)
		t.Logf("$ %s\n%s", line, out)
		if target != "" {
			vars[target] = strings.TrimSpace(out)
		}
		ctx := context.Background()
		switch verb := words[2]; verb {
		case "create":
			if !strings.HasPrefix(out, "created workflow orders (version 1, 3 steps, next fire ") {
				t.Errorf("create printed %q", out)
			}
		case "run":
			runID = strings.TrimSpace(out)
			if !regexp.MustCompile(`^m[0-9a-f]{16}$`).MatchString(runID) {
				t.Fatalf("axe workflow run printed %q, want the run's id alone", out)
			}
			waitRun(t, c, runID, model.WorkflowFailed)
		case "show":
			rows := showRows(t, out)
			shows++
			if shows == 1 {
				firstShow = out
				if r := rows["sync"]; len(r) < 7 || r[1] != "succeeded" || r[5] != `{"path":"/data/2026-12-02/orders.json"}` {
					t.Errorf("sync in the first show: %q", r)
				}
				if r := rows["clean"]; len(r) < 7 || r[1] != "failed" || r[3] != "1" || !strings.Contains(r[6], "HTTP 500") {
					t.Errorf("clean in the first show: %q", r)
				}
				if r := rows["report"]; len(r) < 7 || r[1] != "skipped" || r[3] != "0" {
					t.Errorf("report in the first show: %q", r)
				}
				if !strings.Contains(out, "axe workflow rerun "+runID+" --from failed") || !strings.Contains(out, `params: {"day":"2026-12-02"}`) {
					t.Errorf("the first show lacks the params or the rerun hint:\n%s", out)
				}
				continue
			}
			for _, s := range []string{"sync", "clean", "report"} {
				if r := rows[s]; len(r) < 7 || r[1] != "succeeded" || r[6] != "-" {
					t.Errorf("%s in the show after the rerun: %q", s, r)
				}
			}
			if r := rows["clean"]; len(r) < 7 || r[3] != "2" || r[5] != `{"path":"/data/clean/2026-12-02/orders.json"}` {
				t.Errorf("clean after the rerun: %q", r)
			}
			if r := rows["sync"]; len(r) < 7 || r[3] != "1" {
				t.Errorf("sync after the rerun: %q", r)
			}
		case "rerun":
			waitRun(t, c, runID, model.WorkflowSucceeded)
		case "backfill":
			if !strings.HasPrefix(out, "backfill of orders: 7 fire times") || !strings.Contains(out, "backfill of orders done: 7 fire times, 7 started, 0 skipped") {
				t.Errorf("backfill printed %q", out)
			}
			runs, err := c.WorkflowRuns(ctx, "orders", 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			var backfilled []model.WorkflowRun
			for _, r := range runs {
				if r.Trigger == "backfill" {
					backfilled = append(backfilled, r)
				}
			}
			if len(backfilled) != 7 {
				t.Fatalf("%d backfill runs, want 7: %+v", len(backfilled), runs)
			}
			for i, r := range backfilled { // newest logical time first
				want := time.Date(2026, 12, 1-i, 1, 0, 0, 0, time.UTC) // 02:00 in Berlin (CET)
				if r.ScheduledAt != want.UnixMilli() {
					t.Errorf("backfill run %d for %s, want %s", i, time.UnixMilli(r.ScheduledAt).UTC(), want)
				}
				v := waitRun(t, c, r.ID, model.WorkflowSucceeded)
				day := want.Format("2006-01-02")
				for _, s := range v.Steps {
					if s.Name == "report" && string(s.Output) != `{"report":"rows of /data/clean/`+day+`/orders.json"}` {
						t.Errorf("report of %s: %s", day, s.Output)
					}
				}
			}
		case "runs":
			rows := tableRows(t, out, "ID")
			if len(rows) < 8 {
				t.Errorf("runs listed %d runs, want the manual one and the week's seven:\n%s", len(rows), out)
			}
		default:
			t.Fatalf("the walk-through runs %q, which this test does not check", line)
		}
	}
	if runID == "" || shows != 2 {
		t.Fatalf("the walk-through ran no run, or not two shows (%d)", shows)
	}

	// What the endpoint saw of the manual run: sync once, clean twice (the failure and the
	// rerun), each with sync's path, and report once with clean's.
	var syncs, cleans, reports []stepCall
	for _, s := range []struct {
		step string
		into *[]stepCall
	}{{"sync", &syncs}, {"clean", &cleans}, {"report", &reports}} {
		for _, c := range etl.callsOf(s.step) {
			if c.RunID == runID {
				*s.into = append(*s.into, c)
			}
		}
	}
	if len(syncs) != 1 || len(cleans) != 2 || len(reports) != 1 {
		t.Fatalf("the manual run called sync %d, clean %d, report %d times; want 1, 2, 1", len(syncs), len(cleans), len(reports))
	}
	for _, c := range cleans {
		if string(c.Inputs["sync"]) != `{"path":"/data/2026-12-02/orders.json"}` {
			t.Errorf("clean's input: %s", c.Inputs["sync"])
		}
	}
	if string(reports[0].Inputs["clean"]) != `{"path":"/data/clean/2026-12-02/orders.json"}` {
		t.Errorf("report's input: %s", reports[0].Inputs["clean"])
	}
	if dup := etl.duplicates(); len(dup) > 0 {
		t.Errorf("attempts that reached the endpoint twice: %v", dup)
	}
	// The section's sample of the first show has the rows this run printed.
	got := showRows(t, firstShow)
	for name, r := range showRows(t, blocks[""][0]) {
		if g := got[name]; len(g) < 2 || g[1] != r[1] {
			t.Errorf("the docs show %s %q, the run printed %q", name, r, g)
		}
	}
}

// waitRun waits until the run's state is want and returns it.
func waitRun(t *testing.T, c *client.Client, id, want string) *client.WorkflowRunView {
	t.Helper()
	var v *client.WorkflowRunView
	testwait.For(t, waitTimeout, "workflow run "+id+" to be "+want, func() bool {
		var err error
		v, err = c.GetWorkflowRun(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return v.State == want
	})
	return v
}

// TestCLIWorkflow drives the other workflow commands against `axe serve`: list, get,
// update (by the file's name and by NAME), run with params, show --json, succeed with an
// output its downstream receives, rerun --step, cancel, pause and resume, backfill-status,
// delete; and the refusals: each names its flag or field, exits non-zero and changes
// nothing.
func TestCLIWorkflow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--timezone", "UTC")
	env := []string{"AXE_SERVER=" + srv.url}
	etl := newETL(t, 1)
	c, err := client.New(srv.url, "", "test")
	if err != nil {
		t.Fatal(err)
	}
	step := func(name string, needs ...string) map[string]any {
		s := map[string]any{"name": name, "callback": map[string]any{"type": "http", "url": etl.srv.URL + "/" + name}}
		if len(needs) > 0 {
			s["needs"] = needs
		}
		return s
	}
	defFile := writeJSON(t, dir, "wf.json", map[string]any{"name": "wf", "trigger": "manual",
		"steps": []map[string]any{step("sync"), step("clean", "sync"), step("report", "clean")}})
	refuse := func(what string, want []string, args ...string) {
		t.Helper()
		r := axe(t, env, args...)
		if r.code == 0 {
			t.Errorf("%s: exit 0, stdout %q", what, r.stdout)
			return
		}
		for _, w := range want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr %q does not hold %q", what, r.stderr, w)
			}
		}
	}

	refuse("create without -f", []string{"-f: a workflow JSON file is required"}, "workflow", "create")
	bad := writeJSON(t, dir, "bad.json", map[string]any{"name": "bad", "steps": []map[string]any{step("a", "zz")}})
	refuse("create with an unknown upstream", []string{"zz", "400"}, "workflow", "create", "-f", bad)
	if out := axeOK(t, env, "workflow", "create", "-f", defFile); out != "created workflow wf (version 1, 3 steps, next fire -)\n" {
		t.Errorf("create printed %q", out)
	}
	refuse("a second create", []string{"409"}, "workflow", "create", "-f", defFile)
	rows := tableRows(t, axeOK(t, env, "workflow", "list"), "NAME")
	if len(rows) != 1 || rows[0][0] != "wf" || rows[0][2] != "manual" || rows[0][3] != "1" || rows[0][4] != "3" || rows[0][5] != "active" {
		t.Errorf("list rows %q", rows)
	}
	if out := axeOK(t, env, "workflow", "update", "-f", defFile); out != "updated workflow wf (version 2, 3 steps, next fire -)\n" {
		t.Errorf("update by the file's name printed %q", out)
	}
	cronFile := writeJSON(t, dir, "wf-cron.json", map[string]any{"trigger": "cron", "cron": "0 2 * * *", "timezone": "UTC",
		"steps": []map[string]any{step("sync"), step("clean", "sync"), step("report", "clean")}})
	if out := axeOK(t, env, "workflow", "update", "wf", "-f", cronFile); !strings.HasPrefix(out, "updated workflow wf (version 3, 3 steps, next fire 20") {
		t.Errorf("update by NAME printed %q", out)
	}
	refuse("update of a file without a name and no NAME", []string{"NAME"}, "workflow", "update", "-f", cronFile)
	var got client.WorkflowView
	if err := json.Unmarshal([]byte(axeOK(t, env, "workflow", "get", "wf")), &got); err != nil || got.Version != 3 || got.Cron != "0 2 * * *" {
		t.Errorf("get: %+v, %v", got, err)
	}
	refuse("get of an unknown workflow", []string{"404"}, "workflow", "get", "nope")

	// A run whose clean fails; clean is marked succeeded with an output report receives.
	refuse("run with params that are not JSON", []string{"--params: must be valid JSON"}, "workflow", "run", "wf", "--params", "{day")
	id := strings.TrimSpace(axeOK(t, env, "workflow", "run", "wf", "--params", `{"day":"2026-12-03"}`))
	waitRun(t, c, id, model.WorkflowFailed)
	var view client.WorkflowRunView
	if err := json.Unmarshal([]byte(axeOK(t, env, "workflow", "show", id, "--json")), &view); err != nil || view.ID != id || len(view.Steps) != 3 || view.Steps[1].State != model.StepFailed {
		t.Fatalf("show --json: %+v, %v", view, err)
	}
	refuse("succeed with output that is not JSON", []string{"--output: must be valid JSON"}, "workflow", "succeed", id, "clean", "--output", "{path")
	refuse("succeed of an unknown step", []string{`no step "zz"`, "400"}, "workflow", "succeed", id, "zz")
	refuse("rerun with both", []string{"--from and --step"}, "workflow", "rerun", id, "--from", "failed", "--step", "clean")
	refuse("rerun from something else", []string{`--from: must be "failed"`}, "workflow", "rerun", id, "--from", "everything")
	refuse("rerun of an unknown step", []string{"--step: run " + id + ` has no step "zz"`, "400"}, "workflow", "rerun", id, "--step", "zz")
	refuse("succeed with an output file that is missing", []string{"--output: ", "missing.json"}, "workflow", "succeed", id, "clean", "--output", "@"+filepath.Join(dir, "missing.json"))
	outFile := filepath.Join(dir, "out.json")
	if err := os.WriteFile(outFile, []byte(`{"path":"/data/by-hand.json"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := axeOK(t, env, "workflow", "succeed", id, "clean", "--output", "@"+outFile, "--note", "cleaned by hand")
	if out != id+": step clean marked succeeded; the run is running\n" {
		t.Errorf("succeed printed %q", out)
	}
	waitRun(t, c, id, model.WorkflowSucceeded)
	if r := etl.callsOf("report"); len(r) != 1 || string(r[0].Inputs["clean"]) != `{"path":"/data/by-hand.json"}` {
		t.Errorf("report's calls %+v: want one with the output given by hand", r)
	}
	refuse("rerun from the failed steps of a run without one", []string{"no failed step", "409"}, "workflow", "rerun", id)
	if out := axeOK(t, env, "workflow", "rerun", id, "--step", "report"); out != id+": running again\n" {
		t.Errorf("rerun --step printed %q", out)
	}
	waitRun(t, c, id, model.WorkflowSucceeded)
	if n := len(etl.callsOf("report")); n != 2 {
		t.Errorf("report called %d times, want 2 after its rerun", n)
	}
	if n := len(etl.callsOf("sync")); n != 1 {
		t.Errorf("sync called %d times, want 1", n)
	}
	rows = tableRows(t, axeOK(t, env, "workflow", "runs", "wf"), "ID")
	if len(rows) != 1 || rows[0][0] != id || rows[0][2] != "manual" || rows[0][4] != "succeeded" {
		t.Errorf("runs rows %q", rows)
	}
	refuse("runs with a bad limit", []string{"--limit: must be 1-1000"}, "workflow", "runs", "wf", "--limit", "0")

	// Cancel a run whose step hangs.
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); hang.Close() })
	slowFile := writeJSON(t, dir, "slow.json", map[string]any{"name": "slow", "steps": []map[string]any{
		{"name": "wait", "timeout_sec": 120, "callback": map[string]any{"type": "http", "url": hang.URL}}}})
	axeOK(t, env, "workflow", "create", "-f", slowFile)
	sid := strings.TrimSpace(axeOK(t, env, "workflow", "run", "slow"))
	testwait.For(t, waitTimeout, "the slow step sent", func() bool {
		v, err := c.GetWorkflowRun(context.Background(), sid)
		return err == nil && len(v.Steps) == 1 && len(v.Steps[0].Attempts) > 0 && v.Steps[0].Attempts[len(v.Steps[0].Attempts)-1].Ticket != ""
	})
	refuse("delete with a run in flight", []string{"409"}, "workflow", "delete", "slow")
	if out := axeOK(t, env, "workflow", "cancel", sid, "--reason", "wrong day"); !strings.HasPrefix(out, sid+": cancelled — ") || !strings.Contains(out, "wrong day") {
		t.Errorf("cancel printed %q", out)
	}
	refuse("a second cancel", []string{"409"}, "workflow", "cancel", sid)
	if out := axeOK(t, env, "workflow", "show", sid); !strings.Contains(out, ": cancelled after ") {
		t.Errorf("show of the cancelled run:\n%s", out)
	}
	// A keyed start sent again prints the run the key started and starts no other.
	k1 := strings.TrimSpace(axeOK(t, env, "workflow", "run", "slow", "--key", "nightly-2026-12-06"))
	if k2 := strings.TrimSpace(axeOK(t, env, "workflow", "run", "slow", "--key", "nightly-2026-12-06")); k2 != k1 {
		t.Errorf("a keyed start sent again printed %s, the first %s", k2, k1)
	}
	refuse("run with a key too long", []string{"--key: must be at most 128 bytes"}, "workflow", "run", "slow", "--key", strings.Repeat("x", 129))
	if runs, err := c.WorkflowRuns(context.Background(), "slow", 0, 100); err != nil || len(runs) != 2 {
		t.Errorf("slow has %d runs (%v), want the cancelled one and the keyed one", len(runs), err)
	}
	axeOK(t, env, "workflow", "cancel", k1)

	// Pause, resume, backfill refusals and progress, delete.
	if out := axeOK(t, env, "workflow", "pause", "wf", "--note", "maintenance"); out != "wf: paused\n" {
		t.Errorf("pause printed %q", out)
	}
	if rows := tableRows(t, axeOK(t, env, "workflow", "list"), "NAME"); rows[1][0] != "wf" || rows[1][5] != "paused" {
		t.Errorf("list after the pause: %q", rows)
	}
	if out := axeOK(t, env, "workflow", "resume", "wf"); out != "wf: active\n" {
		t.Errorf("resume printed %q", out)
	}
	refuse("backfill without --from", []string{"--from: is required"}, "workflow", "backfill", "wf", "--to", "2026-11-02T00:00:00Z")
	refuse("backfill with a bad --to", []string{"--to: must be an RFC 3339 time"}, "workflow", "backfill", "wf", "--from", "2026-11-01T00:00:00Z", "--to", "tomorrow")
	refuse("backfill too parallel", []string{"--parallel: must be 1-64", "400"}, "workflow", "backfill", "wf", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-03T00:00:00Z", "--parallel", "65")
	refuse("backfill of a range that ends before it starts", []string{"--to: must be after from"}, "workflow", "backfill", "wf", "--from", "2026-11-03T00:00:00Z", "--to", "2026-11-01T00:00:00Z")
	refuse("backfill of a manual workflow", []string{"trigger", "cron"}, "workflow", "backfill", "slow", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-03T00:00:00Z")
	refuse("progress of no backfill", []string{"404"}, "workflow", "backfill-status", "wf")
	if runs, err := c.WorkflowRuns(context.Background(), "wf", 0, 100); err != nil || len(runs) != 1 {
		t.Errorf("the refused backfills started runs: %d, %v", len(runs), err)
	}
	out = axeOK(t, env, "workflow", "backfill", "wf", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-03T00:00:00Z")
	if out != "backfill of wf: 2 fire times from 2026-11-01T00:00:00Z to 2026-11-03T00:00:00Z, 1 at a time\nprogress: axe workflow backfill-status wf\n" {
		t.Errorf("backfill printed %q", out)
	}
	testwait.For(t, waitTimeout, "the backfill done", func() bool {
		return strings.Contains(axeOK(t, env, "workflow", "backfill-status", "wf"), "backfill of wf done: 2 fire times, 2 started, 0 skipped")
	})
	if out := axeOK(t, env, "workflow", "delete", "wf"); out != "deleted workflow wf\n" {
		t.Errorf("delete printed %q", out)
	}
	refuse("show of nothing", []string{"404"}, "workflow", "show", "m0000000000000000")
	if rows := tableRows(t, axeOK(t, env, "workflow", "list"), "NAME"); len(rows) != 1 || rows[0][0] != "slow" {
		t.Errorf("list after delete: %q", rows)
	}
	var ae *client.APIError
	if _, err := c.GetWorkflow(context.Background(), "wf"); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("wf after delete: %v", err)
	}
}

// TestPrintWorkflowRun: the show table of a run in flight: a fan-out's items with their
// failed and running counts, a running step's time so far, an output cut to one line, and
// an error's control characters escaped so that a step's answer cannot rewrite the
// terminal.
func TestPrintWorkflowRun(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	v := &client.WorkflowRunView{
		WorkflowRun: model.WorkflowRun{ID: "m1", Workflow: "w", Version: 3, Trigger: "cron", ScheduledAt: 900_000, State: "running", CreatedAt: 900_000},
		Steps: []wire.WorkflowStepView{
			{Name: "extract", State: "succeeded", StartedAt: 900_000, EndedAt: 901_500, Output: json.RawMessage(`{"items": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]}`),
				Attempts: []model.StepRun{{Ticket: "t1", State: "succeeded"}}},
			{Name: "per_day", State: "running", Items: 5, Succeeded: 2, Failed: 1, Running: 2, StartedAt: 990_000,
				Attempts: []model.StepRun{{Index: -1, State: "pending"}, {Ticket: "t2"}, {Ticket: "t3"}, {Ticket: "t4"}, {Ticket: "t5"}, {Ticket: "t6"}}},
			{Name: "report", State: "pending", Error: "bad\x1b[2Jthing"},
		},
	}
	var b strings.Builder
	if err := printWorkflowRun(&b, v, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.HasPrefix(out, "run m1 of w (version 3), cron run for ") || !strings.Contains(out, ": running\n") {
		t.Errorf("header:\n%s", out)
	}
	rows := showRows(t, out)
	want := map[string][]string{
		"extract": {"extract", "succeeded", "-", "1", "1.5s", `{"items":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,1…`, "-"},
		"per_day": {"per_day", "running", "2/5 ok, 1 failed, 2 running", "5", "10s+", "-", "-"},
		"report":  {"report", "pending", "-", "0", "-", "-", `bad\x1b[2Jthing`},
	}
	for name, w := range want {
		if g := rows[name]; strings.Join(g, "|") != strings.Join(w, "|") {
			t.Errorf("%s: %q, want %q", name, g, w)
		}
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, "rerun from") {
		t.Errorf("raw escape or a rerun hint for a running run:\n%s", out)
	}
}
