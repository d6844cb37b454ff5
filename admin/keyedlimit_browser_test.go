package admin_test

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestConsoleBrowserKeyedLimits: the limits page sets a pattern limit tenant:* of 1 and lists
// under it the keys in use: a manual task keyed tenant:{params.tenant} run now for tenants a
// (hung) and b (hung) shows keys tenant:a and tenant:b with a run in flight each, and a fire
// of tenant a waiting; once the runs are released the keys leave the list. The API answers
// the same keys.
func TestConsoleBrowserKeyedLimits(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	h := daemontest.NewHook(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	url := d.Base + "/"
	run(t, ctx, "open the limits", chromedp.Navigate(url+"#/limits"), chromedp.WaitVisible("#cl-form", chromedp.ByQuery))
	run(t, ctx, "limit tenant:* to 1", setField("#cl-kind", "key"), setField("#cl-name", "tenant:*"), setField("#cl-max", "1"),
		chromedp.Click("#cl-save", chromedp.ByQuery))
	waitJS(t, ctx, "the pattern listed", `!!document.querySelector('#limits-table tr[data-limit="key/tenant:*"]')`)

	d.Create(t, daemontest.Spec("tn", h.URL("/hang"), "trigger", "manual", "concurrency_key", "tenant:{params.tenant}"))
	d.RunNow(t, "tn", map[string]any{"params": map[string]any{"tenant": "a"}})
	d.RunNow(t, "tn", map[string]any{"params": map[string]any{"tenant": "b"}})
	h.WaitCalls(t, "tn", 2, daemontest.WaitTimeout)
	// A cron-less delay task of tenant a waits behind a's run.
	d.Create(t, daemontest.Spec("tn-a", h.URL("/ok"), "trigger", "delay", "delay_ms", 0,
		"concurrency_key", "tenant:{params.tenant}", "params", map[string]any{"tenant": "a"}))
	var v client.ConcurrencyLimit
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/concurrency-limits/key/tenant:*", nil, &v)
	if v.KeysInUse != 2 || len(v.Keys) != 2 || v.Keys[0].Key != "tenant:a" || v.Keys[1].Key != "tenant:b" {
		t.Fatalf("the pattern's keys over HTTP: %+v", v)
	}
	// Refresh the page's data: the refresh button re-runs load.
	waitJS(t, ctx, "tenant:a with a run in flight and a fire waiting, tenant:b with one run", `(() => {
		const btn = document.querySelector('#refresh-now'); if (btn) btn.click();
		const a = document.querySelector('#limits-table tr.cl-key[data-key="tenant:a"]');
		const b = document.querySelector('#limits-table tr.cl-key[data-key="tenant:b"]');
		return !!a && !!b && a.querySelector(".cl-in-use").textContent === "1" && a.querySelector(".cl-waiting").textContent === "1" &&
			b.querySelector(".cl-in-use").textContent === "1" && b.querySelector(".cl-waiting").textContent === "0"; })()`)
	h.ReleaseHung()
	h.WaitCalls(t, "tn-a", 1, daemontest.WaitTimeout)
	waitJS(t, ctx, "no key in use any more", `(() => {
		const btn = document.querySelector('#refresh-now'); if (btn) btn.click();
		return !!document.querySelector('#limits-table tr[data-limit="key/tenant:*"]') && !document.querySelector('#limits-table tr.cl-key'); })()`)
}
