package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestRefusedResultsAreFoldedPerWindow: results for tickets that do not exist write one
// record per executor app and reason at once, and one summary counting the rest when the
// window closes; another app's refusals have their own record. Every refusal is counted
// in axe_refused_results_total.
func TestRefusedResultsAreFoldedPerWindow(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk), func(c *Config) { c.RefusalWindow = time.Minute })
		report := func(app string, i int) {
			_, err := e.API().ReportResult(ctx, Report{Ticket: fmt.Sprintf("999999-%s%d-0", app, i), App: app, Address: "127.0.0.1:9", Status: "success"})
			if !errors.Is(err, model.ErrRunNotFound) {
				t.Fatalf("result for an unknown ticket: %v, want ErrRunNotFound", err)
			}
		}
		for i := range 500 {
			report("flood", i)
		}
		// Naming another task for each made-up ticket does not make records either.
		for i := range 100 {
			if _, err := e.API().ReportResult(ctx, Report{Ticket: fmt.Sprintf("888888-%d-0", i), Task: fmt.Sprintf("t%d", i), App: "flood",
				Address: "127.0.0.1:9", Status: "failed"}); !errors.Is(err, model.ErrRunNotFound) {
				t.Fatalf("result naming a task for an unknown ticket: %v", err)
			}
		}
		report("other", 0)
		refused := func() []model.Action {
			acts, err := s.ListActions(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var out []model.Action
			for _, a := range acts {
				if a.Action == ActRefusedResult {
					out = append(out, a)
				}
			}
			return out
		}
		// Records are queued to the writer: wait for them, then for the writer to be idle.
		waitFor(t, 10*time.Second, "the first refusal of each app recorded", func() bool { return len(refused()) >= 2 })
		waitSettled(t, e)
		if got := refused(); len(got) != 2 {
			t.Fatalf("records after 601 refusals: %d %+v, want one per app", len(got), got)
		}
		if n := e.m.refusedResults(refusalUnknownTicket).Get(); n != 601 {
			t.Errorf("axe_refused_results_total{reason=unknown_ticket} = %d, want 601", n)
		}
		waitAdvancing(t, clk, 5*time.Second, 30*time.Second, "the window's summary", func() bool { return len(refused()) == 3 })
		sum := refused()[0] // newest first
		if !strings.Contains(sum.Detail, "599 more results from executor app \"flood\" refused (unknown_ticket)") {
			t.Errorf("summary %q does not count the 599 others of flood", sum.Detail)
		}
		// The next window starts afresh: its first refusal is recorded at once.
		report("flood", 1000)
		waitFor(t, 10*time.Second, "the next window's first refusal recorded", func() bool { return len(refused()) == 4 })
	})
}

// TestExecutorAlertsGathered: executors of one app lost, or back, over several passes make
// one alert once a pass adds none, naming five and counting the rest; a lone one keeps its
// own message.
func TestExecutorAlertsGathered(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk))
		now := e.nowMS()
		for i := range 4 {
			e.executors.noteAlert(AlertExecutorBack, "a", fmt.Sprintf("10.0.0.%d:1", i), now)
		}
		e.executors.noteAlert(AlertExecutorLost, "b", "10.0.1.1:1", now)
		e.executors.raiseGathered(ctx, now, false) // both grew in this pass: nothing yet
		for i := 4; i < 7; i++ {
			e.executors.noteAlert(AlertExecutorBack, "a", fmt.Sprintf("10.0.0.%d:1", i), now)
		}
		e.executors.raiseGathered(ctx, now, false) // b is quiet: raised; a grew
		e.executors.raiseGathered(ctx, now, false) // a is quiet: raised
		var got []string
		waitFor(t, 10*time.Second, "two alerts recorded", func() bool {
			acts, err := s.ListActions(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			got = got[:0]
			for _, a := range acts {
				got = append(got, a.Action+": "+a.Detail)
			}
			return len(got) >= 2
		})
		want := []string{
			"executor_back: 7 executors of a are back: they registered or heartbeat again (10.0.0.0:1, 10.0.0.1:1, 10.0.0.2:1, 10.0.0.3:1, 10.0.0.4:1 and 2 more)",
			"executor_lost: executor b at 10.0.1.1:1 silent for more than 30s: no new dispatch to it",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("alerts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}
