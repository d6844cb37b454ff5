package admin_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestSensitiveParams checks that the keys a task names in sensitive_params are masked in
// every API read, that saving a read definition back keeps the real values, and that the
// callback still receives them.
func TestSensitiveParams(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		d.Create(t, daemontest.Spec("payroll", h.URL("/ok/p"), "trigger", "manual",
			"params", map[string]any{"api_key": "s3cret-k3y", "region": "eu"}, "sensitive_params", []string{"api_key"}))

		read := func(where string, raw json.RawMessage) map[string]any {
			t.Helper()
			var p map[string]any
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("%s: params %s: %v", where, raw, err)
			}
			if p["api_key"] != "***" || p["region"] != "eu" {
				t.Errorf("%s: params %v, want api_key masked and region shown", where, p)
			}
			return p
		}
		var one struct {
			Params          json.RawMessage `json:"params"`
			SensitiveParams []string        `json:"sensitive_params"`
		}
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/payroll", nil, &one)
		read("GET task", one.Params)
		if len(one.SensitiveParams) != 1 || one.SensitiveParams[0] != "api_key" {
			t.Errorf("sensitive_params = %v", one.SensitiveParams)
		}
		var list struct {
			Tasks []struct {
				Params json.RawMessage `json:"params"`
			} `json:"tasks"`
		}
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks?name_prefix=pay", nil, &list)
		if len(list.Tasks) != 1 {
			t.Fatalf("list: %d tasks", len(list.Tasks))
		}
		read("list", list.Tasks[0].Params)

		// Saving what was read keeps the secret, and changes the rest.
		d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/tasks/payroll", daemontest.Spec("payroll", h.URL("/ok/p"), "trigger", "manual",
			"params", map[string]any{"api_key": "***", "region": "us"}, "sensitive_params", []string{"api_key"}), nil)
		ticket := d.RunNow(t, "payroll", nil)
		d.WaitRun(t, "payroll", ticket)
		calls := h.CallsOf("payroll")
		var sent map[string]any
		if err := json.Unmarshal(calls[len(calls)-1].Body.Params, &sent); err != nil || sent["api_key"] != "s3cret-k3y" || sent["region"] != "us" {
			t.Errorf("the callback received %s, want the real key and the new region", calls[len(calls)-1].Body.Params)
		}

		if msg := d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks",
			daemontest.Spec("bad", h.URL("/ok/p"), "trigger", "manual", "sensitive_params", []string{""})); msg == "" || msg[:16] != "sensitive_params" {
			t.Errorf("empty key: error %q does not name sensitive_params", msg)
		}
	})
}
