package admin_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/model"
)

// TestConsoleBrowserPauseAfterFailures: the task form reads and writes pause_after_failures
// and shows the server's error naming the field; the task page shows the bound, the count,
// and the note of a pause on failure; the timeline's alerts filter finds its alert.
func TestConsoleBrowserPauseAfterFailures(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	d.Create(t, daemontest.Spec("flaky", h.URL("/fail/flaky"), "cron", "* * * * * *", "timezone", "UTC", "paused", true,
		"pause_after_failures", 5))

	openEditForm(t, ctx, d.Base+"/#/tasks/flaky/edit")
	var shown string
	run(t, ctx, "read the bound", chromedp.Value("#pause_after_failures", &shown, chromedp.ByQuery))
	if shown != "5" {
		t.Errorf("the form shows pause_after_failures %q, want 5", shown)
	}
	run(t, ctx, "save a bound out of range", setField("#pause_after_failures", "5000"), chromedp.Click("#save", chromedp.ByQuery))
	waitJS(t, ctx, "the field's error", `document.querySelector("#pause_after_failures-error").textContent.startsWith("pause_after_failures:")`)
	if v := d.Get(t, "flaky"); v.PauseAfterFailures != 5 {
		t.Errorf("after the refused edit: %d, want 5", v.PauseAfterFailures)
	}
	run(t, ctx, "save 2", setField("#pause_after_failures", "2"), chromedp.Click("#save", chromedp.ByQuery))
	waitJS(t, ctx, "the task page", `location.hash === "#/tasks/flaky" && !!document.querySelector("#task-pause-after")`)
	if v := d.Get(t, "flaky"); v.PauseAfterFailures != 2 || !v.Paused {
		t.Errorf("after the edit: pause_after_failures %d, paused %v; want 2, still paused", v.PauseAfterFailures, v.Paused)
	}

	d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/flaky/resume", nil, nil)
	v := d.WaitState(t, "flaky", model.StatePaused)
	if v.Runtime.ConsecutiveFailures != 2 {
		t.Fatalf("paused with count %d, want 2", v.Runtime.ConsecutiveFailures)
	}
	waitJS(t, ctx, "the pause on the page",
		`(document.querySelector("#task-note") || {textContent: ""}).textContent.includes("paused after 2 consecutive failed runs") &&
		 document.querySelector("#task-pause-after").textContent === "after 2 consecutive failed runs (2 now)"`)
	run(t, ctx, "filter the timeline to alerts", setField("#timeline-kind", "breaker_open,breaker_close,final_failure,paused_on_failure"))
	waitJS(t, ctx, "the alert in the timeline",
		`[...document.querySelectorAll("#task-timeline li")].some(l => l.dataset.action === "paused_on_failure")`)
	var kinds string
	run(t, ctx, "read the timeline", chromedp.Evaluate(`[...document.querySelectorAll("#task-timeline li")].map(l => l.dataset.action).join(",")`, &kinds))
	if strings.Count(kinds, "paused_on_failure") != 1 {
		t.Errorf("timeline kinds %q, want one paused_on_failure", kinds)
	}
}
