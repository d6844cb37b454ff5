package admin_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestConsoleETag: the API's GETs carry an ETag of their answer; a request holding it is
// answered 304 with no body until the answer changes; the overview's ETag leaves out its
// clock; writes and errors carry none.
func TestConsoleETag(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	d.Create(t, daemontest.Spec("etag-a", h.URL("/ok/a"), "trigger", "manual"))

	code, hdr, body := d.Send(t, http.MethodGet, "/api/v1/tasks?total=1", nil, true)
	etag := hdr.Get("ETag")
	if code != 200 || !strings.HasPrefix(etag, `"`) || len(body) == 0 {
		t.Fatalf("first GET: %d, ETag %q, %d bytes", code, etag, len(body))
	}
	code, hdr2, body := d.Send(t, http.MethodGet, "/api/v1/tasks?total=1", nil, true, "If-None-Match", etag)
	if code != http.StatusNotModified || len(body) != 0 || hdr2.Get("ETag") != etag {
		t.Errorf("same answer: %d, %d bytes, ETag %q; want 304, none, %q", code, len(body), hdr2.Get("ETag"), etag)
	}
	// A list of ETags naming it, and a weak one, match too.
	if code, _, _ := d.Send(t, http.MethodGet, "/api/v1/tasks?total=1", nil, true, "If-None-Match", `"x", W/`+etag); code != http.StatusNotModified {
		t.Errorf("If-None-Match list: %d, want 304", code)
	}

	d.Create(t, daemontest.Spec("etag-b", h.URL("/ok/b"), "trigger", "manual"))
	code, hdr3, body := d.Send(t, http.MethodGet, "/api/v1/tasks?total=1", nil, true, "If-None-Match", etag)
	if code != 200 || hdr3.Get("ETag") == etag || !strings.Contains(string(body), "etag-b") {
		t.Errorf("after a create: %d, ETag %q (was %q), body %s", code, hdr3.Get("ETag"), etag, body)
	}

	// The overview holds the server's clock; two answers a moment apart have one ETag.
	_, o1, b1 := d.Send(t, http.MethodGet, "/api/v1/overview", nil, true)
	var o2 http.Header
	var b2 []byte
	for i := 0; i < 100; i++ {
		_, o2, b2 = d.Send(t, http.MethodGet, "/api/v1/overview", nil, true)
		if string(b2) != string(b1) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if string(b1) == string(b2) {
		t.Fatal("the overview's clock did not move")
	}
	if o1.Get("ETag") == "" || o1.Get("ETag") != o2.Get("ETag") {
		t.Errorf("overview ETags %q and %q: want one, leaving out now", o1.Get("ETag"), o2.Get("ETag"))
	}
	if code, _, body := d.Send(t, http.MethodGet, "/api/v1/overview", nil, true, "If-None-Match", o1.Get("ETag")); code != http.StatusNotModified || len(body) != 0 {
		t.Errorf("overview revalidated: %d with %d bytes", code, len(body))
	}

	// Errors and writes carry none.
	if code, hdr, _ := d.Send(t, http.MethodGet, "/api/v1/tasks/nosuch", nil, true); code != 404 || hdr.Get("ETag") != "" {
		t.Errorf("404: %d ETag %q", code, hdr.Get("ETag"))
	}
	if code, hdr, _ := d.Send(t, http.MethodPost, "/api/v1/tasks/etag-a/pause", map[string]any{}, true); code != 200 || hdr.Get("ETag") != "" {
		t.Errorf("POST: %d ETag %q", code, hdr.Get("ETag"))
	}
}

// TestConsoleBrowserRefreshInPlace: the page renders while whoami has not answered; a text
// selection in the runs list survives refreshes that bring new rows; an idle list is
// revalidated (304) rather than sent again; a run page refreshes while its run is in flight
// and stops once it ended.
func TestConsoleBrowserRefreshInPlace(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	url := d.Base + "/"

	// 1. whoami held by the browser: the overview renders all the same.
	var mu sync.Mutex
	var held []fetch.RequestID
	var statuses []int64
	chromedp.ListenTarget(ctx, func(ev any) {
		switch e := ev.(type) {
		case *fetch.EventRequestPaused:
			mu.Lock()
			held = append(held, e.RequestID)
			mu.Unlock()
		case *network.EventResponseReceived:
			if strings.Contains(e.Response.URL, "/api/v1/tasks?") {
				mu.Lock()
				statuses = append(statuses, e.Response.Status)
				mu.Unlock()
			}
		}
	})
	run(t, ctx, "hold whoami", network.Enable(), fetch.Enable().WithPatterns([]*fetch.RequestPattern{{URLPattern: "*/api/v1/whoami*"}}))
	run(t, ctx, "open the overview", chromedp.Navigate(url+"#/overview"))
	waitJS(t, ctx, "the overview's cards", `!!document.querySelector("#ov-failing .value")`)
	mu.Lock()
	nHeld := len(held)
	ids := append([]fetch.RequestID(nil), held...)
	mu.Unlock()
	who := mustEval(t, ctx, `document.getElementById("who").textContent`)
	if nHeld == 0 || who != "" {
		t.Errorf("whoami held %d time(s), #who %q: the overview should render before whoami answers", nHeld, who)
	}
	for _, id := range ids {
		run(t, ctx, "let whoami go", fetch.ContinueRequest(id))
	}
	waitJS(t, ctx, "whoami answered", `document.getElementById("who").textContent.includes("(write)")`)
	run(t, ctx, "stop holding", fetch.Disable())

	// 2. A selection in the runs list survives refreshes that bring new runs.
	d.Create(t, daemontest.Spec("ticker", h.URL("/ok/tick"), "cron", "* * * * * *"))
	h.WaitCalls(t, "ticker", 3, daemontest.WaitTimeout)
	run(t, ctx, "open the runs", chromedp.Navigate(url+"#/runs"))
	waitJS(t, ctx, "three runs listed", `document.querySelectorAll("#all-runs-table tbody tr").length >= 3`)
	ticket := mustEval(t, ctx, `(() => {
		const a = document.querySelector("#all-runs-table tbody tr:nth-child(3) td a");
		const r = document.createRange(); r.selectNodeContents(a);
		const s = getSelection(); s.removeAllRanges(); s.addRange(r);
		window.axeFirst = document.querySelector("#all-runs-table tbody tr").dataset.ticket;
		window.axeRefreshes = Number(document.body.dataset.refreshes || 0);
		return s.toString(); })()`)
	if ticket == "" {
		t.Fatal("nothing selected")
	}
	waitJS(t, ctx, "two refreshes with a newer run on top",
		`Number(document.body.dataset.refreshes || 0) >= window.axeRefreshes + 2 &&
		 document.querySelector("#all-runs-table tbody tr").dataset.ticket !== window.axeFirst`)
	sel := mustEval(t, ctx, `(() => { const s = getSelection();
		return [s.toString(), s.rangeCount && s.getRangeAt(0).startContainer.isConnected].join("|"); })()`)
	if sel != ticket+"|true" {
		t.Errorf("after the refreshes the selection is %q, want %q", sel, ticket+"|true")
	}

	// 3. An idle list is revalidated: its refreshes are answered 304.
	d.Create(t, daemontest.Spec("idle", h.URL("/ok/idle"), "trigger", "manual"))
	mu.Lock()
	statuses = nil
	mu.Unlock()
	run(t, ctx, "open the idle tasks", chromedp.Navigate(url+"#/tasks?name_prefix=idle"))
	waitJS(t, ctx, "the idle task listed", `!!document.querySelector('#task-table tr[data-task="idle"]')`)
	n0 := mustEval(t, ctx, `String(Number(document.body.dataset.refreshes || 0))`)
	waitJS(t, ctx, "three refreshes", fmt.Sprintf(`Number(document.body.dataset.refreshes || 0) >= %s + 3`, n0))
	mu.Lock()
	got := append([]int64(nil), statuses...)
	mu.Unlock()
	n304 := 0
	for _, s := range got {
		if s == http.StatusNotModified {
			n304++
		}
	}
	if len(got) < 3 || n304 < 2 {
		t.Errorf("the idle list's answers: %v; want its refreshes answered 304", got)
	}
	t.Logf("idle task list: %d answers, %d of them 304", len(got), n304)

	// 4. A run page refreshes while the run is in flight, and stops once it ended.
	d.Create(t, daemontest.Spec("hung", h.URL("/hang/x"), "trigger", "manual", "timeout_sec", 300))
	hungTicket := d.RunNow(t, "hung", nil)
	h.WaitCalls(t, "hung", 1, daemontest.WaitTimeout)
	run(t, ctx, "open the hung run", chromedp.Navigate(url+"#/run/"+hungTicket))
	waitJS(t, ctx, "the run running", `(document.querySelector("#run-result") || {}).textContent === "running"`)
	n0 = mustEval(t, ctx, `String(Number(document.body.dataset.refreshes || 0))`)
	waitJS(t, ctx, "refreshes while running", fmt.Sprintf(`Number(document.body.dataset.refreshes || 0) >= %s + 2`, n0))
	d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/runs/"+hungTicket+"/kill", map[string]any{"reason": "test"}, nil)
	waitJS(t, ctx, "the run killed", `(document.querySelector("#run-result") || {}).textContent === "killed"`)
	n1 := mustEval(t, ctx, `String(Number(document.body.dataset.refreshes || 0))`)
	// Three refresh periods (2 s each) with nothing more asked.
	time.Sleep(6500 * time.Millisecond)
	if n2 := mustEval(t, ctx, `String(Number(document.body.dataset.refreshes || 0))`); n2 != n1 {
		t.Errorf("a finished run's page refreshed on: %s → %s", n1, n2)
	}
}
