package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/executor/internal/schedpeer"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/protocol"
)

func TestRunReportsResultByCallback(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	exe := newExecutor(t, executor.Config{Clock: clk}, peer)
	seen := make(chan executor.Run, 1)
	exe.Handle("invoice", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		seen <- run
		clk.Advance(1500 * time.Millisecond) // the handler "takes" 1.5 s of clock time
		return executor.Result{Output: "invoiced acme"}, nil
	})
	start(t, exe)

	run := runFor("t-1", "monthly-invoice", "invoice")
	run.Attempt = 3
	run.Params = json.RawMessage(`{"customer":"acme"}`)
	resp := dispatch(t, peer, exe, run, http.StatusAccepted)
	if string(resp.Body) != `{"accepted":true}` {
		t.Errorf("202 body = %s", resp.Body)
	}

	got := recv(t, seen, "handler call")
	want := executor.Run{
		Ticket: "t-1", Task: "monthly-invoice", Handler: "invoice", Attempt: 3,
		ScheduledAt: time.UnixMilli(run.ScheduledAt), Deadline: time.UnixMilli(run.Deadline),
		Params: json.RawMessage(`{"customer":"acme"}`),
	}
	if !got.ScheduledAt.Equal(want.ScheduledAt) || !got.Deadline.Equal(want.Deadline) ||
		got.Ticket != want.Ticket || got.Task != want.Task || got.Handler != want.Handler ||
		got.Attempt != want.Attempt || string(got.Params) != string(want.Params) {
		t.Errorf("handler saw %+v, want %+v", got, want)
	}

	cb := waitCallbacks(t, peer, 1)[0]
	wantCB := schedpeer.Callback{
		Ticket: "t-1", Task: "monthly-invoice", App: "billing", Address: exe.Addr(),
		Status: "success", Output: "invoiced acme",
		StartedAt: 1_700_000_000_000, EndedAt: 1_700_000_001_500, DurationMS: 1500,
	}
	if cb != wantCB {
		t.Errorf("callback = %+v\nwant       %+v", cb, wantCB)
	}
	if calls := peer.Calls(schedpeer.PathCallback); calls[0].Status != http.StatusOK {
		t.Errorf("peer answered the callback %d", calls[0].Status)
	}
}

func TestHandlerFailuresBecomeFailedResults(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	exitCode := 7
	exe.Handle("fails", func(context.Context, executor.Run) (executor.Result, error) {
		return executor.Result{Output: "partial", ExitCode: &exitCode}, errors.New("disk full")
	})
	exe.Handle("panics", func(context.Context, executor.Run) (executor.Result, error) {
		panic("nil map")
	})
	start(t, exe)

	dispatch(t, peer, exe, runFor("t-fail", "a", "fails"), http.StatusAccepted)
	cb := waitCallbacks(t, peer, 1)[0]
	if cb.Status != "failed" || cb.Error != "disk full" || cb.Output != "partial" || cb.ExitCode == nil || *cb.ExitCode != 7 {
		t.Errorf("error result = %+v", cb)
	}

	dispatch(t, peer, exe, runFor("t-panic", "b", "panics"), http.StatusAccepted)
	cb = waitCallbacks(t, peer, 2)[1]
	if cb.Status != "failed" || !strings.Contains(cb.Error, "handler panicked") || !strings.Contains(cb.Error, "nil map") {
		t.Errorf("panic result = %+v", cb)
	}
	if cb.ExitCode != nil {
		t.Errorf("panic result has exit code %d", *cb.ExitCode)
	}

	// The executor survived the panic.
	dispatch(t, peer, exe, runFor("t-after", "a", "fails"), http.StatusAccepted)
	waitCallbacks(t, peer, 3)
}

func TestOutputKeepsItsTail(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{OutputLimit: 10}, peer)
	exe.Handle("log", okHandler("0123456789abcdefghij"))
	start(t, exe)
	dispatch(t, peer, exe, runFor("t-1", "a", "log"), http.StatusAccepted)
	if cb := waitCallbacks(t, peer, 1)[0]; cb.Output != "abcdefghij" {
		t.Errorf("output = %q, want the last 10 bytes", cb.Output)
	}
}

// TestResultsFitTheProtocol: output that is not UTF-8 and an overlong error are reported
// within the protocol's sizes as the scheduler decodes them, so the result is never refused
// for its size (which would lose it).
func TestResultsFitTheProtocol(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{OutputLimit: 1000}, peer)
	exe.Handle("bin", func(context.Context, executor.Run) (executor.Result, error) {
		return executor.Result{Output: strings.Repeat("\xff", 5000)}, errors.New(strings.Repeat("e", protocol.MaxErrorBytes+100))
	})
	start(t, exe)
	dispatch(t, peer, exe, runFor("t-bin", "a", "bin"), http.StatusAccepted)
	cb := waitCallbacks(t, peer, 1)[0]
	if len(cb.Output) > 1000 || !utf8.ValidString(cb.Output) || cb.Output == "" {
		t.Errorf("output of %d bytes (valid UTF-8: %v), want at most 1000 valid bytes", len(cb.Output), utf8.ValidString(cb.Output))
	}
	if len(cb.Error) > protocol.MaxErrorBytes || len(cb.Error) < protocol.MaxErrorBytes-4 {
		t.Errorf("error of %d bytes, want the first %d", len(cb.Error), protocol.MaxErrorBytes)
	}
	if err := cb.Check(); err != nil {
		t.Errorf("the result fails the protocol's check: %v", err)
	}
}

func TestDuplicateTicketRunsOnce(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	var calls atomic.Int32
	started := make(chan string, 1)
	release := make(chan struct{})
	exe.Handle("h", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		calls.Add(1)
		started <- run.Ticket
		<-release
		return executor.Result{Output: "once"}, nil
	})
	start(t, exe)
	run := runFor("t-dup", "a", "h")

	dispatch(t, peer, exe, run, http.StatusAccepted)
	recv(t, started, "handler start")
	// While it runs, the same ticket is acknowledged without a second run.
	resp := dispatch(t, peer, exe, run, http.StatusAccepted)
	if string(resp.Body) != `{"accepted":true,"duplicate":true}` {
		t.Errorf("running duplicate body = %s", resp.Body)
	}
	close(release)
	first := waitCallbacks(t, peer, 1)[0]

	// After it finished, the same ticket returns the earlier result and re-sends the callback.
	resp = dispatch(t, peer, exe, run, http.StatusOK)
	var dup struct {
		Duplicate bool   `json:"duplicate"`
		Status    string `json:"status"`
		Error     string `json:"error"`
	}
	if err := resp.Decode(&dup); err != nil {
		t.Fatal(err)
	}
	if !dup.Duplicate || dup.Status != "success" || dup.Error != "" {
		t.Errorf("finished duplicate = %+v", dup)
	}
	cbs := waitCallbacks(t, peer, 2)
	if cbs[1] != first {
		t.Errorf("re-sent callback %+v differs from the first %+v", cbs[1], first)
	}
	if got := waitCalls(t, peer, schedpeer.PathCallback, 2)[1].Body; !strings.Contains(string(got), `"output":"once"`) {
		t.Errorf("re-sent body = %s", got)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

func TestFinishedTicketIsForgottenAfterItsTTL(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	exe := newExecutor(t, executor.Config{Clock: clk, DedupTTL: time.Hour}, peer)
	var calls atomic.Int32
	exe.Handle("h", func(context.Context, executor.Run) (executor.Result, error) {
		calls.Add(1)
		return executor.Result{}, nil
	})
	start(t, exe)
	run := runFor("t-ttl", "a", "h")
	run.DedupTTLMS = 1000 // the run's own TTL wins over Config.DedupTTL

	dispatch(t, peer, exe, run, http.StatusAccepted)
	waitCallbacks(t, peer, 1)
	clk.Advance(999 * time.Millisecond)
	dispatch(t, peer, exe, run, http.StatusOK) // still remembered
	waitCallbacks(t, peer, 2)
	clk.Advance(time.Millisecond)
	dispatch(t, peer, exe, run, http.StatusAccepted) // forgotten: runs again
	waitCallbacks(t, peer, 3)
	if n := calls.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}

func TestReentryOfARunningTaskIsRefused(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started := make(chan string, 2)
	release := make(chan struct{})
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)

	dispatch(t, peer, exe, runFor("t-a", "nightly", "h"), http.StatusAccepted)
	recv(t, started, "first run")
	resp := dispatch(t, peer, exe, runFor("t-b", "nightly", "h"), http.StatusConflict)
	if !strings.Contains(string(resp.Body), `already running here with ticket \"t-a\"`) {
		t.Errorf("409 body = %s", resp.Body)
	}
	// Another task is not affected.
	dispatch(t, peer, exe, runFor("t-c", "hourly", "h"), http.StatusAccepted)
	recv(t, started, "other task")

	close(release)
	waitCallbacks(t, peer, 2)
	// Once the first run finished, the task may run again here.
	dispatch(t, peer, exe, runFor("t-b", "nightly", "h"), http.StatusAccepted)
	recv(t, started, "re-run")
	waitCallbacks(t, peer, 3)
}

