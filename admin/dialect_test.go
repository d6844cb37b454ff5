package admin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestCronDialect is the acceptance as a new user meets it: a Quartz expression
// pasted with a numeric day is refused with a message that says what to write; with
// "cron_dialect": "quartz" it fires on Mondays; a PUT re-validates the same way; the
// preview honours &dialect=; a server started with --cron-dialect does not refuse.
func TestCronDialect(t *testing.T) {
	h := daemontest.NewHook(t)
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		msg := d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks",
			daemontest.Spec("q", h.URL("/q"), "cron", "0 0 12 ? * 2"))
		for _, want := range []string{"cron", "2 is Tuesday in unix cron but Monday in Quartz", "TUE or MON", "cron_dialect"} {
			if !strings.Contains(msg, want) {
				t.Errorf("refusal %q lacks %q", msg, want)
			}
		}
		// Names are never ambiguous.
		d.Create(t, daemontest.Spec("named", h.URL("/n"), "cron", "0 0 12 ? * MON"))

		v := d.Create(t, daemontest.Spec("q", h.URL("/q"), "cron", "0 0 12 ? * 2", "cron_dialect", "quartz", "paused", false))
		if v.CronDialect != "quartz" {
			t.Fatalf("cron_dialect = %q, want quartz", v.CronDialect)
		}
		next := time.UnixMilli(v.Runtime.NextTriggerTime).UTC()
		if next.Weekday() != time.Monday || next.Hour() != 12 {
			t.Fatalf("quartz 0 0 12 ? * 2 next fires %s (%s), want a Monday noon", next, next.Weekday())
		}
		// A task that names none is unix, stored as such.
		u := d.Create(t, daemontest.Spec("u", h.URL("/u"), "cron", "0 12 * * 2"))
		if u.CronDialect != "unix" || time.UnixMilli(u.Runtime.NextTriggerTime).UTC().Weekday() != time.Tuesday {
			t.Fatalf("unix task: dialect %q next %s", u.CronDialect, time.UnixMilli(u.Runtime.NextTriggerTime).UTC())
		}

		// A PUT that leaves the dialect out is a task with none of its own: refused again.
		msg = d.APIError(t, http.StatusBadRequest, http.MethodPut, "/api/v1/tasks/q",
			daemontest.Spec("q", h.URL("/q"), "cron", "0 0 12 ? * 6L"))
		if !strings.Contains(msg, "6 is Saturday in unix cron but Friday in Quartz") {
			t.Errorf("PUT refusal %q does not name both readings", msg)
		}
		if got := d.Get(t, "q"); got.Cron != "0 0 12 ? * 2" || got.CronDialect != "quartz" {
			t.Errorf("refused PUT changed the task: %q %q", got.Cron, got.CronDialect)
		}
		var put client.TaskView
		d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/tasks/q",
			daemontest.Spec("q", h.URL("/q"), "cron", "0 0 12 ? * 6L", "cron_dialect", "quartz"), &put)
		if last := time.UnixMilli(put.Runtime.NextTriggerTime).UTC(); last.Weekday() != time.Friday || last.AddDate(0, 0, 7).Month() == last.Month() {
			t.Errorf("quartz 6L next fires %s (%s), want the last Friday of a month", last, last.Weekday())
		}
		msg = d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks",
			daemontest.Spec("bad", h.URL("/b"), "cron", "0 0 12 * * 2", "cron_dialect", "quartz"))
		if !strings.Contains(msg, "both day-of-month") {
			t.Errorf("both day fields in quartz: %q", msg)
		}
		msg = d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks",
			daemontest.Spec("bad", h.URL("/b"), "cron", "0 0 12 * * ?", "cron_dialect", "vixie"))
		if !strings.Contains(msg, "cron_dialect") {
			t.Errorf("unknown dialect: %q", msg)
		}

		// The preview.
		var prev struct {
			Next []string `json:"next"`
		}
		q := url.Values{"expr": {"0 0 12 ? * 1#2"}, "tz": {"UTC"}, "n": {"3"}, "dialect": {"quartz"}}
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/cron/next?"+q.Encode(), nil, &prev)
		for _, s := range prev.Next {
			ft, err := time.Parse(time.RFC3339, s)
			if err != nil || ft.Weekday() != time.Sunday || ft.Day() < 8 || ft.Day() > 14 {
				t.Errorf("quartz 1#2 preview %s is not a second Sunday", s)
			}
		}
		q.Del("dialect")
		msg = d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/cron/next?"+q.Encode(), nil)
		if !strings.Contains(msg, "1 is Monday in unix cron but Sunday in Quartz") {
			t.Errorf("ambiguous preview: %q", msg)
		}
	})
}

// TestCronDialectServerDefault: on a server told its dialect, tasks that name none take it
// and nothing is refused as ambiguous.
func TestCronDialectServerDefault(t *testing.T) {
	h := daemontest.NewHook(t)
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Engine.CronDialect = "quartz" })
		v := d.Create(t, daemontest.Spec("q", h.URL("/q"), "cron", "0 0 12 ? * 2"))
		if next := time.UnixMilli(v.Runtime.NextTriggerTime).UTC(); v.CronDialect != "quartz" || next.Weekday() != time.Monday {
			t.Fatalf("dialect %q, next %s (%s); want quartz, Monday", v.CronDialect, next, next.Weekday())
		}
		u := d.Create(t, daemontest.Spec("u", h.URL("/u"), "cron", "0 0 12 ? * 2", "cron_dialect", "unix"))
		if next := time.UnixMilli(u.Runtime.NextTriggerTime).UTC(); next.Weekday() != time.Tuesday {
			t.Fatalf("unix task on a quartz server: next %s (%s), want Tuesday", next, next.Weekday())
		}
	})
}
