package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// Overlap policy allow_all on a whole engine: real HTTP callbacks over loopback, the real
// stores, the engine on a fake clock; what ran is read back from the store.

// hangingServer is a callback server whose calls hang until released, counting how many are
// in the endpoint at once.
type hangingServer struct {
	*callbackServer
	mu      sync.Mutex
	in, max int
	hold    chan struct{}
}

func newHangingServer(t *testing.T, clk clock.Clock) *hangingServer {
	h := &hangingServer{callbackServer: newCallbackServer(t), hold: make(chan struct{})}
	h.clk = clk
	var once sync.Once
	h.status = func(call) int {
		h.mu.Lock()
		h.in++
		h.max = max(h.max, h.in)
		hold := h.hold
		h.mu.Unlock()
		<-hold
		h.mu.Lock()
		h.in--
		h.mu.Unlock()
		return 200
	}
	t.Cleanup(func() { once.Do(func() { h.release() }) })
	return h
}

// clockPastSecondFire moves clk just past the second fire of a schedule firing every period
// (on multiples of it) and stops there, so exactly two fires come due however long the
// engine takes to send them. Advancing until two runs were inside the endpoint let a loaded
// engine have a third (and once 17) come due before a poll saw two.
func clockPastSecondFire(clk *clock.Fake, every time.Duration) {
	now, p := clk.Now().UnixMilli(), every.Milliseconds()
	second := now - now%p + 2*p
	runFor(clk, time.Duration(second+100-now)*time.Millisecond, 50*time.Millisecond)
}

// release lets every hung call answer, and later ones answer at once.
func (h *hangingServer) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.hold:
	default:
		close(h.hold)
	}
}

func (h *hangingServer) inside() (in, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.in, h.max
}

// TestAllowAllRunsBesideSlowRuns: a task fires every 5 s and its runs hang. Under allow_all
// every fire runs at its time beside the runs in flight: four runs are in the endpoint at
// once, each with its own scheduled_at and ticket, the runtime names the next fire while
// they run, and each fire made beside others is recorded.
func TestAllowAllRunsBesideSlowRuns(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Now())
		h := newHangingServer(t, clk)
		e := startEngine(t, s, withFakeClock(clk))
		spec := httpSpec("parallel", h.URL)
		spec.Cron = "*/5 * * * * *"
		spec.TimeoutSec = ptr(600)
		spec.OverlapPolicy = model.OverlapAllowAll
		mustCreate(t, e, spec)
		waitAdvancing(t, clk, 50*time.Millisecond, 30*time.Second, "the first run in the endpoint", func() bool {
			in, _ := h.inside()
			return in >= 1
		})
		// The clock goes to the fourth fire and stops short of the fifth: on a loaded box the
		// calls arrive late, and a clock still advancing meanwhile would reach the fifth.
		for first := h.got("parallel")[0].body.ScheduledAt; clk.Now().UnixMilli() < first+15_000; {
			clk.Advance(50 * time.Millisecond)
			time.Sleep(10 * time.Millisecond)
		}
		waitAdvancing(t, nil, 0, 30*time.Second, "four runs in the endpoint at once", func() bool {
			in, _ := h.inside()
			return in == 4
		})
		got, err := e.API().GetTask(ctx, "parallel")
		if err != nil {
			t.Fatal(err)
		}
		if got.Runtime.State != model.StateScheduled {
			t.Errorf("state with runs in flight = %s, want SCHEDULED (allow_all runs are outside the state machine)", got.Runtime.State)
		}
		calls := h.got("parallel")
		if len(calls) != 4 {
			t.Fatalf("%d calls, want 4", len(calls))
		}
		f0 := calls[0].body.ScheduledAt
		if got.Runtime.NextTriggerTime != f0+20_000 {
			t.Errorf("next fire with four runs in flight = %d, want %d (the fifth fire)", got.Runtime.NextTriggerTime, f0+20_000)
		}
		if n := len(e.API().RunsInFlight()); n != 4 {
			t.Errorf("%d runs in flight, want 4", n)
		}
		h.release()
		waitAdvancing(t, clk, 10*time.Millisecond, 30*time.Second, "the runs to end", func() bool {
			runs, _ := e.API().Runs(ctx, "parallel", 100)
			if len(runs) < 4 {
				return false
			}
			for _, r := range runs {
				if r.EndedAt == 0 {
					return false
				}
			}
			return true
		})
		stopEngine(t, e)
		runs, err := s.ListRuns(ctx, got.Def.ID, 1000)
		if err != nil {
			t.Fatal(err)
		}
		noTicketTwice(t, runs)
		at := scheduledOf(runs)
		for i, x := range at {
			if x != f0+int64(i)*5000 {
				t.Fatalf("scheduled_at %v, want every 5 s from %d without a gap", rel(at, f0), f0)
			}
		}
		for _, r := range runs {
			if r.Ticket != scheduledTicket(got.Def.ID, r.ScheduledAt, 1) || r.Kind != model.RunScheduled || r.Result != model.ResultSuccess {
				t.Errorf("run %+v: want a scheduled success with its fire time's ticket", r)
			}
		}
		if _, most := h.inside(); most < 4 {
			t.Errorf("at most %d runs in the endpoint at once, want 4", most)
		}
		ov := actionDetails(t, e, "parallel", ActOverlap)
		if len(ov) < 3 {
			t.Fatalf("overlap actions %+v, want one per fire made beside a run in flight (3 or more)", ov)
		}
		for i, a := range ov[:3] {
			if want := "runs beside " + string(rune('1'+i)) + " run(s)"; !strings.Contains(a.Detail, "allow_all") || !strings.Contains(a.Detail, want) {
				t.Errorf("overlap action %d = %q, want allow_all and %q", i, a.Detail, want)
			}
		}
		rt, err := s.GetTaskByID(ctx, got.Def.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rt.Runtime.SuccessCount != int64(len(runs)) || rt.Runtime.LastResult != model.ResultSuccess {
			t.Errorf("stored runtime %+v, want %d successes counted", rt.Runtime, len(runs))
		}
	})
}