// TestParallelRunsOfATaskRunTogether: runs marked parallel (overlap_policy allow_all) run
// beside one another and beside a run of the same task; a run not so marked is still
// refused while the task's unmarked run is here.
func TestParallelRunsOfATaskRunTogether(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started := make(chan string, 4)
	release := make(chan struct{})
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)

	par := func(ticket string) protocol.Run {
		r := runFor(ticket, "every-minute", "h")
		r.Parallel = true
		return r
	}
	dispatch(t, peer, exe, par("p-1"), http.StatusAccepted)
	recv(t, started, "first parallel run")
	dispatch(t, peer, exe, par("p-2"), http.StatusAccepted)
	recv(t, started, "second parallel run beside the first")
	dispatch(t, peer, exe, runFor("p-3", "every-minute", "h"), http.StatusAccepted) // nothing unmarked is here
	recv(t, started, "an unmarked run beside the parallel ones")
	resp := dispatch(t, peer, exe, runFor("p-4", "every-minute", "h"), http.StatusConflict)
	if !strings.Contains(string(resp.Body), `already running here with ticket \"p-3\"`) {
		t.Errorf("409 body = %s", resp.Body)
	}
	dispatch(t, peer, exe, par("p-1"), http.StatusAccepted) // a parallel ticket is still de-duplicated
	close(release)
	waitCallbacks(t, peer, 3)
}

func TestFullPoolAndQueueAnswerBusy(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{PoolSize: 1, QueueSize: 1}, peer)
	started := make(chan string, 3)
	release := make(chan struct{})
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)

	dispatch(t, peer, exe, runFor("t-1", "a", "h"), http.StatusAccepted)
	recv(t, started, "first run")
	dispatch(t, peer, exe, runFor("t-2", "b", "h"), http.StatusAccepted) // waits in the queue
	resp := dispatch(t, peer, exe, runFor("t-3", "c", "h"), http.StatusTooManyRequests)
	if string(resp.Body) != `{"error":"busy"}` {
		t.Errorf("429 body = %s", resp.Body)
	}
	select {
	case tk := <-started:
		t.Fatalf("%s started while the only worker was busy", tk)
	default:
	}
	beat, err := peer.Beat(exe.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(beat.Body), `"running":2`) {
		t.Errorf("beat while full = %s, want running 2 (queued runs count)", beat.Body)
	}

	close(release)
	cbs := waitCallbacks(t, peer, 2)
	tickets := []string{cbs[0].Ticket, cbs[1].Ticket}
	slices.Sort(tickets)
	if !slices.Equal(tickets, []string{"t-1", "t-2"}) {
		t.Errorf("results for %v, want t-1 and t-2", tickets)
	}
	// Capacity is back: the refused run is accepted now.
	dispatch(t, peer, exe, runFor("t-3", "c", "h"), http.StatusAccepted)
	waitCallbacks(t, peer, 3)
}

func TestKillCancelsTheHandlerContext(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started := make(chan string, 1)
	exe.Handle("h", blockingHandler(started, nil))
	start(t, exe)

	dispatch(t, peer, exe, runFor("t-kill", "a", "h"), http.StatusAccepted)
	recv(t, started, "handler start")
	resp, err := peer.Kill(exe.Addr(), "t-kill")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusOK || string(resp.Body) != `{"killed":true}` {
		t.Fatalf("kill = %d %s", resp.Status, resp.Body)
	}
	cb := waitCallbacks(t, peer, 1)[0]
	if cb.Status != "failed" || cb.Error != executor.ErrKilled.Error() {
		t.Errorf("killed result = %+v, want failed with %q", cb, executor.ErrKilled)
	}
	// A finished ticket cannot be killed.
	resp, err = peer.Kill(exe.Addr(), "t-kill")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusNotFound {
		t.Errorf("kill of a finished ticket = %d %s, want 404", resp.Status, resp.Body)
	}
}

func TestKillOfAQueuedRunSkipsTheHandler(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{PoolSize: 1, QueueSize: 1}, peer)
	started := make(chan string, 2)
	release := make(chan struct{})
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)

	dispatch(t, peer, exe, runFor("t-1", "a", "h"), http.StatusAccepted)
	recv(t, started, "first run")
	dispatch(t, peer, exe, runFor("t-2", "b", "h"), http.StatusAccepted)
	if resp, err := peer.Kill(exe.Addr(), "t-2"); err != nil || resp.Status != http.StatusOK {
		t.Fatalf("kill queued = %v %v", resp, err)
	}
	close(release)
	cbs := waitCallbacks(t, peer, 2)
	byTicket := map[string]schedpeer.Callback{cbs[0].Ticket: cbs[0], cbs[1].Ticket: cbs[1]}
	if cb := byTicket["t-2"]; cb.Status != "failed" || !strings.Contains(cb.Error, "handler not started") ||
		!strings.Contains(cb.Error, executor.ErrKilled.Error()) {
		t.Errorf("queued kill result = %+v", cb)
	}
	if len(started) != 0 {
		t.Errorf("the killed queued run's handler was called")
	}
}

func TestDeadlineReachesTheHandler(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	deadlines := make(chan time.Time, 1)
	exe.Handle("report", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		d, ok := ctx.Deadline()
		if !ok {
			return executor.Result{}, errors.New("no deadline")
		}
		if !d.Equal(run.Deadline) {
			return executor.Result{}, fmt.Errorf("context deadline %v != run deadline %v", d, run.Deadline)
		}
		deadlines <- d
		return executor.Result{}, nil
	})
	exe.Handle("wait", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		<-ctx.Done()
		return executor.Result{}, context.Cause(ctx)
	})
	start(t, exe)

	run := runFor("t-report", "a", "report")
	run.Deadline = time.Now().Add(time.Hour).UnixMilli()
	dispatch(t, peer, exe, run, http.StatusAccepted)
	if got := recv(t, deadlines, "deadline"); got.UnixMilli() != run.Deadline {
		t.Errorf("handler deadline %d, want %d", got.UnixMilli(), run.Deadline)
	}
	if cb := waitCallbacks(t, peer, 1)[0]; cb.Status != "success" {
		t.Errorf("report result = %+v", cb)
	}

	run = runFor("t-wait", "b", "wait")
	run.Deadline = time.Now().Add(200 * time.Millisecond).UnixMilli()
	dispatch(t, peer, exe, run, http.StatusAccepted)
	// Normally the handler sees the deadline pass; on a starved machine the run may expire while
	// queued and be reported "handler not started: context deadline exceeded". Both are right.
	if cb := waitCallbacks(t, peer, 2)[1]; cb.Status != "failed" || !strings.HasSuffix(cb.Error, context.DeadlineExceeded.Error()) {
		t.Errorf("expired result = %+v", cb)
	}
}

