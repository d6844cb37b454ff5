package admin_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
)

// TestConsoleBrowserTriage: the overview groups the last hour's failures by task and by
// error text, with the counts GET /api/v1/triage gives; a task's count opens its failed
// runs; the quick ranges change the window; the runs list's quick ranges set From.
func TestConsoleBrowserTriage(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	url := d.Base + "/"
	if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/triage?within=9d", nil); !strings.HasPrefix(msg, "within:") {
		t.Errorf("within=9d: %q, want an error naming within", msg)
	}
	d.Create(t, daemontest.Spec("sync-a", h.URL("/fail/a"), "cron", "* * * * * *"))
	d.Create(t, daemontest.Spec("sync-b", h.URL("/fail/b"), "cron", "* * * * * *"))
	d.Create(t, daemontest.Spec("healthy", h.URL("/ok/h"), "cron", "* * * * * *"))
	d.Create(t, daemontest.Spec("stuck", h.URL("/hang/s"), "trigger", "delay", "delay_ms", 10, "timeout_sec", 1))
	h.WaitCalls(t, "sync-a", 3, daemontest.WaitTimeout)
	h.WaitCalls(t, "sync-b", 3, daemontest.WaitTimeout)
	// Stop the failures so the counts hold still.
	for _, n := range []string{"sync-a", "sync-b"} {
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/"+n+"/pause", map[string]any{}, nil)
		d.WaitState(t, n, "PAUSED")
	}
	type group struct {
		Key       string   `json:"key"`
		Count     int      `json:"count"`
		Tasks     []string `json:"tasks"`
		TaskCount int      `json:"task_count"`
	}
	var tri struct {
		Failures int     `json:"failures"`
		Complete bool    `json:"complete"`
		ByTask   []group `json:"by_task"`
		ByError  []group `json:"by_error"`
	}
	testwait.For(t, daemontest.WaitTimeout, "the stuck run timed out", func() bool {
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/triage?within=1h", nil, &tri)
		for _, g := range tri.ByTask {
			if g.Key == "stuck" {
				return true
			}
		}
		return false
	})
	byTask := map[string]int{}
	for _, g := range tri.ByTask {
		byTask[g.Key] = g.Count
	}
	if !tri.Complete || byTask["sync-a"] < 3 || byTask["sync-b"] < 3 || byTask["stuck"] != 1 || byTask["healthy"] != 0 || len(tri.ByError) != 2 {
		t.Fatalf("triage: %+v", tri)
	}
	http500 := tri.ByError[0]
	if http500.Count != byTask["sync-a"]+byTask["sync-b"] || http500.TaskCount != 2 || !strings.Contains(http500.Key, "500") {
		t.Errorf("the HTTP 500 group: %+v, want both sync tasks' %d failures", http500, byTask["sync-a"]+byTask["sync-b"])
	}

	run(t, ctx, "open the overview", chromedp.Navigate(url+"#/overview"))
	waitJS(t, ctx, "the triage", fmt.Sprintf(`(document.querySelector("#triage-note") || {dataset: {}}).dataset.failures === "%d"`, tri.Failures))
	cells := func(sel string) string {
		return mustEval(t, ctx, fmt.Sprintf(`[...document.querySelectorAll(%q)].map(r => [...r.children].slice(0, 3).map(c => c.textContent).join("|")).join("\n")`, sel))
	}
	tasks := cells("#triage-tasks tbody tr")
	for _, n := range []string{"sync-a", "sync-b", "stuck"} {
		if !strings.Contains(tasks, fmt.Sprintf("%s|%d|", n, byTask[n])) {
			t.Errorf("the by-task table lacks %s with %d failures:\n%s", n, byTask[n], tasks)
		}
	}
	errs := cells("#triage-errors tbody tr")
	first := strings.Split(errs, "\n")[0]
	if !strings.HasPrefix(first, fmt.Sprintf("%s|%d|", http500.Key, http500.Count)) || !strings.Contains(first, "sync-a") || !strings.Contains(first, "sync-b") {
		t.Errorf("the by-error table's first row is %q, want %s with %d failures of sync-a and sync-b", first, http500.Key, http500.Count)
	}
	shot(t, ctx, artifacts(t), "overview-triage.png")

	// The 15-minute range holds the same failures; 7 days too.
	clickUntil(t, ctx, "15 min", `#triage button[data-range="15m"], .ranges button[data-range="15m"]`,
		`document.querySelector('.ranges button[data-range="15m"]').getAttribute("aria-pressed") === "true"`)
	waitJS(t, ctx, "the 15-minute triage", fmt.Sprintf(`document.querySelector("#triage-note").textContent.startsWith("%d failure(s) in the last 15 min")`, tri.Failures))

	// A task's count opens its failed runs.
	clickUntil(t, ctx, "sync-a's count", `#triage-tasks tr[data-task="sync-a"] td.num a`, `location.hash.startsWith("#/runs?")`)
	waitJS(t, ctx, "sync-a's failed runs", fmt.Sprintf(`document.querySelectorAll("#all-runs-table tbody tr").length === %d &&
		[...document.querySelectorAll("#all-runs-table tbody tr")].every(r => r.dataset.result === "failed")`, byTask["sync-a"]))

	// A task's runs within a quick range: all of sync-a's, scheduled minutes ago.
	var all struct {
		Total int `json:"total"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/sync-a/runs?total=1", nil, &all)
	run(t, ctx, "open sync-a", chromedp.Navigate(url+"#/tasks/sync-a"))
	waitJS(t, ctx, "its runs", `document.querySelectorAll("#runs-table tbody tr").length > 0`)
	run(t, ctx, "the last 15 min", setField("#runs-range", "15m"))
	waitJS(t, ctx, "the runs within 15 min", fmt.Sprintf(`document.querySelector("#runs-total").textContent.startsWith("%d run(s)")`, all.Total))
	run(t, ctx, "the last 7 days", setField("#runs-range", "168h"))
	waitJS(t, ctx, "the runs within 7 days", fmt.Sprintf(`document.querySelector("#runs-total").textContent.startsWith("%d run(s)")`, all.Total))

	// The runs list's quick range sets From and applies.
	run(t, ctx, "clear the filter", chromedp.Navigate(url+"#/runs"))
	waitJS(t, ctx, "the runs", `document.querySelectorAll("#all-runs-table tbody tr").length > 0`)
	clickUntil(t, ctx, "last 1 h", `#run-ranges button[data-range="1h"]`, `location.hash.includes("from=")`)
	if v := mustEval(t, ctx, `document.querySelector("#r-from").value`); v == "" {
		t.Error("the 1 h range left From empty")
	}
	waitJS(t, ctx, "runs within the hour", `document.querySelectorAll("#all-runs-table tbody tr").length > 0`)
}