// TestAllowAllKillKillsEveryRun: Kill ends every allow_all run of the task in flight, each
// recorded killed by the actor, and the schedule goes on.
func TestAllowAllKillKillsEveryRun(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Now())
		h := newHangingServer(t, clk)
		e := startEngine(t, s, withFakeClock(clk))
		spec := httpSpec("killall", h.URL)
		spec.Cron = "*/5 * * * * *"
		spec.TimeoutSec = ptr(600)
		spec.OverlapPolicy = model.OverlapAllowAll
		pt := mustCreate(t, e, spec)
		clockPastSecondFire(clk, 5*time.Second)
		waitFor(t, 30*time.Second, "two runs in the endpoint", func() bool {
			in, _ := h.inside()
			return in == 2
		})
		killed, err := e.API().Kill(ctx, "killall", "ops")
		if err != nil {
			t.Fatal(err)
		}
		if killed.Runtime.State != model.StateScheduled || killed.Runtime.NextTriggerTime == 0 {
			t.Errorf("after the kill: %+v, want SCHEDULED with its next fire", killed.Runtime)
		}
		if n := len(e.API().RunsInFlight()); n != 0 {
			t.Errorf("%d runs in flight after the kill, want 0", n)
		}
		runs, err := s.ListRuns(ctx, pt.Def.ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 2 {
			t.Fatalf("%d runs, want 2", len(runs))
		}
		for _, r := range runs {
			if r.Result != model.ResultKilled || r.Error != "killed by ops" {
				t.Errorf("run %s = %s %q, want killed by ops", r.Ticket, r.Result, r.Error)
			}
		}
		if k := actionDetails(t, e, "killall", ActKill); len(k) != 2 || k[0].Actor != "ops" {
			t.Errorf("kill actions %+v, want two by ops", k)
		}
		if _, err := e.API().Kill(ctx, "killall", "ops"); !errors.Is(err, ErrConflict) {
			t.Errorf("a kill with nothing in flight: %v, want ErrConflict", err)
		}
		h.release()
		waitAdvancing(t, clk, 50*time.Millisecond, 30*time.Second, "the schedule to go on", func() bool {
			runs, _ := e.API().Runs(ctx, "killall", 100)
			return len(runs) >= 3 && runs[0].Result == model.ResultSuccess
		})
	})
}