func TestMalformedRequestsAreRefused(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	exe.Handle("h", okHandler(""))
	start(t, exe)

	post := func(path, body string, headers map[string]string) schedpeer.Response {
		t.Helper()
		resp, err := peer.Post(exe.Addr(), path, []byte(body), "", headers)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tc := range []struct {
		name, path, body string
		headers          map[string]string
		status           int
		errContains      string
	}{
		{"bad json", "/axe/run", `{"ticket":`, nil, 400, "invalid JSON"},
		// A field this SDK does not know is skipped (tolerant reading): the run is taken.
		{"unknown field", "/axe/run", `{"attempt":1,"deadline":0,"ticket":"u-1","task":"u1","handler":"h","command":"rm -rf /","later":{"a":[1]}}`, nil, 202, ""},
		{"repeated key in an unknown field", "/axe/run", `{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","later":{"a":1,"a":2}}`, nil, 400, "later.a: repeated key"},
		{"invalid UTF-8 in an unknown field", "/axe/run", "{\"attempt\":1,\"deadline\":0,\"ticket\":\"t\",\"task\":\"a\",\"handler\":\"h\",\"later\":\"\xff\"}", nil, 400, "invalid UTF-8"},
		{"missing attempt", "/axe/run", `{"deadline":0,"ticket":"t","task":"a","handler":"h"}`, nil, 400, "attempt: is required"},
		{"attempt 0", "/axe/run", `{"attempt":0,"deadline":0,"ticket":"t","task":"a","handler":"h"}`, nil, 400, "attempt: must be 1 or more"},
		{"missing deadline", "/axe/run", `{"attempt":1,"ticket":"t","task":"a","handler":"h"}`, nil, 400, "deadline: is required"},
		{"trailing data", "/axe/run", `{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h"} {"ticket":"u"}`, nil, 400, "trailing data"},
		{"two objects in a batch", "/axe/runs", `{"runs":[{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h"}]}{}`, nil, 400, "trailing data"},
		{"unknown batch field", "/axe/runs", `{"runs":[{"attempt":1,"deadline":0,"ticket":"u-2","task":"u2","handler":"h","x":1}],"all":true}`, nil, 200, ""},
		{"ticket of wrong type", "/axe/run", `{"attempt":1,"deadline":0,"ticket":7,"task":"a","handler":"h"}`, nil, 400, "ticket: must be string"},
		{"group too long", "/axe/run", `{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","group":"` + strings.Repeat("g", 300) + `"}`, nil, 400, "group"},
		{"missing ticket", "/axe/run", `{"attempt":1,"deadline":0,"task":"a","handler":"h"}`, nil, 400, "ticket: is required"},
		{"missing handler", "/axe/run", `{"attempt":1,"deadline":0,"ticket":"t-h","task":"a"}`, nil, 404, `unknown handler ""`},
		{"negative attempt", "/axe/run", `{"deadline":0,"ticket":"t","task":"a","handler":"h","attempt":-1}`, nil, 400, "attempt"},
		{"header mismatch", "/axe/run", `{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h"}`, map[string]string{"X-Axe-Ticket": "other"}, 400, "X-Axe-Ticket"},
		{"unknown handler", "/axe/run", `{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"nope"}`, nil, 404, `unknown handler "nope"`},
		{"kill without ticket", "/axe/kill", `{}`, nil, 400, "ticket: is required"},
		{"kill bad json", "/axe/kill", `[`, nil, 400, "invalid JSON"},
		{"kill unknown field", "/axe/kill", `{"ticket":"ghost","signal":9}`, nil, 404, "not running"},
		{"kill repeated key", "/axe/kill", `{"ticket":"ghost","ticket":"t"}`, nil, 400, "ticket: repeated key"},
		{"kill trailing data", "/axe/kill", `{"ticket":"t"}]`, nil, 400, "trailing data"},
		{"kill negative epoch", "/axe/kill", `{"ticket":"t","epoch":-1}`, nil, 400, "epoch"},
		{"kill ticket too long", "/axe/kill", `{"ticket":"` + strings.Repeat("t", 300) + `"}`, nil, 400, "ticket"},
		{"kill body too large", "/axe/kill", `{"ticket":"` + strings.Repeat("t", 5000) + `"}`, nil, 413, "limit of 4096 bytes"},
		{"kill unknown", "/axe/kill", `{"ticket":"ghost"}`, nil, 404, "not running"},
		{"beat by POST", "/axe/beat", ``, nil, 405, "use GET"},
		{"unknown path", "/axe/nope", ``, nil, 404, "no endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(tc.path, tc.body, tc.headers)
			var e struct{ Error string }
			if err := resp.Decode(&e); err != nil {
				t.Fatal(err)
			}
			if resp.Status != tc.status || !strings.Contains(e.Error, tc.errContains) {
				t.Errorf("%s %s = %d %s, want %d containing %q", tc.path, tc.body, resp.Status, resp.Body, tc.status, tc.errContains)
			}
		})
	}
	for _, c := range peer.Calls(schedpeer.PathCallback) {
		var r schedpeer.Callback
		if json.Unmarshal(c.Body, &r) != nil || (r.Ticket != "u-1" && r.Ticket != "u-2") {
			t.Errorf("a refused request produced a callback: %s", c.Body)
		}
	}
}

func TestBeatDescribesTheExecutor(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{App: "ops"}, peer)
	exe.Handle("backup", okHandler(""))
	exe.Handle("archive", okHandler(""))
	start(t, exe)
	resp, err := peer.Beat(exe.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusOK || string(resp.Body) != `{"app":"ops","running":0,"handlers":["archive","backup"]}` {
		t.Errorf("beat = %d %s", resp.Status, resp.Body)
	}
}

func TestRegistrationAndHeartbeatCadence(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{HeartbeatIntervalMS: 60_000})
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	exe := newExecutor(t, executor.Config{App: "ops", Clock: clk, HeartbeatInterval: 10 * time.Second}, peer)
	started := make(chan string, 1)
	release := make(chan struct{})
	defer close(release)
	exe.Handle("b", blockingHandler(started, release))
	exe.Handle("a", okHandler(""))
	start(t, exe)

	regs := peer.Registrations()
	want := schedpeer.Registration{App: "ops", Address: exe.Addr(), Protocol: "http", Handlers: []string{"a", "b"}}
	if len(regs) != 1 || !equalRegistration(regs[0], want) {
		t.Fatalf("registrations = %+v, want one %+v", regs, want)
	}

	// The configured 10 s wins over the scheduler's longer 60 s.
	for i := 1; i <= 3; i++ {
		if err := clk.WaitForWaiters(1, schedpeer.WaitTimeout); err != nil {
			t.Fatal(err)
		}
		if fired := clk.Advance(10*time.Second - time.Millisecond); fired != 0 {
			t.Fatalf("beat %d: a timer fired %v early", i, time.Millisecond)
		}
		if fired := clk.Advance(time.Millisecond); fired != 1 {
			t.Fatalf("beat %d: %d timers fired at the interval, want 1", i, fired)
		}
		waitCalls(t, peer, schedpeer.PathHeartbeat, i)
		if i == 2 {
			dispatch(t, peer, exe, runFor("t-1", "x", "b"), http.StatusAccepted)
			recv(t, started, "handler start")
		}
	}
	hbs := peer.Heartbeats()
	for i, hb := range hbs {
		wantRunning := 0
		if i == 2 {
			wantRunning = 1
		}
		if hb.Incarnation == "" || hb != (schedpeer.Heartbeat{App: "ops", Address: exe.Addr(), Running: wantRunning, Incarnation: hbs[0].Incarnation}) {
			t.Errorf("heartbeat %d = %+v, want running %d", i, hb, wantRunning)
		}
	}
}

