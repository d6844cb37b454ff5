package admin_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
)

// TestConsoleAlertsByTask: the Alerts page narrowed to one task lists that task's recent
// alerts and stored records only, newest first, and says so; an unknown task says so too.
func TestConsoleAlertsByTask(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	url := d.Base + "/"
	// Each fails every second until its second failure pauses it: final_failure and
	// paused_on_failure alerts, recent and stored.
	for _, n := range []string{"fail-a", "fail-b"} {
		d.Create(t, daemontest.Spec(n, h.URL("/fail/"+n), "cron", "* * * * * *", "pause_after_failures", 2))
	}
	var a struct {
		Actions    []model.Action `json:"actions"`
		Deliveries []struct {
			Task string `json:"task"`
		} `json:"deliveries"`
	}
	testwait.For(t, daemontest.WaitTimeout, "both tasks paused on failure with their alerts", func() bool {
		for _, n := range []string{"fail-a", "fail-b"} {
			if d.Get(t, n).Runtime.State != model.StatePaused {
				return false
			}
		}
		d.MustJSON(t, http.StatusOK, "GET", "/api/v1/alerts?task=fail-a", nil, &a)
		tasks := map[string]bool{}
		for _, x := range a.Deliveries {
			tasks[x.Task] = true
		}
		// The records a pause writes land after the task's state does: wait for every
		// one of them, or the page may list more rows than this answer counted.
		kinds := map[string]int{}
		for _, x := range a.Actions {
			kinds[x.Action]++
		}
		return kinds["paused_on_failure"] == 1 && kinds["pause"] == 1 && kinds["final_failure"] == 2 &&
			kinds["result"] == 2 && tasks["fail-a"] && tasks["fail-b"]
	})
	d.MustJSON(t, http.StatusOK, "GET", "/api/v1/alerts?task=fail-a", nil, &a)

	run(t, ctx, "open the alerts", chromedp.Navigate(url+"#/alerts"))
	waitJS(t, ctx, "both tasks' recent alerts", `(() => { const t = (document.querySelector("#deliveries-table") || {}).textContent || "";
		return t.includes("fail-a") && t.includes("fail-b"); })()`)
	run(t, ctx, "type the task", chromedp.SendKeys("#alerts-task", "fail-a", chromedp.ByQuery))
	waitJS(t, ctx, "fail-a's records", fmt.Sprintf(`document.querySelectorAll("#stored-alerts-table tbody tr").length === %d &&
		document.querySelector("#al-stored-h").textContent === "Stored records of task fail-a"`, len(a.Actions)))
	if v := mustEval(t, ctx, rowsText("#deliveries-table tbody tr td:nth-child(3)")); strings.Trim(strings.ReplaceAll(v, "fail-a", ""), "\n ,") != "" || !strings.Contains(v, "fail-a") {
		t.Errorf("the recent alerts narrowed to fail-a name the tasks %q", v)
	}
	// Newest first, as the API answers.
	if v := mustEval(t, ctx, `(() => { const at = [...document.querySelectorAll("#stored-alerts-table tbody tr")].map(r => Number(r.dataset.at));
		return String(at.length > 1 && at.every((x, i) => i === 0 || at[i-1] >= x)); })()`); v != "true" {
		t.Errorf("fail-a's stored records are not newest first")
	}
	for i, act := range a.Actions {
		if v := mustEval(t, ctx, fmt.Sprintf(`document.querySelectorAll("#stored-alerts-table tbody tr")[%d].dataset.action`, i)); v != act.Action {
			t.Errorf("row %d is %q, the API's %d-th record is %q", i, v, i, act.Action)
		}
	}
	if v := mustEval(t, ctx, `location.hash`); v != "#/alerts?task=fail-a" {
		t.Errorf("the address after the task filter: %q", v)
	}
	// The address opens the page narrowed.
	run(t, ctx, "open the address", chromedp.Navigate(url+"#/overview"), chromedp.Navigate(url+"#/alerts?task=fail-b"))
	waitJS(t, ctx, "fail-b's records", `(document.querySelector("#al-stored-h") || {}).textContent === "Stored records of task fail-b" &&
		!!document.querySelector("#stored-alerts-table tbody tr")`)
	// An unknown task.
	run(t, ctx, "open an unknown task's alerts", chromedp.Navigate(url+"#/alerts?task=nope"))
	waitJS(t, ctx, "no such task", `(document.querySelector("#stored-alerts-table") || {}).textContent === "No task named nope."`)
}
