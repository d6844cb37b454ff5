package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/engine"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
)

// refreshes is the number of automatic refreshes the tab has done (app.js counts them).
const refreshes = `Number(document.body.dataset.refreshes || 0)`

// TestConsoleBrowserTypingSurvivesRefresh: on a task page whose task fires (so every
// refresh has news), text typed into the pause note and the run-now params stays, with the
// focus and the caret, across several refreshes, and typing goes on where it was. The
// refresh can be paused, and its interval is kept in localStorage.
func TestConsoleBrowserTypingSurvivesRefresh(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	d.Create(t, daemontest.Spec("busy", h.URL("/ok/busy"), "cron", "* * * * * *", "timezone", "Europe/Paris"))
	url := d.Base + "/"
	run(t, ctx, "open the task", chromedp.Navigate(url+"#/tasks/busy"), chromedp.WaitVisible("#pause-note", chromedp.ByQuery))

	var n0 int
	for _, field := range []string{"#pause-note", "#run-params"} {
		run(t, ctx, "type the first half into "+field, chromedp.Click(field, chromedp.ByQuery), chromedp.SendKeys(field, "half way ", chromedp.ByQuery),
			chromedp.Evaluate(refreshes, &n0))
		// Two refreshes (each reloads the task, its runs and its timeline) while the field
		// holds half a text and the focus.
		waitJS(t, ctx, "two refreshes", fmt.Sprintf(`%s >= %d`, refreshes, n0+2))
		var state string
		run(t, ctx, "read the field", chromedp.Evaluate(fmt.Sprintf(`(() => { const e = document.querySelector(%q);
			return [e.value, document.activeElement === e, e.selectionStart, e.isConnected].join("|"); })()`, field), &state))
		if state != "half way |true|9|true" {
			t.Errorf("%s after two refreshes: value|focused|caret|connected = %q, want %q", field, state, "half way |true|9|true")
		}
		// Typing goes on into the same field, without clicking it again.
		run(t, ctx, "type the rest", chromedp.SendKeys(field, "there", chromedp.ByQuery))
		var v string
		run(t, ctx, "read it", chromedp.Value(field, &v, chromedp.ByQuery))
		if v != "half way there" {
			t.Errorf("%s = %q, want the whole text typed across the refreshes", field, v)
		}
	}
	// The note typed across refreshes is the one the pause sends.
	run(t, ctx, "pause with it", setField("#pause-note", "typed across refreshes"), chromedp.Click("#act-pause", chromedp.ByQuery))
	waitJS(t, ctx, "paused with the note", `(document.querySelector("#task-note") || {}).textContent === "Note: typed across refreshes"`)
	if v := d.Get(t, "busy"); v.Runtime.Note != "typed across refreshes" {
		t.Errorf("the stored note is %q", v.Runtime.Note)
	}

	// Paused refresh: no refresh for three periods; resumed, they go on.
	run(t, ctx, "pause the refresh", chromedp.Click("#refresh-toggle", chromedp.ByQuery), chromedp.Evaluate(refreshes, &n0))
	time.Sleep(6500 * time.Millisecond)
	var n1 int
	var label string
	run(t, ctx, "count", chromedp.Evaluate(refreshes, &n1), chromedp.Text("#refresh-toggle", &label, chromedp.ByQuery))
	if n1 > n0+1 || label != "Resume" { // one refresh may have been under way at the click
		t.Errorf("with the refresh paused: %d refreshes in 6.5 s, button %q", n1-n0, label)
	}
	run(t, ctx, "resume the refresh", chromedp.Click("#refresh-toggle", chromedp.ByQuery))
	waitJS(t, ctx, "refreshes again", fmt.Sprintf(`%s >= %d`, refreshes, n1+1))

	// The interval is chosen and kept.
	run(t, ctx, "choose 10 s", setField("#refresh-every", "10000"), chromedp.Reload(), chromedp.WaitVisible("#refresh-every", chromedp.ByQuery))
	var every string
	run(t, ctx, "read it back", chromedp.Value("#refresh-every", &every, chromedp.ByQuery))
	if every != "10000" {
		t.Errorf("after a reload the interval is %q, want 10000", every)
	}
	run(t, ctx, "count", chromedp.Evaluate(refreshes, &n0))
	time.Sleep(4 * time.Second)
	run(t, ctx, "count", chromedp.Evaluate(refreshes, &n1))
	if n1 != n0 {
		t.Errorf("%d refreshes in 4 s at a 10 s interval", n1-n0)
	}
}

