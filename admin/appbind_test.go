package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/axe-sched/axe/admin"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/protocol"
)

// holdingExecutor accepts every run and never reports a result, so each run it gets stays
// RUNNING, waiting for whoever reports it.
type holdingExecutor struct {
	srv  *httptest.Server
	mu   sync.Mutex
	runs []string // tickets received
}

func newHoldingExecutor(t *testing.T) *holdingExecutor {
	t.Helper()
	x := &holdingExecutor{}
	x.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case protocol.PathRun:
			var run protocol.Run
			_ = json.NewDecoder(r.Body).Decode(&run)
			x.add(run.Ticket)
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"accepted":true}`))
		case protocol.PathRuns:
			var b struct{ Runs []protocol.Run }
			_ = json.NewDecoder(r.Body).Decode(&b)
			out := protocol.RunBatchAnswer{}
			for _, run := range b.Runs {
				x.add(run.Ticket)
				out.Results = append(out.Results, protocol.RunAnswer{Code: http.StatusAccepted, Body: json.RawMessage(`{"accepted":true}`)})
			}
			_ = json.NewEncoder(w).Encode(out)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"no such path"}`))
		}
	}))
	t.Cleanup(x.srv.Close)
	return x
}

func (x *holdingExecutor) add(ticket string) {
	x.mu.Lock()
	x.runs = append(x.runs, ticket)
	x.mu.Unlock()
}

func (x *holdingExecutor) got(ticket string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, t := range x.runs {
		if t == ticket {
			return true
		}
	}
	return false
}

func (x *holdingExecutor) addr() string { return strings.TrimPrefix(x.srv.URL, "http://") }

// TestResultsAreBoundToTheRunsApp: an executor token bound to one app cannot report the
// result of another app's run, even naming its own app, whether the run is in flight, over
// the batch endpoint, or already ended; nor heartbeat as the other app's executor. The run
// stays as it was until its own app's token reports it.
func TestResultsAreBoundToTheRunsApp(t *testing.T) {
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		const payTok = "payroll-exec-0123456789"
		file := filepath.Join(t.TempDir(), "tokens.json")
		writeTokenFile(t, file, []admin.TokenEntry{
			{Name: "ops", Scope: "write", Token: writeTok},
			{Name: "billing-exec", Scope: "executor", Token: billTok, Apps: []string{"billing"}},
			{Name: "payroll-exec", Scope: "executor", Token: payTok, Apps: []string{"payroll"}},
		})
		d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Security.TokenFile = file })
		d.Token = writeTok
		billX, payX := newHoldingExecutor(t), newHoldingExecutor(t)
		for _, r := range []struct {
			app, handler, tok string
			x                 *holdingExecutor
		}{{"billing", "charge", billTok, billX}, {"payroll", "pay", payTok, payX}} {
			reg := map[string]any{"app": r.app, "address": r.x.addr(), "handlers": []string{r.handler}, "auth": "signed"}
			d.MustJSON(t, 200, "POST", protocol.PathRegister, reg, nil, bearer(r.tok)...)
			d.Create(t, map[string]any{"name": r.handler, "trigger": "manual",
				"callback": map[string]any{"type": "executor", "app": r.app, "handler": r.handler}})
		}
		charge := d.RunNow(t, "charge", nil)
		pay := d.RunNow(t, "pay", nil)
		testwait.For(t, daemontest.WaitTimeout, "both runs to reach their executors", func() bool {
			return billX.got(charge) && payX.got(pay)
		})

		result := func(ticket, app, status string) map[string]any {
			return map[string]any{"ticket": ticket, "app": app, "address": payX.addr(), "status": status, "output": "forged"}
		}
		// The payroll token, naming its own app, for billing's run in flight.
		msg := d.APIError(t, http.StatusForbidden, "POST", protocol.PathCallback, result(charge, "payroll", "failed"), bearer(payTok)...)
		if !strings.Contains(msg, `"payroll"`) || !strings.Contains(msg, charge) {
			t.Errorf("403 %q does not name the app and the run", msg)
		}
		// Naming billing's app, which the token is not bound to.
		msg = d.APIError(t, http.StatusForbidden, "POST", protocol.PathCallback, result(charge, "billing", "failed"), bearer(payTok)...)
		if !strings.Contains(msg, `"billing"`) {
			t.Errorf("403 %q does not name the app", msg)
		}
		// In a batch, next to its own run's result: only the foreign one is refused.
		var ans protocol.CallbackBatchAnswer
		d.MustJSON(t, 200, "POST", protocol.PathCallbackBatch, map[string]any{"results": []any{
			result(charge, "payroll", "failed"), result(pay, "payroll", "success")}}, &ans, bearer(payTok)...)
		if len(ans.Results) != 2 || ans.Results[0].Status != http.StatusForbidden || !strings.Contains(ans.Results[0].Error, "payroll") ||
			ans.Results[1].Status != http.StatusOK {
			t.Errorf("batch answer %+v, want 403 for billing's run and 200 for payroll's", ans.Results)
		}
		// Heartbeating as billing's executor.
		d.APIError(t, http.StatusForbidden, "POST", protocol.PathHeartbeat, map[string]any{"app": "billing", "address": billX.addr()}, bearer(payTok)...)
		d.MustJSON(t, 200, "POST", protocol.PathHeartbeat, map[string]any{"app": "payroll", "address": payX.addr()}, nil, bearer(payTok)...)

		if r := runOf(t, d, "charge", charge); r.Result != model.ResultRunning || r.Output != "" {
			t.Fatalf("billing's run after the forged results: %+v, want it still running", r)
		}
		if r := d.WaitRun(t, "pay", pay); r.Result != model.ResultSuccess {
			t.Errorf("payroll's own run: %+v, want success", r)
		}
		// Billing's token reports its own run.
		d.MustJSON(t, 200, "POST", protocol.PathCallback, map[string]any{"ticket": charge, "app": "billing",
			"address": billX.addr(), "status": "success", "output": "charged"}, nil, bearer(billTok)...)
		if r := d.WaitRun(t, "charge", charge); r.Result != model.ResultSuccess || r.Output != "charged" {
			t.Errorf("billing's run: %+v, want success with its own output", r)
		}
		// Once ended, a foreign report is still refused, not acknowledged as a duplicate.
		d.APIError(t, http.StatusForbidden, "POST", protocol.PathCallback, result(charge, "payroll", "success"), bearer(payTok)...)
		acts := d.Actions(t, "charge")
		for _, a := range acts {
			if strings.Contains(a.Actor, payX.addr()) || strings.Contains(a.Detail, "forged") {
				t.Errorf("a forged result left an action: %+v", a)
			}
		}
	})
}