// TestAllowAllRunsRecoveredAfterACrash: two allow_all runs are in flight when the scheduler
// dies (their fire records open, the runtime moved on past them, as the fire writes it). The
// next scheduler finds both, records them lost and never sends them again; the schedule goes
// on from the runtime's next fire, and nothing is fired twice.
func TestAllowAllRunsRecoveredAfterACrash(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Now())
		cs := newCallbackServer(t)
		cs.clk = clk
		now := clk.Now().UnixMilli()
		due := now - now%5000 - 5000 // two fires of the schedule, in flight since
		def := model.TaskDef{
			Name: "par", Group: "default", Trigger: model.TriggerCron, Cron: "*/5 * * * * *", Timezone: "UTC",
			TimeoutSec: 600, Priority: 2, MisfirePolicy: model.MisfireFireOnce, OverlapPolicy: model.OverlapAllowAll,
			Callback: model.Callback{Type: model.CallbackHTTP, URL: cs.URL},
		}
		rt := model.Runtime{State: model.StateScheduled, NextTriggerTime: due + 5000, Version: 7}
		if err := s.CreateTask(ctx, &def, &rt); err != nil {
			t.Fatal(err)
		}
		var open []model.Run
		for _, x := range []int64{due - 5000, due} {
			open = append(open, model.Run{Ticket: scheduledTicket(def.ID, x, 1), TaskID: def.ID, TaskName: def.Name,
				Kind: model.RunScheduled, Attempt: 1, ScheduledAt: x, DispatchedAt: x + 3, Result: model.ResultRunning})
		}
		if err := s.ApplyBatch(ctx, &persist.Batch{Fires: open}); err != nil {
			t.Fatal(err)
		}
		listed, err := s.ListOpenParallelRuns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(listed) != 2 || listed[0].Ticket != open[0].Ticket || listed[1].Ticket != open[1].Ticket {
			t.Fatalf("ListOpenParallelRuns = %+v, want the two open runs oldest first", listed)
		}
		if of, err := s.ListOpenFires(ctx, now+60_000); err != nil || len(of) != 0 {
			t.Fatalf("ListOpenFires = %+v, %v: want none (the runtime is past both)", of, err)
		}
		e := startEngine(t, s, withFakeClock(clk))
		for _, o := range open {
			waitAdvancing(t, clk, 0, 20*time.Second, "the open run recorded lost", func() bool {
				r, err := s.GetRun(ctx, o.Ticket)
				return err == nil && r.Result == model.ResultLost
			})
		}
		waitAdvancing(t, clk, 50*time.Millisecond, 20*time.Second, "the next fire", func() bool {
			return len(cs.got("par")) >= 1
		})
		for _, c := range cs.got("par") {
			if c.ticket == open[0].Ticket || c.ticket == open[1].Ticket {
				t.Errorf("recovered run %s sent again", c.ticket)
			}
		}
		if first := cs.got("par")[0].body.ScheduledAt; first != due+5000 {
			t.Errorf("first fire after the restart at %d, want the runtime's next %d", first, due+5000)
		}
		if lost := actionDetails(t, e, "par", ActLost); len(lost) != 2 {
			t.Errorf("lost actions %+v, want two", lost)
		}
		waitAdvancing(t, clk, 10*time.Millisecond, 20*time.Second, "the runs to end", func() bool { return len(e.API().RunsInFlight()) == 0 })
		stopEngine(t, e)
		runs, err := s.ListRuns(ctx, def.ID, 1000)
		if err != nil {
			t.Fatal(err)
		}
		noTicketTwice(t, runs)
	})
}