// TestConsoleBrowserFindFailing: among 30 healthy cron tasks in six groups, one cron task
// fails every second and stays SCHEDULED. From the overview, two clicks reach it: the
// "failing in the last hour" card, then its row. Its runs page through all of them, a run
// page shows the whole stored error, the runs list filters failures across tasks, the
// timeline filters by kind, the preview takes N and a start, and times follow the zone
// switch.
func TestConsoleBrowserFindFailing(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), func(c *axedaemon.Config) {
		c.BasePath = consoleBase
		// The breaker opens after 45 results, so that the task has runs for three pages
		// first (after it, a probe runs one fire in ten).
		c.Engine = engine.Config{Breaker: engine.BreakerConfig{MinSamples: 45}}
	})
	h := daemontest.NewHook(t)
	api := consoleBase + "/api/v1"
	url := d.Base + consoleBase + "/"
	for i := range 30 {
		d.MustJSON(t, http.StatusCreated, http.MethodPost, api+"/tasks",
			daemontest.Spec(fmt.Sprintf("healthy-%02d", i), h.URL("/ok/h"), "cron", "0 0 * * * *", "group", fmt.Sprintf("team-%d", i%6)), nil)
	}
	d.MustJSON(t, http.StatusCreated, http.MethodPost, api+"/tasks",
		daemontest.Spec("flaky-sync", h.URL("/fail/sync"), "cron", "* * * * * *", "group", "team-3", "timezone", "Asia/Tokyo"), nil)
	h.WaitCalls(t, "flaky-sync", 3, daemontest.WaitTimeout)
	// Between its runs it is SCHEDULED (the reason it was hard to find); a read may meet a run
	// in flight (RUNNING), the more so on a loaded box, but never another state.
	testwait.For(t, daemontest.WaitTimeout, "the failing cron task SCHEDULED between its runs", func() bool {
		switch st := getAt(t, d, api, "flaky-sync").Runtime.State; st {
		case model.StateScheduled:
			return true
		case model.StateRunning:
			return false
		default:
			t.Fatalf("the failing cron task is %s, want SCHEDULED between its runs", st)
			return false
		}
	})

	run(t, ctx, "open the overview", chromedp.Navigate(url+"#/overview"))
	waitJS(t, ctx, "one task failing", `(document.querySelector("#ov-failing .value") || {}).textContent === "1"`)
	run(t, ctx, "click 1: the failing card", chromedp.Click("#ov-failing", chromedp.ByQuery))
	waitJS(t, ctx, "only the failing task listed",
		`(() => { const r = [...document.querySelectorAll("#task-table tbody tr")].map(x => x.dataset.task);
		  return r.length === 1 && r[0] === "flaky-sync" && document.querySelector("#list-total").textContent === "1 task(s) match"; })()`)
	run(t, ctx, "click 2: its row", chromedp.Click(`#task-table tr[data-task="flaky-sync"] a[href^="#/tasks/"]`, chromedp.ByQuery))
	waitJS(t, ctx, "its page, last result failed", `location.hash === "#/tasks/flaky-sync" &&
		(document.querySelector("#task-last-result") || {}).textContent === "failed"`)

	// Its runs, 20 a page, through all of them; then only its failures.
	var stored struct {
		Runs  []model.Run `json:"runs"`
		Total int         `json:"total"`
	}
	testwait.For(t, 90*time.Second, "more than two pages of runs", func() bool {
		d.MustJSON(t, http.StatusOK, http.MethodGet, api+"/tasks/flaky-sync/runs?limit=1&total=1", nil, &stored)
		return stored.Total > 45
	})
	// Its breaker opened after 45 failures: the breaker filter finds it too.
	run(t, ctx, "open tasks with an open breaker", chromedp.Navigate(url+"#/tasks?breaker=open"))
	waitJS(t, ctx, "flaky-sync's breaker open", `(() => { const r = [...document.querySelectorAll("#task-table tbody tr")].map(x => x.dataset.task);
		return r.length === 1 && r[0] === "flaky-sync"; })()`)
	run(t, ctx, "back to the task", chromedp.Navigate(url+"#/tasks/flaky-sync"), chromedp.WaitVisible("#act-pause", chromedp.ByQuery))
	// The title fills in when the task loads and moves the button: click until it paused.
	clickUntil(t, ctx, "pause the task", "#act-pause", `(document.querySelector(".title .state") || {}).textContent === "PAUSED"`)
	// A run in flight at the pause ends before the runs are counted.
	testwait.For(t, 30*time.Second, "the run in flight at the pause ended", func() bool {
		d.MustJSON(t, http.StatusOK, http.MethodGet, api+"/tasks/flaky-sync/runs?limit=1", nil, &stored)
		return len(stored.Runs) == 0 || stored.Runs[0].Result != model.ResultRunning
	})
	d.MustJSON(t, http.StatusOK, http.MethodGet, api+"/tasks/flaky-sync/runs?limit=1000&total=1", nil, &stored)
	run(t, ctx, "first page", chromedp.Reload())
	waitJS(t, ctx, "the total", fmt.Sprintf(`(document.querySelector("#runs-total") || {}).textContent === "%d run(s)"`, stored.Total))
	var seen []string
	for page := 0; ; page++ {
		var tickets []string
		waitJS(t, ctx, "a page of runs", `document.querySelectorAll("#runs-table tbody tr").length > 0`)
		run(t, ctx, "read the page", chromedp.Evaluate(`[...document.querySelectorAll("#runs-table tbody tr")].map(r => r.dataset.ticket)`, &tickets))
		seen = append(seen, tickets...)
		var last bool
		run(t, ctx, "is it the last", chromedp.Evaluate(`document.querySelector("#runs-older").disabled`, &last))
		if last || page > 10 {
			break
		}
		first := tickets[0]
		run(t, ctx, "older", chromedp.Click("#runs-older", chromedp.ByQuery))
		waitJS(t, ctx, "the next page", fmt.Sprintf(`document.querySelector("#runs-table tbody tr").dataset.ticket !== %q`, first))
	}
	var want []string
	for _, r := range stored.Runs {
		want = append(want, r.Ticket)
	}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Errorf("paging the task's runs showed %d tickets, the store holds %d:\n got  %v\n want %v", len(seen), len(want), seen, want)
	}

	// One run's page: the whole stored error.
	failed := stored.Runs[len(stored.Runs)-1]
	nFailed := 0
	for _, r := range stored.Runs {
		if r.Result == model.ResultFailed {
			nFailed++
		}
	}
	run(t, ctx, "open a run", chromedp.Navigate(url+"#/run/"+failed.Ticket), chromedp.WaitVisible("#run-error", chromedp.ByQuery))
	var errText, result string
	run(t, ctx, "read it", chromedp.Text("#run-error", &errText, chromedp.ByQuery), chromedp.Text("#run-result", &result, chromedp.ByQuery))
	if errText != failed.Error || result != failed.Result {
		t.Errorf("the run page shows %q / %q, the store %q / %q", result, errText, failed.Result, failed.Error)
	}

	// The runs list across tasks, failures only: every row is the failing task's.
	d.MustJSON(t, http.StatusAccepted, http.MethodPost, api+"/tasks/healthy-04/run", nil, nil)
	run(t, ctx, "open the runs list", chromedp.Navigate(url+"#/runs"), chromedp.WaitVisible("#all-runs-table", chromedp.ByQuery))
	waitJS(t, ctx, "healthy-04's run-now listed", `[...document.querySelectorAll("#all-runs-table tbody tr td:nth-child(2)")].some(c => c.textContent === "healthy-04")`)
	run(t, ctx, "failures only", setField("#r-result", "failure"), chromedp.Click("#r-apply", chromedp.ByQuery))
	waitJS(t, ctx, "only flaky-sync's failures", fmt.Sprintf(`(() => { const r = [...document.querySelectorAll("#all-runs-table tbody tr")];
		return r.length === Math.min(50, %d) && r.every(x => x.dataset.result === "failed" && x.children[1].textContent === "flaky-sync"); })()`, nFailed))
	var total string
	run(t, ctx, "the total", chromedp.AttributeValue("#runs-status", "data-total", &total, nil, chromedp.ByQuery))
	if total != fmt.Sprint(nFailed) {
		t.Errorf("the runs list counts %s failures, the task has %d failed runs", total, nFailed)
	}
	if !strings.Contains(mustEval(t, ctx, `location.hash`), "result=failure") {
		t.Errorf("the filter is not in the address: %s", mustEval(t, ctx, `location.hash`))
	}

	// The timeline filtered to pause and resume: the one pause.
	run(t, ctx, "open the task", chromedp.Navigate(url+"#/tasks/flaky-sync"), chromedp.WaitVisible("#task-timeline li", chromedp.ByQuery))
	run(t, ctx, "only pause and resume", setField("#timeline-kind", "pause,resume"))
	waitJS(t, ctx, "one pause", `(() => { const k = [...document.querySelectorAll("#task-timeline li")].map(l => l.dataset.action);
		return k.length === 1 && k[0] === "pause"; })()`)

	// The preview: 25 fires from a chosen start, in the task's zone.
	run(t, ctx, "25 fires from 2030-01-01 00:00 Tokyo", setField("#preview-n", "25"), setField("#preview-from", "2030-01-01T00:00:00"))
	waitJS(t, ctx, "25 fires from then", `(() => { const r = document.querySelectorAll("#fires-table tbody tr");
		return r.length === 25 && r[0].children[1].textContent === "2030-01-01 00:00:01"; })()`)

	// The zone switch: UTC, the task's zone, the browser's (emulated as New York).
	run(t, ctx, "browser zone New York", emulation.SetTimezoneOverride("America/New_York"))
	zoneOf := func(mode, want string) {
		t.Helper()
		run(t, ctx, "zone "+mode, setField("#zone", mode))
		waitJS(t, ctx, "times in "+want, fmt.Sprintf(`[...document.querySelectorAll("#runs-table tbody td.time")].length > 0 &&
			[...document.querySelectorAll("#runs-table tbody td.time")].every(c => c.textContent.endsWith(%q))`, " "+want))
	}
	zoneOf("task", "Asia/Tokyo")
	zoneOf("browser", "America/New_York")
	zoneOf("utc", "UTC")
	zoneOf("task", "Asia/Tokyo")
	run(t, ctx, "the task list in the task zone", chromedp.Navigate(url+"#/tasks?group=team-3"), chromedp.WaitVisible("#task-table", chromedp.ByQuery))
	waitJS(t, ctx, "next fires in each task's zone", `(() => { const c = [...document.querySelectorAll("#task-table tbody tr")].map(r => r.children[4].textContent);
		return c.length === 6 && c.filter(x => x.endsWith(" UTC")).length === 5 && c.filter(x => x === "paused").length === 1; })()`)
	if z := mustEval(t, ctx, `localStorage.getItem("axe.zone")`); z != "task" {
		t.Errorf("the zone kept in localStorage is %q", z)
	}
}