func runOf(t *testing.T, d *daemontest.Daemon, task, ticket string) model.Run {
	t.Helper()
	for _, r := range d.Runs(t, task) {
		if r.Ticket == ticket {
			return r
		}
	}
	t.Fatalf("no run %s of %s", ticket, task)
	return model.Run{}
}

// TestResultsAreBoundToTheRunsExecutor: a run in flight takes its result only from the
// executor it was sent to, naming its own task: another executor of the same app, an
// address no executor registered, or another task's name is refused, singly and in a batch,
// and none of them changes the run or the executor it records. Without tokens, so the app
// binding of tokens plays no part.
func TestResultsAreBoundToTheRunsExecutor(t *testing.T) {
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		xs := []*holdingExecutor{newHoldingExecutor(t), newHoldingExecutor(t)}
		for _, x := range xs {
			d.MustJSON(t, 200, "POST", protocol.PathRegister, map[string]any{"app": "billing", "address": x.addr(), "handlers": []string{"charge"}}, nil)
		}
		d.Create(t, map[string]any{"name": "charge", "trigger": "manual",
			"callback": map[string]any{"type": "executor", "app": "billing", "handler": "charge"}})
		ticket := d.RunNow(t, "charge", nil)
		testwait.For(t, daemontest.WaitTimeout, "the run to reach an executor", func() bool { return xs[0].got(ticket) || xs[1].got(ticket) })
		holder, other := xs[0], xs[1]
		if other.got(ticket) {
			holder, other = other, holder
		}
		result := func(task, addr string) map[string]any {
			return map[string]any{"ticket": ticket, "task": task, "app": "billing", "address": addr, "status": "success", "output": "forged"}
		}
		for _, c := range []struct {
			name string
			body map[string]any
			code int
			says string
		}{
			{"another executor of the app", result("charge", other.addr()), 403, holder.addr()},
			{"an unregistered address", result("charge", "127.0.0.1:1"), 403, holder.addr()},
			{"another task's name", result("refund", holder.addr()), 400, "task"},
		} {
			if msg := d.APIError(t, c.code, "POST", protocol.PathCallback, c.body); !strings.Contains(msg, c.says) {
				t.Errorf("%s: %q, want %d naming %s", c.name, msg, c.code, c.says)
			}
		}
		var ans protocol.CallbackBatchAnswer
		d.MustJSON(t, 200, "POST", protocol.PathCallbackBatch, map[string]any{"results": []any{
			result("charge", other.addr()), result("refund", holder.addr())}}, &ans)
		if len(ans.Results) != 2 || ans.Results[0].Status != 403 || ans.Results[1].Status != 400 {
			t.Errorf("batch answer %+v, want 403 and 400", ans.Results)
		}
		if r := runOf(t, d, "charge", ticket); r.Result != model.ResultRunning || r.Output != "" {
			t.Fatalf("the run after the forged results: %+v, want it still running", r)
		}
		d.MustJSON(t, 200, "POST", protocol.PathCallback, map[string]any{"ticket": ticket, "task": "charge", "app": "billing",
			"address": holder.addr(), "status": "success", "output": "charged"}, nil)
		if r := d.WaitRun(t, "charge", ticket); r.Result != model.ResultSuccess || r.Output != "charged" || r.Executor != holder.addr() {
			t.Errorf("the run after its executor's result: %+v, want success from %s", r, holder.addr())
		}
	})
}
