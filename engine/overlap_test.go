package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/wire"
)

// Overlap policies and the catch-up window on a whole engine: real HTTP callbacks and
// executors over loopback, the real stores, the engine on a fake clock; what ran is read
// back from the store.

// scheduledOf is the scheduled_at of runs, oldest first (runs come newest first).
func scheduledOf(runs []model.Run) []int64 {
	out := make([]int64, 0, len(runs))
	for i := len(runs) - 1; i >= 0; i-- {
		out = append(out, runs[i].ScheduledAt)
	}
	return out
}

// actionDetails returns the details of the task's action records named name, oldest first.
func actionDetails(t *testing.T, e *Engine, task, name string) []model.Action {
	t.Helper()
	acts, err := e.API().Actions(context.Background(), task, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []model.Action
	for i := len(acts) - 1; i >= 0; i-- {
		if acts[i].Action == name {
			out = append(out, acts[i])
		}
	}
	return out
}

// noTicketTwice fails when two runs share a ticket or a (scheduled_at, attempt).
func noTicketTwice(t *testing.T, runs []model.Run) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r.Ticket] {
			t.Errorf("ticket %s ran twice", r.Ticket)
		}
		seen[r.Ticket] = true
	}
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// TestOverlapPoliciesOnASlowRun: a task fires every 5 s; its first run hangs for three more
// fires (16 s of the engine's clock). What runs after it is the policy's, and the store says
// so: skip goes on to the first fire after the run, buffer_one runs the latest of the three
// at once, buffer_all runs all three, oldest first, each with its own scheduled_at and
// ticket; each records the decision.
func TestOverlapPoliciesOnASlowRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy  string
		after   []time.Duration // scheduled_at of the runs after the slow one, from its fire
		overlap string          // in the overlap action's detail
	}{
		{model.OverlapSkip, []time.Duration{20 * time.Second}, "skip: 3 fire(s)"},
		{model.OverlapBufferOne, []time.Duration{15 * time.Second, 20 * time.Second}, "2 fire(s)"},
		{model.OverlapBufferAll, []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second, 20 * time.Second},
			"buffer_all: 3 fire(s) due while runs were in flight are buffered (bound 100)"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel() // each its own engine, clock and endpoint
			persisttest.Each(t, func(t *testing.T, s persist.Store) {
				ctx := context.Background()
				cs := newCallbackServer(t)
				hang := make(chan struct{})
				var once sync.Once
				first := true
				var mu sync.Mutex
				cs.status = func(call) int {
					mu.Lock()
					f := first
					first = false
					mu.Unlock()
					if f {
						<-hang
					}
					return 200
				}
				t.Cleanup(func() { once.Do(func() { close(hang) }) })
				clk := clock.NewFake(time.Now())
				cs.clk = clk
				e := startEngine(t, s, withFakeClock(clk))
				name := "slow-" + tc.policy
				spec := httpSpec(name, cs.URL)
				spec.Cron = "*/5 * * * * *"
				spec.TimeoutSec = ptr(600)
				spec.OverlapPolicy = tc.policy
				mustCreate(t, e, spec)
				waitAdvancing(t, clk, 50*time.Millisecond, 20*time.Second, "the first fire", func() bool { return len(cs.got(name)) == 1 })
				f0 := cs.got(name)[0].body.ScheduledAt
				// Three more fires come due while the run hangs.
				for clk.Now().UnixMilli() < f0+ms(16*time.Second) {
					clk.Advance(100 * time.Millisecond)
					time.Sleep(5 * time.Millisecond)
				}
				once.Do(func() { close(hang) })
				want := len(tc.after) + 1
				waitAdvancing(t, clk, 10*time.Millisecond, 30*time.Second, "the runs after the slow one", func() bool {
					runs, _ := e.API().Runs(ctx, name, 100)
					return len(runs) >= want && runs[0].EndedAt > 0
				})
				runs, err := e.API().Runs(ctx, name, 100)
				if err != nil {
					t.Fatal(err)
				}
				got := scheduledOf(runs)[:want]
				exp := []int64{f0}
				for _, d := range tc.after {
					exp = append(exp, f0+ms(d))
				}
				if !slices.Equal(got, exp) {
					t.Errorf("runs scheduled at %v, want %v (from the slow run's fire)", rel(got, f0), rel(exp, f0))
				}
				noTicketTwice(t, runs)
				acts := actionDetails(t, e, name, ActOverlap)
				if len(acts) == 0 || !strings.Contains(acts[0].Detail, tc.overlap) {
					t.Errorf("overlap actions %+v, want the first to contain %q", acts, tc.overlap)
				}
			})
		})
	}
}

