package admin_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleMeasurePages times every page of a running axe's console in headless
// Chromium: from a fresh document (the modules, whoami, the page's requests) to its content
// shown, three times each, and logs the times. It asserts nothing about speed (the machine
// is shared) and runs only when AXE_CONSOLE_MEASURE names the console's address, e.g.
// http://127.0.0.1:7070/ with 50,000 tasks loaded; AXE_CONSOLE_MEASURE_PAGES limits it to
// the pages named (comma-separated), for a build that has fewer.
func TestConsoleMeasurePages(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	base := os.Getenv("AXE_CONSOLE_MEASURE")
	if base == "" {
		t.Skip("AXE_CONSOLE_MEASURE is not set")
	}
	pages := []struct{ name, hash, ready string }{
		{"overview", "#/overview", `!!document.querySelector("#ov-mem .value")`},
		{"tasks", "#/tasks", `document.querySelectorAll("#task-table tbody tr").length > 0`},
		{"tasks-next", "#/tasks?sort=next", `document.querySelectorAll("#task-table tbody tr").length > 0`},
		{"tasks-failing", "#/tasks?failed_within=1h", `!!document.querySelector("#list-total")`},
		{"tasks-search", "#/tasks?q=job-04", `document.querySelectorAll("#task-table tbody tr").length > 0`},
		{"task", "#/tasks/job-000042", `!!document.querySelector("#task-def dl") && !!document.querySelector("#runs-table")`},
		{"groups", "#/groups", `document.querySelectorAll("#groups-table tbody tr").length > 0`},
		{"executors", "#/executors", `!!document.querySelector("#executors")`},
		{"form", "#/new", `!!document.querySelector("#cron-preview #fires-table")`},
		{"runs", "#/runs", `document.querySelectorAll("#all-runs-table tbody tr").length > 0`},
		{"runs-failed", "#/runs?result=failure", `!!document.querySelector("#runs-status").dataset.seq`},
		{"alerts", "#/alerts", `!!document.querySelector("#deliveries-table")`},
		{"ratelimits", "#/ratelimits", `!!document.querySelector("#ratelimits-table")`},
		{"nodes", "#/nodes", `!!document.querySelector("#nodes-table")`},
	}
	only := map[string]bool{}
	for _, p := range strings.Split(os.Getenv("AXE_CONSOLE_MEASURE_PAGES"), ",") {
		if p != "" {
			only[p] = true
		}
	}
	ctx := browser(t)
	run(t, ctx, "warm up", chromedp.Navigate(base+"#/executors"), chromedp.WaitVisible("main", chromedp.ByQuery))
	for _, p := range pages {
		if len(only) > 0 && !only[p.name] {
			continue
		}
		var took []string
		for i := range 3 {
			start := time.Now()
			// A new document each time: ?n= changes the address before the hash.
			run(t, ctx, "open "+p.name, chromedp.Navigate(base+"?n="+p.name+string(rune('a'+i))+p.hash))
			waitJS(t, ctx, p.name, "(() => { try { return "+p.ready+"; } catch { return false; } })()")
			took = append(took, time.Since(start).Round(time.Millisecond).String())
		}
		t.Logf("page %-14s %s", p.name, strings.Join(took, " "))
	}
}
