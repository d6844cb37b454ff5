package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestRefusedResultsAreFoldedPerWindow: results for tickets that do not exist write one
// record per executor app and reason at once, and one summary counting the rest when the
// window closes; another app's refusals have their own record. Every refusal is counted
// in axe_refused_results_total.
func TestRefusedResultsAreFoldedPerWindow(t *testing.T) {
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk), func(c *Config) { c.RefusalWindow = time.Minute })
		report := func(app string, i int) {
			_, err := e.ReportResult(ctx, Report{Ticket: fmt.Sprintf("999999-%s%d-0", app, i), App: app, Address: "127.0.0.1:9", Status: "success"})
			if !errors.Is(err, model.ErrRunNotFound) {
				t.Fatalf("result for an unknown ticket: %v, want ErrRunNotFound", err)
			}
		}
		for i := range 500 {
			report("flood", i)
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
			t.Fatalf("records after 501 refusals: %d %+v, want one per app", len(got), got)
		}
		if n := e.m.refusedResults(refusalUnknownTicket).Get(); n != 501 {
			t.Errorf("axe_refused_results_total{reason=unknown_ticket} = %d, want 501", n)
		}
		waitAdvancing(t, clk, 5*time.Second, 30*time.Second, "the window's summary", func() bool { return len(refused()) == 3 })
		sum := refused()[0] // newest first
		if !strings.Contains(sum.Detail, "499 more results from executor app \"flood\" refused (unknown_ticket)") {
			t.Errorf("summary %q does not count the 499 others of flood", sum.Detail)
		}
		// The next window starts afresh: its first refusal is recorded at once.
		report("flood", 1000)
		waitFor(t, 10*time.Second, "the next window's first refusal recorded", func() bool { return len(refused()) == 4 })
	})
}
