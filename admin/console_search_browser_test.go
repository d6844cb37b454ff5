package admin_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestConsoleBrowserSearch: the task search ignores case, needs every word it is given,
// applies as one types (no Enter, no Filter click), and a ticket typed into it opens that
// run. More than eight words is a 400 naming q.
func TestConsoleBrowserSearch(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	url := d.Base + "/"
	for _, s := range [][2]string{{"Billing-Nightly", "Finance"}, {"billing-hourly", "ops"}, {"report-nightly", "finance"}, {"cleanup", "ops"}} {
		d.Create(t, daemontest.Spec(s[0], h.URL("/ok/"+s[0]), "trigger", "manual", "group", s[1]))
	}
	if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/tasks?q=a+b+c+d+e+f+g+h+i", nil); !strings.Contains(msg, "q:") {
		t.Errorf("nine words: %q, want an error naming q", msg)
	}

	names := rowsText("#task-table tbody tr td:nth-child(2)")
	run(t, ctx, "open the tasks", chromedp.Navigate(url+"#/tasks"))
	waitJS(t, ctx, "four tasks", `document.querySelectorAll("#task-table tbody tr").length === 4`)
	// Typed, not submitted: the list follows the words.
	run(t, ctx, "type two words", chromedp.SendKeys("#f-q", "NIGHTLY bill", chromedp.ByQuery))
	// The keys go one at a time, and "NIGHTLY b" already lists Billing-Nightly alone: the
	// wait is for the whole search in the address too, which keeps it.
	waitJS(t, ctx, "only Billing-Nightly, and the address keeps the search", `(() => { const r = [...document.querySelectorAll("#task-table tbody tr")].map(x => x.dataset.task);
		return r.length === 1 && r[0] === "Billing-Nightly" && location.hash.includes("q=NIGHTLY+bill"); })()`)
	run(t, ctx, "a word of the group", setField("#f-q", "finance"))
	waitJS(t, ctx, "both finance tasks", `document.querySelectorAll("#task-table tbody tr").length === 2`)
	if v := mustEval(t, ctx, names); v != "Billing-Nightly\nreport-nightly" {
		t.Errorf("finance lists %q", v)
	}
	run(t, ctx, "a word nothing holds", setField("#f-q", "nightly nowhere"))
	waitJS(t, ctx, "none", `(document.querySelector("#task-table") || {}).textContent === "No task matches."`)

	// A ticket opens its run; a ticket no run has is searched as words.
	ticket := d.RunNow(t, "cleanup", nil)
	d.WaitRun(t, "cleanup", ticket)
	run(t, ctx, "an unknown ticket", setField("#f-q", "99-1700000000000-1"))
	waitJS(t, ctx, "searched as words", `(document.querySelector("#list-status") || {}).textContent.startsWith("0 task(s) match") && location.hash.includes("q=99-")`)
	run(t, ctx, "clear", setField("#f-q", ""))
	waitJS(t, ctx, "four again", `document.querySelectorAll("#task-table tbody tr").length === 4`)
	run(t, ctx, "type the ticket", chromedp.SendKeys("#f-q", ticket, chromedp.ByQuery))
	waitJS(t, ctx, "its run", fmt.Sprintf(`location.hash === "#/run/%s" && (document.querySelector("#run-result") || {}).textContent === "success"`, ticket))
}