func rel(xs []int64, base int64) []string {
	var out []string
	for _, x := range xs {
		out = append(out, (time.Duration(x-base) * time.Millisecond).String())
	}
	return out
}

// killingExecutor is an executor over loopback that accepts every run and never reports it,
// and records the runs offered and the kills it receives.
type killingExecutor struct {
	*httptest.Server
	mu     sync.Mutex
	runs   []string // tickets offered
	killed []string // tickets killed
}

func newKillingExecutor(t *testing.T) *killingExecutor {
	x := &killingExecutor{}
	x.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A run's body and a kill's both carry the ticket; protocol.Kill reads just that.
		var body protocol.Kill
		_ = json.NewDecoder(r.Body).Decode(&body)
		x.mu.Lock()
		switch r.URL.Path {
		case protocol.PathRun:
			x.runs = append(x.runs, body.Ticket)
		case protocol.PathKill:
			x.killed = append(x.killed, body.Ticket)
		}
		x.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(x.Close)
	return x
}

func (x *killingExecutor) seen() (runs, killed []string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.runs), slices.Clone(x.killed)
}

// TestCancelOtherKillsTheRunningRun: under cancel_other, the next fire coming due while a
// run is in flight kills that run as an operator's kill would (a kill sent to the executor,
// the run ended KILLED by "overlap") and starts the new fire, with its own ticket.
func TestCancelOtherKillsTheRunningRun(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		x := newKillingExecutor(t)
		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk))
		addr := x.Listener.Addr().String()
		if err := e.API().Executors().Register(ctx, wire.ExecutorRegistration{App: "busy", Address: addr, Handlers: []string{"job"}}); err != nil {
			t.Fatal(err)
		}
		spec := &wire.TaskSpec{Name: "cover", Cron: "*/5 * * * * *", OverlapPolicy: model.OverlapCancelOther,
			Callback: &model.Callback{Type: model.CallbackExecutor, App: "busy", Handler: "job"}, TimeoutSec: ptr(600)}
		mustCreate(t, e, spec)
		waitAdvancing(t, clk, 50*time.Millisecond, 20*time.Second, "the first run offered", func() bool {
			runs, _ := x.seen()
			return len(runs) == 1
		})
		runs, _ := x.seen()
		first := runs[0]
		waitAdvancing(t, clk, 50*time.Millisecond, 20*time.Second, "the second fire to kill the first run", func() bool {
			runs, killed := x.seen()
			return len(runs) == 2 && len(killed) == 1
		})
		runs, killed := x.seen()
		if killed[0] != first || runs[1] == first {
			t.Fatalf("killed %v, offered %v: want the first run killed and a second ticket", killed, runs)
		}
		stored, err := e.API().Runs(ctx, "cover", 10)
		if err != nil {
			t.Fatal(err)
		}
		old := stored[len(stored)-1]
		if old.Ticket != first || old.Result != model.ResultKilled || old.Error != "killed by overlap" {
			t.Errorf("the first run = %+v, want KILLED by overlap", old)
		}
		if n := stored[len(stored)-2]; n.ScheduledAt != old.ScheduledAt+5000 || n.Ticket != runs[1] {
			t.Errorf("the run after the kill = %+v, want the fire 5 s later", n)
		}
		kills := actionDetails(t, e, "cover", ActKill)
		if len(kills) != 1 || kills[0].Actor != ActorOverlap || kills[0].Ticket != first {
			t.Errorf("kill actions %+v, want one by %q of %s", kills, ActorOverlap, first)
		}
		if ov := actionDetails(t, e, "cover", ActOverlap); len(ov) != 1 || !strings.Contains(ov[0].Detail, "cancel_other") {
			t.Errorf("overlap actions %+v, want one cancel_other record", ov)
		}
		// The executor never reports: end the second run so the engine can stop.
		if _, err := e.API().Kill(ctx, "cover", "test"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCatchupAfterOutage: a task is created on one engine, which stops; ten and a half
// minutes later (the fake clock) another engine starts on the same store. Each of the 11
// fires missed runs once, oldest first, with its own scheduled_at, one after another (each
// dispatched after the one before ended), and the catch-up is recorded.
func TestCatchupAfterOutage(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		clkA := clock.NewFake(time.Now())
		a := startEngine(t, s, withFakeClock(clkA))
		spec := httpSpec("minutely", cs.URL)
		spec.Cron = "0 * * * * *"
		spec.CatchupWindowSec = 3600
		spec.OverlapPolicy = model.OverlapSkip // the catch-up runs each missed fire whatever the policy
		pt := mustCreate(t, a, spec)
		due0 := pt.Runtime.NextTriggerTime
		stopEngine(t, a)

		clkB := clock.NewFake(time.UnixMilli(due0).Add(10*time.Minute + 30*time.Second))
		cs.clk = clkB
		b := startEngine(t, s, withFakeClock(clkB))
		waitAdvancing(t, clkB, time.Millisecond, 60*time.Second, "11 catch-up runs", func() bool {
			runs, _ := b.API().Runs(ctx, "minutely", 100)
			return len(runs) == 11 && runs[0].EndedAt > 0
		})
		waitSettled(t, b)
		runs, err := b.API().Runs(ctx, "minutely", 100)
		if err != nil {
			t.Fatal(err)
		}
		checkCaughtUp(t, runs, due0, 11)
		acts := actionDetails(t, b, "minutely", ActCatchup)
		if len(acts) != 1 || !strings.Contains(acts[0].Detail, "11 fire(s)") || !strings.Contains(acts[0].Detail, "run one after another") {
			t.Errorf("catch-up actions %+v, want one naming the 11 missed fires", acts)
		}
		got, err := b.API().GetTask(ctx, "minutely")
		if err != nil {
			t.Fatal(err)
		}
		if got.Runtime.NextTriggerTime != due0+ms(11*time.Minute) {
			t.Errorf("next fire after the catch-up = %d, want the first after the outage %d", got.Runtime.NextTriggerTime, due0+ms(11*time.Minute))
		}
	})
}

