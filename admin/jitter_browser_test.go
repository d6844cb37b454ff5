package admin_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestConsoleBrowserJitter: the task form reads and writes jitter_sec, previews when each fire
// leaves and shows the server's error naming the field for a bound the schedule's gap
// refuses; the task page shows the bound, the next fire's jitter and the preview's jitter
// and leave time, as the engine computes them.
func TestConsoleBrowserJitter(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	d.Create(t, daemontest.Spec("spread", h.URL("/ok"), "cron", "0 3 * * *", "timezone", "UTC", "paused", true, "jitter_sec", 600))

	openEditForm(t, ctx, d.Base+"/#/tasks/spread/edit")
	var shown string
	run(t, ctx, "read the bound", chromedp.Value("#jitter_sec", &shown, chromedp.ByQuery))
	if shown != "600" {
		t.Errorf("the form shows jitter_sec %q, want 600", shown)
	}
	waitJS(t, ctx, "the form's preview with jitter", `document.querySelectorAll("#cron-preview td.leaves").length === 10`)
	run(t, ctx, "every minute with a minute of jitter", setField("#cron", "*/1 * * * *"), setField("#jitter_sec", "60"))
	waitJS(t, ctx, "the preview's error on the field", `document.querySelector("#jitter_sec-error").textContent.startsWith("jitter_sec:")`)
	run(t, ctx, "save it", chromedp.Click("#save", chromedp.ByQuery))
	waitJS(t, ctx, "the save's error", `document.querySelector("#form-error").textContent.startsWith("jitter_sec:")`)
	if v := d.Get(t, "spread"); v.JitterSec != 600 || v.Cron != "0 3 * * *" {
		t.Errorf("after the refused edit: jitter %d, cron %q; want 600 and the old cron", v.JitterSec, v.Cron)
	}
	// The preview re-renders its table (ten rows where "No preview." stood) 200 ms after the
	// edit, moving the Save button down; a click aimed before that lands elsewhere, so the
	// save waits for the preview to settle.
	run(t, ctx, "set 45", setField("#jitter_sec", "45"))
	waitJS(t, ctx, "the preview with 45", `document.querySelectorAll("#cron-preview td.leaves").length === 10 && document.querySelector("#jitter_sec-error").textContent === ""`)
	run(t, ctx, "save 45", chromedp.Click("#save", chromedp.ByQuery))
	waitJS(t, ctx, "the task page", `location.hash === "#/tasks/spread" && !!document.querySelector("#task-jitter")`)
	v := d.Get(t, "spread")
	if v.JitterSec != 45 || v.Cron != "*/1 * * * *" {
		t.Fatalf("after the edit: jitter %d, cron %q; want 45 and */1", v.JitterSec, v.Cron)
	}
	run(t, ctx, "resume", chromedp.Navigate(d.Base+"/#/tasks"), chromedp.Navigate(d.Base+"/#/tasks/spread"))
	waitJS(t, ctx, "the preview's jitter column", `document.querySelectorAll("#fires-table td.jitter").length === 10`)
	var text string
	run(t, ctx, "read the jitter row", chromedp.Text("#task-jitter", &text, chromedp.ByQuery))
	if !strings.HasPrefix(text, "each fire leaves up to 45 s after its time") {
		t.Errorf("jitter row %q", text)
	}
	// The first fire's jitter cell is the engine's offset of that fire (the time cell is the
	// nominal time in the task's zone, UTC here).
	var cells []string
	run(t, ctx, "read the first fire", chromedp.Evaluate(
		`[...document.querySelectorAll("#fires-table tbody tr:first-child td")].map(c => c.textContent)`, &cells))
	if len(cells) < 5 {
		t.Fatalf("first fire's row %q", cells)
	}
	at, err := time.ParseInLocation("2006-01-02 15:04:05", cells[1], time.UTC)
	if err != nil {
		t.Fatalf("first fire's time %q: %v", cells[1], err)
	}
	j := engine.JitterOffset("spread", at.UnixMilli(), 45)
	want := fmt.Sprintf("%d ms", j)
	if j >= 1000 {
		want = fmt.Sprintf("%.1f s", float64(j)/1000)
	}
	if cells[3] != want {
		t.Errorf("first fire (%s) shows jitter %q, want %q (row %q)", cells[1], cells[3], want, cells)
	}
}
