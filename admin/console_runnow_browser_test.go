package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/model"
)

// TestConsoleRunNowParams: the task page's run-now box holds the task's params (a sensitive
// value masked); edited and sent, the run gets the edited params (the sensitive one its
// stored value), the toast links the new ticket, the run's page shows the params it was
// given, the timeline's run_now record says params were given, and a Retry of that run
// offers them again. A run given none says it had the task's.
func TestConsoleRunNowParams(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	url := d.Base + "/"
	d.Create(t, daemontest.Spec("export", h.URL("/fail/export"), "trigger", "manual",
		"params", map[string]any{"day": "2026-01-01", "token": "t0p-s3cret"}, "sensitive_params", []string{"token"}))

	run(t, ctx, "open the task", chromedp.Navigate(url+"#/tasks/export"))
	waitJS(t, ctx, "the box pre-filled", `(document.querySelector("#run-params") || {}).value !== "" && (document.querySelector("#run-params") || {}).value !== undefined`)
	var pre map[string]any
	if err := json.Unmarshal([]byte(mustEval(t, ctx, `document.querySelector("#run-params").value`)), &pre); err != nil ||
		pre["day"] != "2026-01-01" || pre["token"] != "***" || len(pre) != 2 {
		t.Fatalf("the run-now box holds %v (%v); want the task's params, the token masked", pre, err)
	}
	// Edit the day, keep the masked token, run.
	run(t, ctx, "edit and run", setField("#run-params", `{"day": "2026-12-24", "token": "***", "full": true}`))
	clickUntil(t, ctx, "run now", "#act-run", `!!document.querySelector("#run-now-ticket")`)
	ticket := mustEval(t, ctx, `document.querySelector("#run-now-ticket").textContent`)
	// The toast's link opens the run.
	run(t, ctx, "open the run from the toast", chromedp.Click("#run-now-ticket", chromedp.ByQuery))
	waitJS(t, ctx, "the run's page", fmt.Sprintf(`location.hash === %q && (document.querySelector("#run-result") || {}).textContent === "failed"`, "#/run/"+ticket))
	calls := h.WaitCalls(t, "export", 1, daemontest.WaitTimeout)
	var sent map[string]any
	if err := json.Unmarshal(calls[0].Body.Params, &sent); err != nil || sent["day"] != "2026-12-24" || sent["token"] != "t0p-s3cret" || sent["full"] != true {
		t.Errorf("the callback got %s (%v); want the edited day, the stored token, full", calls[0].Body.Params, err)
	}
	if calls[0].Ticket != ticket {
		t.Errorf("the toast links %q, the callback ran %q", ticket, calls[0].Ticket)
	}
	// The run's page shows the params given.
	var shown map[string]any
	if err := json.Unmarshal([]byte(mustEval(t, ctx, `document.querySelector("#run-params-given").textContent`)), &shown); err != nil ||
		shown["day"] != "2026-12-24" || shown["token"] != "***" || shown["full"] != true {
		t.Errorf("the run's page shows params %v (%v); want the given ones, the token masked", shown, err)
	}
	// Retry offers the params it was given.
	clickUntil(t, ctx, "retry", "#run-retry", `document.getElementById("confirm").open`)
	if v := mustEval(t, ctx, `document.getElementById("confirm-text").textContent`); !strings.Contains(v, "the params run "+ticket+" was given") {
		t.Errorf("the retry's confirmation reads %q", v)
	}
	run(t, ctx, "confirm the retry", chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "the retry's page", fmt.Sprintf(`location.hash.startsWith("#/run/") && location.hash !== %q && !!document.querySelector("#run-params-given")`, "#/run/"+ticket))
	calls = h.WaitCalls(t, "export", 2, daemontest.WaitTimeout)
	if err := json.Unmarshal(calls[1].Body.Params, &sent); err != nil || sent["day"] != "2026-12-24" || sent["token"] != "t0p-s3cret" {
		t.Errorf("the retry's callback got %s (%v); want the first run's params", calls[1].Body.Params, err)
	}

	// The timeline's run_now record names the params given; the box holds the task's params.
	run(t, ctx, "open the task again", chromedp.Navigate(url+"#/tasks/export"))
	waitJS(t, ctx, "the box filled", `(document.querySelector("#run-params") || {}).value.includes("2026-01-01")`)
	waitJS(t, ctx, "the run_now record", fmt.Sprintf(`[...document.querySelectorAll("#task-timeline li[data-action=run_now]")].some(l => l.textContent.includes(%q) && l.textContent.includes("params given (day, full, token)"))`, ticket))

	// A run given none: the box emptied sends none, and the run says it had the task's.
	run(t, ctx, "empty the box and run", setField("#run-params", ""))
	run(t, ctx, "note the last ticket", chromedp.Evaluate(`document.querySelectorAll("#run-now-ticket").forEach(e => e.remove())`, nil))
	clickUntil(t, ctx, "run now", "#act-run", `!!document.querySelector("#run-now-ticket")`)
	plain := mustEval(t, ctx, `document.querySelector("#run-now-ticket").textContent`)
	calls = h.WaitCalls(t, "export", 3, daemontest.WaitTimeout)
	if err := json.Unmarshal(calls[2].Body.Params, &sent); err != nil || sent["day"] != "2026-01-01" || sent["token"] != "t0p-s3cret" {
		t.Errorf("the plain run's callback got %s (%v); want the task's params", calls[2].Body.Params, err)
	}
	run(t, ctx, "open the plain run", chromedp.Navigate(url+"#/run/"+plain))
	waitJS(t, ctx, "it had the task's params", `(document.querySelector("#run-params-given") || {}).textContent === "the task's (none given)"`)
	d.WaitRun(t, "export", plain)
	var r model.Run
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs/"+plain, nil, &r)
	if r.Params != "" || r.Kind != model.RunManual {
		t.Errorf("the plain run = %+v; want no params stored", r)
	}
}
