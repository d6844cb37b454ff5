package admin_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wire"
)

// quietFires is how many fires of the tasks left running a paused task is watched over for
// fires that must not happen. The tasks share one per-second cron, so a paused task that still
// fired would have fired at those same instants.
const quietFires = 2

// waitQuietFires waits until each of running has been called for quietFires fire times after
// ms: the positive event a paused task is watched over, instead of a fixed sleep that a slow
// machine can outrun.
func waitQuietFires(t *testing.T, h *daemontest.Hook, ms int64, running ...string) {
	t.Helper()
	for _, n := range running {
		testwait.For(t, daemontest.WaitTimeout, fmt.Sprintf("%s to fire %d times after the pause", n, quietFires), func() bool {
			return len(h.CallsAfter(n, ms)) >= quietFires
		})
	}
}

// TestPauseResume pauses one task of a group, then the group, then resumes the group, and
// checks at each step exactly which tasks keep firing.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		for _, n := range []struct{ name, group string }{{"a1", "alpha"}, {"a2", "alpha"}, {"b1", "beta"}} {
			d.Create(t, daemontest.Spec(n.name, h.URL("/ok/"+n.name), "group", n.group, "cron", "*/1 * * * * *"))
		}
		for _, n := range []string{"a1", "a2", "b1"} {
			h.WaitCalls(t, n, 1, daemontest.WaitTimeout)
		}

		// Pause one task: its group-mate and the other group keep firing.
		var pv client.TaskView
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/a1/pause", map[string]string{"note": "disk full"}, &pv,
			"X-Axe-Actor", "ops")
		if !pv.Paused || (pv.Runtime.State != model.StatePaused && pv.Runtime.State != model.StateRunning) {
			t.Fatalf("pause answered paused=%v state %s", pv.Paused, pv.Runtime.State)
		}
		t0 := time.Now().UnixMilli()
		waitQuietFires(t, h, t0, "a2", "b1") // they keep firing
		if got := h.CallsAfter("a1", t0); len(got) != 0 {
			t.Errorf("paused a1 fired %d time(s) for fire times after the pause", len(got))
		}
		a1 := d.WaitState(t, "a1", model.StatePaused)
		if a1.Runtime.Note != "disk full" {
			t.Errorf("paused a1 note = %q", a1.Runtime.Note)
		}
		// The operator's pause record; a pause that met a run in flight (a loaded box's runs
		// take longer) has a second one, the scheduler's, when that run ends.
		var pauses []model.Action
		for _, a := range d.Actions(t, "a1") {
			if a.Action == "pause" {
				pauses = append(pauses, a)
			}
		}
		if !slices.ContainsFunc(pauses, func(a model.Action) bool { return a.Actor == "api:ops" && strings.Contains(a.Detail, "disk full") }) {
			t.Errorf("pause actions = %+v, want one by api:ops with its note", pauses)
		}

		// Pause the group: exactly alpha stops; a1, paused on its own, keeps its pause.
		var g struct {
			Group           string            `json:"group"`
			Tasks           int               `json:"tasks"`
			AlreadyPaused   int               `json:"already_paused"`
			LeftPaused      []wire.PausedTask `json:"left_paused"`
			LeftPausedCount int               `json:"left_paused_count"`
		}
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/groups/alpha/pause", nil, &g)
		if g.Group != "alpha" || g.Tasks != 1 || g.AlreadyPaused != 1 {
			t.Errorf("group pause answered %+v, want alpha with 1 task paused and 1 paused already", g)
		}
		t1 := time.Now().UnixMilli()
		waitQuietFires(t, h, t1, "b1") // another group's task keeps firing
		for _, n := range []string{"a1", "a2"} {
			if got := h.CallsAfter(n, t1); len(got) != 0 {
				t.Errorf("%s fired %d time(s) after its group was paused", n, len(got))
			}
		}
		d.WaitState(t, "a2", model.StatePaused)
		paused := daemontest.Names(d.List(t, "?state=PAUSED"))
		slices.Sort(paused)
		if !slices.Equal(paused, []string{"a1", "a2"}) {
			t.Errorf("paused tasks = %v, want [a1 a2]", paused)
		}
		if b1 := d.Get(t, "b1"); b1.Paused {
			t.Errorf("b1 is paused after pausing group alpha")
		}

		// Resume the group: a2, which its pause paused, fires again; a1 stays paused on its
		// own, named with its note, until it is resumed itself.
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/groups/alpha/resume", nil, &g)
		if g.Tasks != 1 || g.LeftPausedCount != 1 || len(g.LeftPaused) != 1 ||
			g.LeftPaused[0] != (wire.PausedTask{Name: "a1", PausedBy: model.PausedByTask, Note: "disk full"}) {
			t.Errorf("group resume answered %+v, want 1 task resumed and a1 left paused", g)
		}
		if a1 := d.Get(t, "a1"); !a1.Paused || a1.Runtime.Note != "disk full" {
			t.Errorf("a1 after the group's resume: paused %v note %q", a1.Paused, a1.Runtime.Note)
		}
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/a1/resume", nil, nil)
		t2 := time.Now().UnixMilli()
		for _, n := range []string{"a1", "a2", "b1"} {
			testwait.For(t, daemontest.WaitTimeout, n+" to fire after the resume", func() bool { return len(h.CallsAfter(n, t2)) >= 2 })
		}
		if got := daemontest.Names(d.List(t, "?state=PAUSED")); len(got) != 0 {
			t.Errorf("paused tasks after resume = %v", got)
		}
		if a, ok := daemontest.FindAction(d.Actions(t, "a2"), "resume"); !ok || a.From != model.StatePaused {
			t.Errorf("resume action = %+v (found %v)", a, ok)
		}

		d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks/a1/pause", `{"note": 1}`)
		d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks/a1/pause", `{"reason": "x"}`)
		if d.Get(t, "a1").Paused {
			t.Error("a rejected pause paused the task")
		}
	})
}