// checkCaughtUp checks that runs (newest first) are n fires a minute apart from due0, each
// once, in order, each dispatched after the one before ended.
func checkCaughtUp(t *testing.T, runs []model.Run, due0 int64, n int) {
	t.Helper()
	noTicketTwice(t, runs)
	if len(runs) != n {
		t.Fatalf("%d runs, want %d: %v", len(runs), n, rel(scheduledOf(runs), due0))
	}
	for i, at := range scheduledOf(runs) {
		if at != due0+int64(i)*60_000 {
			t.Errorf("run %d scheduled at %s, want %dm", i, rel([]int64{at}, due0), i)
		}
	}
	for i := len(runs) - 2; i >= 0; i-- {
		if runs[i].DispatchedAt < runs[i+1].EndedAt {
			t.Errorf("run of %d dispatched at %d before the one before ended at %d", runs[i].ScheduledAt, runs[i].DispatchedAt, runs[i+1].EndedAt)
		}
	}
}

func stopEngine(t *testing.T, e *Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// TestRestartDuringCatchupRunsNothingTwice: the engine catching up stops after three of its
// runs (the fourth is drained by Stop); a third engine starts on the same store a minute
// later. The catch-up goes on from the first fire not run, nothing runs twice, and the minute
// of the second outage is caught up too.
func TestRestartDuringCatchupRunsNothingTwice(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		clkA := clock.NewFake(time.Now())
		a := startEngine(t, s, withFakeClock(clkA))
		spec := httpSpec("minutely", cs.URL)
		spec.Cron = "0 * * * * *"
		spec.CatchupWindowSec = 3600
		pt := mustCreate(t, a, spec)
		due0 := pt.Runtime.NextTriggerTime
		stopEngine(t, a)

		hang := make(chan struct{})
		var mu sync.Mutex
		calls := 0
		cs.status = func(call) int {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			if n == 4 {
				<-hang
			}
			return 200
		}
		clkB := clock.NewFake(time.UnixMilli(due0).Add(10*time.Minute + 30*time.Second))
		cs.clk = clkB
		b := startEngine(t, s, withFakeClock(clkB))
		waitAdvancing(t, clkB, time.Millisecond, 60*time.Second, "the fourth catch-up run sent", func() bool { return len(cs.got("minutely")) == 4 })
		stopped := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stopped <- b.Stop(ctx)
		}()
		waitFor(t, 10*time.Second, "the engine to stop triggering", func() bool { return !b.running.Load() })
		close(hang)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}

		clkC := clock.NewFake(clkB.Now().Add(time.Minute))
		cs.clk = clkC
		c := startEngine(t, s, withFakeClock(clkC))
		waitAdvancing(t, clkC, time.Millisecond, 60*time.Second, "the catch-up to end", func() bool {
			runs, _ := c.API().Runs(ctx, "minutely", 100)
			return len(runs) == 12 && runs[0].EndedAt > 0
		})
		waitSettled(t, c)
		runs, err := c.API().Runs(ctx, "minutely", 100)
		if err != nil {
			t.Fatal(err)
		}
		checkCaughtUp(t, runs, due0, 12)
		if n := len(cs.got("minutely")); n != 12 {
			t.Errorf("%d calls, want 12: one per fire", n)
		}
		if acts := actionDetails(t, c, "minutely", ActCatchup); len(acts) != 2 {
			t.Errorf("catch-up actions %+v, want one per start", acts)
		}
	})
}