// TestAllowAllPausesOnFailure: allow_all runs count in pause_after_failures in the order they
// end; the third failure in a row pauses the task.
func TestAllowAllPausesOnFailure(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Now())
		cs := newCallbackServer(t)
		cs.clk = clk
		cs.status = func(call) int { return 500 }
		e := startEngine(t, s, withFakeClock(clk))
		spec := httpSpec("failing", cs.URL)
		spec.Cron = "*/5 * * * * *"
		spec.OverlapPolicy = model.OverlapAllowAll
		spec.PauseAfterFailures = 3
		mustCreate(t, e, spec)
		waitAdvancing(t, clk, 50*time.Millisecond, 30*time.Second, "the pause", func() bool {
			got, err := e.API().GetTask(ctx, "failing")
			return err == nil && got.Def.Paused
		})
		got, err := e.API().GetTask(ctx, "failing")
		if err != nil {
			t.Fatal(err)
		}
		if got.Runtime.State != model.StatePaused || got.Runtime.ConsecutiveFailures != 3 ||
			!strings.Contains(got.Runtime.Note, "3 consecutive failed runs") {
			t.Errorf("after three failures: %+v, want PAUSED with a count of 3 and a note", got.Runtime)
		}
		calls := len(cs.got("failing"))
		if calls != 3 {
			t.Errorf("%d calls before the pause, want 3", calls)
		}
		for i := 0; i < 30; i++ {
			clk.Advance(time.Second)
			time.Sleep(2 * time.Millisecond)
		}
		if n := len(cs.got("failing")); n != calls {
			t.Errorf("%d calls after the pause, want still %d", n, calls)
		}
	})
}

// TestAllowAllRefusals: allow_all is for cron tasks, without retries or re-sends; each
// refusal names its field.
func TestAllowAllRefusals(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		e := startEngine(t, s)
		for _, tc := range []struct {
			field string
			mod   func(*wire.TaskSpec)
		}{
			{"retry_count", func(sp *wire.TaskSpec) { sp.RetryCount = ptr(2) }},
			{"on_lost", func(sp *wire.TaskSpec) { sp.OnLost = persist.OnLostResend }},
			{"overlap_policy", func(sp *wire.TaskSpec) { sp.Cron, sp.Trigger, sp.DelayMS = "", model.TriggerDelay, ptr(int64(60_000)) }},
		} {
			spec := httpSpec("refused-"+tc.field, "http://127.0.0.1:1/")
			spec.Cron = "*/5 * * * * *"
			spec.OverlapPolicy = model.OverlapAllowAll
			tc.mod(spec)
			_, err := e.API().CreateTask(context.Background(), spec, "test")
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("%s: %v, want a field error on %s", tc.field, err, tc.field)
			}
			if _, err := e.API().GetTask(context.Background(), spec.Name); !errors.Is(err, ErrTaskNotFound) {
				t.Errorf("%s: the refused task exists (%v)", tc.field, err)
			}
		}
	})
}

