package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestKillRunByTicketAllowAll: one of two allow_all runs in flight is killed by its ticket
// with a reason; the other goes on; the task's last result is killed.
func TestKillRunByTicketAllowAll(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Now())
		h := newHangingServer(t, clk)
		e := startEngine(t, s, withFakeClock(clk))
		spec := httpSpec("beside", h.URL)
		spec.Cron = "*/5 * * * * *"
		spec.TimeoutSec = ptr(600)
		spec.OverlapPolicy = model.OverlapAllowAll
		mustCreate(t, e, spec)
		clockPastSecondFire(clk, 5*time.Second)
		waitFor(t, 30*time.Second, "two runs in the endpoint", func() bool {
			in, _ := h.inside()
			return in == 2
		})
		flying := e.API().RunsInFlight()
		if len(flying) != 2 {
			t.Fatalf("%d runs in flight, want 2", len(flying))
		}
		run, err := e.API().KillRun(ctx, flying[0].Ticket, "INC-9", "ops")
		if err != nil {
			t.Fatal(err)
		}
		if run.Ticket != flying[0].Ticket || run.Result != model.ResultKilled || run.Error != "killed by ops: INC-9" {
			t.Errorf("the killed run = %+v", run)
		}
		if left := e.API().RunsInFlight(); len(left) != 1 || left[0].Ticket != flying[1].Ticket {
			t.Errorf("runs in flight after one kill = %+v, want only %s", left, flying[1].Ticket)
		}
		if pt, _ := e.API().GetTask(ctx, "beside"); pt == nil || pt.Runtime.LastResult != model.ResultKilled {
			t.Errorf("the task after the kill = %+v", pt)
		}
		if _, err := e.API().KillRun(ctx, flying[0].Ticket, "", "ops"); !errors.Is(err, ErrConflict) {
			t.Errorf("a second kill = %v, want ErrConflict", err)
		}
		if _, err := e.API().KillRun(ctx, "nope", "", "ops"); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("a kill of an unknown ticket = %v, want ErrRunNotFound", err)
		}
		h.release()
	})
}

// TestKillRunByTicketBackfill: a backfill's run in flight is killed by its ticket; the
// backfill counts it and goes on with its next fire time.
func TestKillRunByTicketBackfill(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		h := newHangingServer(t, clock.Real)
		e := startEngine(t, s)
		cronTask(t, e, "minutely", "* * * * *", "UTC", h.URL)
		from := mustTime(t, "2026-01-01T00:00:00Z")
		v, err := e.API().Backfills().Create(ctx, "minutely", BackfillRequest{From: from, To: from.Add(2 * time.Minute), Parallel: 1}, "test")
		if err != nil {
			t.Fatal(err)
		}
		var first model.Run
		waitFor(t, 30*time.Second, "a backfill run in flight", func() bool {
			for _, r := range e.API().RunsInFlight() {
				if r.Kind == model.RunBackfill {
					first = r
					return true
				}
			}
			return false
		})
		run, err := e.API().KillRun(ctx, first.Ticket, "wrong range", "ops")
		if err != nil {
			t.Fatal(err)
		}
		if run.Kind != model.RunBackfill || run.Result != model.ResultKilled || run.Error != "killed by ops: wrong range" {
			t.Errorf("the killed backfill run = %+v", run)
		}
		waitFor(t, 30*time.Second, "the backfill's next run", func() bool {
			for _, r := range e.API().RunsInFlight() {
				if r.Kind == model.RunBackfill && r.Ticket != first.Ticket {
					return true
				}
			}
			return false
		})
		if k := actionDetails(t, e, "minutely", ActKill); len(k) != 1 || k[0].Actor != "ops" || k[0].Ticket != first.Ticket {
			t.Errorf("kill actions %+v, want one by ops for %s", k, first.Ticket)
		}
		h.release()
		done := waitBackfill(t, e, "minutely", v.ID, model.BackfillDone)
		if done.Total != 3 || done.Succeeded != 2 || done.Failed != 1 {
			t.Errorf("the backfill after one of its runs was killed = %+v; want 2 succeeded and the killed one counted failed", done)
		}
	})
}