func TestSchedulerAdvertisedIntervalIsUsedWhenShorter(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{HeartbeatIntervalMS: 2000})
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	exe := newExecutor(t, executor.Config{Clock: clk, HeartbeatInterval: 10 * time.Second}, peer)
	exe.Handle("h", okHandler(""))
	start(t, exe)
	if err := clk.WaitForWaiters(1, schedpeer.WaitTimeout); err != nil {
		t.Fatal(err)
	}
	if fired := clk.Advance(2 * time.Second); fired != 1 {
		t.Fatalf("%d timers fired after the advertised 2 s, want 1", fired)
	}
	waitCalls(t, peer, schedpeer.PathHeartbeat, 1)
}

func TestUnknownExecutorRegistersAgain(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	exe := newExecutor(t, executor.Config{Clock: clk}, peer)
	exe.Handle("h", okHandler(""))
	start(t, exe)

	peer.Forget() // the scheduler restarted without this executor
	if err := clk.WaitForWaiters(1, schedpeer.WaitTimeout); err != nil {
		t.Fatal(err)
	}
	clk.Advance(executor.HeartbeatIntervalDefault)
	hb := waitCalls(t, peer, schedpeer.PathHeartbeat, 1)[0]
	if hb.Status != http.StatusNotFound {
		t.Fatalf("heartbeat after Forget answered %d, want 404", hb.Status)
	}
	waitCalls(t, peer, schedpeer.PathRegister, 2)
	regs := peer.Registrations()
	if !equalRegistration(regs[0], regs[1]) {
		t.Errorf("re-registration %+v differs from the first %+v", regs[1], regs[0])
	}
	if got := peer.Executors(); len(got) != 1 {
		t.Errorf("registry has %d rows, want 1", len(got))
	}

	// The next heartbeat is accepted again.
	if err := clk.WaitForWaiters(1, schedpeer.WaitTimeout); err != nil {
		t.Fatal(err)
	}
	clk.Advance(executor.HeartbeatIntervalDefault)
	if hb := waitCalls(t, peer, schedpeer.PathHeartbeat, 2)[1]; hb.Status != http.StatusOK {
		t.Errorf("heartbeat after re-registering answered %d", hb.Status)
	}
}

func TestRestartedExecutorRegistersTheSameRow(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	first := newExecutor(t, executor.Config{}, peer)
	first.Handle("h", okHandler(""))
	start(t, first)
	addr := first.Addr()
	stop(t, first)

	second := newExecutor(t, executor.Config{Addr: addr}, peer)
	second.Handle("h", okHandler(""))
	start(t, second)

	regs := waitCalls(t, peer, schedpeer.PathRegister, 2)
	if len(regs) != 2 {
		t.Fatalf("%d registrations, want 2", len(regs))
	}
	// The same registration but for the incarnation: each process start makes its own.
	var r0, r1 schedpeer.Registration
	if json.Unmarshal(regs[0].Body, &r0) != nil || json.Unmarshal(regs[1].Body, &r1) != nil {
		t.Fatalf("registrations %s, %s", regs[0].Body, regs[1].Body)
	}
	if r0.Version != protocol.Version || !protocol.ValidIncarnation(r0.Incarnation) || !protocol.ValidIncarnation(r1.Incarnation) ||
		r0.Incarnation == r1.Incarnation {
		t.Errorf("incarnations %q, %q (version %d): want two valid, different ones", r0.Incarnation, r1.Incarnation, r0.Version)
	}
	r1.Incarnation = r0.Incarnation
	if !reflect.DeepEqual(r0, r1) {
		t.Errorf("registrations differ:\n%s\n%s", regs[0].Body, regs[1].Body)
	}
	if rows := peer.Executors(); len(rows) != 1 || rows[0].Address != addr {
		t.Errorf("registry = %+v, want one row for %s", rows, addr)
	}
}

func TestResultIsResentWithBackoffUntilAcknowledged(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	exe := newExecutor(t, executor.Config{
		Clock: clk, ResendMin: 500 * time.Millisecond, ResendMax: 800 * time.Millisecond,
	}, peer)
	exe.Handle("h", okHandler("done"))
	start(t, exe)
	peer.FailNext(schedpeer.PathCallback, 500, 502, 500)

	dispatch(t, peer, exe, runFor("t-1", "a", "h"), http.StatusAccepted)
	waitCalls(t, peer, schedpeer.PathCallback, 1)
	// Waits: 500 ms, then doubled to 1 s but capped at 800 ms, then 800 ms.
	for i, wait := range []time.Duration{500 * time.Millisecond, 800 * time.Millisecond, 800 * time.Millisecond} {
		if err := clk.WaitForWaiters(2, schedpeer.WaitTimeout); err != nil { // heartbeat + re-send
			t.Fatal(err)
		}
		if fired := clk.Advance(wait - time.Millisecond); fired != 0 {
			t.Fatalf("re-send %d fired before %v", i+1, wait)
		}
		if fired := clk.Advance(time.Millisecond); fired != 1 {
			t.Fatalf("re-send %d: %d timers fired at %v, want 1", i+1, fired, wait)
		}
		waitCalls(t, peer, schedpeer.PathCallback, i+2)
	}
	calls := peer.Calls(schedpeer.PathCallback)
	statuses := []int{}
	for _, c := range calls {
		statuses = append(statuses, c.Status)
		if string(c.Body) != string(calls[0].Body) {
			t.Errorf("re-sent body differs:\n%s\n%s", c.Body, calls[0].Body)
		}
	}
	if !slices.Equal(statuses, []int{500, 502, 500, 200}) {
		t.Errorf("callback statuses = %v", statuses)
	}
	// Acknowledged: nothing is pending, so a graceful Stop returns at once.
	stop(t, exe)
	if n := len(peer.Calls(schedpeer.PathCallback)); n != 4 {
		t.Errorf("%d callbacks after the acknowledgement, want 4", n)
	}
}

func TestFinalRefusalsStopTheResends(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
	}{
		{"stale ticket", http.StatusConflict},
		{"unknown ticket", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := startPeer(t, schedpeer.Config{})
			clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
			exe := newExecutor(t, executor.Config{Clock: clk}, peer)
			exe.Handle("h", okHandler(""))
			start(t, exe)
			if tc.status == http.StatusConflict {
				peer.MarkStale("t-1") // e.g. the scheduler already timed the run out
				dispatch(t, peer, exe, runFor("t-1", "a", "h"), http.StatusAccepted)
			} else {
				// Sent around the peer, so it never heard of the ticket.
				resp, err := peer.Post(exe.Addr(), "/axe/run", []byte(`{"attempt":1,"deadline":0,"ticket":"t-1","task":"a","handler":"h"}`), "", nil)
				if err != nil || resp.Status != http.StatusAccepted {
					t.Fatalf("run = %v %v", resp, err)
				}
			}
			if c := waitCalls(t, peer, schedpeer.PathCallback, 1)[0]; c.Status != tc.status {
				t.Fatalf("callback answered %d, want %d", c.Status, tc.status)
			}
			// No re-send is pending: Stop does not wait for one, and no timer is left but the
			// heartbeat's.
			stop(t, exe)
			if n := len(peer.Calls(schedpeer.PathCallback)); n != 1 {
				t.Errorf("%d callbacks, want 1", n)
			}
			if w := clk.Waiters(); w != 1 {
				t.Errorf("%d timers pending after Stop, want only the abandoned heartbeat timer", w)
			}
		})
	}
}