// TestCancelOtherArmedForARunRecoveredInFlight: a run left in flight by a scheduler that
// died (its fire record open in the store, as a crash or a failover leaves it) is recovered
// by the next one, which arms the task's next fire again: when it comes due the recovered
// run is killed by "overlap" and the new fire starts.
func TestCancelOtherArmedForARunRecoveredInFlight(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		x := newKillingExecutor(t)
		clk := clock.NewFake(time.Now())
		now := clk.Now().UnixMilli()
		// A fire of the schedule below, in flight since; the next one (due + 5 s) lies ahead
		// of the fake clock, so it comes due only once the executor below has registered (a
		// next fire already due at the start raced the registration and found no executor).
		due := now - now%5000
		def := model.TaskDef{
			Name: "cover", Group: "default", Trigger: model.TriggerCron, Cron: "*/5 * * * * *", Timezone: "UTC",
			TimeoutSec: 600, Priority: 2, MisfirePolicy: model.MisfireFireOnce, OverlapPolicy: model.OverlapCancelOther,
			Callback: model.Callback{Type: model.CallbackExecutor, App: "busy", Handler: "job"},
		}
		rt := model.Runtime{State: model.StateScheduled, NextTriggerTime: due, Version: 3}
		if err := s.CreateTask(ctx, &def, &rt); err != nil {
			t.Fatal(err)
		}
		ticket := scheduledTicket(def.ID, due, 1)
		if err := s.ApplyBatch(ctx, &persist.Batch{Fires: []model.Run{{Ticket: ticket, TaskID: def.ID, TaskName: def.Name,
			Kind: model.RunScheduled, Attempt: 1, ScheduledAt: due, DispatchedAt: due + 5, Result: model.ResultRunning,
			Executor: "busy"}}}); err != nil {
			t.Fatal(err)
		}
		e := startEngine(t, s, withFakeClock(clk))
		if err := e.API().Executors().Register(ctx, wire.ExecutorRegistration{App: "busy", Address: x.Listener.Addr().String(), Handlers: []string{"job"}}); err != nil {
			t.Fatal(err)
		}
		if runs := e.API().RunsInFlight(); len(runs) != 1 || runs[0].Ticket != ticket {
			t.Fatalf("in flight after the start: %+v, want the recovered run %s", runs, ticket)
		}
		next := scheduledTicket(def.ID, due+5000, 1)
		waitAdvancing(t, clk, 50*time.Millisecond, 20*time.Second, "the next fire to replace the recovered run", func() bool {
			runs, _ := x.seen()
			return slices.Contains(runs, next)
		})
		r, err := s.GetRun(ctx, ticket)
		if err != nil || r.Result != model.ResultKilled || r.Error != "killed by overlap" {
			t.Errorf("the recovered run = %+v, %v; want KILLED by overlap", r, err)
		}
		if _, err := e.API().Kill(ctx, "cover", "test"); err != nil {
			t.Fatal(err)
		}
	})
}
