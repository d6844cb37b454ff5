package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/wire"
)

// TestKeyedLimitsAPI: over HTTP on both stores, a rate limit on a pattern of rate keys and a
// concurrency limit on a pattern of keys are set and read back; a pattern of every key ("*")
// and a group pattern are refused naming the field, and change nothing; a task's rate_key and
// concurrency_key templates round-trip; one its params do not render is a 400 naming it.
func TestKeyedLimitsAPI(t *testing.T) {
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/ratelimits", map[string]any{"downstream": "tenant:*", "rate": 5, "burst": 1}, nil)
		if msg := d.APIError(t, http.StatusBadRequest, http.MethodPut, "/api/v1/ratelimits", map[string]any{"downstream": "*", "rate": 5}); !strings.Contains(msg, "downstream") {
			t.Errorf("a rate limit on every key: %q, want it to name downstream", msg)
		}
		var rl wire.RateLimits
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/ratelimits", nil, &rl)
		if got := rl.PerKey["tenant:*"]; got.Rate != 5 || got.Burst != 1 || len(rl.PerKey) != 1 {
			t.Errorf("rate limits read back: %+v", rl.PerKey)
		}
		var v client.ConcurrencyLimit
		d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/concurrency-limits/key/tenant:*", map[string]any{"max": 2}, &v)
		if v.Name != "tenant:*" || v.Max != 2 {
			t.Errorf("PUT of a pattern answered %+v", v)
		}
		for _, path := range []string{"/api/v1/concurrency-limits/group/etl*", "/api/v1/concurrency-limits/key/a*b*"} {
			if msg := d.APIError(t, http.StatusBadRequest, http.MethodPut, path, map[string]any{"max": 1}); !strings.Contains(msg, "name") {
				t.Errorf("PUT %s: %q, want it to name name", path, msg)
			}
		}
		var list struct {
			Limits []client.ConcurrencyLimit `json:"limits"`
		}
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/concurrency-limits", nil, &list)
		if len(list.Limits) != 1 || list.Limits[0].Name != "tenant:*" {
			t.Errorf("limits after the refused PUTs: %+v", list.Limits)
		}
		got := d.Create(t, daemontest.Spec("keyed", h.URL("/ok"), "trigger", "delay", "delay_ms", 60_000,
			"concurrency_key", "tenant:{params.t.id}", "rate_key", "tenant:{params.t.id}", "params", map[string]any{"t": map[string]any{"id": 7}}))
		if got.ConcurrencyKey != "tenant:{params.t.id}" || got.RateKey != "tenant:{params.t.id}" {
			t.Errorf("the templates read back as %q and %q", got.ConcurrencyKey, got.RateKey)
		}
		for _, field := range []string{"concurrency_key", "rate_key"} {
			msg := d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks",
				daemontest.Spec("unkeyed-"+strings.ReplaceAll(field, "_", "-"), h.URL("/ok"), "trigger", "delay", "delay_ms", 60_000, field, "tenant:{params.t.id}"))
			if !strings.HasPrefix(msg, field) || !strings.Contains(msg, "params.t.id is missing") {
				t.Errorf("a %s its params do not render: %q", field, msg)
			}
		}
	})
}