func TestResultSurvivesASchedulerRestart(t *testing.T) {
	peer, err := schedpeer.Start(schedpeer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	addr := peer.Addr()
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	exe := newExecutor(t, executor.Config{Clock: clk, RequestTimeout: time.Second}, peer)
	release := make(chan struct{})
	started := make(chan string, 1)
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)
	dispatch(t, peer, exe, runFor("t-1", "a", "h"), http.StatusAccepted)
	recv(t, started, "handler start")

	if err := peer.Close(); err != nil {
		t.Fatal(err)
	}
	close(release) // the result is ready while the scheduler is down
	if err := clk.WaitForWaiters(2, schedpeer.WaitTimeout); err != nil {
		t.Fatal(err) // heartbeat + first re-send wait after the failed delivery
	}

	restarted := startPeer(t, schedpeer.Config{Addr: addr})
	restarted.OpenTicket("t-1") // reloaded from its store
	clk.Advance(executor.ResendMinDefault)
	cb := waitCallbacks(t, restarted, 1)[0]
	if cb.Ticket != "t-1" || cb.Status != "success" {
		t.Errorf("callback after restart = %+v", cb)
	}
	if c := restarted.Calls(schedpeer.PathCallback)[0]; c.Status != http.StatusOK {
		t.Errorf("restarted scheduler answered %d", c.Status)
	}
}

func TestFailoverFollowsTheSchedulerThatAnswers(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		peer := startPeer(t, schedpeer.Config{})
		exe := newExecutor(t, executor.Config{Schedulers: []string{"http://" + freeAddr(t)}}, peer)
		exe.Handle("h", okHandler(""))
		start(t, exe)
		if n := len(peer.Registrations()); n != 1 {
			t.Fatalf("second scheduler got %d registrations, want 1", n)
		}
		dispatch(t, peer, exe, runFor("t-1", "a", "h"), http.StatusAccepted)
		waitCallbacks(t, peer, 1)
	})

	t.Run("503 from a backup", func(t *testing.T) {
		backup := startPeer(t, schedpeer.Config{})
		primary := startPeer(t, schedpeer.Config{})
		backup.SetUnavailable(true)
		clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
		exe := newExecutor(t, executor.Config{Clock: clk}, backup, primary)
		exe.Handle("h", okHandler(""))
		start(t, exe)
		if n, m := len(backup.Calls(schedpeer.PathRegister)), len(primary.Calls(schedpeer.PathRegister)); n != 1 || m != 1 {
			t.Fatalf("register calls: backup %d, primary %d, want 1 and 1", n, m)
		}
		beat := func(n int, on *schedpeer.Peer) {
			t.Helper()
			if err := clk.WaitForWaiters(1, schedpeer.WaitTimeout); err != nil {
				t.Fatal(err)
			}
			clk.Advance(executor.HeartbeatIntervalDefault)
			waitCalls(t, on, schedpeer.PathHeartbeat, n)
		}
		beat(1, primary)
		beat(2, primary)
		if n := len(backup.Calls(schedpeer.PathHeartbeat)); n != 0 {
			t.Errorf("the remembered primary was skipped: backup got %d heartbeats", n)
		}

		// Failover: the old primary now answers 503 and the backup took over. It does not know
		// the executor, so the executor registers with it.
		primary.SetUnavailable(true)
		backup.SetUnavailable(false)
		beat(1, backup)
		waitCalls(t, backup, schedpeer.PathRegister, 2)
		beat(2, backup)
		if got := backup.Heartbeats(); len(got) != 2 || got[1].Address != exe.Addr() {
			t.Errorf("backup heartbeats = %+v", got)
		}
		if n := len(primary.Calls(schedpeer.PathHeartbeat)); n != 3 {
			t.Errorf("old primary got %d heartbeats, want 3 (two before, one 503 during failover)", n)
		}
	})
}

func TestStartWithoutAReachableSchedulerRegistersLater(t *testing.T) {
	addr := freeAddr(t)
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	exe := newExecutor(t, executor.Config{Clock: clk, Schedulers: []string{"http://" + addr}})
	exe.Handle("h", okHandler(""))
	start(t, exe) // the scheduler is not up yet: not an error

	peer := startPeer(t, schedpeer.Config{Addr: addr})
	if err := clk.WaitForWaiters(1, schedpeer.WaitTimeout); err != nil {
		t.Fatal(err)
	}
	clk.Advance(executor.HeartbeatIntervalDefault)
	reg := waitCalls(t, peer, schedpeer.PathRegister, 1)[0]
	if reg.Status != http.StatusOK {
		t.Errorf("late registration answered %d", reg.Status)
	}
}