// TestRunNow starts independent instances of a manual task, also while it is paused, with
// and without a params override.
func TestRunNow(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		d.Create(t, daemontest.Spec("by-hand", h.URL("/ok/by-hand"), "trigger", "manual", "params", map[string]int{"p": 1}))
		time.Sleep(200 * time.Millisecond)
		if n := len(h.CallsOf("by-hand")); n != 0 {
			t.Fatalf("manual task fired %d time(s) on its own", n)
		}

		first := d.RunNow(t, "by-hand", nil)
		calls := h.WaitCalls(t, "by-hand", 1, daemontest.WaitTimeout)
		if c := calls[0]; c.Ticket != first || c.Body.Kind != model.RunManual || c.Attempt != "1" || !jsonEqual(c.Body.Params, []byte(`{"p":1}`)) {
			t.Errorf("run-now call: ticket %s (want %s), body %s", c.Ticket, first, c.Raw)
		}

		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/by-hand/pause", nil, nil)
		second := d.RunNow(t, "by-hand", map[string]any{"params": map[string]int{"p": 2}})
		calls = h.WaitCalls(t, "by-hand", 2, daemontest.WaitTimeout)
		if c := calls[1]; c.Ticket != second || second == first || !jsonEqual(c.Body.Params, []byte(`{"p":2}`)) {
			t.Errorf("run-now while paused: ticket %s (want %s, distinct from %s), body %s", c.Ticket, second, first, c.Raw)
		}
		for _, tk := range []string{first, second} {
			if r := d.WaitRun(t, "by-hand", tk); r.Result != model.ResultSuccess || r.Kind != model.RunManual {
				t.Errorf("run %s = %+v", tk, r)
			}
		}
		if g := d.Get(t, "by-hand"); g.Runtime.State != model.StatePaused || g.Runtime.SuccessCount != 0 {
			t.Errorf("run-now touched the periodic state: %+v", g.Runtime)
		}
		// The task's own params are unchanged by the override.
		if g := d.Get(t, "by-hand"); !jsonEqual(g.Params, []byte(`{"p":1}`)) {
			t.Errorf("task params after an override = %s", g.Params)
		}

		for _, body := range []string{`{"params":`, `{"parameters": {}}`} {
			d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks/by-hand/run", body)
		}
		time.Sleep(200 * time.Millisecond)
		if n := len(h.CallsOf("by-hand")); n != 2 {
			t.Errorf("callback called %d times, want 2 (rejected run-nows must not run)", n)
		}
	})
}

