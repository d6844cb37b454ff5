package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/model"
)

// TestRunNowParamsStored: the params a run-now is given are stored on its run and shown by
// GET /api/v1/runs/{ticket}, a sensitive key's value masked there (and sent as *** it takes
// the task's stored value); the run lists leave them out; the run_now action record names
// that params were given and their keys; a run-now given none stores none and its record
// says nothing of params; a bad params body answers 400 and starts no run.
func TestRunNowParamsStored(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		d.Create(t, daemontest.Spec("payroll", h.URL("/ok/p"), "trigger", "manual",
			"params", map[string]any{"api_key": "s3cret-k3y", "region": "eu"}, "sensitive_params", []string{"api_key"}))

		// Given: the region changed, the key sent as the console pre-fills it (masked).
		ticket := d.RunNow(t, "payroll", map[string]any{"params": map[string]any{"api_key": "***", "region": "us", "day": "2026-12-01"}})
		d.WaitRun(t, "payroll", ticket)
		calls := h.CallsOf("payroll")
		var sent map[string]any
		if err := json.Unmarshal(calls[len(calls)-1].Body.Params, &sent); err != nil || sent["api_key"] != "s3cret-k3y" || sent["region"] != "us" || sent["day"] != "2026-12-01" {
			t.Errorf("the callback got params %s (%v); want the stored key, region us, the day", calls[len(calls)-1].Body.Params, err)
		}
		var run struct {
			Ticket string          `json:"ticket"`
			Params json.RawMessage `json:"params"`
		}
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs/"+ticket, nil, &run)
		var shown map[string]any
		if err := json.Unmarshal(run.Params, &shown); err != nil || shown["api_key"] != "***" || shown["region"] != "us" || shown["day"] != "2026-12-01" {
			t.Errorf("GET run shows params %s (%v); want the given ones with api_key masked", run.Params, err)
		}
		if strings.Contains(string(run.Params), "s3cret") {
			t.Errorf("GET run shows the secret: %s", run.Params)
		}
		for _, path := range []string{"/api/v1/runs?task=payroll", "/api/v1/tasks/payroll/runs", "/api/v1/runs"} {
			code, body := d.Call(t, http.MethodGet, path, nil)
			if code != http.StatusOK || !strings.Contains(string(body), ticket) || strings.Contains(string(body), `"params"`) {
				t.Errorf("GET %s = %d %s; want the run listed without params", path, code, body)
			}
		}
		act, ok := findTicketAction(d.Actions(t, "payroll"), ticket)
		if !ok || !strings.Contains(act.Detail, "params given (api_key, day, region), stored on the run") || strings.Contains(act.Detail, "s3cret") {
			t.Errorf("the run_now record = %+v (found %v); want it to name the params given and their keys", act, ok)
		}

		// None given: the run keeps none, and its record says nothing of params.
		plain := d.RunNow(t, "payroll", nil)
		d.WaitRun(t, "payroll", plain)
		run.Params = nil
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs/"+plain, nil, &run)
		if run.Params != nil {
			t.Errorf("a run-now given no params shows params %s", run.Params)
		}
		if act, ok := findTicketAction(d.Actions(t, "payroll"), plain); !ok || strings.Contains(act.Detail, "params") {
			t.Errorf("the plain run_now record = %+v (found %v)", act, ok)
		}

		// Bad input changes nothing.
		before := len(d.Runs(t, "payroll"))
		if msg := d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks/payroll/run", `{"params": {"a": }`); !strings.Contains(msg, "JSON") {
			t.Errorf("bad params: error %q", msg)
		}
		if n := len(d.Runs(t, "payroll")); n != before {
			t.Errorf("a refused run-now left %d runs, want %d", n, before)
		}
	})
}

// findTicketAction finds the run_now record of ticket.
func findTicketAction(acts []model.Action, ticket string) (model.Action, bool) {
	for _, a := range acts {
		if a.Action == "run_now" && a.Ticket == ticket {
			return a, true
		}
	}
	return model.Action{}, false
}