func TestTokenAuthentication(t *testing.T) {
	t.Run("sent to the scheduler and required by the executor", func(t *testing.T) {
		peer := startPeer(t, schedpeer.Config{Token: "s3cret"})
		exe := newExecutor(t, executor.Config{Token: "s3cret"}, peer)
		exe.Handle("h", okHandler(""))
		start(t, exe)
		dispatch(t, peer, exe, runFor("t-1", "a", "h"), http.StatusAccepted)
		waitCallbacks(t, peer, 1)
		for _, path := range []string{schedpeer.PathRegister, schedpeer.PathCallback} {
			for _, c := range peer.Calls(path) {
				if c.Auth != "Bearer s3cret" || c.Status != http.StatusOK {
					t.Errorf("%s: Authorization %q answered %d", path, c.Auth, c.Status)
				}
			}
		}
		for _, token := range []string{"", "wrong"} {
			resp, err := peer.Post(exe.Addr(), "/axe/run", []byte(`{"attempt":1,"deadline":0,"ticket":"t-2","task":"b","handler":"h"}`), token, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != http.StatusUnauthorized || !strings.Contains(string(resp.Body), `"error"`) {
				t.Errorf("token %q: %d %s, want 401 with an error", token, resp.Status, resp.Body)
			}
		}
	})

	t.Run("runs and kills must carry the scheduler's signature", func(t *testing.T) {
		peer := startPeer(t, schedpeer.Config{Token: "exec-token"})
		exe := newExecutor(t, executor.Config{Token: "exec-token"}, peer)
		exe.Handle("h", okHandler(""))
		start(t, exe)
		if regs := waitCalls(t, peer, schedpeer.PathRegister, 1); !strings.Contains(string(regs[0].Body), `"auth":"signed"`) {
			t.Errorf("registration %s does not ask for signed calls", regs[0].Body)
		}
		key := protocol.DispatchKey("exec-token")
		body := []byte(`{"attempt":1,"deadline":0,"ticket":"t-9","task":"z","handler":"h"}`)
		now := time.Now()
		// The executor's own token does not make it run anything, and neither does a
		// signature under another key, for another executor, path, epoch or body, or of a
		// time too far from now.
		for name, auth := range map[string]func(path string) string{
			"no header":     func(string) string { return "" },
			"its own token": func(string) string { return "Bearer exec-token" },
			"another key": func(p string) string {
				return protocol.SignCall(protocol.DispatchKey("other"), now, exe.Addr(), p, "", body)
			},
			"another executor":  func(p string) string { return protocol.SignCall(key, now, "127.0.0.1:1", p, "", body) },
			"another path":      func(string) string { return protocol.SignCall(key, now, exe.Addr(), "/axe/beat", "", body) },
			"another epoch":     func(p string) string { return protocol.SignCall(key, now, exe.Addr(), p, "7", body) },
			"another body":      func(p string) string { return protocol.SignCall(key, now, exe.Addr(), p, "", []byte(`{}`)) },
			"signed too early":  func(p string) string { return protocol.SignCall(key, now.Add(-6*time.Minute), exe.Addr(), p, "", body) },
			"signed too late":   func(p string) string { return protocol.SignCall(key, now.Add(6*time.Minute), exe.Addr(), p, "", body) },
			"a truncated sig":   func(p string) string { return protocol.SignCall(key, now, exe.Addr(), p, "", body)[:60] },
			"the scheme alone":  func(string) string { return protocol.SignatureScheme },
			"a bearer of a sig": func(p string) string { return "Bearer " + protocol.SignCall(key, now, exe.Addr(), p, "", body) },
		} {
			for _, path := range []string{"/axe/run", "/axe/kill"} {
				resp, err := peer.Post(exe.Addr(), path, body, "", map[string]string{"Authorization": auth(path)})
				if err != nil {
					t.Fatal(err)
				}
				if resp.Status != http.StatusUnauthorized || !strings.Contains(string(resp.Body), "signature") {
					t.Errorf("%s with %s: %d %s, want 401 naming the signature", path, name, resp.Status, resp.Body)
				}
			}
		}
		resp, err := peer.Post(exe.Addr(), "/axe/run", []byte(`{"attempt":1,"deadline":0,"ticket":"t-3","task":"c","handler":"h"}`), "exec-token", nil)
		if err != nil || resp.Status != http.StatusAccepted {
			t.Fatalf("a signed run: %v %d %s", err, resp.Status, resp.Body)
		}
		waitCallbacks(t, peer, 1)
		for _, c := range peer.Calls(schedpeer.PathCallback) {
			if c.Auth != "Bearer exec-token" {
				t.Errorf("result sent with %q, want the executor's own token", c.Auth)
			}
		}
		// A probe of /axe/beat may use the executor's own token instead of a signature.
		for auth, want := range map[string]int{"Bearer exec-token": http.StatusOK, "Bearer wrong": http.StatusUnauthorized, "": http.StatusUnauthorized} {
			resp, err := peer.Do(exe.Addr(), http.MethodGet, protocol.PathBeat, map[string]string{"Authorization": auth})
			if err != nil || resp.Status != want {
				t.Errorf("GET /axe/beat with %q: %v %d %s, want %d", auth, err, resp.Status, resp.Body, want)
			}
		}
	})

	t.Run("a scheduler token of its own is refused", func(t *testing.T) {
		cfg := executor.Config{App: "a", Schedulers: []string{"http://127.0.0.1:1"}, Token: "exec-token", SchedulerToken: "sched-token"}
		if _, err := executor.New(cfg); !errors.Is(err, executor.ErrInvalidConfig) || !strings.Contains(err.Error(), "SchedulerToken") {
			t.Errorf("New with a SchedulerToken other than Token = %v, want ErrInvalidConfig naming SchedulerToken", err)
		}
		cfg.SchedulerToken = cfg.Token
		if _, err := executor.New(cfg); err != nil {
			t.Errorf("New with SchedulerToken equal to Token = %v", err)
		}
	})

	t.Run("without a token nothing is signed or asked for", func(t *testing.T) {
		peer := startPeer(t, schedpeer.Config{})
		exe := newExecutor(t, executor.Config{}, peer)
		exe.Handle("h", okHandler(""))
		start(t, exe)
		if regs := waitCalls(t, peer, schedpeer.PathRegister, 1); strings.Contains(string(regs[0].Body), `"auth"`) {
			t.Errorf("registration %s without a token asks for signed calls", regs[0].Body)
		}
		dispatch(t, peer, exe, runFor("t-1", "a", "h"), http.StatusAccepted)
		waitCallbacks(t, peer, 1)
	})

	t.Run("a non-loopback listen needs a token", func(t *testing.T) {
		base := executor.Config{App: "a", Schedulers: []string{"http://127.0.0.1:1"}, AdvertiseAddr: "127.0.0.1:9"}
		for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
			cfg := base
			cfg.Addr = addr
			if _, err := executor.New(cfg); !errors.Is(err, executor.ErrInvalidConfig) || !strings.Contains(err.Error(), "Addr") {
				t.Errorf("New on %s without a token = %v, want ErrInvalidConfig naming Addr", addr, err)
			}
			cfg.Token = "t"
			if _, err := executor.New(cfg); err != nil {
				t.Errorf("New on %s with a token = %v", addr, err)
			}
			cfg.Token, cfg.InsecureNoAuth = "", true
			if _, err := executor.New(cfg); err != nil {
				t.Errorf("New on %s with InsecureNoAuth = %v", addr, err)
			}
		}
		for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
			cfg := base
			cfg.Addr = addr
			if _, err := executor.New(cfg); err != nil {
				t.Errorf("New on %s = %v", addr, err)
			}
		}
	})

	t.Run("a refused token fails Start", func(t *testing.T) {
		peer := startPeer(t, schedpeer.Config{Token: "s3cret"})
		exe := newExecutor(t, executor.Config{Token: "old"}, peer)
		exe.Handle("h", okHandler(""))
		err := exe.Start(context.Background())
		if !errors.Is(err, executor.ErrUnauthorized) {
			t.Fatalf("Start = %v, want ErrUnauthorized", err)
		}
		if c := peer.Calls(schedpeer.PathRegister); len(c) != 1 || c[0].Auth != "Bearer old" {
			t.Errorf("register calls = %+v", c)
		}
		if err := exe.Start(context.Background()); !errors.Is(err, executor.ErrStopped) {
			t.Errorf("Start after a failed Start = %v, want ErrStopped", err)
		}
	})

	t.Run("a rejected registration fails Start", func(t *testing.T) {
		peer := startPeer(t, schedpeer.Config{})
		peer.FailNext(schedpeer.PathRegister, http.StatusBadRequest)
		exe := newExecutor(t, executor.Config{}, peer)
		exe.Handle("h", okHandler(""))
		if err := exe.Start(context.Background()); !errors.Is(err, executor.ErrRegistrationRejected) {
			t.Fatalf("Start = %v, want ErrRegistrationRejected", err)
		}
	})
}

func TestStopDrainsRunsAndDeliversResults(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started := make(chan string, 1)
	release := make(chan struct{})
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)
	dispatch(t, peer, exe, runFor("t-1", "a", "h"), http.StatusAccepted)
	recv(t, started, "handler start")

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		stopped <- exe.Stop(ctx)
	}()
	// Wait until Stop refuses new runs; it cannot return while the handler is blocked. The
	// probe names no handler of this executor, so before Stop begins it is refused (404)
	// rather than admitted as a second run.
	testwait.For(t, schedpeer.WaitTimeout, "runs to be refused with 503 after Stop began", func() bool {
		resp, err := peer.Dispatch(exe.Addr(), runFor("t-2", "b", "no-such-handler"))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status == http.StatusServiceUnavailable
	})
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v while a handler was running", err)
	default:
	}
	// The executor still answers during the drain.
	if resp, err := peer.Beat(exe.Addr()); err != nil || !strings.Contains(string(resp.Body), `"running":1`) {
		t.Errorf("beat during drain = %v %v", resp, err)
	}
	close(release)
	if err := recv(t, stopped, "Stop"); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	// The result was delivered before Stop returned.
	calls := peer.Calls(schedpeer.PathCallback)
	if len(calls) != 1 || calls[0].Status != http.StatusOK || !strings.Contains(string(calls[0].Body), `"output":"released"`) {
		t.Errorf("callbacks at Stop = %+v", calls)
	}
	if _, err := peer.Beat(exe.Addr()); err == nil {
		t.Errorf("executor still serving after Stop")
	}
}

func TestStopCancelsRunsWhenItsContextExpires(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started := make(chan string, 1)
	causes := make(chan error, 1)
	exe.Handle("h", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		started <- run.Ticket
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return executor.Result{}, context.Cause(ctx)
	})
	start(t, exe)
	dispatch(t, peer, exe, runFor("t-1", "a", "h"), http.StatusAccepted)
	recv(t, started, "handler start")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := exe.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want DeadlineExceeded", err)
	}
	if cause := recv(t, causes, "handler cancellation"); !errors.Is(cause, executor.ErrShutdown) {
		t.Errorf("handler context cause = %v, want ErrShutdown", cause)
	}
	if err := exe.Stop(context.Background()); err != nil {
		t.Errorf("second Stop = %v", err)
	}
}

