package admin_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/wire"
)

// wfSink is the HTTP endpoint the steps of the console's test workflows call: it answers
// by step, fails a step as many times as asked, holds a "slow" step until its request is
// ended (a kill, a cancel) or the test ends, and counts the requests of each step.
type wfSink struct {
	mu      sync.Mutex
	failing map[string]int
	calls   map[string]int
	inputs  map[string]string // step → the inputs of its last request
	release chan struct{}
	srv     *httptest.Server
}

func newWFSink(t *testing.T) *wfSink {
	s := &wfSink{failing: map[string]int{}, calls: map[string]int{}, inputs: map[string]string{}, release: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body struct {
			Params struct {
				Step   string          `json:"step"`
				Item   json.RawMessage `json:"item"`
				Inputs json.RawMessage `json:"inputs"`
				Params map[string]any  `json:"params"`
			} `json:"params"`
		}
		_ = json.Unmarshal(raw, &body)
		p := body.Params
		s.mu.Lock()
		s.calls[p.Step]++
		s.inputs[p.Step] = string(p.Inputs)
		fail := s.failing[p.Step] > 0
		if fail {
			s.failing[p.Step]--
		}
		s.mu.Unlock()
		if p.Step == "slow" {
			select {
			case <-r.Context().Done():
			case <-s.release:
			case <-time.After(2 * time.Minute):
			}
			return
		}
		if fail {
			http.Error(w, "clean: the source table is locked", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch p.Step {
		case "sync":
			fmt.Fprintf(w, `{"path": "/data/%v/orders.parquet", "rows": 1204, "days": [1, 2, 3]}`, p.Params["day"])
		case "clean":
			var in struct {
				Sync struct {
					Path string `json:"path"`
				} `json:"sync"`
			}
			_ = json.Unmarshal(p.Inputs, &in)
			fmt.Fprintf(w, `{"cleaned": %q, "dropped": 7}`, in.Sync.Path)
		case "per_day":
			fmt.Fprintf(w, `{"day": %s, "ok": true}`, p.Item)
		default:
			fmt.Fprint(w, `{"done": true}`)
		}
	}))
	t.Cleanup(func() { close(s.release); s.srv.Close() })
	return s
}

func (s *wfSink) fail(step string, n int) {
	s.mu.Lock()
	s.failing[step] = n
	s.mu.Unlock()
}

func (s *wfSink) count(step string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[step]
}

func (s *wfSink) lastInputs(step string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inputs[step]
}

// wfRun reads a workflow run through the API.
func wfRun(t *testing.T, d *daemontest.Daemon, id string) wire.WorkflowRunView {
	t.Helper()
	var v wire.WorkflowRunView
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/workflow-runs/"+id, nil, &v)
	return v
}

func wfStep(v wire.WorkflowRunView, name string) wire.WorkflowStepView {
	for _, s := range v.Steps {
		if s.Name == name {
			return s
		}
	}
	return wire.WorkflowStepView{}
}

