package admin_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/admin"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/protocol"
)

// v2Executor is an executor of protocol version 2 written against the docs alone: it
// verifies each call's signature for its current incarnation, refuses one for another
// incarnation with 401 as the SDK does, takes every other run (202) and records the calls.
type v2Executor struct {
	srv   *httptest.Server
	token string
	mu    sync.Mutex
	inc   string
	calls []v2Call
}

type v2Call struct {
	path, incarnation string
	status            int
	body              []byte
}

func newV2Executor(t *testing.T, token, inc string) *v2Executor {
	t.Helper()
	x := &v2Executor{token: token, inc: inc}
	x.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		x.mu.Lock()
		own := x.inc
		x.mu.Unlock()
		got := r.Header.Get(protocol.HeaderIncarnation)
		status, answer := http.StatusAccepted, `{"accepted":true}`
		if err := protocol.VerifyCallV2(protocol.DispatchKey(token), []byte(r.Header.Get("Authorization")), x.addr(), r.URL.Path,
			r.Header.Get("X-Axe-Epoch"), own, got, body, time.Now()); err != nil {
			status, answer = http.StatusUnauthorized, `{"error":"`+err.Error()+`"}`
		}
		x.mu.Lock()
		x.calls = append(x.calls, v2Call{path: r.URL.Path, incarnation: got, status: status, body: body})
		x.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(x.srv.Close)
	return x
}

func (x *v2Executor) addr() string { return strings.TrimPrefix(x.srv.URL, "http://") }

// restart gives the executor a new incarnation, as a new process at the same address.
func (x *v2Executor) restart(inc string) {
	x.mu.Lock()
	x.inc = inc
	x.mu.Unlock()
}

// runsOf returns the calls to /axe/run that carried ticket.
func (x *v2Executor) runsOf(ticket string) []v2Call {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []v2Call
	for _, c := range x.calls {
		if c.path == protocol.PathRun && strings.Contains(string(c.body), `"`+ticket+`"`) {
			out = append(out, c)
		}
	}
	return out
}

func (x *v2Executor) runCount() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, c := range x.calls {
		if c.path == protocol.PathRun || c.path == protocol.PathRuns {
			n++
		}
	}
	return n
}

const (
	incA = "aaaaaaaaaaaaaaaa0000000000000001"
	incB = "bbbbbbbbbbbbbbbb0000000000000002"
)

