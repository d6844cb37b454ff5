package admin_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
)

// cronNextJSON is GET /api/v1/cron/next's answer, as far as jitter is concerned.
type cronNextJSON struct {
	Task      string   `json:"task"`
	JitterSec int      `json:"jitter_sec"`
	Next      []string `json:"next"`
	Fires     []struct {
		At       string `json:"at"`
		FireAt   string `json:"fire_at"`
		JitterMS *int64 `json:"jitter_ms"`
	} `json:"fires"`
}

// TestJitterAPI covers jitter_sec over HTTP: a 400 naming the field on a create, an update
// and a batch item (non-cron, negative, over 3600, not a number, not below the schedule's
// smallest gap); the value read back from each; the preview's nominal times with fire_at and
// jitter_ms, equal to what the engine computes; and a jittered task's runs, sent no earlier
// than nominal plus the preview's jitter and recorded with the nominal scheduled_at and the
// jitter in their detail.
func TestJitterAPI(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)

		t.Run("validation", func(t *testing.T) {
			cases := []struct {
				what string
				kv   []any
			}{
				{"manual", []any{"trigger", "manual", "jitter_sec", 10}},
				{"delay", []any{"delay_ms", 60000, "jitter_sec", 10}},
				{"negative", []any{"cron", "0 3 * * *", "jitter_sec", -1}},
				{"over 3600", []any{"cron", "0 3 * * *", "jitter_sec", 3601}},
				{"a string", []any{"cron", "0 3 * * *", "jitter_sec", "5"}},
				{"a fraction", []any{"cron", "0 3 * * *", "jitter_sec", 2.5}},
				{"the gap of */1", []any{"cron", "*/1 * * * *", "jitter_sec", 60}},
				{"over the gap of */5", []any{"cron", "*/5 * * * *", "jitter_sec", 301}},
			}
			for _, c := range cases {
				msg := d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks",
					daemontest.Spec("bad", h.URL("/ok"), append([]any{"timezone", "UTC"}, c.kv...)...))
				if !strings.Contains(msg, "jitter_sec") {
					t.Errorf("create, %s: error %q does not name jitter_sec", c.what, msg)
				}
			}
			d.Create(t, daemontest.Spec("edit-me", h.URL("/ok"), "cron", "*/1 * * * *", "timezone", "UTC", "jitter_sec", 59))
			msg := d.APIError(t, http.StatusBadRequest, http.MethodPut, "/api/v1/tasks/edit-me",
				daemontest.Spec("edit-me", h.URL("/ok"), "cron", "*/1 * * * *", "timezone", "UTC", "jitter_sec", 60))
			if !strings.Contains(msg, "jitter_sec") {
				t.Errorf("update: error %q does not name jitter_sec", msg)
			}
			if v := d.Get(t, "edit-me"); v.JitterSec != 59 {
				t.Errorf("after the refused update: jitter_sec %d, want 59", v.JitterSec)
			}
			a := postBatch(t, d, http.StatusBadRequest, "", ndjson(t, []map[string]any{
				daemontest.Spec("b-ok", h.URL("/ok"), "trigger", "manual"),
				daemontest.Spec("b-bad", h.URL("/ok"), "cron", "*/1 * * * *", "timezone", "UTC", "jitter_sec", 120),
			}), ndjsonHdr...)
			if len(a.Errors) != 1 || a.Errors[0].Index != 1 || !strings.Contains(a.Errors[0].Error, "jitter_sec") {
				t.Errorf("batch answer %+v, want item 1 refused naming jitter_sec", a)
			}
		})

		t.Run("round trip", func(t *testing.T) {
			v := d.Create(t, daemontest.Spec("rt", h.URL("/ok"), "cron", "0 3 * * *", "timezone", "UTC", "jitter_sec", 3600))
			if v.JitterSec != 3600 {
				t.Errorf("create answered jitter_sec %d, want 3600", v.JitterSec)
			}
			g := d.Get(t, "rt")
			want := engine.JitterOffset("rt", g.Runtime.NextTriggerTime, 3600)
			if g.JitterSec != 3600 || g.Runtime.NextJitterMS == nil || *g.Runtime.NextJitterMS != want {
				t.Errorf("get: jitter_sec %d, next_jitter_ms %v; want 3600 and %d", g.JitterSec, g.Runtime.NextJitterMS, want)
			}
			d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/tasks/rt",
				daemontest.Spec("rt", h.URL("/ok"), "cron", "0 3 * * *", "timezone", "UTC", "jitter_sec", 7), nil)
			if v := d.Get(t, "rt"); v.JitterSec != 7 {
				t.Errorf("get after update: %d, want 7", v.JitterSec)
			}
			// An update that leaves it out turns it off, as a PUT replaces the definition.
			d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/tasks/rt", daemontest.Spec("rt", h.URL("/ok"), "cron", "0 3 * * *", "timezone", "UTC"), nil)
			if v := d.Get(t, "rt"); v.JitterSec != 0 || v.Runtime.NextJitterMS != nil {
				t.Errorf("get after an update without it: %d, next_jitter_ms %v; want 0 and none", v.JitterSec, v.Runtime.NextJitterMS)
			}
			a := postBatch(t, d, http.StatusOK, "", ndjson(t, []map[string]any{
				daemontest.Spec("rt-b", h.URL("/ok"), "cron", "*/5 * * * *", "timezone", "UTC", "jitter_sec", 299),
			}), ndjsonHdr...)
			if a.Created != 1 {
				t.Fatalf("batch answer %+v", a)
			}
			if v := d.Get(t, "rt-b"); v.JitterSec != 299 {
				t.Errorf("batch-created task: %d, want 299", v.JitterSec)
			}
		})

		t.Run("preview", func(t *testing.T) {
			from := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
			q := url.Values{"expr": {"30 1,2 * * *"}, "tz": {"America/New_York"}, "n": {"4"},
				"from": {from.Format(time.RFC3339)}, "task": {"nightly"}, "jitter_sec": {"1700"}}
			var v cronNextJSON
			d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/cron/next?"+q.Encode(), nil, &v)
			if v.Task != "nightly" || v.JitterSec != 1700 || len(v.Fires) != 4 {
				t.Fatalf("preview %+v", v)
			}
			// 2026-03-08 springs forward: 02:30 does not exist and fires at 03:00 EDT.
			wantAt := []string{"2026-03-08T01:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T01:30:00-04:00", "2026-03-09T02:30:00-04:00"}
			for i, f := range v.Fires {
				at, err := time.Parse(time.RFC3339, f.At)
				if err != nil || f.At != wantAt[i] || v.Next[i] != f.At {
					t.Fatalf("fire %d at %q (next %q), want %s", i, f.At, v.Next[i], wantAt[i])
				}
				want := engine.JitterOffset("nightly", at.UnixMilli(), 1700)
				leaves, err := time.Parse(time.RFC3339Nano, f.FireAt)
				if f.JitterMS == nil || *f.JitterMS != want || err != nil || !leaves.Equal(at.Add(time.Duration(want)*time.Millisecond)) {
					t.Errorf("fire %d: jitter_ms %v, fire_at %q; want %d and at plus it", i, f.JitterMS, f.FireAt, want)
				}
			}
			// Without jitter, no fire_at: the answer is what it was.
			var plain cronNextJSON
			d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/cron/next?expr=0+3+*+*+*&tz=UTC&n=2", nil, &plain)
			if len(plain.Fires) != 2 || plain.Fires[0].JitterMS != nil || plain.Fires[0].FireAt != "" {
				t.Errorf("preview without jitter: %+v", plain)
			}
			// The same refusals as a create, naming the parameter; a bound needs the name.
			for _, bad := range []string{
				"expr=30+1,2+*+*+*&tz=America/New_York&task=nightly&jitter_sec=1800", // the DST day's 30 minutes
				"expr=*/1+*+*+*+*&tz=UTC&task=x&jitter_sec=60",
				"expr=0+3+*+*+*&tz=UTC&task=x&jitter_sec=3601",
				"expr=0+3+*+*+*&tz=UTC&task=x&jitter_sec=-1",
			} {
				if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/cron/next?"+bad, nil); !strings.Contains(msg, "jitter_sec") {
					t.Errorf("preview %s: error %q does not name jitter_sec", bad, msg)
				}
			}
			if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/cron/next?expr=0+3+*+*+*&tz=UTC&jitter_sec=5", nil); !strings.Contains(msg, "task") {
				t.Errorf("preview without a task: error %q does not name task", msg)
			}
		})

		t.Run("fires", func(t *testing.T) {
			// Every two seconds with up to a second of jitter.
			d.Create(t, daemontest.Spec("jit", h.URL("/ok"), "cron", "*/2 * * * * *", "timezone", "UTC", "jitter_sec", 1))
			var runs []model.Run
			testwait.For(t, daemontest.WaitTimeout, "three jittered runs", func() bool {
				runs = nil
				for _, r := range d.Runs(t, "jit") {
					if r.Result == model.ResultSuccess {
						runs = append(runs, r)
					}
				}
				return len(runs) >= 3
			})
			for _, r := range runs {
				q := url.Values{"expr": {"*/2 * * * * *"}, "tz": {"UTC"}, "n": {"1"}, "task": {"jit"}, "jitter_sec": {"1"},
					"from": {fmt.Sprint(r.ScheduledAt - 1)}}
				var v cronNextJSON
				d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/cron/next?"+q.Encode(), nil, &v)
				at, _ := time.Parse(time.RFC3339, v.Fires[0].At)
				j := *v.Fires[0].JitterMS
				if at.UnixMilli() != r.ScheduledAt || r.ScheduledAt%2000 != 0 {
					t.Errorf("run %s scheduled at %d, not the nominal fire %s", r.Ticket, r.ScheduledAt, v.Fires[0].At)
				}
				if r.DispatchedAt < r.ScheduledAt+j || r.Detail != fmt.Sprintf("jitter %d ms", j) {
					t.Errorf("run %s: dispatched %d ms after its nominal time, detail %q; want at least the preview's %d ms and that in the detail",
						r.Ticket, r.DispatchedAt-r.ScheduledAt, r.Detail, j)
				}
			}
		})
	})
}
