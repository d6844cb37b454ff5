package admin_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestConsoleBrowserOverlap: the task form reads and writes overlap_policy and
// catchup_window_sec, shows the server's error on the field it names (a window with misfire
// policy skip names misfire_policy), and the task page shows both where jitter and pause on
// failure are shown.
func TestConsoleBrowserOverlap(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	d.Create(t, daemontest.Spec("nightly", h.URL("/ok"), "cron", "0 3 * * *", "timezone", "UTC", "paused", true,
		"overlap_policy", "buffer_all", "catchup_window_sec", 600))

	openEditForm(t, ctx, d.Base+"/#/tasks/nightly/edit")
	var policy, window string
	run(t, ctx, "read the fields", chromedp.Value("#overlap_policy", &policy, chromedp.ByQuery),
		chromedp.Value("#catchup_window_sec", &window, chromedp.ByQuery))
	if policy != "buffer_all" || window != "600" {
		t.Errorf("the form shows overlap %q, window %q; want buffer_all, 600", policy, window)
	}
	run(t, ctx, "misfire skip with the window", chromedp.SetValue("#misfire_policy", "skip", chromedp.ByQuery),
		chromedp.Click("#save", chromedp.ByQuery))
	waitJS(t, ctx, "the save's error on misfire_policy", `document.querySelector("#misfire_policy-error").textContent.startsWith("misfire_policy:")`)
	if v := d.Get(t, "nightly"); v.MisfirePolicy != "fire_once" || v.CatchupWindowSec != 600 {
		t.Errorf("after the refused edit: misfire %q, window %d", v.MisfirePolicy, v.CatchupWindowSec)
	}
	run(t, ctx, "cancel_other, no window", chromedp.SetValue("#overlap_policy", "cancel_other", chromedp.ByQuery),
		setField("#catchup_window_sec", "0"), chromedp.Click("#save", chromedp.ByQuery))
	waitJS(t, ctx, "the task page", `location.hash === "#/tasks/nightly" && !!document.querySelector("#task-overlap")`)
	if v := d.Get(t, "nightly"); v.OverlapPolicy != "cancel_other" || v.CatchupWindowSec != 0 || v.MisfirePolicy != "skip" {
		t.Errorf("after the edit: overlap %q, window %d, misfire %q", v.OverlapPolicy, v.CatchupWindowSec, v.MisfirePolicy)
	}
	var ov, cu string
	run(t, ctx, "read the rows", chromedp.Text("#task-overlap", &ov, chromedp.ByQuery), chromedp.Text("#task-catchup", &cu, chromedp.ByQuery))
	if !strings.HasPrefix(ov, "cancel_other: the next fire kills the run in flight") || !strings.HasPrefix(cu, "off") {
		t.Errorf("overlap row %q, catch-up row %q", ov, cu)
	}
	// allow_all: its runs are in flight while the task rests, so Kill stays offered.
	openEditForm(t, ctx, d.Base+"/#/tasks/nightly/edit")
	run(t, ctx, "allow_all", chromedp.SetValue("#overlap_policy", "allow_all", chromedp.ByQuery), chromedp.Click("#save", chromedp.ByQuery))
	waitJS(t, ctx, "the task page under allow_all", `location.hash === "#/tasks/nightly" && !!document.querySelector("#task-overlap") &&
		document.querySelector("#task-overlap").textContent.startsWith("allow_all: every fire runs at its time")`)
	if v := d.Get(t, "nightly"); v.OverlapPolicy != "allow_all" {
		t.Errorf("after the edit: overlap %q, want allow_all", v.OverlapPolicy)
	}
	waitJS(t, ctx, "Kill offered for an allow_all task at rest", `!document.querySelector("#act-kill").disabled`)
}
