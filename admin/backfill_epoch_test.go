package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestBackfillFromTheUnixEpoch: a backfill's fire times are Unix milliseconds in which 0
// stands for none, so a range from 1970-01-01T00:00:00Z, whose first fire time is that 0,
// was answered "the range holds no fire time". It is refused naming from and why; a range
// from the millisecond after holds its fire times and starts.
func TestBackfillFromTheUnixEpoch(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		h := daemontest.NewHook(t)
		d := daemontest.Start(t, dsn, nil)
		d.Create(t, daemontest.Spec("epoch", h.URL("/ok"), "trigger", "cron", "cron", "* * * * *"))
		for _, from := range []string{"1970-01-01T00:00:00Z", "1969-12-31T23:59:00Z", "1970-01-01T01:00:00+01:00"} {
			msg := d.APIError(t, http.StatusBadRequest, "POST", "/api/v1/tasks/epoch/backfill",
				map[string]any{"from": from, "to": "1970-01-01T00:05:00Z"})
			if !strings.Contains(msg, "from: must be after 1970-01-01T00:00:00Z") || strings.Contains(msg, "no fire time") {
				t.Errorf("a backfill from %s: %q, want it refused as at or before the Unix epoch", from, msg)
			}
		}
		var v struct {
			Total int64 `json:"total"`
		}
		d.MustJSON(t, http.StatusCreated, "POST", "/api/v1/tasks/epoch/backfill",
			map[string]any{"from": "1970-01-01T00:00:00.001Z", "to": "1970-01-01T00:05:00Z"}, &v)
		if v.Total != 5 {
			t.Errorf("a backfill of 1970-01-01T00:00:00.001Z..00:05:00Z holds %d fire times, want 5 (00:01 to 00:05)", v.Total)
		}
	})
}