// TestConsoleWorkflows walks the workflow pages in Chromium against a live axe whose steps
// are real HTTP endpoints: the list with pause and resume; a workflow's page, whose Run now
// carries params edited from the definition's; the run's page, where clean failed: the DAG's
// boxes are coloured by state (sync green, clean red, report skipped) with the fan-out's
// counts and an edge per need, the Gantt has a bar per started step, clean's inputs are
// sync's output; Rerun from failed makes the run succeed without calling sync again; a
// step rerun with what follows; a failed step marked succeeded with an output that reaches
// the step after it; a running attempt killed by its ticket; a run cancelled; a backfill
// started from the form. Screenshots of the three pages at desktop and phone width go to
// $AXE_DOCS_IMG (else the artifacts folder), and no page is wider than a phone's screen.
func TestConsoleWorkflows(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	dir := os.Getenv("AXE_DOCS_IMG")
	if dir == "" {
		dir = filepath.Join(artifacts(t), "pages")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	sink := newWFSink(t)
	url := d.Base + "/"
	cb := map[string]any{"type": "http", "url": sink.srv.URL}
	d.MustJSON(t, http.StatusCreated, http.MethodPost, "/api/v1/workflows", map[string]any{
		"name": "orders", "group": "etl", "trigger": "cron", "cron": "0 2 * * *", "timezone": "Europe/Berlin",
		"params": map[string]any{"day": "2026-12-01", "table": "orders"},
		"steps": []map[string]any{
			{"name": "sync", "callback": cb},
			{"name": "clean", "needs": []string{"sync"}, "callback": cb},
			{"name": "per_day", "needs": []string{"sync"}, "fan_out": "sync.days", "parallelism": 2, "callback": cb},
			{"name": "report", "needs": []string{"clean", "per_day"}, "callback": cb},
			{"name": "alert", "needs": []string{"clean", "report"}, "condition": "any_failed", "callback": cb},
		},
	}, nil)
	d.MustJSON(t, http.StatusCreated, http.MethodPost, "/api/v1/workflows", map[string]any{
		"name": "slowflow", "group": "ops", "trigger": "manual",
		"steps": []map[string]any{{"name": "slow", "timeout_sec": 600, "callback": cb}, {"name": "after", "needs": []string{"slow"}, "callback": cb}},
	}, nil)

	// The list: both workflows, the cron one with its next fire; pause and resume.
	run(t, ctx, "open the workflows", chromedp.Navigate(url+"#/workflows"))
	waitJS(t, ctx, "the list", `document.querySelectorAll("#workflows-table tbody tr").length === 2`)
	if v := mustEval(t, ctx, rowsText(`#workflows-table tr[data-key="wf:orders"] td`)); !strings.Contains(v, "cron 0 2 * * * (Europe/Berlin)") ||
		!strings.Contains(v, "etl") || !strings.Contains(v, "Europe/Berlin") || !strings.Contains(v, "v1") {
		t.Errorf("orders' row reads %q", v)
	}
	clickUntil(t, ctx, "pause orders", `#workflows-table tr[data-key="wf:orders"] .wf-toggle`,
		`document.querySelector('#workflows-table tr[data-key="wf:orders"]').dataset.paused === "true"`)
	var w wire.WorkflowView
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/workflows/orders", nil, &w)
	if !w.Paused {
		t.Fatalf("orders is not paused after the console's Pause: %+v", w)
	}
	clickUntil(t, ctx, "resume orders", `#workflows-table tr[data-key="wf:orders"] .wf-toggle`,
		`document.querySelector('#workflows-table tr[data-key="wf:orders"]').dataset.paused === "false"`)

	// The workflow's page: Run now with the params pre-filled, edited.
	sink.fail("clean", 1)
	run(t, ctx, "open orders", chromedp.Navigate(url+"#/workflows/orders"))
	waitJS(t, ctx, "the steps listed", `document.querySelectorAll("#wf-steps-table tbody tr").length === 5`)
	if v := mustEval(t, ctx, `document.querySelector("#wf-run-params").value`); !strings.Contains(v, `"day": "2026-12-01"`) {
		t.Fatalf("the run-now params are not pre-filled from the definition: %q", v)
	}
	run(t, ctx, "edit the params", setField("#wf-run-params", `{"day": "2026-12-02", "table": "orders"}`))
	run(t, ctx, "run now", chromedp.Click("#wf-run", chromedp.ByQuery))
	waitJS(t, ctx, "the run's page", `location.hash.startsWith("#/workflow-run/")`)
	id := strings.TrimPrefix(mustEval(t, ctx, `decodeURIComponent(location.hash)`), "#/workflow-run/")
	waitJS(t, ctx, "the run failed", `(document.querySelector("#wf-run-state") || {}).textContent === "failed"`)
	v := wfRun(t, d, id)
	if v.State != "failed" || wfStep(v, "clean").State != "failed" || !strings.Contains(string(wfStep(v, "sync").Output), "2026-12-02") {
		t.Fatalf("the run %s: %+v", id, v)
	}

	// The DAG: a box per step coloured by its state, an edge per need, the fan-out's counts.
	waitJS(t, ctx, "the DAG drawn", `document.querySelector('#wf-dag-svg g.dag-node[data-step="clean"].step-failed') !== null`)
	states := mustEval(t, ctx, `[...document.querySelectorAll("#wf-dag-svg g.dag-node")].map(g => g.dataset.step + "=" + g.dataset.state).join(",")`)
	if states != "sync=succeeded,clean=failed,per_day=succeeded,report=skipped,alert=succeeded" {
		t.Errorf("the DAG's boxes: %s", states)
	}
	stroke := func(step string) string {
		return mustEval(t, ctx, fmt.Sprintf(`getComputedStyle(document.querySelector('#wf-dag-svg g.dag-node[data-step=%q] rect')).stroke`, step))
	}
	if ok, bad, skip := stroke("sync"), stroke("clean"), stroke("report"); ok == bad || ok == skip || bad == skip || ok == "" {
		t.Errorf("the boxes are not coloured by state: succeeded %s, failed %s, skipped %s", ok, bad, skip)
	}
	if fill := mustEval(t, ctx, `getComputedStyle(document.querySelector('#wf-dag-svg g.dag-node[data-step="clean"] rect')).fill`); fill == "" || fill == "none" {
		t.Errorf("the failed box has no fill: %q", fill)
	}
	if n := mustEval(t, ctx, `String(document.querySelectorAll("#wf-dag-svg path.dag-edge").length)`); n != "6" {
		t.Errorf("the DAG has %s edges, want 6 (one per need)", n)
	}
	if e := mustEval(t, ctx, `[...document.querySelectorAll("#wf-dag-svg path.dag-edge")].filter(p => p.getAttribute("d").split("L").length < 2).length + ""`); e != "0" {
		t.Errorf("%s edges have no path", e)
	}
	if txt := mustEval(t, ctx, `document.querySelector('#wf-dag-svg g.dag-node[data-step="per_day"]').textContent`); !strings.Contains(txt, "3 ok of 3") {
		t.Errorf("the fan-out's box reads %q, want its item counts", txt)
	}
	// Laid out in ranks: sync left of clean, clean left of report.
	x := func(step string) string {
		return mustEval(t, ctx, fmt.Sprintf(`String(document.querySelector('#wf-dag-svg g.dag-node[data-step=%q]').getBoundingClientRect().x)`, step))
	}
	if xs, xc, xr := x("sync"), x("clean"), x("report"); !(atof(xs) < atof(xc) && atof(xc) < atof(xr)) {
		t.Errorf("the DAG is not laid out by needs: sync at %s, clean at %s, report at %s", xs, xc, xr)
	}
	// The list's last_run, which the Workflows page shows, is this run.
	var list struct {
		Workflows []struct {
			Name    string `json:"name"`
			LastRun *struct {
				ID    string `json:"id"`
				State string `json:"state"`
			} `json:"last_run"`
		} `json:"workflows"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/workflows?last_run=1", nil, &list)
	for _, w := range list.Workflows {
		if (w.Name == "orders") != (w.LastRun != nil) || w.LastRun != nil && (w.LastRun.ID != id || w.LastRun.State != "failed") {
			t.Errorf("GET /api/v1/workflows?last_run=1: %s has last_run %+v", w.Name, w.LastRun)
		}
	}
	// The Gantt: a bar per started step (report was skipped), each wider than nothing.
	if n := mustEval(t, ctx, `String(document.querySelectorAll("#wf-gantt-svg rect.gantt-bar").length)`); n != "4" {
		t.Errorf("the Gantt has %s bars, want 4", n)
	}
	if n := mustEval(t, ctx, `String([...document.querySelectorAll("#wf-gantt-svg rect.gantt-bar")].filter(r => r.getBBox().width > 0).length)`); n != "4" {
		t.Errorf("%s of the Gantt's bars have a width", n)
	}
	if v := mustEval(t, ctx, `document.querySelector('#wf-gantt-svg rect.gantt-bar[data-step="clean"]').getAttribute("class")`); !strings.Contains(v, "step-failed") {
		t.Errorf("clean's bar is %q", v)
	}
	// clean's inputs are sync's output; its error is shown.
	if v := mustEval(t, ctx, `document.querySelector('#wf-run-steps section[data-step="clean"]').textContent`); !strings.Contains(v, "/data/2026-12-02/orders.parquet") ||
		!strings.Contains(v, "HTTP 500") {
		t.Errorf("clean's section lacks its inputs or error: %q", v)
	}
	// Clicking a box brings its step's section.
	run(t, ctx, "pick clean", chromedp.Click(`#wf-dag-svg g.dag-node[data-step="clean"]`, chromedp.ByQuery))
	waitJS(t, ctx, "clean's section picked", `document.querySelector('#wf-run-steps section[data-step="clean"]').classList.contains("picked")`)

	// Narrowed to a phone's width, the page lays the DAG out again top to bottom (sync above
	// clean), and back left to right when widened.
	pos := `(s, k) => document.querySelector('#wf-dag-svg g.dag-node[data-step="' + s + '"]').getBoundingClientRect()[k]`
	run(t, ctx, "narrow", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	waitJS(t, ctx, "the DAG top to bottom", `(() => { const p = `+pos+`; return p("sync", "bottom") < p("clean", "top"); })()`)
	run(t, ctx, "widen", chromedp.EmulateViewport(1280, 900))
	waitJS(t, ctx, "the DAG left to right", `(() => { const p = `+pos+`; return p("sync", "right") < p("clean", "left"); })()`)

	shots := func(name, hash, ready string) {
		for _, size := range []struct {
			name string
			w, h int64
			opts []chromedp.EmulateViewportOption
		}{{"desktop", 1280, 800, nil}, {"phone", 390, 844, []chromedp.EmulateViewportOption{chromedp.EmulateMobile}}} {
			run(t, ctx, "viewport "+size.name, chromedp.EmulateViewport(size.w, size.h, size.opts...))
			run(t, ctx, "open "+name, chromedp.Navigate(url+"?shot="+name+"-"+size.name+hash))
			waitJS(t, ctx, name+" rendered", "(() => { try { return "+ready+"; } catch { return false; } })()")
			if size.name == "phone" {
				if over := mustEval(t, ctx, phoneOverflow); over != "" {
					t.Errorf("%s at %d px: %s", name, size.w, over)
				}
			}
			run(t, ctx, "settle", chromedp.Evaluate(`localStorage.setItem("axe.refreshPaused", "1")`, nil), chromedp.Sleep(300*time.Millisecond))
			var raw []byte
			run(t, ctx, "screenshot "+name, chromedp.CaptureScreenshot(&raw))
			small, err := docsPNG(raw)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "console-"+name+"-"+size.name+".png")
			if err := os.WriteFile(file, small, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d bytes", file, len(small))
			run(t, ctx, "resume", chromedp.Evaluate(`localStorage.removeItem("axe.refreshPaused")`, nil))
		}
		run(t, ctx, "viewport desktop", chromedp.EmulateViewport(1280, 900))
	}
	shots("workflow-run", "#/workflow-run/"+id, `document.querySelectorAll("#wf-dag-svg g.dag-node").length === 5 && !!document.querySelector("#wf-gantt-svg rect.gantt-bar")`)
	shots("workflows", "#/workflows", `document.querySelectorAll("#workflows-table tbody tr").length === 2 && !!document.querySelector("#workflows-table .last-run a")`)
	shots("workflow", "#/workflows/orders", `document.querySelectorAll("#wf-runs-table tbody tr").length === 1`)

	// Rerun from failed: clean runs again and the run succeeds; sync is not called again.
	syncCalls := sink.count("sync")
	run(t, ctx, "open the run", chromedp.Navigate(url+"#/workflow-run/"+id))
	waitJS(t, ctx, "the run failed", `(document.querySelector("#wf-run-state") || {}).textContent === "failed"`)
	run(t, ctx, "rerun from failed", chromedp.Click("#wf-rerun-failed", chromedp.ByQuery))
	waitJS(t, ctx, "the run succeeded", `(document.querySelector("#wf-run-state") || {}).textContent === "succeeded"`)
	// alert (any_failed) ran and succeeded the first time: it keeps its output and stays so.
	waitJS(t, ctx, "every box green", `[...document.querySelectorAll("#wf-dag-svg g.dag-node")].map(g => g.dataset.state).join() === "succeeded,succeeded,succeeded,succeeded,succeeded"`)
	if v := wfRun(t, d, id); v.State != "succeeded" || wfStep(v, "report").State != "succeeded" {
		t.Fatalf("after the rerun from failed: %+v", v)
	}
	if n := sink.count("sync"); n != syncCalls {
		t.Errorf("sync was called %d times by the rerun from failed", n-syncCalls)
	}
	if n := mustEval(t, ctx, `String(document.querySelectorAll("#wf-gantt-svg rect.gantt-bar.step-succeeded").length)`); n != "5" {
		t.Errorf("after the rerun the Gantt has %s green bars, want 5", n)
	}

	// Rerun one step and what follows: report runs again, sync and clean do not.
	reports, cleans := sink.count("report"), sink.count("clean")
	clickUntil(t, ctx, "rerun report", `#wf-run-steps section[data-step="report"] .wf-rerun-step`, `document.getElementById("confirm").open`)
	run(t, ctx, "confirm", chromedp.Click("#confirm-ok", chromedp.ByQuery))
	testwait.For(t, daemontest.WaitTimeout, "report to run again", func() bool { return sink.count("report") == reports+1 })
	testwait.For(t, daemontest.WaitTimeout, "the run to succeed again", func() bool { return wfRun(t, d, id).State == "succeeded" })
	// The page, refreshing again since the rerun reopened the run, shows it: report's
	// attempts include the one its own rerun started.
	attempts := wfStep(wfRun(t, d, id), "report").Attempts
	last := attempts[len(attempts)-1].Ticket
	shown, ok := 0, 0
	for _, a := range attempts {
		// A step-level row (index -1) left pending marks a rerun, not an attempt: the page
		// leaves it out.
		if a.Index >= 0 || a.State != "pending" {
			shown++
		}
		if a.State == "succeeded" {
			ok++
		}
	}
	if last == "" || ok != 2 {
		t.Errorf("report's attempts after its rerun: %+v", attempts)
	}
	waitJS(t, ctx, "the page shows the second end", fmt.Sprintf(`(document.querySelector("#wf-run-state") || {}).textContent === "succeeded" &&
		document.querySelectorAll('#wf-run-steps section[data-step="report"] tbody tr').length === %d &&
		document.querySelector('#wf-run-steps section[data-step="report"]').textContent.includes(%q)`, shown, last))
	if sink.count("clean") != cleans || sink.count("sync") != syncCalls {
		t.Errorf("rerunning report called clean %d more times, sync %d more", sink.count("clean")-cleans, sink.count("sync")-syncCalls)
	}

	// Mark a failed step succeeded with an output: report gets it as clean's output.
	sink.fail("clean", 1)
	var second struct {
		ID string `json:"id"`
	}
	d.MustJSON(t, http.StatusAccepted, http.MethodPost, "/api/v1/workflows/orders/run", map[string]any{"params": map[string]any{"day": "2026-12-03"}}, &second)
	run(t, ctx, "open the second run", chromedp.Navigate(url+"#/workflow-run/"+second.ID))
	waitJS(t, ctx, "the second run failed", `(document.querySelector("#wf-run-state") || {}).textContent === "failed"`)
	clickUntil(t, ctx, "mark clean", `#wf-run-steps section[data-step="clean"] .wf-mark-step`, `document.activeElement === document.querySelector("#wf-mark-output")`)
	if v := mustEval(t, ctx, `document.querySelector("#wf-mark-step").value`); v != "clean" {
		t.Errorf("the mark form chose %q, want clean", v)
	}
	run(t, ctx, "a bad output", setField("#wf-mark-output", `{not json`), chromedp.Click("#wf-mark-submit", chromedp.ByQuery))
	waitJS(t, ctx, "the JSON refused", `document.querySelector("#wf-mark-error").textContent.includes("not valid JSON")`)
	if v := wfRun(t, d, second.ID); v.State != "failed" {
		t.Fatalf("a refused mark changed the run: %s", v.State)
	}
	run(t, ctx, "the output", setField("#wf-mark-output", `{"cleaned": "/data/by-hand.parquet"}`), setField("#wf-mark-note", "cleaned by hand"),
		chromedp.Click("#wf-mark-submit", chromedp.ByQuery))
	waitJS(t, ctx, "the marked run succeeded", `(document.querySelector("#wf-run-state") || {}).textContent === "succeeded"`)
	if in := sink.lastInputs("report"); !strings.Contains(in, "/data/by-hand.parquet") {
		t.Errorf("report's inputs after the mark: %s", in)
	}
	if v := wfRun(t, d, second.ID); v.State != "succeeded" || !strings.Contains(string(wfStep(v, "clean").Output), "by-hand") {
		t.Errorf("after the mark: %+v", v)
	}

	// Kill a running attempt by its ticket: slow fails, after is skipped, the run fails.
	run(t, ctx, "open slowflow", chromedp.Navigate(url+"#/workflows/slowflow"))
	waitJS(t, ctx, "slowflow's page", `document.querySelectorAll("#wf-steps-table tbody tr").length === 2`)
	run(t, ctx, "run slowflow", chromedp.Click("#wf-run", chromedp.ByQuery))
	waitJS(t, ctx, "the slow run's page", `location.hash.startsWith("#/workflow-run/")`)
	slowID := strings.TrimPrefix(mustEval(t, ctx, `decodeURIComponent(location.hash)`), "#/workflow-run/")
	waitJS(t, ctx, "slow running with a Kill", `!!document.querySelector('#wf-run-steps section[data-step="slow"] .wf-kill')`)
	if v := mustEval(t, ctx, `document.querySelector('#wf-dag-svg g.dag-node[data-step="slow"]').dataset.state`); v != "running" {
		t.Errorf("slow's box is %q while it runs", v)
	}
	ticket := mustEval(t, ctx, `document.querySelector('#wf-run-steps section[data-step="slow"] .wf-kill').dataset.ticket`)
	clickUntil(t, ctx, "kill slow", `#wf-run-steps section[data-step="slow"] .wf-kill`, `document.getElementById("confirm").open`)
	run(t, ctx, "confirm the kill", setField("#confirm-note", "stuck"), chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "the run failed", `(document.querySelector("#wf-run-state") || {}).textContent === "failed"`)
	var killed struct{ Result string }
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs/"+ticket, nil, &killed)
	if killed.Result != "killed" {
		t.Errorf("the killed attempt %s has result %q", ticket, killed.Result)
	}
	if v := wfRun(t, d, slowID); wfStep(v, "slow").State != "cancelled" || wfStep(v, "after").State != "skipped" {
		t.Errorf("after the kill: slow %s, after %s", wfStep(v, "slow").State, wfStep(v, "after").State)
	}

	// Cancel a run: its running step is killed, the run is cancelled.
	var third struct {
		ID string `json:"id"`
	}
	d.MustJSON(t, http.StatusAccepted, http.MethodPost, "/api/v1/workflows/slowflow/run", nil, &third)
	run(t, ctx, "open the third run", chromedp.Navigate(url+"#/workflow-run/"+third.ID))
	waitJS(t, ctx, "slow running", `!!document.querySelector('#wf-run-steps section[data-step="slow"] .wf-kill')`)
	clickUntil(t, ctx, "cancel the run", "#wf-cancel", `document.getElementById("confirm").open`)
	run(t, ctx, "confirm the cancel", chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "the run cancelled", `(document.querySelector("#wf-run-state") || {}).textContent === "cancelled"`)
	if v := wfRun(t, d, third.ID); v.State != "cancelled" {
		t.Errorf("after the cancel: %s", v.State)
	}

	// Backfill two logical times from the form; a bad range is refused with the field named.
	run(t, ctx, "open orders", chromedp.Navigate(url+"#/workflows/orders"))
	waitJS(t, ctx, "orders' runs", `document.querySelectorAll("#wf-runs-table tbody tr").length === 2`)
	run(t, ctx, "a bad backfill", setField("#wf-backfill-from", "yesterday"), setField("#wf-backfill-to", "2026-11-27T00:00:00Z"),
		chromedp.Click("#wf-backfill-start", chromedp.ByQuery))
	waitJS(t, ctx, "the bad backfill refused", `document.querySelector("#wf-backfill-error").textContent.includes("from")`)
	run(t, ctx, "a backfill", setField("#wf-backfill-from", "2026-11-25T00:00:00Z"), setField("#wf-backfill-parallel", "1"),
		chromedp.Click("#wf-backfill-start", chromedp.ByQuery))
	waitJS(t, ctx, "the backfill done", `(document.querySelector("#wf-backfill-progress") || {dataset: {}}).dataset.done === "true"`)
	waitJS(t, ctx, "the backfilled runs listed", `document.querySelectorAll("#wf-runs-table tbody tr").length === 4`)
	if v := mustEval(t, ctx, `document.querySelector("#wf-backfill-progress").textContent`); !strings.Contains(v, "2 of 2") {
		t.Errorf("the backfill's progress reads %q", v)
	}
	testwait.For(t, daemontest.WaitTimeout, "the backfilled runs to end", func() bool {
		var list wire.WorkflowRunList
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/workflows/orders/runs", nil, &list)
		n := 0
		for _, r := range list.Runs {
			if r.Trigger == "backfill" && r.State == "succeeded" {
				n++
			}
		}
		return n == 2
	})
}

func atof(s string) float64 {
	var f float64
	_, _ = fmt.Sscan(s, &f)
	return f
}
