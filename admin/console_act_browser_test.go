package admin_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
)

// TestConsoleActOnRuns: a run in flight shows how long it has been running, in the runs
// list and on its page; "running longer than 1 min" on the Runs list keeps the run in flight
// for over a minute and drops the one just started; a failed run's Retry runs its task again
// and opens the new run.
func TestConsoleActOnRuns(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	url := d.Base + "/"

	// Retry: a failed run's page offers Retry; it runs the task now and opens the new run.
	d.Create(t, daemontest.Spec("broken", h.URL("/fail/broken"), "trigger", "manual"))
	first := d.RunNow(t, "broken", nil)
	if r := d.WaitRun(t, "broken", first); r.Result != model.ResultFailed {
		t.Fatalf("broken's run: %+v, want failed", r)
	}
	run(t, ctx, "open the failed run", chromedp.Navigate(url+"#/run/"+first))
	waitJS(t, ctx, "the run failed", `(document.querySelector("#run-result") || {}).textContent === "failed"`)
	clickUntil(t, ctx, "retry", "#run-retry", `document.getElementById("confirm").open`)
	if v := mustEval(t, ctx, `document.getElementById("confirm-text").textContent`); !strings.Contains(v, "task's params as they are now") {
		t.Errorf("the retry's confirmation reads %q; it should say the task's params are used", v)
	}
	run(t, ctx, "confirm the retry", chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "the new run's page", fmt.Sprintf(`location.hash.startsWith("#/run/") && location.hash !== %q &&
		(document.querySelector("#run-task") || {}).textContent === "broken"`, "#/run/"+first))
	second := strings.TrimPrefix(mustEval(t, ctx, `decodeURIComponent(location.hash)`), "#/run/")
	if r := d.WaitRun(t, "broken", second); r.TaskName != "broken" || r.Ticket == first {
		t.Errorf("the retried run = %+v", r)
	}
	if runs := d.Runs(t, "broken"); len(runs) != 2 {
		t.Errorf("broken has %d runs after the retry, want 2", len(runs))
	}

	// Elapsed time and "running longer than 1 min".
	d.Create(t, daemontest.Spec("long", h.URL("/hang/long"), "trigger", "manual", "timeout_sec", 600))
	d.Create(t, daemontest.Spec("short", h.URL("/hang/short"), "trigger", "manual", "timeout_sec", 600))
	long := d.RunNow(t, "long", nil)
	h.WaitCalls(t, "long", 1, daemontest.WaitTimeout)
	var dispatched int64
	testwait.For(t, daemontest.WaitTimeout, "long's run dispatched", func() bool {
		for _, r := range d.Runs(t, "long") {
			if r.Ticket == long && r.DispatchedAt > 0 {
				dispatched = r.DispatchedAt
			}
		}
		return dispatched > 0
	})
	// The filter is about time in flight: the long run must have been in flight over a minute.
	time.Sleep(time.Until(time.UnixMilli(dispatched).Add(62 * time.Second)))
	short := d.RunNow(t, "short", nil)
	h.WaitCalls(t, "short", 1, daemontest.WaitTimeout)

	row := func(ticket string) string {
		return fmt.Sprintf(`document.querySelector('#all-runs-table tr[data-ticket=%q]')`, ticket)
	}
	run(t, ctx, "open the runs", chromedp.Navigate(url+"#/runs"))
	waitJS(t, ctx, "both running", `!!`+row(long)+` && !!`+row(short))
	if v := mustEval(t, ctx, row(long)+`.children[6].textContent`); !strings.HasPrefix(v, "running 1 m") {
		t.Errorf("the long run's duration cell reads %q, want running 1 m …", v)
	}
	// The elapsed time grows with the refresh.
	before := mustEval(t, ctx, row(short)+`.children[6].dataset.elapsed`)
	waitJS(t, ctx, "the short run's elapsed time grown", fmt.Sprintf(`!!%s && Number(%s.children[6].dataset.elapsed) > %s + 1000`, row(short), row(short), before))

	run(t, ctx, "pick running longer than 1 min", chromedp.SetValue("#r-longer", "1m", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#r-longer").dispatchEvent(new Event("change"))`, nil))
	waitJS(t, ctx, "only the long run", fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll("#all-runs-table tbody tr")];
		return rows.length === 1 && rows[0].dataset.ticket === %q; })()`, long))
	if v := mustEval(t, ctx, `location.hash`); !strings.Contains(v, "longer=1m") {
		t.Errorf("the filter is not in the address: %q", v)
	}
	if v := mustEval(t, ctx, `document.querySelector("#runs-longer").textContent`); !strings.Contains(v, "1 of them running longer than 1 min") {
		t.Errorf("the status reads %q", v)
	}
	// 10 min: none.
	run(t, ctx, "pick running longer than 10 min", chromedp.SetValue("#r-longer", "10m", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#r-longer").dispatchEvent(new Event("change"))`, nil))
	waitJS(t, ctx, "no run", `(document.querySelector("#all-runs-table") || {}).textContent === "No runs."`)

	// The run page's elapsed time.
	run(t, ctx, "open the long run", chromedp.Navigate(url+"#/run/"+long))
	waitJS(t, ctx, "its elapsed time", `/^running 1 m/.test((document.querySelector("#run-elapsed") || {}).textContent || "")`)
}