func TestLifecycleMisuse(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})

	never := newExecutor(t, executor.Config{}, peer)
	if err := never.Stop(context.Background()); err != nil {
		t.Errorf("Stop without Start = %v", err)
	}
	if err := never.Stop(context.Background()); err != nil {
		t.Errorf("second Stop without Start = %v", err)
	}
	if addr := never.Addr(); addr != "" {
		t.Errorf("Addr before Start = %q", addr)
	}

	empty := newExecutor(t, executor.Config{}, peer)
	if err := empty.Start(context.Background()); !errors.Is(err, executor.ErrNoHandlers) {
		t.Errorf("Start without handlers = %v", err)
	}

	exe := newExecutor(t, executor.Config{}, peer)
	exe.Handle("h", okHandler(""))
	mustPanic(t, "duplicate handler", func() { exe.Handle("h", okHandler("")) })
	mustPanic(t, "empty name", func() { exe.Handle("", okHandler("")) })
	mustPanic(t, "nil handler", func() { exe.Handle("x", nil) })
	start(t, exe)
	if err := exe.Start(context.Background()); !errors.Is(err, executor.ErrAlreadyStarted) {
		t.Errorf("second Start = %v", err)
	}
	mustPanic(t, "Handle after Start", func() { exe.Handle("late", okHandler("")) })
	stop(t, exe)
	stop(t, exe)
	if err := exe.Start(context.Background()); !errors.Is(err, executor.ErrStopped) {
		t.Errorf("Start after Stop = %v", err)
	}
}

func TestWildcardListenNeedsAnAdvertiseAddress(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	// A wildcard listen also needs a token (protected bind); that is tested on its own.
	exe := newExecutor(t, executor.Config{Addr: "0.0.0.0:0", Token: "t"}, peer)
	exe.Handle("h", okHandler(""))
	err := exe.Start(context.Background())
	if !errors.Is(err, executor.ErrInvalidConfig) || !strings.Contains(err.Error(), "AdvertiseAddr") {
		t.Fatalf("Start = %v, want an AdvertiseAddr config error", err)
	}

	adv := newExecutor(t, executor.Config{Addr: "0.0.0.0:0", AdvertiseAddr: "executor-1.internal:9100", Token: "t"}, peer)
	adv.Handle("h", okHandler(""))
	start(t, adv)
	if adv.Addr() != "executor-1.internal:9100" {
		t.Errorf("Addr = %q", adv.Addr())
	}
	if regs := peer.Registrations(); len(regs) != 1 || regs[0].Address != "executor-1.internal:9100" {
		t.Errorf("registrations = %+v", regs)
	}
}