// TestKill kills a run hanging on a slow endpoint.
func TestKill(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		defer h.ReleaseHung() // before the daemon stops: its dispatcher waits for the call
		d.Create(t, daemontest.Spec("stuck", h.URL("/hang/stuck"), "delay_ms", 0, "timeout_sec", 120))
		call := h.WaitCalls(t, "stuck", 1, daemontest.WaitTimeout)[0]
		d.WaitState(t, "stuck", model.StateRunning)

		// Run-now works while the periodic run is RUNNING, as an independent instance;
		// the task's kill ends every run of it in flight, this one too.
		manual := d.RunNow(t, "stuck", nil)
		if mc := h.WaitCalls(t, "stuck", 2, daemontest.WaitTimeout)[1]; mc.Ticket != manual || mc.Body.Kind != model.RunManual || manual == call.Ticket {
			t.Errorf("run-now during a run: call %s kind %s, want ticket %s", mc.Ticket, mc.Body.Kind, manual)
		}

		var v client.TaskView
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/stuck/kill", nil, &v, "X-Axe-Actor", "dave")
		if v.Runtime.State == model.StateRunning || v.Runtime.CurrentTicket != "" {
			t.Errorf("after kill the task is %s with ticket %q", v.Runtime.State, v.Runtime.CurrentTicket)
		}
		r := d.WaitRun(t, "stuck", call.Ticket)
		if r.Result != model.ResultKilled || !strings.Contains(r.Error, "api:dave") || r.EndedAt == 0 {
			t.Errorf("killed run = %+v", r)
		}
		kills := 0
		for _, a := range d.Actions(t, "stuck") {
			if a.Action != engine.ActKill {
				continue
			}
			kills++
			if a.Actor != "api:dave" || (a.Ticket == call.Ticket && (a.From != model.StateRunning || a.To != model.StateKilled)) ||
				(a.Ticket != call.Ticket && a.Ticket != manual) {
				t.Errorf("kill action = %+v", a)
			}
		}
		if kills != 2 {
			t.Errorf("%d kill actions, want one per run in flight (2)", kills)
		}
		if msg := d.APIError(t, http.StatusConflict, http.MethodPost, "/api/v1/tasks/stuck/kill", nil); !strings.Contains(msg, "no run in flight") {
			t.Errorf("kill with nothing running: %q", msg)
		}

		// The downstream answering late changes nothing.
		h.ReleaseHung()
		time.Sleep(300 * time.Millisecond)
		if g := d.Get(t, "stuck"); g.Runtime.State == model.StateRunning || g.Runtime.SuccessCount != 0 {
			t.Errorf("late answer after kill changed the task: %+v", g.Runtime)
		}
		if r := d.WaitRun(t, "stuck", manual); r.Result != model.ResultKilled {
			t.Errorf("run-now instance ended %q, want killed by the task's kill", r.Result)
		}
		if r := d.WaitRun(t, "stuck", call.Ticket); r.Result != model.ResultKilled {
			t.Errorf("killed run after the late answer = %+v", r)
		}
	})
}

// TestRetriesAndTimeout checks retry_count/retry_interval_sec on a failing endpoint and
// timeout_sec on a hanging one.
func TestRetriesAndTimeout(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		defer h.ReleaseHung()
		d.Create(t, daemontest.Spec("flaky", h.URL("/fail/flaky"), "delay_ms", 0, "retry_count", 2, "retry_interval_sec", 1))
		d.Create(t, daemontest.Spec("slowpoke", h.URL("/hang/slowpoke"), "delay_ms", 0, "timeout_sec", 1))

		t.Run("retries", func(t *testing.T) {
			calls := h.WaitCalls(t, "flaky", 3, daemontest.WaitTimeout)
			tickets := map[string]bool{}
			for i, c := range calls {
				if want := []string{"1", "2", "3"}[i]; c.Attempt != want || c.Body.Attempt != i+1 {
					t.Errorf("call %d: X-Axe-Attempt %q body attempt %d, want %s", i, c.Attempt, c.Body.Attempt, want)
				}
				tickets[c.Ticket] = true
				if i > 0 {
					if gap := c.At.Sub(calls[i-1].At); gap < time.Second {
						t.Errorf("attempts %d and %d are %s apart, want >= 1s", i, i+1, gap)
					}
				}
			}
			if len(tickets) != 3 {
				t.Errorf("3 attempts used %d distinct tickets", len(tickets))
			}
			v := d.WaitState(t, "flaky", model.StateFailed)
			if v.Runtime.FailureCount != 1 || v.Runtime.SuccessCount != 0 {
				t.Errorf("after the last attempt: %+v", v.Runtime)
			}
			testwait.For(t, daemontest.WaitTimeout, "three failed runs", func() bool {
				runs := d.Runs(t, "flaky")
				if len(runs) != 3 {
					return false
				}
				for _, r := range runs {
					if r.Result != model.ResultFailed || !strings.Contains(r.Error, "500") {
						return false
					}
				}
				return true
			})
			time.Sleep(1500 * time.Millisecond)
			if n := len(h.CallsOf("flaky")); n != 3 {
				t.Errorf("flaky called %d times, want 3 (1 + retry_count 2)", n)
			}
			acts := d.Actions(t, "flaky")
			retries := 0
			for _, a := range acts {
				if a.Action == "retry" {
					retries++
				}
			}
			if retries != 2 {
				t.Errorf("%d retry actions, want 2", retries)
			}
		})

		t.Run("timeout", func(t *testing.T) {
			// Wait on the run record, not on the call: the deadline counts from the dispatch
			// decision, so on a badly overloaded machine the call may never get out.
			var r model.Run
			testwait.For(t, daemontest.WaitTimeout, "the hanging run to end", func() bool {
				runs := d.Runs(t, "slowpoke")
				if len(runs) == 0 || runs[0].Result == model.ResultRunning {
					return false
				}
				r = runs[0]
				return true
			})
			if r.Result != model.ResultTimeout {
				t.Fatalf("hanging run ended %q (%s), want timeout", r.Result, r.Error)
			}
			if took := r.EndedAt - r.DispatchedAt; took < 900 || took > 2000 {
				t.Errorf("timeout after %d ms, want about timeout_sec (1 s) and within 2 s", took)
			}
			if v := d.WaitState(t, "slowpoke", model.StateFailed); v.Runtime.FailureCount != 1 {
				t.Errorf("after the timeout: %+v", v.Runtime)
			}
		})
	})
}
