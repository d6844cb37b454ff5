package admin_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	_ "modernc.org/sqlite"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/engine"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// The console's browser tests drive Debian's headless Chromium with chromedp against a real
// axe serve (in-process, real HTTP on loopback) and a real callback target. Without a
// chromium binary they skip, unless AXE_REQUIRE_BROWSER=1 (scripts/test.sh sets it after
// installing the package), when they fail.

// consoleBase is the --base-path the browser tests run under, so the prefix is exercised.
const consoleBase = "/axe"

// browser starts a fresh headless Chromium and returns a tab's context.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("AXE_CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		if os.Getenv("AXE_REQUIRE_BROWSER") == "1" {
			t.Fatal("no chromium binary found and AXE_REQUIRE_BROWSER=1")
		}
		t.Skip("no chromium binary (apt-get install chromium, or set AXE_CHROMIUM)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	// This chromedp predates some events of the system Chromium (the dialog's top layer) and
	// reports them as unhandled; they change nothing here.
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "unhandled node event") {
			t.Logf("chromedp: %s", msg)
		}
	}))
	t.Cleanup(func() {
		// Cancel closes the browser and waits for it, so its profile folder can be removed.
		_ = chromedp.Cancel(ctx)
		cancel()
		acancel()
	})
	// The page's exceptions and console messages go to the test log.
	chromedp.ListenTarget(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *cdpruntime.EventExceptionThrown:
			t.Logf("browser exception: %s", ev.ExceptionDetails.Error())
		case *cdpruntime.EventConsoleAPICalled:
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			t.Logf("browser console.%s: %s", ev.Type, strings.Join(parts, " "))
		}
	})
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("cannot start chromium: %v", err)
	}
	return ctx
}

// artifacts is the folder screenshots go to: $AXE_ARTIFACTS, else artifacts/console at the
// repository root (ignored by git).
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("AXE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "artifacts")
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// run runs chromedp actions with a bound, failing the test with what was being done.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Run(c, actions...); err != nil {
		var body string
		// Bounded too: the page may have no main at all.
		tc, tcancel := context.WithTimeout(ctx, 5*time.Second)
		defer tcancel()
		_ = chromedp.Run(tc, chromedp.Evaluate(`document.body ? document.body.innerText : ""`, &body))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, body)
	}
}

// waitJS waits until the JavaScript expression is true.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	var ok bool
	run(t, ctx, "wait for "+what, chromedp.Poll(expr, &ok, chromedp.WithPollingInterval(50*time.Millisecond)))
}

// clickUntil clicks sel until the JavaScript expression is true, up to five times, three
// seconds apart. A click lands where the element was when chromedp measured it; on a loaded
// machine the page may still be laying out the sections that load after it (a run list, a
// timeline), and the click then meets another element. What it waits for (a dialog open)
// says whether the click reached its button.
func clickUntil(t *testing.T, ctx context.Context, what, sel, expr string) {
	t.Helper()
	for try := 1; ; try++ {
		run(t, ctx, what+": click", chromedp.Click(sel, chromedp.ByQuery))
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		var ok bool
		err := chromedp.Run(c, chromedp.Poll(expr, &ok, chromedp.WithPollingInterval(50*time.Millisecond)))
		cancel()
		if err == nil {
			return
		}
		if try == 5 {
			t.Fatalf("%s: %s still false after %d clicks on %s: %v", what, expr, try, sel, err)
		}
		t.Logf("%s: click %d on %s changed nothing in 3 s; again", what, try, sel)
	}
}

// shot saves a PNG of the viewport under the artifacts folder.
func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	var png []byte
	run(t, ctx, "screenshot "+name, chromedp.CaptureScreenshot(&png))
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", filepath.Join(dir, name))
}