// TestSchedulerSpeaksProtocolV2 drives a real daemon with an executor of version 2 over real
// HTTP: the scheduler reads register, heartbeat, deregister and results that carry a field
// it does not know; signs each call for the registered incarnation; answers a heartbeat of
// another incarnation 404; treats a run refused as signed for another incarnation as not
// delivered (the executor restarted: the run goes to its new process once it registered, and
// the task does not fail); and stops routing to an executor at once when it deregisters,
// while the result of its run in flight is still recorded. An app-bound token deregisters
// only its own app's executors.
func TestSchedulerSpeaksProtocolV2(t *testing.T) {
	const billingTok, otherTok = "billing-exec-0123456789", "other-exec-0123456789"
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		file := filepath.Join(t.TempDir(), "tokens.json")
		writeTokenFile(t, file, []admin.TokenEntry{
			{Name: "ops", Scope: "write", Token: writeTok},
			{Name: "billing-exec", Scope: "executor", Token: billingTok, Apps: []string{"billing"}},
			{Name: "other-exec", Scope: "executor", Token: otherTok, Apps: []string{"other"}},
		})
		d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Security.TokenFile = file })
		d.Token = writeTok
		x := newV2Executor(t, billingTok, incA)
		exec := bearer(billingTok)

		// Register with a field this scheduler does not know: taken, answered with version 2.
		var ans map[string]any
		d.MustJSON(t, 200, "POST", protocol.PathRegister, map[string]any{"app": "billing", "address": x.addr(),
			"handlers": []string{"charge"}, "auth": "signed", "version": 2, "incarnation": incA,
			"labels": map[string]any{"zone": "b", "gpu": false}}, &ans, exec...)
		if ans["version"] != float64(protocol.Version) || ans["heartbeat_interval_ms"] == nil {
			t.Errorf("registration answered %v, want version %d and the timings", ans, protocol.Version)
		}
		d.MustJSON(t, 200, "POST", protocol.PathHeartbeat, map[string]any{"app": "billing", "address": x.addr(),
			"running": 0, "incarnation": incA, "load": 0.25}, nil, exec...)
		if msg := d.APIError(t, 404, "POST", protocol.PathHeartbeat, map[string]any{"app": "billing", "address": x.addr(),
			"incarnation": incB}, exec...); !strings.Contains(msg, "not registered") {
			t.Errorf("a heartbeat of another incarnation: %q", msg)
		}
		// The field is optional: a heartbeat without it is not checked.
		d.MustJSON(t, 200, "POST", protocol.PathHeartbeat, map[string]any{"app": "billing", "address": x.addr()}, nil, exec...)
		d.Create(t, map[string]any{"name": "charge", "trigger": "manual", "timeout_sec": 60,
			"callback": map[string]any{"type": "executor", "app": "billing", "handler": "charge"}})

		// A run is signed for the registered incarnation; its result, with a field the
		// scheduler does not know, is recorded.
		t1 := d.RunNow(t, "charge", nil)
		testwait.For(t, 20*time.Second, "the first run at the executor", func() bool { return len(x.runsOf(t1)) == 1 })
		if c := x.runsOf(t1)[0]; c.status != 202 || c.incarnation != incA {
			t.Fatalf("the first run reached the executor with incarnation %q and was answered %d", c.incarnation, c.status)
		}
		d.MustJSON(t, 200, "POST", protocol.PathCallback, map[string]any{"ticket": t1, "task": "charge", "app": "billing",
			"address": x.addr(), "status": "success", "output": "ok", "host": map[string]any{"cpu": 1}}, nil, exec...)
		if r := d.WaitRun(t, "charge", t1); r.Result != model.ResultSuccess {
			t.Errorf("run %s: %+v, want success", t1, r)
		}

		// The executor restarts at the same address (new incarnation) before the scheduler
		// hears of it: the next run, signed for the old incarnation, is refused 401 without
		// being read; once the new process registers, the run goes to it.
		x.restart(incB)
		t2 := d.RunNow(t, "charge", nil)
		testwait.For(t, 20*time.Second, "the run refused as signed for the previous process", func() bool { return len(x.runsOf(t2)) >= 1 })
		if c := x.runsOf(t2)[0]; c.status != 401 || c.incarnation != incA {
			t.Fatalf("the run to the restarted executor: incarnation %q answered %d, want %s answered 401", c.incarnation, c.status, incA)
		}
		d.MustJSON(t, 200, "POST", protocol.PathRegister, map[string]any{"app": "billing", "address": x.addr(),
			"handlers": []string{"charge"}, "auth": "signed", "version": 2, "incarnation": incB}, nil, exec...)
		testwait.For(t, 20*time.Second, "the run offered again to the new process", func() bool { return len(x.runsOf(t2)) == 2 })
		if c := x.runsOf(t2)[1]; c.status != 202 || c.incarnation != incB {
			t.Fatalf("the run offered again: incarnation %q answered %d, want %s answered 202", c.incarnation, c.status, incB)
		}
		// The batch endpoint skips unknown fields too.
		var batch struct {
			Results []protocol.CallbackItem `json:"results"`
		}
		d.MustJSON(t, 200, "POST", protocol.PathCallbackBatch, map[string]any{"results": []map[string]any{{"ticket": t2,
			"task": "charge", "app": "billing", "address": x.addr(), "status": "success", "later": []int{1}}}, "trace": "x"}, &batch, exec...)
		if len(batch.Results) != 1 || batch.Results[0].Status != 200 {
			t.Errorf("batch answer %+v, want one 200", batch.Results)
		}
		if r := d.WaitRun(t, "charge", t2); r.Result != model.ResultSuccess {
			t.Errorf("the run refused by the previous incarnation then taken: %+v, want success (it was not delivered, no failure)", r)
		}

		// Deregistration: a run in flight, then the executor deregisters.
		t3 := d.RunNow(t, "charge", nil)
		testwait.For(t, 20*time.Second, "the third run at the executor", func() bool { return len(x.runsOf(t3)) == 1 })
		dereg := map[string]any{"app": "billing", "address": x.addr(), "incarnation": incB, "reason": "SIGTERM"}
		if msg := d.APIError(t, 403, "POST", protocol.PathDeregister, dereg, bearer(otherTok)...); !strings.Contains(msg, "billing") {
			t.Errorf("another app's token deregistering: %q", msg)
		}
		d.MustJSON(t, 200, "POST", protocol.PathDeregister, map[string]any{"app": "billing", "address": x.addr(),
			"incarnation": incA}, nil, exec...) // an older incarnation's: no effect
		var list struct {
			Executors []model.Executor `json:"executors"`
		}
		d.MustJSON(t, 200, "GET", "/api/v1/executors", nil, &list)
		if len(list.Executors) != 1 || list.Executors[0].Status != "alive" {
			t.Fatalf("after a deregistration of an older incarnation: %+v, want alive", list.Executors)
		}
		var ok map[string]bool
		d.MustJSON(t, 200, "POST", protocol.PathDeregister, dereg, &ok, exec...)
		d.MustJSON(t, 200, "POST", protocol.PathDeregister, dereg, &ok, exec...) // idempotent
		if !ok["ok"] {
			t.Errorf("deregistration answered %v", ok)
		}
		d.MustJSON(t, 200, "GET", "/api/v1/executors", nil, &list)
		if len(list.Executors) != 1 || list.Executors[0].Status != "left" {
			t.Errorf("after the deregistration: %+v, want status left", list.Executors)
		}
		// It drains: its heartbeats are taken and do not make it take runs again.
		d.MustJSON(t, 200, "POST", protocol.PathHeartbeat, map[string]any{"app": "billing", "address": x.addr(),
			"running": 1, "incarnation": incB}, nil, exec...)
		before := x.runCount()
		t4 := d.RunNow(t, "charge", nil)
		if r := d.WaitRun(t, "charge", t4); r.Result != model.ResultFailed || !strings.Contains(r.Error, "no alive executor") {
			t.Errorf("a run after the deregistration: %+v, want failed for want of an executor", r)
		}
		if n := x.runCount(); n != before {
			t.Errorf("the executor got %d calls with runs after it deregistered", n-before)
		}
		// The run it held finishes, and its result is recorded.
		d.MustJSON(t, 200, "POST", protocol.PathCallback, map[string]any{"ticket": t3, "task": "charge", "app": "billing",
			"address": x.addr(), "status": "success"}, nil, exec...)
		if r := d.WaitRun(t, "charge", t3); r.Result != model.ResultSuccess {
			t.Errorf("the run in flight at the deregistration: %+v, want success", r)
		}
		// A registration ends the deregistration.
		d.MustJSON(t, 200, "POST", protocol.PathRegister, map[string]any{"app": "billing", "address": x.addr(),
			"handlers": []string{"charge"}, "auth": "signed", "version": 2, "incarnation": incA}, nil, exec...)
		x.restart(incA)
		t5 := d.RunNow(t, "charge", nil)
		testwait.For(t, 20*time.Second, "a run after registering again", func() bool { return len(x.runsOf(t5)) == 1 })
		d.MustJSON(t, 200, "POST", protocol.PathCallback, map[string]any{"ticket": t5, "task": "charge", "app": "billing",
			"address": x.addr(), "status": "success"}, nil, exec...)
		if r := d.WaitRun(t, "charge", t5); r.Result != model.ResultSuccess {
			t.Errorf("a run after registering again: %+v, want success", r)
		}

		// A scheduler started again on the same store signs for the incarnation the store
		// kept, without a new registration.
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		d = daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Security.TokenFile = file })
		d.Token = writeTok
		t6 := d.RunNow(t, "charge", nil)
		testwait.For(t, 20*time.Second, "a run from the restarted scheduler", func() bool { return len(x.runsOf(t6)) == 1 })
		if c := x.runsOf(t6)[0]; c.status != 202 || c.incarnation != incA {
			t.Errorf("the restarted scheduler's run: incarnation %q answered %d, want %s answered 202", c.incarnation, c.status, incA)
		}
		d.MustJSON(t, 200, "POST", protocol.PathCallback, map[string]any{"ticket": t6, "task": "charge", "app": "billing",
			"address": x.addr(), "status": "success"}, nil, exec...)
		d.WaitRun(t, "charge", t6)
	})
}

