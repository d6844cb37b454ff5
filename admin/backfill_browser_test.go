package admin_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestConsoleBrowserBackfill: the task page of a cron task starts a backfill from its form,
// shows its refusal naming the field, lists the running backfill with its progress and
// cancels it with its Cancel button; the runs in flight finish and no other starts.
func TestConsoleBrowserBackfill(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	// Hourly through the backfill's six hours only: at "0 * * * *" a run crossing the top of
	// an hour got the task's own fire as a third call.
	d.Create(t, daemontest.Spec("hourly", h.URL("/hang"), "cron", "0 0-5 1 1 *", "timezone", "UTC"))

	run(t, ctx, "open the task", chromedp.Navigate(d.Base+"/#/tasks/hourly"), chromedp.WaitVisible("#backfill-start", chromedp.ByQuery))
	run(t, ctx, "a range that ends before it starts", setField("#backfill-from", "2026-01-01T05:00:00Z"),
		setField("#backfill-to", "2026-01-01T00:00:00Z"), chromedp.Click("#backfill-start", chromedp.ByQuery))
	waitJS(t, ctx, "the refusal naming the field", `document.querySelector("#backfill-error").textContent.startsWith("to:")`)
	run(t, ctx, "six hours, two at a time", setField("#backfill-from", "2026-01-01T00:00:00Z"),
		setField("#backfill-to", "2026-01-01T05:00:00Z"), setField("#backfill-parallel", "2"), chromedp.Click("#backfill-start", chromedp.ByQuery))
	waitJS(t, ctx, "the running backfill listed", `!!document.querySelector('#backfills-table tr[data-status="running"]')`)
	h.WaitCalls(t, "hourly", 2, daemontest.WaitTimeout)
	waitJS(t, ctx, "its progress", `(() => { const r = document.querySelector('#backfills-table tr[data-status="running"]');
		return r && r.querySelector('td.progress').textContent === "0 / 6" && r.querySelector('td.running').textContent === "2 of 2"; })()`)
	clickUntil(t, ctx, "cancel", `#backfills-table tr[data-status="running"] button`, `document.getElementById("confirm").open`)
	run(t, ctx, "confirm the cancel", chromedp.WaitVisible("#confirm-ok", chromedp.ByQuery), chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "the backfill canceled", `!!document.querySelector('#backfills-table tr[data-status="canceled"]')`)
	h.ReleaseHung()
	var list struct {
		Backfills []client.BackfillView `json:"backfills"`
	}
	_, body := d.Call(t, "GET", "/api/v1/tasks/hourly/backfills", nil)
	if err := json.Unmarshal(body, &list); err != nil || len(list.Backfills) != 1 {
		t.Fatalf("backfills: %s (%v)", body, err)
	}
	if b := list.Backfills[0]; b.Status != "canceled" || b.Total != 6 || b.Started != 2 {
		t.Errorf("after the cancel: %+v", b)
	}
	if calls := h.CallsOf("hourly"); len(calls) != 2 {
		var got []string
		for _, c := range calls {
			got = append(got, fmt.Sprintf("%s attempt %s at %s", c.Ticket, c.Attempt, c.At.Format("15:04:05.000")))
		}
		t.Errorf("%d calls (%s), want the 2 in flight at the cancel", len(calls), strings.Join(got, "; "))
	}
}