// setField sets a form control's value (empty included) and tells the page it changed.
func setField(sel, value string) chromedp.Action {
	return chromedp.Evaluate(fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q;
		e.dispatchEvent(new Event("input", {bubbles: true})); e.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`,
		sel, value), nil)
}

// openEditForm opens a task's edit form and waits until its preview has rendered (the
// fire table of a cron task, a line for any other). The preview arrives 200 ms after the
// form and pushes the fields below it down, so a click aimed before that misses.
func openEditForm(t *testing.T, ctx context.Context, target string) {
	t.Helper()
	run(t, ctx, "open the edit form", chromedp.Navigate(target), chromedp.WaitVisible("#task-form", chromedp.ByQuery))
	waitJS(t, ctx, "the form's preview", `(document.querySelector("#cron-preview") || {}).childElementCount > 0`)
}

func rowsText(sel string) string {
	return fmt.Sprintf(`[...document.querySelectorAll(%q)].map(e => e.textContent).join("\n")`, sel)
}

// TestConsoleBrowser walks the console as an operator would: create a cron task from the
// form with its preview, watch it fire, pause it with a note, run it now with params, read
// both in the timeline, kill a hung run, watch a stopped executor turn lost, and filter
// the task list.
func TestConsoleBrowser(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	dir := artifacts(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), func(c *axedaemon.Config) {
		c.BasePath = consoleBase
		c.Engine = engine.Config{HeartbeatInterval: 300 * time.Millisecond, LostAfter: 1500 * time.Millisecond}
	})
	h := daemontest.NewHook(t)
	api := consoleBase + "/api/v1"
	url := d.Base + consoleBase + "/"

	// The console answers with its CSP, and the API answers under the base path only.
	resp, err := d.HTTP.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("console CSP = %q", csp)
	}

	// 1. Create a cron task from the form; the preview shows 10 fire times as we type.
	run(t, ctx, "open the form", chromedp.Navigate(url+"#/new"), chromedp.WaitVisible("#task-form", chromedp.ByQuery))
	run(t, ctx, "fill the name", chromedp.SetValue("#name", "nightly-report", chromedp.ByQuery))
	run(t, ctx, "type the cron", chromedp.SetValue("#cron", "*/2 * * * * *", chromedp.ByQuery))
	run(t, ctx, "type the zone", chromedp.SetValue("#timezone", "Europe/Paris", chromedp.ByQuery))
	run(t, ctx, "fill the URL", chromedp.SetValue("#cb-url", h.URL("/ok/report"), chromedp.ByQuery))
	run(t, ctx, "fill the params", chromedp.SetValue("#params", `{"report": "daily"}`, chromedp.ByQuery))
	waitJS(t, ctx, "ten previewed fires in Paris",
		`document.querySelectorAll("#cron-preview #fires-table tbody tr").length === 10 &&
		 document.querySelector("#cron-preview").textContent.includes("Europe/Paris")`)
	shot(t, ctx, dir, "form-preview.png")
	// A bad expression is refused as we type, naming the field.
	run(t, ctx, "type a bad cron", chromedp.SendKeys("#cron", " nonsense", chromedp.ByQuery))
	waitJS(t, ctx, "the cron error", `document.querySelector("#cron-error").textContent.startsWith("expr:")`)
	run(t, ctx, "fix the cron and create",
		chromedp.SetValue("#cron", "*/2 * * * * *", chromedp.ByQuery))
	waitJS(t, ctx, "the error cleared", `document.querySelector("#cron-error").textContent === ""`)
	run(t, ctx, "create", chromedp.Click("#save", chromedp.ByQuery))
	waitJS(t, ctx, "the task page", `location.hash === "#/tasks/nightly-report" && !!document.querySelector("#task-def")`)

	// 2. See it fire: a successful run appears in the runs table without a reload.
	h.WaitCalls(t, "nightly-report", 1, daemontest.WaitTimeout)
	waitJS(t, ctx, "a successful run", `[...document.querySelectorAll("#runs-table tbody tr")].some(r => r.textContent.includes("success"))`)
	shot(t, ctx, dir, "task-fired.png")

	// 3. Pause it with a note.
	run(t, ctx, "pause with a note",
		chromedp.SetValue("#pause-note", "maintenance window", chromedp.ByQuery),
		chromedp.Click("#act-pause", chromedp.ByQuery))
	waitJS(t, ctx, "the note on the page", `(document.querySelector("#task-note") || {}).textContent === "Note: maintenance window"`)
	if v := getAt(t, d, api, "nightly-report"); v.Runtime.State != "PAUSED" || v.Runtime.Note != "maintenance window" {
		t.Errorf("after pause: state %s note %q", v.Runtime.State, v.Runtime.Note)
	}

	// 4. Run it now with params.
	before := len(h.CallsOf("nightly-report"))
	run(t, ctx, "run now with params",
		chromedp.WaitVisible("#run-params", chromedp.ByQuery),
		chromedp.SetValue("#run-params", `{"rerun": true, "day": "2026-12-01"}`, chromedp.ByQuery),
		chromedp.Click("#act-run", chromedp.ByQuery))
	calls := h.WaitCalls(t, "nightly-report", before+1, daemontest.WaitTimeout)
	var got map[string]any
	if err := json.Unmarshal(calls[len(calls)-1].Body.Params, &got); err != nil || got["day"] != "2026-12-01" || got["rerun"] != true {
		t.Errorf("run-now params = %s (%v)", calls[len(calls)-1].Body.Params, err)
	}

	// 5. Both are in its timeline.
	waitJS(t, ctx, "pause and run_now in the timeline",
		`(() => { const k = [...document.querySelectorAll("#task-timeline li")].map(l => l.dataset.action);
		  return k.includes("pause") && k.includes("run_now"); })()`)
	var timeline string
	run(t, ctx, "read the timeline", chromedp.Evaluate(rowsText("#task-timeline li"), &timeline))
	if !strings.Contains(timeline, "maintenance window") || !strings.Contains(timeline, "api:console") {
		t.Errorf("timeline lacks the note or the console actor:\n%s", timeline)
	}
	shot(t, ctx, dir, "task-timeline.png")

	// 6. Kill a hung run.
	d.MustJSON(t, http.StatusCreated, http.MethodPost, api+"/tasks",
		daemontest.Spec("stuck-export", h.URL("/hang/export"), "trigger", "delay", "delay_ms", 50, "timeout_sec", 300), nil)
	h.WaitCalls(t, "stuck-export", 1, daemontest.WaitTimeout)
	run(t, ctx, "open the hung task", chromedp.Navigate(url+"#/tasks/stuck-export"))
	waitJS(t, ctx, "kill enabled", `!!document.querySelector("#act-kill") && !document.querySelector("#act-kill").disabled`)
	clickUntil(t, ctx, "kill", "#act-kill", `document.getElementById("confirm").open`)
	run(t, ctx, "confirm the kill",
		chromedp.WaitVisible("#confirm-ok", chromedp.ByQuery),
		chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "the killed run", `[...document.querySelectorAll("#runs-table tbody tr")].some(r => r.textContent.includes("killed"))`)
	var killed struct{ Runs []struct{ Result string } }
	d.MustJSON(t, http.StatusOK, http.MethodGet, api+"/tasks/stuck-export/runs", nil, &killed)
	if len(killed.Runs) != 1 || killed.Runs[0].Result != "killed" {
		t.Errorf("after kill: runs %+v, want one killed", killed.Runs)
	}
	shot(t, ctx, dir, "task-killed.png")

	// 7. A stopped executor turns lost.
	// Executors talk to the scheduler directly, at the root, whatever the console's prefix.
	exe := startSDK(t, d.Base, "127.0.0.1:0")
	run(t, ctx, "open executors", chromedp.Navigate(url+"#/executors"))
	waitJS(t, ctx, "the executor alive", `!!document.querySelector('#executors-table tr[data-status="alive"]')`)
	if err := exe.exe.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the executor lost", `!!document.querySelector('#executors-table tr[data-status="lost"]')`)
	shot(t, ctx, dir, "executors-lost.png")

	// 8. Filter the task list.
	for i := 0; i < 12; i++ {
		grp := "etl"
		if i%2 == 1 {
			grp = "web"
		}
		d.MustJSON(t, http.StatusCreated, http.MethodPost, api+"/tasks",
			daemontest.Spec(fmt.Sprintf("%s-job-%02d", grp, i), h.URL("/ok/x"), "trigger", "manual", "group", grp), nil)
	}
	run(t, ctx, "filter by name prefix",
		chromedp.Navigate(url+"#/tasks"),
		chromedp.WaitVisible("#task-table", chromedp.ByQuery),
		chromedp.SendKeys("#f-name", "etl-", chromedp.ByQuery),
		chromedp.Click("#f-apply", chromedp.ByQuery))
	waitJS(t, ctx, "only etl- rows",
		`(() => { const r = [...document.querySelectorAll("#task-table tbody tr")].map(x => x.dataset.task);
		  return r.length === 6 && r.every(n => n.startsWith("etl-")); })()`)
	// Bulk: pause two of the filtered rows at once, after confirming.
	run(t, ctx, "select two rows and bulk pause",
		chromedp.Click(`#task-table tr[data-task="etl-job-00"] input[type=checkbox]`, chromedp.ByQuery),
		chromedp.Click(`#task-table tr[data-task="etl-job-02"] input[type=checkbox]`, chromedp.ByQuery),
		chromedp.Click("#bulk-pause", chromedp.ByQuery),
		chromedp.WaitVisible("#confirm-ok", chromedp.ByQuery),
		chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "two rows paused", `[...document.querySelectorAll("#task-table tbody tr")].filter(r => r.textContent.includes("PAUSED")).length === 2`)
	for _, n := range []string{"etl-job-00", "etl-job-02"} {
		if v := getAt(t, d, api, n); v.Runtime.State != "PAUSED" {
			t.Errorf("after bulk pause: %s is %s", n, v.Runtime.State)
		}
	}
	if v := getAt(t, d, api, "etl-job-04"); v.Runtime.State == "PAUSED" {
		t.Error("bulk pause paused an unselected task")
	}
	run(t, ctx, "filter by group and state",
		setField("#f-name", ""),
		chromedp.SetValue("#f-group", "web", chromedp.ByQuery),
		chromedp.SetValue("#f-state", "WAITING", chromedp.ByQuery),
		chromedp.Click("#f-apply", chromedp.ByQuery))
	waitJS(t, ctx, "only web rows",
		`(() => { const r = [...document.querySelectorAll("#task-table tbody tr")].map(x => x.dataset.task);
		  return r.length === 6 && r.every(n => n.startsWith("web-")); })()`)
	shot(t, ctx, dir, "tasks-filtered.png")

	// Groups: counts by state, and a group paused as a whole after confirming.
	run(t, ctx, "open groups", chromedp.Navigate(url+"#/groups"),
		chromedp.WaitVisible(`#groups-table tr[data-group="web"] .group-pause`, chromedp.ByQuery),
		chromedp.Click(`#groups-table tr[data-group="web"] .group-pause`, chromedp.ByQuery),
		chromedp.WaitVisible("#confirm-ok", chromedp.ByQuery),
		chromedp.Click("#confirm-ok", chromedp.ByQuery))
	// The web row's PAUSED column (the seventh of the eight state columns after the total)
	// counts its six tasks.
	waitJS(t, ctx, "group web paused", `(() => { const c = document.querySelectorAll('#groups-table tr[data-group="web"] td');
		return c.length > 9 && c[2 + 6].textContent === "6"; })()`)
	shot(t, ctx, dir, "groups.png")

	// The overview shows the lost executor and the fires of the last minutes.
	run(t, ctx, "open the overview", chromedp.Navigate(url+"#/overview"))
	waitJS(t, ctx, "one executor lost and some fires", `(document.querySelector("#ov-lost .value") || {}).textContent === "1" &&
		/Bars: fires \([1-9]/.test((document.querySelector("#chart-caption") || {}).textContent || "")`)
	shot(t, ctx, dir, "overview.png")
	run(t, ctx, "dark theme", emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}),
		chromedp.Navigate(url+"#/tasks/nightly-report"), chromedp.WaitVisible("#task-timeline li", chromedp.ByQuery))
	shot(t, ctx, dir, "task-dark.png")
}