// TestVersion1ExecutorStillWorks: an executor of protocol version 1 (no version or
// incarnation at registration, heartbeats without one, version 1 signatures) is served as
// before by this scheduler: its calls carry no X-Axe-Incarnation and verify as version 1.
func TestVersion1ExecutorStillWorks(t *testing.T) {
	const tok = "billing-exec-0123456789"
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "axe.db")
	file := filepath.Join(t.TempDir(), "tokens.json")
	writeTokenFile(t, file, []admin.TokenEntry{
		{Name: "ops", Scope: "write", Token: writeTok},
		{Name: "billing-exec", Scope: "executor", Token: tok, Apps: []string{"billing"}},
	})
	d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Security.TokenFile = file })
	d.Token = writeTok
	var (
		mu    sync.Mutex
		calls []http.Header
	)
	var addr string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, r.Header.Clone())
		mu.Unlock()
		if err := protocol.VerifyCall(protocol.DispatchKey(tok), []byte(r.Header.Get("Authorization")), addr, r.URL.Path,
			r.Header.Get("X-Axe-Epoch"), body, time.Now()); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"missing or invalid scheduler signature"}`)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"accepted":true}`)
	}))
	t.Cleanup(srv.Close)
	addr = strings.TrimPrefix(srv.URL, "http://")
	d.MustJSON(t, 200, "POST", protocol.PathRegister, map[string]any{"app": "billing", "address": addr,
		"protocol": "http", "handlers": []string{"charge"}, "auth": "signed"}, nil, bearer(tok)...)
	d.MustJSON(t, 200, "POST", protocol.PathHeartbeat, map[string]any{"app": "billing", "address": addr, "running": 0}, nil, bearer(tok)...)
	d.Create(t, map[string]any{"name": "charge", "trigger": "manual", "timeout_sec": 60,
		"callback": map[string]any{"type": "executor", "app": "billing", "handler": "charge"}})
	ticket := d.RunNow(t, "charge", nil)
	testwait.For(t, 20*time.Second, "the run at the version 1 executor", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == 1
	})
	mu.Lock()
	h := calls[0]
	mu.Unlock()
	if h.Get(protocol.HeaderIncarnation) != "" {
		t.Errorf("a version 1 executor got X-Axe-Incarnation %q", h.Get(protocol.HeaderIncarnation))
	}
	d.MustJSON(t, 200, "POST", protocol.PathCallback, map[string]any{"ticket": ticket, "task": "charge", "app": "billing",
		"address": addr, "status": "success"}, nil, bearer(tok)...)
	if r := d.WaitRun(t, "charge", ticket); r.Result != model.ResultSuccess {
		t.Errorf("the run on the version 1 executor: %+v, want success (its signature verified as version 1)", r)
	}
}

