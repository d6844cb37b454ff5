package admin_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestConsoleEditDiff: an edit made in the console's form shows in the task's timeline as a
// table of the fields it changed, each with its value before and after; a sensitive param's
// values read ***.
func TestConsoleEditDiff(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	url := d.Base + "/"
	d.Create(t, daemontest.Spec("report", h.URL("/ok/r"), "cron", "0 */5 * * * *", "timezone", "UTC", "timeout_sec", 30,
		"params", map[string]any{"day": "mon", "token": "s3cret"}, "sensitive_params", []string{"token"}))

	// The edit, through the console's form.
	openEditForm(t, ctx, url+"#/tasks/report/edit")
	waitJS(t, ctx, "the form filled", `(document.querySelector("#cron") || {}).value === "0 */5 * * * *"`)
	run(t, ctx, "change the cron and the timeout", setField("#cron", "0 0 * * * *"), setField("#timeout_sec", "90"))
	run(t, ctx, "save", chromedp.Click("#save", chromedp.ByQuery))
	waitJS(t, ctx, "the task page", `location.hash === "#/tasks/report"`)
	// A second edit, of a sensitive param, through the API.
	d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/tasks/report", daemontest.Spec("report", h.URL("/ok/r"), "cron", "0 0 * * * *",
		"timezone", "UTC", "timeout_sec", 90, "params", map[string]any{"day": "mon", "token": "n3w"}, "sensitive_params", []string{"token"}), nil)

	row := func(field string) string {
		return `[...document.querySelectorAll('#task-timeline li[data-action=update] table.diff tr[data-field="` + field + `"]')]`
	}
	cells := func(field string) string {
		return row(field) + `.map(r => [...r.children].map(c => c.textContent).join("|")).join("\n")`
	}
	waitJS(t, ctx, "both edits' diffs", row("cron")+`.length === 1 && `+row("params.token")+`.length === 1`)
	if v := mustEval(t, ctx, cells("cron")); v != `cron|"0 */5 * * * *"|"0 0 * * * *"` {
		t.Errorf("the cron row reads %q", v)
	}
	if v := mustEval(t, ctx, cells("timeout_sec")); v != `timeout_sec|30|90` {
		t.Errorf("the timeout row reads %q", v)
	}
	if v := mustEval(t, ctx, cells("params.token")); v != `params.token|"***"|"***"` {
		t.Errorf("the sensitive param's row reads %q", v)
	}
	if v := mustEval(t, ctx, rowsText("#task-timeline li[data-action=update]")); strings.Contains(v, "s3cret") || strings.Contains(v, "n3w") {
		t.Errorf("the timeline shows a sensitive value:\n%s", v)
	}
	// The form's edit changed only what it changed: no params row in its record.
	if v := mustEval(t, ctx, `[...document.querySelectorAll('#task-timeline li[data-action=update]')].map(li => li.querySelectorAll("table.diff tbody tr").length).join(",")`); v != "1,2" {
		t.Errorf("the two update records list %s changed fields, want 1 (the token) and 2 (cron, timeout)", v)
	}
}

// TestConsoleLimitWaits: a run that waited for a concurrency slot, and one that waited for
// its downstream's rate limit, say on their page how long and for which limit, and so does
// the dispatch event of their task's timeline; a run that did not wait says so.
func TestConsoleLimitWaits(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	url := d.Base + "/"
	conc, rate, downstream := limitWaits(t, d)
	for _, c := range []struct {
		run  string
		task string
		re   string
	}{
		{conc.Ticket, "db-next", `^[0-9.]+m?s for concurrency limit key db \(1\)$`},
		{rate.Ticket, "rl-second", `^[0-9.]+m?s for rate limit ` + regexp.QuoteMeta(downstream) + `$`},
	} {
		run(t, ctx, "open "+c.task+"'s run", chromedp.Navigate(url+"#/run/"+c.run))
		waitJS(t, ctx, c.task+"'s wait on its page", fmt.Sprintf(`new RegExp(%q).test((document.querySelector("#run-waits") || {}).textContent || "")`, c.re))
		run(t, ctx, "open "+c.task, chromedp.Navigate(url+"#/tasks/"+c.task))
		waitJS(t, ctx, c.task+"'s wait in its timeline", fmt.Sprintf(`[...document.querySelectorAll("#task-timeline li[data-action=dispatch] .detail")].some(e => new RegExp(%q).test(e.textContent.replace(/^attempt 1; waited /, "")))`, c.re))
	}
	first := d.Runs(t, "rl-first")[0]
	run(t, ctx, "open a run that did not wait", chromedp.Navigate(url+"#/run/"+first.Ticket))
	waitJS(t, ctx, "no wait", `(document.querySelector("#run-waits") || {}).textContent === "no wait for a limit"`)
}
