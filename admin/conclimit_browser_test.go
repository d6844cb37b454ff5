package admin_test

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestConsoleBrowserConcurrencyLimits: the Concurrency page sets a limit, shows a fire waiting
// for it beside the run in flight, refuses a bad max naming the field, and removes the limit,
// which starts the waiting fire; the task page names the task's group and key.
func TestConsoleBrowserConcurrencyLimits(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	h := daemontest.NewHook(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	url := d.Base + "/"
	run(t, ctx, "open the limits", chromedp.Navigate(url+"#/limits"), chromedp.WaitVisible("#cl-form", chromedp.ByQuery))
	waitJS(t, ctx, "no limits yet", `!!document.querySelector("#limits-empty")`)
	run(t, ctx, "limit key db to 1", setField("#cl-kind", "key"), setField("#cl-name", "db"), setField("#cl-max", "1"),
		chromedp.Click("#cl-save", chromedp.ByQuery))
	waitJS(t, ctx, "key db listed", `(document.querySelector('#limits-table tr[data-limit="key/db"]') || {}).textContent?.includes("1")`)
	run(t, ctx, "a bad max", setField("#cl-max", "0"), chromedp.Click("#cl-save", chromedp.ByQuery))
	waitJS(t, ctx, "the refusal names the field", `document.querySelector("#cl-error").textContent.startsWith("max:")`)

	d.Create(t, daemontest.Spec("db-hung", h.URL("/hang"), "trigger", "delay", "delay_ms", 0, "concurrency_key", "db"))
	h.WaitCalls(t, "db-hung", 1, daemontest.WaitTimeout)
	d.Create(t, daemontest.Spec("db-next", h.URL("/ok"), "trigger", "delay", "delay_ms", 0, "concurrency_key", "db"))
	waitJS(t, ctx, "one in use, one waiting", `(() => { const r = document.querySelector('#limits-table tr[data-limit="key/db"]');
		return !!r && r.querySelector(".cl-in-use").textContent === "1" && r.querySelector(".cl-waiting").textContent === "1"; })()`)
	run(t, ctx, "remove key db", chromedp.Click(`#limits-table tr[data-limit="key/db"] .cl-remove`, chromedp.ByQuery),
		chromedp.WaitVisible("#confirm-ok", chromedp.ByQuery), chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "key db gone", `!document.querySelector('#limits-table tr[data-limit="key/db"]')`)
	h.WaitCalls(t, "db-next", 1, daemontest.WaitTimeout)
	var list struct {
		Limits []client.ConcurrencyLimit `json:"limits"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/concurrency-limits", nil, &list)
	if len(list.Limits) != 0 {
		t.Errorf("limits after the removal: %+v", list.Limits)
	}
	run(t, ctx, "open db-next", chromedp.Navigate(url+"#/tasks/db-next"), chromedp.WaitVisible("#task-concurrency", chromedp.ByQuery))
	waitJS(t, ctx, "the task's group and key", `document.querySelector("#task-concurrency").textContent === "group default, key db"`)
	h.ReleaseHung()
}
