package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
)

// TestPauseAfterFailuresAPI covers pause_after_failures over HTTP: out of its bounds on a
// create, an update and a batch item it is a 400 naming the field; it reads back as written
// from each; and a task failing every second is paused after its bound, with the note, the
// scheduler's pause record and one paused_on_failure alert, and resumed, fails its bound again before the next pause.
func TestPauseAfterFailuresAPI(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)

		t.Run("validation", func(t *testing.T) {
			for _, bad := range []any{-1, 1001, "3", 2.5} {
				msg := d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks",
					daemontest.Spec("bad", h.URL("/ok"), "trigger", "manual", "pause_after_failures", bad))
				if !strings.Contains(msg, "pause_after_failures") {
					t.Errorf("create with %v: error %q does not name pause_after_failures", bad, msg)
				}
			}
			d.Create(t, daemontest.Spec("edit-me", h.URL("/ok"), "trigger", "manual"))
			msg := d.APIError(t, http.StatusBadRequest, http.MethodPut, "/api/v1/tasks/edit-me",
				daemontest.Spec("edit-me", h.URL("/ok"), "trigger", "manual", "pause_after_failures", -5))
			if !strings.Contains(msg, "pause_after_failures") {
				t.Errorf("update: error %q does not name pause_after_failures", msg)
			}
			a := postBatch(t, d, http.StatusBadRequest, "", ndjson(t, []map[string]any{
				daemontest.Spec("b-ok", h.URL("/ok"), "trigger", "manual"),
				daemontest.Spec("b-bad", h.URL("/ok"), "trigger", "manual", "pause_after_failures", 5000),
			}), ndjsonHdr...)
			if len(a.Errors) != 1 || a.Errors[0].Index != 1 || !strings.Contains(a.Errors[0].Error, "pause_after_failures") {
				t.Errorf("batch answer %+v, want item 1 refused naming pause_after_failures", a)
			}
		})

		t.Run("round trip", func(t *testing.T) {
			if v := d.Create(t, daemontest.Spec("rt", h.URL("/ok"), "trigger", "manual", "pause_after_failures", 4)); v.PauseAfterFailures != 4 {
				t.Errorf("create answered pause_after_failures %d, want 4", v.PauseAfterFailures)
			}
			if v := d.Get(t, "rt"); v.PauseAfterFailures != 4 {
				t.Errorf("get: %d, want 4", v.PauseAfterFailures)
			}
			d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/tasks/rt",
				daemontest.Spec("rt", h.URL("/ok"), "trigger", "manual", "pause_after_failures", 1000), nil)
			if v := d.Get(t, "rt"); v.PauseAfterFailures != 1000 {
				t.Errorf("get after update: %d, want 1000", v.PauseAfterFailures)
			}
			// An update that leaves it out turns it off, as a PUT replaces the definition.
			d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/tasks/rt", daemontest.Spec("rt", h.URL("/ok"), "trigger", "manual"), nil)
			if v := d.Get(t, "rt"); v.PauseAfterFailures != 0 {
				t.Errorf("get after an update without it: %d, want 0", v.PauseAfterFailures)
			}
			a := postBatch(t, d, http.StatusOK, "", ndjson(t, []map[string]any{
				daemontest.Spec("rt-b", h.URL("/ok"), "trigger", "manual", "pause_after_failures", 7),
			}), ndjsonHdr...)
			if a.Created != 1 {
				t.Fatalf("batch answer %+v", a)
			}
			if v := d.Get(t, "rt-b"); v.PauseAfterFailures != 7 {
				t.Errorf("batch-created task: %d, want 7", v.PauseAfterFailures)
			}
		})

		t.Run("pauses", func(t *testing.T) {
			d.Create(t, daemontest.Spec("doomed", h.URL("/fail/doomed"), "cron", "* * * * * *", "timezone", "UTC", "pause_after_failures", 2))
			v := d.WaitState(t, "doomed", model.StatePaused)
			if !v.Paused || v.Runtime.ConsecutiveFailures != 2 || !strings.Contains(v.Runtime.Note, "paused after 2 consecutive failed runs") {
				t.Fatalf("paused task: paused %v, runtime %+v", v.Paused, v.Runtime)
			}
			if n := len(h.CallsOf("doomed")); n != 2 {
				t.Errorf("%d calls before the pause, want 2", n)
			}
			// The alert is raised once the pause is durable, just after it: wait for it, then
			// count.
			records := func() (pauses, alerts, sent int) {
				for _, a := range d.Actions(t, "doomed") {
					switch {
					case a.Action == "pause" && a.Actor == "scheduler" && a.From == model.StateFailed && a.To == model.StatePaused:
						pauses++
					case a.Action == "paused_on_failure":
						alerts++
					}
				}
				var al struct {
					Deliveries []struct {
						Kind string `json:"kind"`
						Task string `json:"task"`
					} `json:"deliveries"`
				}
				d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/alerts", nil, &al)
				for _, x := range al.Deliveries {
					if x.Kind == "paused_on_failure" && x.Task == "doomed" {
						sent++
					}
				}
				return pauses, alerts, sent
			}
			testwait.For(t, daemontest.WaitTimeout, "the pause's alert", func() bool {
				_, a, s := records()
				return a >= 1 && s >= 1
			})
			if p, a, s := records(); p != 1 || a != 1 || s != 1 {
				t.Errorf("%d scheduler pauses, %d paused_on_failure records, %d alerts sent; want 1 of each", p, a, s)
			}
			// Resumed, it fails twice more (not once) before it is paused again.
			d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/doomed/resume", nil, nil)
			testwait.For(t, daemontest.WaitTimeout, "doomed to pause again", func() bool {
				v = d.Get(t, "doomed")
				return v.Runtime.State == model.StatePaused && len(h.CallsOf("doomed")) > 2
			})
			if n := len(h.CallsOf("doomed")); n != 4 || v.Runtime.ConsecutiveFailures != 2 {
				t.Errorf("paused again after %d calls with count %d, want 4 and 2", n, v.Runtime.ConsecutiveFailures)
			}
			testwait.For(t, daemontest.WaitTimeout, "the second pause's alert", func() bool {
				_, a, s := records()
				return a >= 2 && s >= 2
			})
			if p, a, s := records(); p != 2 || a != 2 || s != 2 {
				t.Errorf("%d scheduler pauses, %d paused_on_failure records, %d alerts sent; want 2 of each", p, a, s)
			}
		})
	})
}