// TestFireBeyondTheWindowWhileARunKeepsTheTask: a task whose next fire lies beyond the
// window when a run of it starts stays in memory, unarmed, while that run is in flight (an
// allow_all run, or a run-now). When the window reaches the fire it is armed and fires on
// time, beside the run still hanging, not when that run ends.
func TestFireBeyondTheWindowWhileARunKeepsTheTask(t *testing.T) {
	t.Parallel()
	for _, runNow := range []bool{false, true} {
		name := "allow_all"
		if runNow {
			name = "run-now"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each its own engine, clock and endpoint
			persisttest.Each(t, func(t *testing.T, s persist.Store) {
				ctx := context.Background()
				// Just past a fire: the next is 29 s away, beyond the window of 10 s.
				clk := clock.NewFake(time.Now().Truncate(30 * time.Second).Add(time.Second))
				h := newHangingServer(t, clk)
				e := startEngine(t, s, withFakeClock(clk))
				spec := httpSpec("sparse", h.URL)
				spec.Cron = "*/30 * * * * *"
				spec.TimeoutSec = ptr(600)
				if !runNow {
					spec.OverlapPolicy = model.OverlapAllowAll
				}
				pt := mustCreate(t, e, spec)
				due := pt.Runtime.NextTriggerTime
				if runNow {
					if _, err := e.API().RunNow(ctx, "sparse", nil, "test"); err != nil {
						t.Fatal(err)
					}
				} else {
					waitAdvancing(t, clk, 50*time.Millisecond, 40*time.Second, "the first fire", func() bool { return len(h.got("sparse")) == 1 })
					due += 30_000
				}
				// The next fire, 30 s on, is beyond the 10 s window now; the run hangs past it.
				// The clock is moved up to the fire's time and then held there: the fire must
				// leave at that instant, however long the box takes to send it (moving the
				// clock on meanwhile counted a loaded box's slowness as lateness).
				fired := func() bool {
					for _, c := range h.got("sparse") {
						if c.body.ScheduledAt == due && c.body.Kind == model.RunScheduled {
							return true
						}
					}
					return false
				}
				waitAdvancing(t, clk, 50*time.Millisecond, 60*time.Second, "the clock at the fire beyond the window", func() bool {
					return fired() || clk.Now().UnixMilli() >= due
				})
				waitAdvancing(t, nil, 0, 60*time.Second, "the fire beyond the window", fired)
				calls := h.got("sparse")
				last := calls[len(calls)-1]
				if late := last.at.UnixMilli() - due; late > 2000 {
					t.Errorf("the fire of %d left %d ms late, want on time", due, late)
				}
				if in, _ := h.inside(); in != 2 {
					t.Errorf("%d calls in the endpoint, want 2: the fire beside the hanging run", in)
				}
				h.release()
			})
		})
	}
}

// TestAllowAllKeepsToItsConcurrencyLimit: allow_all runs count in their group's limit like
// every run; a fire over it waits (nothing is dropped) and starts when a run ends, so the
// endpoint never holds more than the limit.
func TestAllowAllKeepsToItsConcurrencyLimit(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		clk := clock.NewFake(time.Now())
		h := newHangingServer(t, clk)
		e := startEngine(t, s, withFakeClock(clk))
		if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitGroup, "lim", 2, "test"); err != nil {
			t.Fatal(err)
		}
		spec := httpSpec("limited", h.URL)
		spec.Group = "lim"
		spec.Cron = "*/5 * * * * *"
		spec.TimeoutSec = ptr(600)
		spec.OverlapPolicy = model.OverlapAllowAll
		mustCreate(t, e, spec)
		waitAdvancing(t, clk, 50*time.Millisecond, 30*time.Second, "two runs in the endpoint", func() bool {
			in, _ := h.inside()
			return in == 2
		})
		f0 := h.got("limited")[0].body.ScheduledAt
		for clk.Now().UnixMilli() < f0+21_000 { // three more fires come due
			clk.Advance(100 * time.Millisecond)
			time.Sleep(2 * time.Millisecond)
		}
		if in, most := h.inside(); in != 2 || most != 2 {
			t.Fatalf("%d in the endpoint (at most %d), want 2 of limit 2", in, most)
		}
		h.release()
		waitAdvancing(t, clk, 10*time.Millisecond, 30*time.Second, "the waiting fires to run", func() bool {
			runs, _ := e.API().Runs(ctx, "limited", 100)
			return len(runs) >= 5 && runs[0].EndedAt > 0
		})
		runs, err := e.API().Runs(ctx, "limited", 100)
		if err != nil {
			t.Fatal(err)
		}
		noTicketTwice(t, runs)
		at := scheduledOf(runs)
		for i, x := range at[:5] {
			if x != f0+int64(i)*5000 {
				t.Fatalf("scheduled_at %v, want every fire from %d, none dropped", rel(at, f0), f0)
			}
		}
	})
}
