package admin_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/model"
)

// limitWaits makes two runs that wait for a limit: "db-next" for a slot of concurrency key
// db (max 1) held by "db-slow" for about 2 s, and "rl-second" for the rate limit of its
// downstream (one fire every 4 s) after "rl-first" took the token. It returns their ended
// runs and the rate-limited downstream's key.
func limitWaits(t *testing.T, d *daemontest.Daemon) (conc, rate model.Run, downstream string) {
	t.Helper()
	h := daemontest.NewHook(t)
	d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/concurrency-limits/key/db", map[string]any{"max": 1}, nil)
	d.Create(t, daemontest.Spec("db-slow", h.URL("/slow/db?ms=2000"), "trigger", "delay", "delay_ms", 0, "concurrency_key", "db"))
	h.WaitCalls(t, "db-slow", 1, daemontest.WaitTimeout)
	d.Create(t, daemontest.Spec("db-next", h.URL("/ok/db"), "trigger", "delay", "delay_ms", 0, "concurrency_key", "db"))
	h.WaitCalls(t, "db-next", 1, daemontest.WaitTimeout)

	// Another hook: another downstream, whose rate limit holds no other task.
	rl := daemontest.NewHook(t)
	downstream = strings.TrimPrefix(rl.URL(""), "http://")
	d.MustJSON(t, http.StatusOK, http.MethodPut, "/api/v1/ratelimits", map[string]any{"downstream": downstream, "rate": 0.25, "burst": 1}, nil)
	d.Create(t, daemontest.Spec("rl-first", rl.URL("/ok/a"), "trigger", "delay", "delay_ms", 0))
	rl.WaitCalls(t, "rl-first", 1, daemontest.WaitTimeout)
	d.Create(t, daemontest.Spec("rl-second", rl.URL("/ok/b"), "trigger", "delay", "delay_ms", 0))
	rl.WaitCalls(t, "rl-second", 1, daemontest.WaitTimeout)

	one := func(name string) model.Run {
		runs := d.Runs(t, name)
		if len(runs) != 1 {
			t.Fatalf("%s has %d runs, want 1", name, len(runs))
		}
		return d.WaitRun(t, name, runs[0].Ticket)
	}
	return one("db-next"), one("rl-second"), downstream
}

// TestLimitWaitsInRunAndTimeline: a fire that waited for a concurrency slot and one that
// waited for its downstream's rate limit say so in their run's detail (how long, which
// limit), and the dispatch event of their task's timeline repeats it; a fire that did not
// wait says nothing of waits.
func TestLimitWaitsInRunAndTimeline(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, "sqlite:"+t.TempDir()+"/axe.db", nil)
	conc, rate, downstream := limitWaits(t, d)
	concWait := regexp.MustCompile(`^waited [0-9.]+m?s for concurrency limit key db \(1\)$`)
	rateWait := regexp.MustCompile(`^waited [0-9.]+m?s for rate limit ` + regexp.QuoteMeta(downstream) + `$`)
	if !concWait.MatchString(conc.Detail) {
		t.Errorf("db-next's run detail = %q, want its wait for key db", conc.Detail)
	}
	if !rateWait.MatchString(rate.Detail) {
		t.Errorf("rl-second's run detail = %q, want its wait for the rate limit of %s", rate.Detail, downstream)
	}
	for _, c := range []struct {
		task string
		re   *regexp.Regexp
	}{{"db-next", concWait}, {"rl-second", rateWait}} {
		dispatch, ok := daemontest.FindAction(d.Actions(t, c.task), "dispatch")
		wait, found := strings.CutPrefix(dispatch.Detail, "attempt 1; ")
		if !ok || !found || !c.re.MatchString(wait) {
			t.Errorf("%s's dispatch event = %+v (found %v); want attempt 1 and its wait", c.task, dispatch, ok)
		}
	}
	for _, name := range []string{"rl-first", "db-slow"} {
		runs := d.Runs(t, name)
		if len(runs) != 1 || strings.Contains(runs[0].Detail, "waited") {
			t.Errorf("%s, which did not wait, has runs %+v", name, runs)
		}
		if dispatch, ok := daemontest.FindAction(d.Actions(t, name), "dispatch"); !ok || dispatch.Detail != "attempt 1" {
			t.Errorf("%s's dispatch event = %+v (found %v), want attempt 1 alone", name, dispatch, ok)
		}
	}
}