// getAt reads a task under an API prefix.
func getAt(t *testing.T, d *daemontest.Daemon, api, name string) client.TaskView {
	t.Helper()
	var v client.TaskView
	d.MustJSON(t, http.StatusOK, http.MethodGet, api+"/tasks/"+name, nil, &v)
	return v
}

// TestConsoleBrowserLogin checks the token login: the console asks for the token, refuses
// a wrong one, and after the right one shows the caller's scope; the token is kept for the
// tab (sessionStorage), not in localStorage or a cookie.
func TestConsoleBrowserLogin(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), func(c *axedaemon.Config) { c.Token = "open-sesame-0123456" })
	run(t, ctx, "open the console", chromedp.Navigate(d.Base+"/#/tasks"), chromedp.WaitVisible("#login-token", chromedp.ByQuery))
	run(t, ctx, "a wrong token", chromedp.SendKeys("#login-token", "guess", chromedp.ByQuery), chromedp.Click("#login-ok", chromedp.ByQuery))
	waitJS(t, ctx, "the refusal", `document.querySelector("#login-error").textContent.includes("refused")`)
	run(t, ctx, "the right token", setField("#login-token", "open-sesame-0123456"), chromedp.Click("#login-ok", chromedp.ByQuery))
	waitJS(t, ctx, "the scope", `document.querySelector("#who").textContent === "default (write)" && !!document.querySelector("#task-table")`)
	var stored string
	run(t, ctx, "where the token is kept", chromedp.Evaluate(`[sessionStorage.getItem("axe.token"), localStorage.length, document.cookie].join("|")`, &stored))
	if stored != "open-sesame-0123456|0|" {
		t.Errorf("sessionStorage token | localStorage entries | cookies = %q", stored)
	}
}

