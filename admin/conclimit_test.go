package admin_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
)

// TestConcurrencyLimitsAPI: PUT, GET and DELETE /api/v1/concurrency-limits/{kind}/{name} over
// HTTP on both stores; bad input is a 400 naming the field and changes nothing; a task's
// concurrency_key round-trips; a run-now over a full limit is a 429 with Retry-After that
// records no run; the waiting fire shows in the limit's view and starts when the limit goes;
// its run's detail says it waited; every change is an action record.

// waitedDetail is the detail of a run that waited for a slot of key db.
var waitedDetail = regexp.MustCompile(`^waited (\S+) for concurrency limit key db \(1\)`)

func TestConcurrencyLimitsAPI(t *testing.T) {
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		var v client.ConcurrencyLimit
		d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/concurrency-limits/key/db", map[string]any{"max": 1}, &v)
		if v.Kind != model.LimitKey || v.Name != "db" || v.Max != 1 || v.InUse != 0 || v.UpdatedAt == 0 {
			t.Fatalf("PUT answered %+v", v)
		}
		for _, bad := range []struct {
			path  string
			body  any
			field string
		}{
			{"/api/v1/concurrency-limits/team/db", map[string]any{"max": 1}, "kind"},
			{"/api/v1/concurrency-limits/key/a%20b", map[string]any{"max": 1}, "name"},
			{"/api/v1/concurrency-limits/key/db", map[string]any{"max": 0}, "max"},
			{"/api/v1/concurrency-limits/key/db", map[string]any{"max": 2_000_000}, "max"},
			{"/api/v1/concurrency-limits/key/db", map[string]any{}, "max"},
			{"/api/v1/concurrency-limits/key/db", map[string]any{"max": 2, "burst": 1}, "burst"},
		} {
			if msg := d.APIError(t, http.StatusBadRequest, http.MethodPut, bad.path, bad.body); !strings.Contains(msg, bad.field) {
				t.Errorf("PUT %s %v: %q does not name %s", bad.path, bad.body, msg, bad.field)
			}
		}
		var list struct {
			Limits []client.ConcurrencyLimit `json:"limits"`
		}
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/concurrency-limits", nil, &list)
		if len(list.Limits) != 1 || list.Limits[0].Max != 1 {
			t.Fatalf("after the bad PUTs the limits are %+v, want key db at 1", list.Limits)
		}
		d.APIError(t, http.StatusNotFound, http.MethodGet, "/api/v1/concurrency-limits/group/none", nil)
		if msg := d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks",
			daemontest.Spec("badkey", h.URL("/ok"), "trigger", "manual", "concurrency_key", "a b")); !strings.Contains(msg, "concurrency_key") {
			t.Errorf("create with a bad key: %q", msg)
		}

		// One run of key db in flight (it hangs), a second task of the key waits for it.
		hung := d.Create(t, daemontest.Spec("db-hung", h.URL("/hang"), "trigger", "delay", "delay_ms", 0, "concurrency_key", "db"))
		if hung.ConcurrencyKey != "db" {
			t.Fatalf("created task has concurrency_key %q", hung.ConcurrencyKey)
		}
		h.WaitCalls(t, "db-hung", 1, daemontest.WaitTimeout)
		d.Create(t, daemontest.Spec("db-next", h.URL("/ok"), "trigger", "delay", "delay_ms", 0, "concurrency_key", "db", "group", "other"))
		d.Create(t, daemontest.Spec("db-manual", h.URL("/ok"), "trigger", "manual", "concurrency_key", "db"))
		testwait.For(t, daemontest.WaitTimeout, "db-next waiting for key db", func() bool {
			d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/concurrency-limits/key/db", nil, &v)
			return v.InUse == 1 && v.Waiting == 1
		})
		code, hdr, body := d.Send(t, http.MethodPost, "/api/v1/tasks/db-manual/run", nil, true)
		if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || !strings.Contains(string(body), "key db is full (1 of 1") {
			t.Fatalf("run-now over the limit: %d %v %s, want 429 naming key db with Retry-After", code, hdr, body)
		}
		if runs := d.Runs(t, "db-manual"); len(runs) != 0 {
			t.Fatalf("the refused run-now left runs %+v", runs)
		}
		time.Sleep(1100 * time.Millisecond) // the wait the run records is at least a second
		d.MustJSON(t, http.StatusOK, http.MethodDelete, "/api/v1/concurrency-limits/key/db", nil, nil)
		h.WaitCalls(t, "db-next", 1, daemontest.WaitTimeout)
		var waited model.Run
		testwait.For(t, daemontest.WaitTimeout, "db-next's run recorded", func() bool {
			rs := d.Runs(t, "db-next")
			if len(rs) == 1 {
				waited = rs[0]
			}
			return len(rs) == 1
		})
		// "waited <duration> for …": at least the second the test held the slot, however
		// much longer a loaded box took to hand it on.
		if m := waitedDetail.FindStringSubmatch(waited.Detail); m == nil {
			t.Errorf("the run that waited has detail %q", waited.Detail)
		} else if w, err := time.ParseDuration(m[1]); err != nil || w < time.Second {
			t.Errorf("the run that waited has detail %q: want a wait of at least 1s", waited.Detail)
		}
		d.APIError(t, http.StatusNotFound, http.MethodDelete, "/api/v1/concurrency-limits/key/db", nil)
		h.ReleaseHung()
		alerts := alertActions(t, d)
		n := 0
		for _, a := range alerts {
			if a.Action == "concurrency_limit" {
				n++
			}
		}
		if n != 2 {
			t.Errorf("%d concurrency_limit records, want 2 (set, removed): %+v", n, alerts)
		}
	})
}

// alertActions returns the newest records that belong to no task.
func alertActions(t *testing.T, d *daemontest.Daemon) []model.Action {
	t.Helper()
	var v struct {
		Actions []model.Action `json:"actions"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/alerts?limit=100", nil, &v)
	return v.Actions
}
