package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/model"
)

// updateChanges returns the changed fields of the newest update record of a task: the JSON
// object after "changed: " that ends its detail.
func updateChanges(t *testing.T, acts []model.Action) (string, map[string][2]any) {
	t.Helper()
	for _, a := range acts { // newest first
		if a.Action != "update" {
			continue
		}
		i := strings.Index(a.Detail, "changed: {")
		if i < 0 {
			return a.Detail, nil
		}
		var m map[string][2]any
		if err := json.Unmarshal([]byte(a.Detail[i+len("changed: "):]), &m); err != nil {
			t.Fatalf("the update record's changes do not parse: %q: %v", a.Detail, err)
		}
		return a.Detail, m
	}
	t.Fatal("no update record")
	return "", nil
}

// TestEditDiffInActionRecord: an edit's update record names each changed field with its
// value before and after; params compare key by key, a sensitive key's values shown as ***
// (its secret never in the record); an unchanged field is not listed; an edit that changes
// nothing says so; a refused edit (bad cron) writes no record.
func TestEditDiffInActionRecord(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		spec := func(kv ...any) map[string]any {
			return daemontest.Spec("report", h.URL("/ok/r"), append([]any{"cron", "0 */5 * * * *", "timezone", "UTC",
				"sensitive_params", []string{"token"}}, kv...)...)
		}
		d.Create(t, spec("timeout_sec", 30, "params", map[string]any{"day": "mon", "token": "old-s3cret", "gone": 1}))
		d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/tasks/report",
			spec("cron", "0 0 * * * *", "timeout_sec", 60, "params", map[string]any{"day": "tue", "token": "new-s3cret", "added": true}), nil)
		detail, ch := updateChanges(t, d.Actions(t, "report"))
		if strings.Contains(detail, "s3cret") {
			t.Errorf("the record holds a sensitive value: %q", detail)
		}
		want := map[string][2]any{
			"cron":         {"0 */5 * * * *", "0 0 * * * *"},
			"timeout_sec":  {30.0, 60.0},
			"params.day":   {"mon", "tue"},
			"params.token": {"***", "***"},
			"params.gone":  {1.0, nil},
			"params.added": {nil, true},
		}
		for k, v := range want {
			if got, ok := ch[k]; !ok || got != v {
				t.Errorf("change of %s = %v (listed %v), want %v; detail %q", k, got, ok, v, detail)
			}
		}
		for k := range ch {
			if _, ok := want[k]; !ok {
				t.Errorf("change of %s listed (%v), which did not change; detail %q", k, ch[k], detail)
			}
		}
		if !strings.HasPrefix(detail, "definition replaced; next fire ") {
			t.Errorf("the record's detail starts %q", detail)
		}

		// The same definition again: nothing changed (the sensitive value sent masked keeps it).
		d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/tasks/report",
			spec("cron", "0 0 * * * *", "timeout_sec", 60, "params", map[string]any{"day": "tue", "token": "***", "added": true}), nil)
		if detail, ch := updateChanges(t, d.Actions(t, "report")); ch != nil || !strings.HasSuffix(detail, "no field changed") {
			t.Errorf("an edit that changes nothing reads %q", detail)
		}

		// A refused edit writes no record.
		before := len(d.Actions(t, "report"))
		d.APIError(t, http.StatusBadRequest, http.MethodPut, "/api/v1/tasks/report", spec("cron", "not a cron"))
		if n := len(d.Actions(t, "report")); n != before {
			t.Errorf("a refused edit left %d records, want %d", n, before)
		}
	})
}