func mustEval(t *testing.T, ctx context.Context, expr string) string {
	t.Helper()
	var s string
	run(t, ctx, "evaluate "+expr, chromedp.Evaluate(expr, &s))
	return s
}

// TestConsoleBrowserOps: the ops pages: alerts with their delivery state, rate limits
// edited and removed, the nodes of a single node, the executor handlers offered by the
// form, and the bulk bar on a phone.
func TestConsoleBrowserOps(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	h := daemontest.NewHook(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), func(c *axedaemon.Config) {
		c.Engine = engine.Config{AlertWebhooks: []string{h.URL("/ok/alert")}}
	})
	url := d.Base + "/"
	d.Create(t, daemontest.Spec("doomed", h.URL("/fail/doomed"), "trigger", "delay", "delay_ms", 50))
	h.WaitCalls(t, "", 1, daemontest.WaitTimeout) // the webhook's call carries no task header

	run(t, ctx, "open alerts", chromedp.Navigate(url+"#/alerts"))
	waitJS(t, ctx, "the final failure, delivered", `[...document.querySelectorAll("#deliveries-table tbody tr")].some(r =>
		r.dataset.kind === "final_failure" && r.dataset.delivery === "delivered" && r.textContent.includes("doomed"))`)

	run(t, ctx, "open rate limits", chromedp.Navigate(url+"#/ratelimits"), chromedp.WaitVisible("#rl-form", chromedp.ByQuery))
	run(t, ctx, "limit billing to 5/s", setField("#rl-downstream", "billing"), setField("#rl-rate", "5"), setField("#rl-burst", "2"),
		chromedp.Click("#rl-save", chromedp.ByQuery))
	waitJS(t, ctx, "billing listed", `(document.querySelector('#ratelimits-table tr[data-downstream="billing"]') || {}).textContent?.includes("5/s, burst 2")`)
	var limits struct {
		Downstreams map[string]struct{ Rate float64 } `json:"downstreams"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/ratelimits", nil, &limits)
	if limits.Downstreams["billing"].Rate != 5 {
		t.Errorf("rate limits after the edit: %+v", limits)
	}
	run(t, ctx, "a bad rate", setField("#rl-downstream", "<b>"), setField("#rl-rate", "1"), chromedp.Click("#rl-save", chromedp.ByQuery))
	waitJS(t, ctx, "the refusal names the field", `document.querySelector("#rl-error").textContent.startsWith("downstream:")`)
	run(t, ctx, "remove billing", chromedp.Click(`#ratelimits-table tr[data-downstream="billing"] .rl-remove`, chromedp.ByQuery),
		chromedp.WaitVisible("#confirm-ok", chromedp.ByQuery), chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "billing gone", `!document.querySelector('#ratelimits-table tr[data-downstream="billing"]')`)

	run(t, ctx, "open nodes", chromedp.Navigate(url+"#/nodes"), chromedp.WaitVisible("#nodes-table", chromedp.ByQuery))
	waitJS(t, ctx, "a single node says so", `document.querySelector("#nodes-table").textContent.includes("single node")`)

	startSDK(t, d.Base, "127.0.0.1:0")
	run(t, ctx, "open the form", chromedp.Navigate(url+"#/new"), chromedp.WaitVisible("#task-form", chromedp.ByQuery),
		setField("#cb-type", "executor"))
	waitJS(t, ctx, "the executor's app and handler offered", `[...document.querySelectorAll("#cb-apps option")].map(o => o.value).join() === "billing" &&
		[...document.querySelectorAll("#cb-handlers option")].map(o => o.value).join() === "charge"`)

	// A phone: the bulk bar's buttons stay on the screen.
	for i := range 6 {
		d.Create(t, daemontest.Spec(fmt.Sprintf("phone-%d", i), "http://127.0.0.1:1/x", "trigger", "manual", "group", "mobile"))
	}
	run(t, ctx, "phone width", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
		chromedp.Navigate(url+"#/tasks?group=mobile"), chromedp.WaitVisible(`#task-table tr[data-task="phone-1"]`, chromedp.ByQuery),
		chromedp.Click(`#task-table tr[data-task="phone-1"] input[type=checkbox]`, chromedp.ByQuery))
	var off string
	run(t, ctx, "measure the bulk bar", chromedp.Evaluate(`[...document.querySelectorAll("#bulk button")]
		.filter(b => { const r = b.getBoundingClientRect(); return r.left < 0 || r.right > window.innerWidth; }).map(b => b.id).join()`, &off))
	if off != "" {
		t.Errorf("at 390 px these bulk buttons run off the screen: %s", off)
	}
}
