package admin_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// nextMidnightUTC returns the first midnight UTC after now, in Unix milliseconds.
func nextMidnightUTC(now time.Time) int64 {
	y, m, d := now.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).UnixMilli()
}

// nextNewYearUTC returns the first New Year's midnight UTC after now, in Unix milliseconds.
func nextNewYearUTC(now time.Time) int64 {
	return time.Date(now.UTC().Year()+1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
}

// TestTaskCRUD creates, reads, lists, updates and deletes tasks, and checks that the history
// of a deleted task stays in the store.
func TestTaskCRUD(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		actor := []string{"X-Axe-Actor", "carol"}

		yearly := d.Create(t, daemontest.Spec("yearly", h.URL("/ok/yearly"), "group", "ga", "cron", "0 0 1 1 *", "timezone", "UTC"), actor...)
		if yearly.ID == 0 || yearly.Runtime.State != model.StateScheduled {
			t.Fatalf("created %+v / %+v, want an id and SCHEDULED", yearly.TaskDef, yearly.Runtime)
		}
		if want := nextNewYearUTC(time.Now()); yearly.Runtime.NextTriggerTime != want {
			t.Errorf("next_trigger_time = %d, want next New Year %d", yearly.Runtime.NextTriggerTime, want)
		}
		d.Create(t, daemontest.Spec("manual-b", h.URL("/ok/manual"), "group", "gb", "trigger", "manual"))
		d.Create(t, daemontest.Spec("manual-c", h.URL("/ok/manual"), "group", "gb", "trigger", "manual"))
		paused := d.Create(t, daemontest.Spec("paused-a", h.URL("/ok/paused"), "group", "ga", "cron", "0 * * * *", "paused", true))
		if paused.Runtime.State != model.StatePaused || !paused.Paused {
			t.Errorf("task created paused is %s (paused=%v)", paused.Runtime.State, paused.Paused)
		}

		t.Run("names with punctuation", func(t *testing.T) {
			d.Create(t, daemontest.Spec("etl.daily:v2_x-1", h.URL("/ok/p"), "group", "gp", "trigger", "manual"))
			if g := d.Get(t, "etl.daily:v2_x-1"); g.Name != "etl.daily:v2_x-1" {
				t.Errorf("get = %+v", g.TaskDef)
			}
			d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/etl.daily:v2_x-1/pause", nil, nil)
			d.MustJSON(t, http.StatusOK, http.MethodDelete, "/api/v1/tasks/etl.daily:v2_x-1", nil, nil)
		})

		t.Run("get", func(t *testing.T) {
			g := d.Get(t, "yearly")
			if g.ID != yearly.ID || g.Group != "ga" || g.Trigger != "cron" || g.Cron != "0 0 1 1 *" || g.Timezone != "UTC" {
				t.Errorf("get = %+v", g.TaskDef)
			}
			// The task definition's defaults.
			if g.Priority != 2 || g.TimeoutSec != 300 || g.RetryCount != 0 || g.RetryIntervalSec != 30 ||
				g.MisfirePolicy != "fire_once" || g.Callback.Type != "http" {
				t.Errorf("defaults not applied: %+v", g.TaskDef)
			}
			if g.Runtime.NextFireAt == "" || !strings.HasPrefix(g.Runtime.NextFireAt, time.UnixMilli(g.Runtime.NextTriggerTime).UTC().Format("2006-01-02T15:04:05")) {
				t.Errorf("next_fire_at %q does not show next_trigger_time %d", g.Runtime.NextFireAt, g.Runtime.NextTriggerTime)
			}
		})

		t.Run("list", func(t *testing.T) {
			for _, c := range []struct {
				query string
				want  []string
			}{
				{"", []string{"yearly", "manual-b", "manual-c", "paused-a"}},
				{"?group=ga", []string{"yearly", "paused-a"}},
				{"?group=gb", []string{"manual-b", "manual-c"}},
				{"?group=nobody", nil},
				{"?state=PAUSED", []string{"paused-a"}},
				{"?state=waiting", []string{"manual-b", "manual-c"}},
				{"?group=ga&state=SCHEDULED", []string{"yearly"}},
				// Lists are in creation order; the limit holds with and without a state filter.
				{"?limit=2", []string{"yearly", "manual-b"}},
				{"?state=WAITING&limit=1", []string{"manual-b"}},
			} {
				got := daemontest.Names(d.List(t, c.query))
				slices.Sort(got)
				want := slices.Clone(c.want)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("list%s = %v, want %v", c.query, got, want)
				}
			}
			if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/tasks?state=BOGUS", nil); !strings.Contains(msg, "state") {
				t.Errorf("bad state filter error %q does not name state", msg)
			}
			if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/tasks?limit=0", nil); !strings.Contains(msg, "limit") {
				t.Errorf("bad limit error %q does not name limit", msg)
			}
		})

		t.Run("update", func(t *testing.T) {
			var u struct {
				model.TaskDef
				Runtime model.Runtime `json:"runtime"`
			}
			d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/tasks/yearly",
				daemontest.Spec("yearly", h.URL("/ok/yearly"), "group", "ga", "cron", "0 0 * * *", "timezone", "UTC", "priority", 0), &u, actor...)
			if u.Cron != "0 0 * * *" || u.Priority != 0 || u.ID != yearly.ID {
				t.Errorf("update answered %+v", u.TaskDef)
			}
			want := nextMidnightUTC(time.Now())
			if u.Runtime.NextTriggerTime != want || u.Runtime.NextTriggerTime == yearly.Runtime.NextTriggerTime {
				t.Errorf("next_trigger_time after update = %d, want the next midnight %d", u.Runtime.NextTriggerTime, want)
			}
			if g := d.Get(t, "yearly"); g.Cron != "0 0 * * *" || g.Runtime.NextTriggerTime != want {
				t.Errorf("get after update: cron %q next %d", g.Cron, g.Runtime.NextTriggerTime)
			}

			msg := d.APIError(t, http.StatusBadRequest, http.MethodPut, "/api/v1/tasks/yearly",
				daemontest.Spec("yearly", h.URL("/ok/yearly"), "trigger", "delay", "delay_ms", 1000))
			if !strings.Contains(msg, "trigger") {
				t.Errorf("trigger change error %q does not name trigger", msg)
			}
			msg = d.APIError(t, http.StatusBadRequest, http.MethodPut, "/api/v1/tasks/yearly",
				daemontest.Spec("renamed", h.URL("/ok/yearly"), "cron", "0 0 * * *"))
			if !strings.Contains(msg, "name") {
				t.Errorf("rename error %q does not name name", msg)
			}
			msg = d.APIError(t, http.StatusBadRequest, http.MethodPut, "/api/v1/tasks/yearly",
				daemontest.Spec("yearly", h.URL("/ok/yearly"), "cron", "0 0 * * *", "priority", 5))
			if !strings.Contains(msg, "priority") {
				t.Errorf("bad update error %q does not name priority", msg)
			}
			if g := d.Get(t, "yearly"); g.Trigger != "cron" || g.Cron != "0 0 * * *" || g.Priority != 0 || g.Runtime.NextTriggerTime != want {
				t.Errorf("rejected updates changed the task: %+v next %d", g.TaskDef, g.Runtime.NextTriggerTime)
			}
		})

		var ticket string
		t.Run("delete keeps history", func(t *testing.T) {
			ticket = d.RunNow(t, "yearly", nil, actor...)
			if r := d.WaitRun(t, "yearly", ticket); r.Result != model.ResultSuccess {
				t.Fatalf("run-now ended %s (%s)", r.Result, r.Error)
			}
			acts := d.Actions(t, "yearly")
			for _, name := range []string{"create", "update", "run_now", "result"} {
				if _, ok := daemontest.FindAction(acts, name); !ok {
					t.Errorf("no %q action before delete: %+v", name, acts)
				}
			}

			var del map[string]string
			d.MustJSON(t, http.StatusOK, http.MethodDelete, "/api/v1/tasks/yearly", nil, &del, actor...)
			if del["deleted"] != "yearly" {
				t.Errorf("delete answered %v", del)
			}
			d.APIError(t, http.StatusNotFound, http.MethodGet, "/api/v1/tasks/yearly", nil)
			d.APIError(t, http.StatusNotFound, http.MethodDelete, "/api/v1/tasks/yearly", nil)
			if got := daemontest.Names(d.List(t, "?group=ga")); !slices.Equal(got, []string{"paused-a"}) {
				t.Errorf("group ga after delete = %v", got)
			}
			var run model.Run
			d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs/"+ticket, nil, &run)
			if run.Ticket != ticket || run.TaskName != "yearly" || run.Result != model.ResultSuccess {
				t.Errorf("run of the deleted task = %+v", run)
			}
			// The name is free again.
			again := d.Create(t, daemontest.Spec("yearly", h.URL("/ok/yearly"), "trigger", "manual"))
			if again.ID == yearly.ID {
				t.Errorf("re-created task reused id %d", again.ID)
			}
		})

		// The delete itself is in the audit log: read it from the store after shutdown.
		if err := d.Stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := persist.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("reopen store: %v", err)
		}
		defer st.Close()
		acts, err := st.ListActions(ctx, yearly.ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		del, ok := daemontest.FindAction(acts, "delete")
		if !ok || del.Actor != "api:carol" || del.TaskName != "yearly" || del.At == 0 {
			t.Errorf("delete action = %+v (found %v), want actor api:carol", del, ok)
		}
		if run, err := st.GetRun(ctx, ticket); err != nil || run.Result != model.ResultSuccess {
			t.Errorf("run %s after delete: %+v, %v", ticket, run, err)
		}
	})
}

