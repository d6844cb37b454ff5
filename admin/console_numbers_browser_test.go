package admin_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/engine"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/protocol"
)

// TestConsoleBrowserNumbers reads, in the browser, the numbers the console once got wrong:
// a killed run's task shows Last result killed and the killed filter finds it; a run in
// flight on an executor shows the executor's address, and once the executor went silent
// the lost run shows how long it was in flight; a manual task's successes count its
// run-now runs; after a bulk pause empties the filter the page says 0 match; the New-task
// form starts in the server's zone.
func TestConsoleBrowserNumbers(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), func(c *axedaemon.Config) {
		c.Timezone = "Asia/Tokyo"
		c.Engine = engine.Config{HeartbeatInterval: 200 * time.Millisecond, LostAfter: 1500 * time.Millisecond}
	})
	h := daemontest.NewHook(t)
	url := d.Base + "/"

	// 1. The New-task form starts in the server's zone.
	run(t, ctx, "open the form", chromedp.Navigate(url+"#/new"), chromedp.WaitVisible("#timezone", chromedp.ByQuery))
	waitJS(t, ctx, "the zone filled", `document.querySelector("#timezone").value !== ""`)
	if z := mustEval(t, ctx, `document.querySelector("#timezone").value`); z != "Asia/Tokyo" {
		t.Errorf("the New-task form's zone is %q, want the server's Asia/Tokyo", z)
	}

	// 2. A killed run: Last result killed, and the killed filter finds the task.
	d.Create(t, daemontest.Spec("stuck", h.URL("/hang/stuck"), "trigger", "delay", "delay_ms", 50, "timeout_sec", 300))
	h.WaitCalls(t, "stuck", 1, daemontest.WaitTimeout)
	d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/stuck/kill", map[string]any{"reason": "numbers"}, nil)
	run(t, ctx, "open the killed task", chromedp.Navigate(url+"#/tasks/stuck"))
	waitJS(t, ctx, "Last result", `!!document.querySelector("#task-last-result")`)
	if v := mustEval(t, ctx, `document.querySelector("#task-last-result").textContent`); v != "killed" {
		t.Errorf("the killed task's Last result is %q", v)
	}
	run(t, ctx, "filter killed", chromedp.Navigate(url+"#/tasks?last_result=killed"))
	waitJS(t, ctx, "the killed filter's rows", `!!document.querySelector("#list-total")`)
	if v := mustEval(t, ctx, rowsText("#task-table tbody tr td:nth-child(2)")); v != "stuck" {
		t.Errorf("the killed filter lists %q, want stuck", v)
	}

	// 3. A manual task's successes count its run-now runs.
	d.Create(t, daemontest.Spec("by-hand", h.URL("/ok/hand"), "trigger", "manual"))
	for i := 0; i < 2; i++ {
		d.WaitRun(t, "by-hand", d.RunNow(t, "by-hand", nil))
	}
	run(t, ctx, "open the manual task", chromedp.Navigate(url+"#/tasks/by-hand"))
	waitJS(t, ctx, "its counts", `/^\d/.test((document.querySelector("#task-counts") || {}).textContent || "")`)
	if v := mustEval(t, ctx, `document.querySelector("#task-counts").textContent`); !strings.HasPrefix(v, "2 / 0") {
		t.Errorf("the manual task's successes / failures read %q, want 2 / 0", v)
	}

	// 4. A bulk pause that empties the filter: the page says 0 match under No task matches.
	for i := 0; i < 3; i++ {
		d.Create(t, daemontest.Spec(fmt.Sprintf("nightly-%d", i), h.URL("/ok/n"), "cron", "0 0 3 * * *", "group", "nightly"))
	}
	run(t, ctx, "filter the nightly group's scheduled tasks", chromedp.Navigate(url+"#/tasks?group=nightly&state=SCHEDULED"))
	waitJS(t, ctx, "three listed", `document.querySelectorAll("#task-table tbody tr").length === 3 &&
		document.querySelector("#list-total").textContent === "3 task(s) match"`)
	run(t, ctx, "select all matching and pause", chromedp.Click("#bulk-all", chromedp.ByQuery))
	clickUntil(t, ctx, "bulk pause", "#bulk-pause", `document.getElementById("confirm").open`)
	run(t, ctx, "confirm", chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "no task matches", `(document.querySelector("#task-table") || {}).textContent === "No task matches."`)
	if v := mustEval(t, ctx, `document.querySelector("#list-total").textContent`); v != "0 task(s) match" {
		t.Errorf("after the bulk pause the count reads %q under No task matches", v)
	}

	// 5. A run on an executor: the runs list shows its address while in flight; once the
	// executor goes silent the lost run's duration is how long it was in flight.
	exe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"accepted":true}`)
	}))
	t.Cleanup(exe.Close)
	addr := strings.TrimPrefix(exe.URL, "http://")
	d.MustJSON(t, 200, "POST", protocol.PathRegister, map[string]any{"app": "billing", "address": addr, "handlers": []string{"charge"}}, nil)
	beat, stopBeat := context.WithCancel(context.Background())
	defer stopBeat()
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		for beat.Err() == nil {
			code, _ := d.Call(t, "POST", protocol.PathHeartbeat, map[string]any{"app": "billing", "address": addr, "running": 1})
			if code != 200 {
				t.Errorf("heartbeat: %d", code)
				return
			}
			select {
			case <-beat.Done():
			case <-time.After(150 * time.Millisecond):
			}
		}
	}()
	d.Create(t, map[string]any{"name": "charge", "trigger": "manual", "timeout_sec": 600,
		"callback": map[string]any{"type": "executor", "app": "billing", "handler": "charge"}})
	ticket := d.RunNow(t, "charge", nil)
	run(t, ctx, "open the runs", chromedp.Navigate(url+"#/runs?task=charge"))
	row := fmt.Sprintf(`document.querySelector('#all-runs-table tr[data-ticket=%q]')`, ticket)
	waitJS(t, ctx, "the run in flight", row+` && `+row+`.dataset.result === "running"`)
	if v := mustEval(t, ctx, row+`.children[5].textContent`); v != addr {
		t.Errorf("the executor column of a run in flight reads %q, want the executor's address %s", v, addr)
	}
	time.Sleep(time.Second) // the run is in flight a while before its executor goes silent
	stopBeat()
	<-beats
	if r := d.WaitRun(t, "charge", ticket); r.Result != model.ResultLost {
		t.Fatalf("the run on the silent executor: %+v, want lost", r)
	}
	run(t, ctx, "open the lost run", chromedp.Navigate(url+"#/run/"+ticket))
	waitJS(t, ctx, "the run lost", `(document.querySelector("#run-result") || {}).textContent === "lost"`)
	dur := mustEval(t, ctx, `[...document.querySelectorAll("#run-detail dt")].find(e => e.textContent === "Duration").nextElementSibling.textContent`)
	stored := d.Runs(t, "charge")[0]
	t.Logf("lost run: duration shown %q, stored %d ms", dur, stored.DurationMS)
	if stored.DurationMS < 1000 || dur == "0 ms" || !strings.ContainsAny(dur, "123456789") {
		t.Errorf("the lost run's duration reads %q (stored %d ms), want the ≥ 1 s it was in flight", dur, stored.DurationMS)
	}
	if stored.DurationMS != stored.EndedAt-stored.DispatchedAt {
		t.Errorf("stored duration %d ms, ended-dispatched %s ms", stored.DurationMS, strconv.FormatInt(stored.EndedAt-stored.DispatchedAt, 10))
	}
}