// TestConsoleBrowserText checks that data is rendered as text: a task whose params and
// group look like markup shows the characters, and no element is created from them.
func TestConsoleBrowserText(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	d.Create(t, daemontest.Spec("markup", "http://127.0.0.1:1/x", "trigger", "manual",
		"params", map[string]any{"html": `<img src=x onerror="document.title='pwned'">`}))
	run(t, ctx, "open the task", chromedp.Navigate(d.Base+"/#/tasks/markup"), chromedp.WaitVisible("#task-params", chromedp.ByQuery))
	var title, text string
	var imgs int
	run(t, ctx, "read it",
		chromedp.Title(&title),
		chromedp.Text("#task-params", &text, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("main img").length`, &imgs))
	if title == "pwned" || imgs != 0 || !strings.Contains(text, `<img src=x`) {
		t.Errorf("title %q, %d img elements, params text %q", title, imgs, text)
	}
}

// TestConsoleList100K measures the task list with 100,000 tasks loaded: the first page
// and filtered pages, in headless Chromium. It logs the times and asserts only what was
// shown, never how fast (the machine is shared).
func TestConsoleList100K(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	if testing.Short() {
		t.Skip("loads 100,000 tasks")
	}
	for _, kind := range []string{persist.SchemeSQLite, persist.SchemeMySQL} {
		t.Run(kind, func(t *testing.T) { list100K(t, kind) })
	}
}

func list100K(t *testing.T, kind string) {
	const n = 100_000
	var dsn, driver, raw string
	if kind == persist.SchemeSQLite {
		raw = filepath.Join(t.TempDir(), "axe.db")
		dsn, driver = "sqlite:"+raw, "sqlite"
	} else {
		dsn = persisttest.MySQLSchemaDSN(t)
		raw, driver = strings.TrimPrefix(dsn, "mysql:"), "mysql"
	}
	ctx := browser(t)
	// A template task made through the API, then copied n times in one SQL statement: the
	// rows are exactly what the store writes, without n API calls.
	d := daemontest.Start(t, dsn, nil)
	d.Create(t, daemontest.Spec("template", "http://127.0.0.1:1/x", "trigger", "manual"))
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(driver, raw)
	if err != nil {
		t.Fatal(err)
	}
	// k counts 0..n-1 from five joined digit tables, which both dialects accept.
	digits := `(SELECT 0 AS v UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
		UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`
	k := `(SELECT a.v + 10*b.v + 100*c.v + 1000*e.v + 10000*f.v + 1 AS i FROM ` + digits + ` a, ` + digits + ` b, ` +
		digits + ` c, ` + digits + ` e, ` + digits + ` f) k`
	name, grp := `printf('job-%06d', i)`, `'g' || (i % 20)`
	if kind == persist.SchemeMySQL {
		name, grp = `CONCAT('job-', LPAD(i, 6, '0'))`, `CONCAT('g', i % 20)`
	}
	t0 := time.Now()
	for _, q := range []string{
		`INSERT INTO task_def (name, grp, trigger_type, cron, delay_ms, depends_on, depends_mode, timezone, timeout_sec,
			retry_count, retry_interval_sec, priority, callback, params, misfire_policy, paused, created_at, updated_at)
		 SELECT ` + name + `, ` + grp + `, trigger_type, cron, delay_ms, depends_on, depends_mode, timezone,
			timeout_sec, retry_count, retry_interval_sec, i % 5, callback, params, misfire_policy, paused, created_at, updated_at
		 FROM ` + k + `, task_def WHERE name = 'template' AND i <= ` + fmt.Sprint(n),
		`INSERT INTO task_runtime (task_id, state, current_ticket, attempt, next_trigger_time, last_trigger_time,
			last_end_time, last_executor, success_count, failure_count, note, version)
		 SELECT d.id, r.state, r.current_ticket, r.attempt, r.next_trigger_time, r.last_trigger_time, r.last_end_time,
			r.last_executor, r.success_count, r.failure_count, r.note, r.version
		 FROM task_def d, task_runtime r JOIN task_def t ON t.id = r.task_id AND t.name = 'template' WHERE d.name LIKE 'job-%'`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_ = db.Close()
	t.Logf("%s: loaded %d tasks in %s", kind, n, time.Since(t0).Round(time.Millisecond))

	d = daemontest.Start(t, dsn, nil)
	url := d.Base + "/"
	run(t, ctx, "warm the browser", chromedp.Navigate(url+"#/executors"), chromedp.WaitVisible("#executors", chromedp.ByQuery))

	// A full page load (a new document: the console's modules, whoami, then the list).
	start := time.Now()
	run(t, ctx, "first page", chromedp.Navigate(d.Base+"/?fresh=1#/tasks"),
		chromedp.WaitVisible(`#task-table tbody tr[data-task="job-000001"]`, chromedp.ByQuery))
	first := time.Since(start)
	var firstAPI string
	run(t, ctx, "read the load time", chromedp.AttributeValue("#list-status", "data-ms", &firstAPI, nil, chromedp.ByQuery))
	t.Logf("%s, 100K tasks: first page (navigation to rows shown) %s; the list request and render %s ms", kind, first.Round(time.Millisecond), firstAPI)

	filter := func(what, group, state, prefix, want string) {
		t.Helper()
		// Each load of the list bumps data-seq: wait for the load the click started, not
		// for a row the previous page already showed.
		var seq int
		run(t, ctx, "note the load count", chromedp.Evaluate(`Number(document.querySelector("#list-status").dataset.seq)`, &seq))
		start := time.Now()
		run(t, ctx, "filter "+what,
			setField("#f-group", group), setField("#f-state", state), setField("#f-name", prefix),
			chromedp.Click("#f-apply", chromedp.ByQuery))
		rows := fmt.Sprintf(`!!document.querySelector('#task-table tbody tr[data-task=%q]')`, want)
		if want == "" {
			rows = `document.querySelectorAll('#task-table tbody tr').length === 0`
		}
		waitJS(t, ctx, what, fmt.Sprintf(`Number(document.querySelector("#list-status").dataset.seq) > %d && %s`, seq, rows))
		took := time.Since(start)
		var ms string
		run(t, ctx, "read the load time", chromedp.AttributeValue("#list-status", "data-ms", &ms, nil, chromedp.ByQuery))
		t.Logf("%s, 100K tasks: filtered page %s: click to rows shown %s; the list request and render %s ms", kind, what, took.Round(time.Millisecond), ms)
	}
	filter("group=g7", "g7", "", "", "job-000007")
	filter("name prefix job-0421", "", "", "job-0421", "job-042100")
	filter("group=g3 and prefix job-09", "g3", "", "job-09", "job-090003")
	filter("state=WAITING", "", "WAITING", "", "job-000001")
	// No task is paused: no index holds the state, so this page is read from the runtime
	// table first (persist/tasklist.go).
	filter("state=PAUSED (no match, a full scan)", "", "PAUSED", "", "")
	filter("state=WAITING again", "", "WAITING", "", "job-000001")
	run(t, ctx, "next page", chromedp.Click("#page-next", chromedp.ByQuery))
	waitJS(t, ctx, "page 2", `!!document.querySelector('#task-table tbody tr[data-task="job-000051"]')`)
}

// TestConsoleBrowserEdit edits a task from the form: the change is saved, the masked
// sensitive param keeps its real value, and fields the form does not show are kept.
func TestConsoleBrowserEdit(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	d.Create(t, daemontest.Spec("upstream", h.URL("/ok/up"), "trigger", "manual"))
	d.Create(t, daemontest.Spec("sync", h.URL("/ok/sync"), "trigger", "dependency", "depends_on", []string{"upstream"}, "depends_mode", "any", "timeout_sec", 30,
		"params", map[string]any{"token": "real-secret", "batch": 10}, "sensitive_params", []string{"token"}))
	openEditForm(t, ctx, d.Base+"/#/tasks/sync/edit")
	var shown string
	run(t, ctx, "read the params", chromedp.Value("#params", &shown, chromedp.ByQuery))
	if strings.Contains(shown, "real-secret") || !strings.Contains(shown, `"***"`) {
		t.Errorf("the form shows params %q, want the token masked", shown)
	}
	run(t, ctx, "change the timeout and save", setField("#timeout_sec", "77"), chromedp.Click("#save", chromedp.ByQuery))
	waitJS(t, ctx, "the task page", `location.hash === "#/tasks/sync" && !!document.querySelector("#task-def")`)
	var v struct {
		TimeoutSec  int    `json:"timeout_sec"`
		DependsMode string `json:"depends_mode"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/sync", nil, &v)
	if v.TimeoutSec != 77 || v.DependsMode != "any" {
		t.Errorf("after the edit: timeout %d depends_mode %q, want 77 and any", v.TimeoutSec, v.DependsMode)
	}
	d.WaitRun(t, "sync", d.RunNow(t, "sync", nil))
	calls := h.CallsOf("sync")
	if len(calls) != 1 || !strings.Contains(string(calls[0].Body.Params), `"token":"real-secret"`) {
		t.Errorf("the callback received %s, want the real token", calls[len(calls)-1].Body.Params)
	}
}