// TestRunsAndActions checks that a fired task's dispatch and result show in its runs and its
// action records, with actor and time.
func TestRunsAndActions(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		start := time.Now().UnixMilli()
		v := d.Create(t, daemontest.Spec("fired", h.URL("/ok/fired"), "delay_ms", 300, "group", "audit"), "X-Axe-Actor", "alice")
		call := h.WaitCalls(t, "fired", 1, daemontest.WaitTimeout)[0]
		// The task's runtime is shown from memory and may be a write ahead of the run
		// history, so wait on the run record itself.
		d.WaitRun(t, "fired", call.Ticket)
		if g := d.Get(t, "fired"); g.Runtime.State != model.StateSuccess || g.Runtime.SuccessCount != 1 {
			t.Errorf("task after its run: %+v, want SUCCESS with success_count 1", g.Runtime)
		}
		end := time.Now().UnixMilli()

		runs := d.Runs(t, "fired")
		if len(runs) != 1 {
			t.Fatalf("runs = %+v, want one", runs)
		}
		r := runs[0]
		if r.Ticket != call.Ticket || r.TaskName != "fired" || r.TaskID != v.ID || r.Kind != model.RunScheduled || r.Attempt != 1 {
			t.Errorf("run identity %+v does not match the call (ticket %s)", r, call.Ticket)
		}
		if r.Result != model.ResultSuccess || r.Error != "" {
			t.Errorf("run result %q error %q, want success", r.Result, r.Error)
		}
		if r.ScheduledAt != v.CreatedAt+300 || r.DispatchedAt < r.ScheduledAt || r.EndedAt < r.DispatchedAt || r.EndedAt > end {
			t.Errorf("run times scheduled %d dispatched %d ended %d (created %d, now %d)",
				r.ScheduledAt, r.DispatchedAt, r.EndedAt, v.CreatedAt, end)
		}
		if r.Executor != strings.TrimPrefix(h.URL(""), "http://") {
			t.Errorf("run executor %q, want the callback host %s", r.Executor, h.URL(""))
		}
		var byTicket model.Run
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs/"+r.Ticket, nil, &byTicket)
		if byTicket != r {
			t.Errorf("GET /runs/%s = %+v, want %+v", r.Ticket, byTicket, r)
		}
		d.APIError(t, http.StatusNotFound, http.MethodGet, "/api/v1/runs/no-such-ticket", nil)

		acts := d.Actions(t, "fired")
		for i := 1; i < len(acts); i++ {
			if acts[i].At > acts[i-1].At {
				t.Errorf("actions are not newest first: %+v", acts)
				break
			}
		}
		for _, a := range acts {
			if a.TaskName != "fired" || a.TaskID != v.ID || a.At < start || a.At > end || a.Actor == "" {
				t.Errorf("action %+v: wrong task, time outside [%d,%d] or no actor", a, start, end)
			}
		}
		want := []struct {
			action   string
			from, to model.State
			actor    string
			ticket   string
		}{
			{"create", "", model.StateScheduled, "api:alice", ""},
			{"dispatch", model.StateScheduled, model.StateRunning, "scheduler", call.Ticket},
			{"result", model.StateRunning, model.StateSuccess, "scheduler", call.Ticket},
		}
		for _, w := range want {
			a, ok := daemontest.FindAction(acts, w.action)
			if !ok {
				t.Errorf("no %q action in %+v", w.action, acts)
				continue
			}
			if a.From != w.from || a.To != w.to || a.Actor != w.actor || a.Ticket != w.ticket {
				t.Errorf("%s action = %+v, want %s→%s by %s ticket %q", w.action, a, w.from, w.to, w.actor, w.ticket)
			}
		}
		if a, _ := daemontest.FindAction(acts, "dispatch"); a.At < r.ScheduledAt {
			t.Errorf("dispatch recorded at %d, before the fire time %d", a.At, r.ScheduledAt)
		}
	})
}

// TestActor checks who the audit log names for API calls.
func TestActor(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		long := "a" + strings.Repeat("é", 40) // 81 bytes: the 64-byte cut falls inside a rune
		for _, c := range []struct {
			name, header, want string
		}{
			{"anon", "", "api:127.0.0.1"},
			{"spaced", "  bob  ", "api:bob"},
			{"long", long, "api:a" + strings.Repeat("é", 31)},
		} {
			var hdr []string
			if c.header != "" {
				hdr = []string{"X-Axe-Actor", c.header}
			}
			d.Create(t, daemontest.Spec("actor-"+c.name, h.URL("/ok/x"), "trigger", "manual"), hdr...)
			a, ok := daemontest.FindAction(d.Actions(t, "actor-"+c.name), "create")
			if !ok || a.Actor != c.want {
				t.Errorf("%s: create actor %q, want %q", c.name, a.Actor, c.want)
			}
		}
	})
}