func TestConfigValidationNamesTheField(t *testing.T) {
	valid := executor.Config{App: "billing", Schedulers: []string{"http://127.0.0.1:7070"}}
	if _, err := executor.New(valid); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		field  string
		mutate func(*executor.Config)
	}{
		{"App", func(c *executor.Config) { c.App = "" }},
		{"App", func(c *executor.Config) { c.App = "two words" }},
		{"Schedulers", func(c *executor.Config) { c.Schedulers = nil }},
		{"Schedulers[0]", func(c *executor.Config) { c.Schedulers = []string{"ftp://x"} }},
		{"Schedulers[1]", func(c *executor.Config) { c.Schedulers = []string{"http://a:1", "http://b:1/api"} }},
		{"Schedulers[0]", func(c *executor.Config) { c.Schedulers = []string{"http://"} }},
		{"Addr", func(c *executor.Config) { c.Addr = "no-port" }},
		{"AdvertiseAddr", func(c *executor.Config) { c.AdvertiseAddr = "0.0.0.0:9100" }},
		{"AdvertiseAddr", func(c *executor.Config) { c.AdvertiseAddr = "host:0" }},
		{"PoolSize", func(c *executor.Config) { c.PoolSize = -1 }},
		{"QueueSize", func(c *executor.Config) { c.QueueSize = -1 }},
		{"DedupTTL", func(c *executor.Config) { c.DedupTTL = 365 * 24 * time.Hour }},
		{"ResendMax", func(c *executor.Config) { c.ResendMin = time.Minute; c.ResendMax = time.Second }},
		{"OutputLimit", func(c *executor.Config) { c.OutputLimit = -1 }},
		{"OutputLimit", func(c *executor.Config) { c.OutputLimit = protocol.MaxOutputBytes + 1 }},
		{"ResultSenders", func(c *executor.Config) { c.ResultSenders = -1 }},
	} {
		cfg := valid
		tc.mutate(&cfg)
		_, err := executor.New(cfg)
		if !errors.Is(err, executor.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: New = %v, want ErrInvalidConfig naming %s", tc.field, err, tc.field)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg := executor.Config{}.WithDefaults()
	if cfg.Addr != executor.AddrDefault || cfg.HeartbeatInterval != executor.HeartbeatIntervalDefault ||
		cfg.QueueSize != executor.QueueSizeDefault || cfg.DedupTTL != executor.DedupTTLDefault ||
		cfg.PoolSize <= 0 || cfg.PoolSize%executor.PoolSizePerCPUDefault != 0 ||
		cfg.ResendMin != executor.ResendMinDefault || cfg.ResendMax != executor.ResendMaxDefault ||
		cfg.Logger == nil || cfg.Clock == nil {
		t.Errorf("defaults = %+v", cfg)
	}
}

func equalRegistration(a, b schedpeer.Registration) bool {
	return a.App == b.App && a.Address == b.Address && a.Protocol == b.Protocol && slices.Equal(a.Handlers, b.Handlers)
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	f()
}

// TestResultBurstBeyondConnectionLimit finishes more runs at once than the SDK keeps
// connections to the scheduler (512) while the scheduler holds each result call a while:
// every result must wait for a free connection and arrive, not fail at once and sit out a
// re-send delay (an hour here, so a result that needed a re-send never arrives in time).
//
// It also checks that heartbeats keep flowing while every result connection is busy: a
// heartbeat queued behind the results would get the executor reaped as lost at the
// scheduler, and every run it holds recorded lost with it.
func TestResultBurstBeyondConnectionLimit(t *testing.T) {
	const delay = 1500 * time.Millisecond
	peer := startPeer(t, schedpeer.Config{CallbackDelay: delay})
	const n = 700
	exe := newExecutor(t, executor.Config{PoolSize: n, QueueSize: n, ResendMin: time.Hour, ResendMax: time.Hour,
		HeartbeatInterval: 100 * time.Millisecond}, peer)
	started := make(chan string, n)
	release := make(chan struct{})
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)

	var wg sync.WaitGroup
	work := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				resp, err := peer.Dispatch(exe.Addr(), runFor(fmt.Sprintf("t-%03d", i), fmt.Sprintf("task-%03d", i), "h"))
				if err != nil || resp.Status != http.StatusAccepted {
					t.Errorf("dispatch %d: %v, status %d %s", i, err, resp.Status, resp.Body)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for range n {
		recv(t, started, "a handler start")
	}
	close(release) // n results ready at once
	beats := len(peer.Heartbeats())
	time.Sleep(delay) // every result connection is held by the scheduler meanwhile
	if got := len(peer.Heartbeats()) - beats; got < 3 {
		t.Errorf("%d heartbeats in %s of result backlog at a 100ms period: heartbeats wait behind results", got, delay)
	}
	cbs := waitCallbacks(t, peer, n)
	seen := map[string]bool{}
	for _, cb := range cbs {
		if cb.Status != "success" || seen[cb.Ticket] {
			t.Fatalf("result %+v: want one success per ticket", cb)
		}
		seen[cb.Ticket] = true
	}
	if len(seen) != n {
		t.Fatalf("%d results, want %d", len(seen), n)
	}
}

// TestResultsBatched keeps every result sender waiting at the scheduler while more runs
// finish, and checks that those results then travel together in batch calls, each settled by
// its own answer: acknowledged, refused for good (unknown or stale ticket: never re-sent), or
// failed transiently (re-sent until acknowledged); and that a batch the scheduler failed as a
// whole is re-sent whole.
func TestResultsBatched(t *testing.T) {
	hold := make(chan struct{})
	peer := startPeer(t, schedpeer.Config{Hold: hold})
	// Registered after the peer's own cleanup, so it runs first: a test that fails while
	// calls are held must release them, or closing the peer waits on them for ever.
	var release sync.Once
	releaseHeld := func() { release.Do(func() { close(hold) }) }
	t.Cleanup(releaseHeld)
	const senders = 2
	// The held calls must stay in flight until the test releases them: with the default
	// RequestTimeout (5s), a slow machine timed them out and re-sent the fillers' results.
	exe := newExecutor(t, executor.Config{ResultSenders: senders, PoolSize: 32, QueueSize: 32,
		ResendMin: 5 * time.Millisecond, ResendMax: 5 * time.Millisecond, RequestTimeout: time.Minute}, peer)
	finished := make(chan string, 32)
	exe.Handle("h", func(_ context.Context, run executor.Run) (executor.Result, error) {
		defer func() { finished <- run.Ticket }()
		return executor.Result{Output: run.Ticket}, nil
	})
	start(t, exe)

	// Two fillers occupy both senders; the scheduler holds their calls. Each is sent only
	// once the one before has arrived: two results ready at once would travel in one batch
	// call, leaving a sender free.
	for i, tk := range []string{"fill-1", "fill-2"} {
		dispatch(t, peer, exe, runFor(tk, tk, "h"), http.StatusAccepted)
		if err := peer.WaitArrived(i + 1); err != nil {
			t.Fatal(err)
		}
		recv(t, finished, "filler")
	}

	// Everything finishing now waits in the outbox.
	oks := []string{"ok-1", "ok-2", "ok-3", "ok-4", "ok-5"}
	for _, tk := range oks {
		dispatch(t, peer, exe, runFor(tk, tk, "h"), http.StatusAccepted)
	}
	dispatch(t, peer, exe, runFor("stale-1", "stale-1", "h"), http.StatusAccepted)
	peer.MarkStale("stale-1")
	dispatch(t, peer, exe, runFor("flaky-1", "flaky-1", "h"), http.StatusAccepted)
	peer.FailTicket("flaky-1", http.StatusInternalServerError)
	// A ticket the scheduler never dispatched: posted straight, so the peer does not know it.
	body, _ := json.Marshal(runFor("unknown-1", "unknown-1", "h"))
	if resp, err := peer.Post(exe.Addr(), "/axe/run", body, "", nil); err != nil || resp.Status != http.StatusAccepted {
		t.Fatalf("run unknown-1: %v %+v", err, resp)
	}
	for range len(oks) + 3 {
		recv(t, finished, "a run to finish")
	}
	peer.FailNext(schedpeer.PathCallbackBatch, http.StatusInternalServerError)
	releaseHeld()

	// 2 fillers + 5 ok + stale + unknown + flaky twice (a transient failure, then acknowledged).
	waitCallbacks(t, peer, 11)
	stop(t, exe) // returns once every delivery has settled
	for _, cb := range waitCallbacks(t, peer, 11) {
		if cb.Output != cb.Ticket || cb.Status != "success" {
			t.Errorf("result %+v, want success with the ticket as output", cb)
		}
	}
	received := map[string]int{}
	for _, cb := range waitCallbacks(t, peer, 11) {
		received[cb.Ticket]++
	}
	want := map[string]int{"fill-1": 1, "fill-2": 1, "stale-1": 1, "unknown-1": 1, "flaky-1": 2}
	for _, tk := range oks {
		want[tk] = 1
	}
	if !maps.Equal(received, want) {
		t.Errorf("results received per ticket = %v, want %v (refusals final, transient failures re-sent once)", received, want)
	}
	batches := peer.Calls(schedpeer.PathCallbackBatch)
	if len(batches) < 2 || batches[0].Status != http.StatusInternalServerError {
		t.Fatalf("%d batch calls, want the failed one and its re-send at least", len(batches))
	}
	sizes := peer.BatchSizes()
	if sizes[0] < 2 {
		t.Errorf("the first batch carried %d results, want the several that finished while the senders waited", sizes[0])
	}
	// Every result received was in an accepted batch or went alone.
	inBatches := 0
	for i, n := range sizes {
		if batches[i].Status == http.StatusOK {
			inBatches += n
		}
	}
	singles := len(peer.Calls(schedpeer.PathCallback))
	if inBatches+singles != 11 {
		t.Errorf("%d results in accepted batches + %d alone = %d, want 11", inBatches, singles, inBatches+singles)
	}
}

// TestRunBatch admits several runs in one POST /axe/runs: each is answered as POST /axe/run
// would answer it alone, in order, and one refused run does not refuse the others.
func TestRunBatch(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started := make(chan string, 8)
	release := make(chan struct{})
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)

	type answer struct {
		Code int             `json:"code"`
		Body json.RawMessage `json:"body"`
	}
	batch := func(runs ...schedpeer.Run) []answer {
		t.Helper()
		resp, err := peer.DispatchBatch(exe.Addr(), runs)
		if err != nil || resp.Status != http.StatusOK {
			t.Fatalf("POST /axe/runs: %v, %d %s", err, resp.Status, resp.Body)
		}
		var out struct{ Results []answer }
		if err := resp.Decode(&out); err != nil || len(out.Results) != len(runs) {
			t.Fatalf("answer %s (%v): want %d items", resp.Body, err, len(runs))
		}
		return out.Results
	}
	noHandler := runFor("t-4", "task-d", "h")
	noHandler.Handler = ""
	got := batch(runFor("t-1", "task-a", "h"), runFor("t-2", "task-b", "h"), noHandler,
		runFor("t-3", "task-c", "nope"), runFor("t-5", "task-a", "h"))
	for i, want := range []struct {
		code int
		body string
	}{
		{202, `"accepted":true`}, {202, `"accepted":true`}, {404, `unknown handler \"\"`}, {404, `unknown handler`}, {409, `already running`},
	} {
		if got[i].Code != want.code || !strings.Contains(string(got[i].Body), want.body) {
			t.Errorf("run %d answered %d %s, want %d containing %s", i, got[i].Code, got[i].Body, want.code, want.body)
		}
	}
	recv(t, started, "a handler start")
	recv(t, started, "a handler start")

	// A ticket running here is a duplicate, not a second run.
	if got := batch(runFor("t-1", "task-a", "h")); got[0].Code != 202 || !strings.Contains(string(got[0].Body), `"duplicate":true`) {
		t.Errorf("repeated running ticket answered %d %s, want 202 duplicate", got[0].Code, got[0].Body)
	}
	close(release)
	waitCallbacks(t, peer, 2)
	// A finished ticket answers its outcome and its result is sent again.
	if got := batch(runFor("t-1", "task-a", "h"), runFor("t-6", "task-e", "h")); got[0].Code != 200 ||
		!strings.Contains(string(got[0].Body), `"status":"success"`) || got[1].Code != 202 {
		t.Errorf("finished ticket and a new one answered %+v, want 200 success and 202", got)
	}
	cbs := waitCallbacks(t, peer, 4)
	tickets := map[string]int{}
	for _, cb := range cbs {
		tickets[cb.Ticket]++
	}
	if tickets["t-1"] != 2 || tickets["t-2"] != 1 || tickets["t-6"] != 1 || len(tickets) != 3 {
		t.Errorf("results per ticket %v, want t-1 twice (re-sent), t-2 and t-6 once, nothing for refused runs", tickets)
	}

	// The call as a whole is refused only when it is not a batch.
	for _, body := range []string{`{"runs":[]}`, `{"runs":{}}`, `[]`, `{"runs":[` + strings.Repeat(`{},`, 1000) + `{}]}`} {
		resp, err := peer.Post(exe.Addr(), "/axe/runs", []byte(body), "", nil)
		if err != nil || resp.Status != http.StatusBadRequest || !strings.Contains(string(resp.Body), `"error"`) {
			t.Errorf("POST /axe/runs %.30q = %v %d %s, want 400 with an error", body, err, resp.Status, resp.Body)
		}
	}
}