// TestResultAfterLostIsRecorded: a result for a run marked lost (its executor went silent)
// is answered 200 and kept on the run as a late result, as docs/protocol.md says; the task
// is not changed.
func TestResultAfterLostIsRecorded(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "axe.db")
	d := daemontest.Start(t, dsn, func(c *axedaemon.Config) {
		c.Engine.HeartbeatInterval, c.Engine.LostAfter = 200*time.Millisecond, time.Second
	})
	x := newV2Executor(t, "", "")
	x.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"accepted":true}`)
	})
	d.MustJSON(t, 200, "POST", protocol.PathRegister, map[string]any{"app": "billing", "address": x.addr(),
		"handlers": []string{"charge"}}, nil)
	d.Create(t, map[string]any{"name": "charge", "trigger": "manual", "timeout_sec": 600,
		"callback": map[string]any{"type": "executor", "app": "billing", "handler": "charge"}})
	ticket := d.RunNow(t, "charge", nil)
	if r := d.WaitRun(t, "charge", ticket); r.Result != model.ResultLost {
		t.Fatalf("the run on a silent executor: %+v, want lost", r)
	}
	var ans map[string]bool
	d.MustJSON(t, 200, "POST", protocol.PathCallback, map[string]any{"ticket": ticket, "task": "charge", "app": "billing",
		"address": x.addr(), "status": "success", "output": "done late"}, &ans)
	if !ans["ok"] {
		t.Errorf("the late result answered %v, want ok", ans)
	}
	for _, r := range d.Runs(t, "charge") {
		if r.Ticket == ticket && (r.Result != model.ResultSuccess || !strings.Contains(r.Detail, "marked lost")) {
			t.Errorf("the run after its late result: %+v, want success noting it was marked lost", r)
		}
	}
}
