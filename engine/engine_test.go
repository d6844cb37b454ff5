package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/internal/test/leaktest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/ratelimit"
	"github.com/axe-sched/axe/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Options()...)
}

// call is one request received by a callbackServer.
type call struct {
	at      time.Time
	task    string
	ticket  string
	attempt int
	body    runBody
}

// callbackServer is a real HTTP endpoint on loopback that records the runs it receives.
type callbackServer struct {
	*httptest.Server
	mu     sync.Mutex
	calls  []call
	status func(c call) int // default 200
	hang   chan struct{}    // when non-nil, requests block until it is closed
	clk    clock.Clock      // stamps call.at; set it to the engine's clock before the first call
}

func newCallbackServer(t *testing.T) *callbackServer {
	cs := &callbackServer{clk: clock.Real}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		cs.mu.Lock()
		clk := cs.clk
		cs.mu.Unlock()
		c := call{at: clk.Now(), task: r.Header.Get("X-Axe-Task"), ticket: r.Header.Get("X-Axe-Ticket")}
		c.attempt, _ = strconv.Atoi(r.Header.Get("X-Axe-Attempt"))
		_ = json.Unmarshal(data, &c.body)
		cs.mu.Lock()
		cs.calls = append(cs.calls, c)
		status, hang := cs.status, cs.hang
		cs.mu.Unlock()
		if hang != nil {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}
		code := 200
		if status != nil {
			code = status(c)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(func() {
		cs.release()
		cs.Close()
	})
	return cs
}

// release lets hung requests answer, and later ones answer at once.
func (cs *callbackServer) release() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.hang != nil {
		close(cs.hang)
		cs.hang = nil
	}
}

func (cs *callbackServer) got(task string) []call {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []call
	for _, c := range cs.calls {
		if task == "" || c.task == task {
			out = append(out, c)
		}
	}
	return out
}

func startEngine(t *testing.T, s persist.Store, mods ...func(*Config)) *Engine {
	t.Helper()
	cfg := Config{Store: s, Window: 10 * time.Second, LoadInterval: 2 * time.Second}
	for _, m := range mods {
		m(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testwait.Scale(10*time.Second))
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return e
}

// waitFor polls cond until it holds, failing the test after timeout of real time: a
// generous bound on goroutine scheduling, store writes and loopback HTTP, never a measure.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	waitAdvancing(t, nil, 0, timeout, what, cond)
}

// waitAdvancing is waitFor on an engine driven by the fake clock clk: between polls it moves
// clk forward by step, so timers, fires, backoffs and token buckets come due without the
// test sleeping through them. A nil clk only polls.
func waitAdvancing(t *testing.T, clk *clock.Fake, step, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = testwait.Scale(timeout) // stretched on a busy box (testwait.ScaleEnv)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		if clk != nil {
			clk.Advance(step)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitSettled waits until the engine has nothing left to do for what has come due so far: no
// entry waits in a ready queue, no run is in flight and no write is queued, on two polls in a
// row (a fire moves from one to the next). A test that asserts something did not happen
// (a second call, a re-send) asserts it once the engine has settled instead of after a fixed
// sleep: with nothing in flight and nothing due, nothing more can be sent.
func waitSettled(t *testing.T, e *Engine) {
	t.Helper()
	idle := func() bool {
		for i := 0; i < e.wheel.Partitions(); i++ {
			if e.wheel.Ready(i).Len() > 0 {
				return false
			}
		}
		return e.runs.count() == 0 && e.writer.Busy() == 0
	}
	quiet := 0
	waitFor(t, 10*time.Second, "the engine to settle", func() bool {
		if idle() {
			quiet++
		} else {
			quiet = 0
		}
		return quiet >= 2
	})
}

// runFor moves clk forward by d in steps of step, letting the engine work between steps: the
// fake-clock counterpart of sleeping d while the engine runs.
func runFor(clk *clock.Fake, d, step time.Duration) {
	for moved := time.Duration(0); moved < d; moved += step {
		clk.Advance(min(step, d-moved))
		time.Sleep(10 * time.Millisecond)
	}
}

// withFakeClock runs the engine on a fake clock reading the real time now. It starts at the
// real time because the dispatcher's HTTP deadlines, derived from the engine's clock, are
// enforced in real time.
func withFakeClock(clk *clock.Fake) func(*Config) {
	return func(c *Config) { c.Clock = clk }
}

func ptr[T any](v T) *T { return &v }

func httpSpec(name, url string) *wire.TaskSpec {
	return &wire.TaskSpec{Name: name, Callback: &model.Callback{URL: url}}
}

func mustCreate(t *testing.T, e *Engine, s *wire.TaskSpec) *model.Task {
	t.Helper()
	pt, err := e.API().CreateTask(context.Background(), s, "test")
	if err != nil {
		t.Fatalf("create %s: %v", s.Name, err)
	}
	return pt
}

func actionNames(t *testing.T, e *Engine, task string) []string {
	t.Helper()
	acts, err := e.API().Actions(context.Background(), task, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(acts) - 1; i >= 0; i-- {
		out = append(out, acts[i].Action)
	}
	return out
}

func TestDelayTaskFiresOnceAndIsRecorded(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk))
		spec := httpSpec("once", cs.URL+"/hook")
		spec.DelayMS = ptr(int64(300))
		spec.Params = json.RawMessage(`{"k": 1}`)
		created := mustCreate(t, e, spec)
		if created.Runtime.State != model.StateScheduled {
			t.Fatalf("state after create = %s, want SCHEDULED", created.Runtime.State)
		}
		// The clock goes up to the due time and stays there: the fire must leave at that
		// instant, whatever the box's load does to the commit and the call that follow.
		due := created.Def.CreatedAt + 300
		ran := func() bool {
			pt, err := e.API().GetTask(context.Background(), "once")
			return err == nil && pt.Runtime.State == model.StateSuccess
		}
		waitAdvancing(t, clk, 20*time.Millisecond, 30*time.Second, "the clock at the due time", func() bool {
			return ran() || clk.Now().UnixMilli() >= due
		})
		waitFor(t, 30*time.Second, "the delay task to run", ran)
		// A second call would be in flight or queued until the engine settles, or armed to
		// come later.
		waitSettled(t, e)
		if _, armed := e.API().InMemory(); armed != 0 {
			t.Errorf("%d entries still armed after the one-shot task ran", armed)
		}
		calls := cs.got("once")
		if len(calls) != 1 {
			t.Fatalf("called %d times, want 1", len(calls))
		}
		c := calls[0]
		if c.body.ScheduledAt != created.Def.CreatedAt+300 {
			t.Errorf("scheduled_at = %d, want created_at+300 = %d", c.body.ScheduledAt, created.Def.CreatedAt+300)
		}
		if c.attempt != 1 || c.ticket == "" || c.body.Ticket != c.ticket || string(c.body.Params) != `{"k":1}` {
			t.Errorf("request = %+v", c)
		}
		runs, err := e.API().Runs(context.Background(), "once", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 1 || runs[0].Result != model.ResultSuccess || runs[0].Ticket != c.ticket || runs[0].EndedAt == 0 {
			t.Fatalf("runs = %+v", runs)
		}
		// The scheduler's own record of when it fired, on a clock that stopped at most one
		// step past the due time: never early, and an entry armed in the wrong place would
		// have fired later or not at all.
		if late := runs[0].DispatchedAt - runs[0].ScheduledAt; late < 0 || late > 20 {
			t.Errorf("fired %d ms after its due time, want 0..20 (the clock's last step)", late)
		}
		got := actionNames(t, e, "once")
		want := []string{ActCreate, ActDispatch, ActResult}
		if !equalStrings(got, want) {
			t.Errorf("actions = %v, want %v", got, want)
		}
	})
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCronFiresEverySecondWithDistinctTickets(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk))
		spec := httpSpec("tick", cs.URL)
		spec.Cron = "*/1 * * * * *"
		mustCreate(t, e, spec)
		// The fake clock keeps the real one's pace: ahead of it, a run whose writes took
		// longer than a fake second on a busy box (MariaDB, the suite's other packages) was
		// still in flight at the next fire, which the overlap policy then skipped.
		waitAdvancing(t, clk, 10*time.Millisecond, 20*time.Second, "three fires", func() bool { return len(cs.got("tick")) >= 3 })
		calls := cs.got("tick")
		seen := map[string]bool{}
		for i, c := range calls {
			if seen[c.ticket] {
				t.Fatalf("ticket %s sent twice", c.ticket)
			}
			seen[c.ticket] = true
			if c.body.ScheduledAt%1000 != 0 {
				t.Errorf("scheduled_at %d is not on a second", c.body.ScheduledAt)
			}
			if i > 0 && c.body.ScheduledAt-calls[i-1].body.ScheduledAt != 1000 {
				t.Errorf("fires %d and %d are %dms apart, want 1000", i-1, i, c.body.ScheduledAt-calls[i-1].body.ScheduledAt)
			}
		}
	})
}

func TestRestartOnSameStoreKeepsFiring(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		e1, err := New(Config{Store: s})
		if err != nil {
			t.Fatal(err)
		}
		if err := e1.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		spec := httpSpec("survivor", cs.URL)
		spec.Cron = "*/1 * * * * *"
		mustCreate(t, e1, spec)
		waitFor(t, 5*time.Second, "a first fire", func() bool { return len(cs.got("survivor")) >= 1 })
		if err := e1.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		before := len(cs.got("survivor"))
		startEngine(t, s)
		waitFor(t, 5*time.Second, "fires after the restart", func() bool { return len(cs.got("survivor")) >= before+2 })
		seen := map[string]bool{}
		for _, c := range cs.got("survivor") {
			if seen[c.ticket] {
				t.Fatalf("ticket %s sent twice across the restart", c.ticket)
			}
			seen[c.ticket] = true
		}
	})
}

// TestTwoEnginesNeverDispatchTheSameFireTwice runs two engines on one store, both holding
// the same task in their windows: only the fire record decides who dispatches each fire (design.md, "Write path").
func TestTwoEnginesNeverDispatchTheSameFireTwice(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		clk := clock.NewFake(time.Now()) // one clock for both engines
		a := startEngine(t, s, withFakeClock(clk))
		spec := httpSpec("contended", cs.URL)
		spec.Cron = "*/1 * * * * *"
		mustCreate(t, a, spec)
		b := startEngine(t, s, withFakeClock(clk)) // loads the same task from the store
		if n, _ := b.API().InMemory(); n != 1 {
			t.Fatalf("second engine holds %d tasks, want 1", n)
		}
		runFor(clk, 3500*time.Millisecond, 50*time.Millisecond)
		// The 3.5 s hold three fires or more; on a loaded box their records and sends may
		// still be under way once the clock has moved on (two of them were, once).
		waitFor(t, 10*time.Second, "three fires sent and every run ended", func() bool {
			return len(cs.got("contended")) >= 3 && len(a.API().RunsInFlight()) == 0 && len(b.API().RunsInFlight()) == 0
		})
		calls := cs.got("contended")
		seen := map[int64]bool{}
		for _, c := range calls {
			if seen[c.body.ScheduledAt] {
				t.Fatalf("fire %d dispatched twice", c.body.ScheduledAt)
			}
			seen[c.body.ScheduledAt] = true
		}
	})
}

func TestMisfirePolicies(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		ctx := context.Background()
		// Every minute, at the second half a minute away from now: the next regular fire is
		// ~30 s off, outside the few seconds the test watches (at second 0 a test started just
		// before a minute's turn saw that fire too).
		now := time.Now()
		sec := (now.Second() + 30) % 60
		past := now.Add(-time.Hour).Truncate(time.Minute).Add(time.Duration(sec) * time.Second).UnixMilli()
		for _, policy := range []string{model.MisfireFireOnce, model.MisfireSkip} {
			def := model.TaskDef{
				Name: "mf-" + policy, Group: "default", Trigger: model.TriggerCron, Cron: strconv.Itoa(sec) + " * * * * *",
				Timezone: "UTC", TimeoutSec: 10, RetryIntervalSec: 1, Priority: 2,
				Callback: model.Callback{Type: model.CallbackHTTP, URL: cs.URL}, MisfirePolicy: policy,
			}
			rt := model.Runtime{State: model.StateScheduled, NextTriggerTime: past, Version: 1}
			if err := s.CreateTask(ctx, &def, &rt); err != nil {
				t.Fatal(err)
			}
		}
		e := startEngine(t, s)
		waitFor(t, 3*time.Second, "the fire_once misfire to fire", func() bool { return len(cs.got("mf-fire_once")) == 1 })
		waitSettled(t, e)
		if n := len(cs.got("mf-fire_once")); n != 1 {
			t.Errorf("fire_once fired %d times, want exactly 1 for 60 missed fires", n)
		}
		if n := len(cs.got("mf-skip")); n != 0 {
			t.Errorf("skip fired %d times, want 0", n)
		}
		for _, name := range []string{"mf-fire_once", "mf-skip"} {
			pt, err := e.API().GetTask(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if pt.Runtime.NextTriggerTime <= time.Now().UnixMilli() || pt.Runtime.State != model.StateScheduled {
				t.Errorf("%s: runtime after misfire = %+v, want SCHEDULED in the future", name, pt.Runtime)
			}
			if acts := actionNames(t, e, name); len(acts) == 0 || acts[0] != ActMisfire {
				t.Errorf("%s: actions = %v, want a misfire record first", name, acts)
			}
		}
		// The skipped fire is in the run history as skipped; the fired one is not.
		var runs []model.Run
		waitFor(t, 2*time.Second, "the skipped run recorded", func() bool {
			runs, _ = e.API().Runs(ctx, "mf-skip", 10)
			return len(runs) == 1
		})
		if r := runs[0]; r.Result != model.ResultSkipped || r.ScheduledAt != past || r.EndedAt == 0 {
			t.Errorf("skipped fire recorded as %+v, want result skipped for the fire due %d", r, past)
		}
		if runs, _ := e.API().Runs(ctx, "mf-fire_once", 10); len(runs) != 1 || runs[0].Result == model.ResultSkipped {
			t.Errorf("fire_once runs = %+v, want its one fired run", runs)
		}
	})
}

func TestRunLeftInFlightIsResolvedLostNotResent(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		ctx := context.Background()
		now := time.Now().UnixMilli()
		def := model.TaskDef{
			Name: "inflight", Group: "default", Trigger: model.TriggerCron, Cron: "0 0 * * * *",
			Timezone: "UTC", TimeoutSec: 10, RetryCount: 3, RetryIntervalSec: 1, Priority: 2,
			Callback: model.Callback{Type: model.CallbackHTTP, URL: cs.URL}, MisfirePolicy: model.MisfireFireOnce,
		}
		rt := model.Runtime{State: model.StateRunning, CurrentTicket: "t-lost", Attempt: 1, LastTriggerTime: now - 1000, Version: 1}
		if err := s.CreateTask(ctx, &def, &rt); err != nil {
			t.Fatal(err)
		}
		if err := s.ApplyBatch(ctx, &persist.Batch{Runs: []model.Run{{Ticket: "t-lost", TaskID: def.ID, TaskName: def.Name,
			Kind: model.RunScheduled, Attempt: 1, ScheduledAt: now - 1000, DispatchedAt: now - 1000, Result: model.ResultRunning}}}); err != nil {
			t.Fatal(err)
		}
		e := startEngine(t, s)
		waitFor(t, 3*time.Second, "the lost run to be recorded", func() bool {
			r, err := s.GetRun(ctx, "t-lost")
			return err == nil && r.Result == model.ResultLost
		})
		pt, err := e.API().GetTask(ctx, "inflight")
		if err != nil {
			t.Fatal(err)
		}
		if pt.Runtime.State != model.StateScheduled || pt.Runtime.FailureCount != 1 || pt.Runtime.NextTriggerTime <= now {
			t.Errorf("runtime = %+v, want SCHEDULED for the next hour with one failure", pt.Runtime)
		}
		wantNotResent(t, e, cs)
	})
}

// TestOpenFireLeftInFlightIsResolvedLost: what a fire leaves when the process dies before
// its result is written is its fire record, a run row `running`, while the runtime still
// holds the SCHEDULED state, due time and version it fired from (design.md, "Crash
// recovery"). The next start must find that run, record it lost without sending it again,
// and move the task on; a one-shot task must not fire a second time.
func TestOpenFireLeftInFlightIsResolvedLost(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		ctx := context.Background()
		now := time.Now().UnixMilli()
		due := now - 60_000 // long past: a misfire too, were it not in flight
		mk := func(name, trig string) (model.TaskDef, string) {
			def := model.TaskDef{
				Name: name, Group: "default", Trigger: trig, Cron: "0 0 * * * *", DelayMS: 1000,
				Timezone: "UTC", TimeoutSec: 10, RetryCount: 3, RetryIntervalSec: 1, Priority: 2,
				Callback: model.Callback{Type: model.CallbackHTTP, URL: cs.URL}, MisfirePolicy: model.MisfireSkip,
			}
			if trig == model.TriggerDelay {
				def.Cron = ""
			}
			rt := model.Runtime{State: model.StateScheduled, NextTriggerTime: due, Version: 3}
			if err := s.CreateTask(ctx, &def, &rt); err != nil {
				t.Fatal(err)
			}
			ticket := scheduledTicket(def.ID, due, 1)
			if err := s.ApplyBatch(ctx, &persist.Batch{Fires: []model.Run{{Ticket: ticket, TaskID: def.ID, TaskName: def.Name,
				Kind: model.RunScheduled, Attempt: 1, ScheduledAt: due, DispatchedAt: due + 5, Result: model.ResultRunning}}}); err != nil {
				t.Fatal(err)
			}
			return def, ticket
		}
		_, cronTicket := mk("open-cron", model.TriggerCron)
		_, onceTicket := mk("open-once", model.TriggerDelay)
		// Read from the store by an engine that does not run (a backup's reader), an open
		// fire shows its task RUNNING.
		reader, err := New(Config{Store: s})
		if err != nil {
			t.Fatal(err)
		}
		pt, err := reader.API().GetTask(ctx, "open-once")
		_ = reader.Stop(ctx) // never started: releases what New made
		if err != nil || pt.Runtime.State != model.StateRunning || pt.Runtime.CurrentTicket != onceTicket {
			t.Fatalf("backup view of an open fire = %+v, %v; want RUNNING with ticket %s", pt, err, onceTicket)
		}
		if list, err := s.ListTasks(ctx, persist.TaskFilter{State: model.StateRunning}); err != nil || len(list) != 2 {
			t.Fatalf("store's RUNNING filter = %d tasks, %v; want both open fires", len(list), err)
		}

		e := startEngine(t, s)
		for _, ticket := range []string{cronTicket, onceTicket} {
			waitFor(t, 3*time.Second, "the open fire "+ticket+" to be recorded lost", func() bool {
				r, err := s.GetRun(ctx, ticket)
				return err == nil && r.Result == model.ResultLost && r.EndedAt >= now
			})
		}
		waitFor(t, 3*time.Second, "the runtimes to move on", func() bool {
			c, err1 := s.GetTask(ctx, "open-cron")
			o, err2 := s.GetTask(ctx, "open-once")
			return err1 == nil && err2 == nil &&
				c.Runtime.State == model.StateScheduled && c.Runtime.FailureCount == 1 && c.Runtime.NextTriggerTime > now &&
				o.Runtime.State == model.StateFailed && o.Runtime.FailureCount == 1 && o.Runtime.NextTriggerTime == 0
		})
		wantNotResent(t, e, cs)
		// CreateTask in the store writes no action record: the timeline is the fire, read
		// from its run row, and the loss.
		if names, want := actionNames(t, e, "open-once"), []string{ActDispatch, ActLost}; !equalStrings(names, want) {
			t.Errorf("timeline of the one-shot = %v, want %v", names, want)
		}
	})
}

// wantNotResent fails the test if cs has received any call once e has settled: a run
// recovered as lost must never be sent again. Recovery runs inside Start, so a re-send would
// have left by then and be in flight or delivered.
func wantNotResent(t *testing.T, e *Engine, cs *callbackServer) {
	t.Helper()
	waitSettled(t, e)
	if n := len(cs.got("")); n != 0 {
		t.Errorf("a lost run was re-sent %d times", n)
	}
}

// TestManualRunLeftInFlightIsResolvedLost: run-now instances a previous process left running
// are found at start (they have no runtime state of their own) and recorded lost, never
// re-sent, also when their task was deleted meanwhile; finished ones are left alone.
func TestManualRunLeftInFlightIsResolvedLost(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		ctx := context.Background()
		now := time.Now().UnixMilli()
		def := model.TaskDef{
			Name: "by-hand", Group: "default", Trigger: model.TriggerManual, Timezone: "UTC", TimeoutSec: 10,
			Priority: 2, Callback: model.Callback{Type: model.CallbackHTTP, URL: cs.URL}, MisfirePolicy: model.MisfireFireOnce,
		}
		if err := s.CreateTask(ctx, &def, &model.Runtime{State: model.StateWaiting, Version: 1}); err != nil {
			t.Fatal(err)
		}
		manual := func(ticket string, taskID int64, result string) model.Run {
			return model.Run{Ticket: ticket, TaskID: taskID, TaskName: def.Name, Kind: model.RunManual, Attempt: 1,
				ScheduledAt: now - 1000, DispatchedAt: now - 1000, Result: result}
		}
		done := manual("m-done", def.ID, model.ResultSuccess)
		if err := s.ApplyBatch(ctx, &persist.Batch{Runs: []model.Run{
			manual("m-lost", def.ID, model.ResultRunning), manual("m-gone", def.ID+1000, model.ResultRunning), done,
		}}); err != nil {
			t.Fatal(err)
		}
		e := startEngine(t, s)
		for _, ticket := range []string{"m-lost", "m-gone"} {
			waitFor(t, 3*time.Second, "run "+ticket+" to be recorded lost", func() bool {
				r, err := s.GetRun(ctx, ticket)
				return err == nil && r.Result == model.ResultLost && r.EndedAt >= now
			})
		}
		if r, err := s.GetRun(ctx, "m-done"); err != nil || *r != done {
			t.Errorf("finished run = %+v, %v; want it untouched", r, err)
		}
		if runs, err := s.ListRunningManual(ctx, 0); err != nil || len(runs) != 0 {
			t.Errorf("runs still running = %+v, %v", runs, err)
		}
		wantNotResent(t, e, cs)
	})
}

// TestRunningKeepsItsDueTime: while a cron run is in flight the stored runtime keeps the due
// time of that fire (one window-index move per cycle, not two); the run's end, by result or
// by kill, replaces it with the next fire, and the kept due is never fired again.
func TestRunningKeepsItsDueTime(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		cs.hang = make(chan struct{})
		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk))
		ctx := context.Background()
		spec := httpSpec("slowcron", cs.URL)
		spec.Cron = "*/1 * * * * *"
		spec.TimeoutSec = ptr(30)
		mustCreate(t, e, spec)
		waitAdvancing(t, clk, 50*time.Millisecond, 5*time.Second, "the first fire", func() bool { return len(cs.got("slowcron")) == 1 })
		first := cs.got("slowcron")[0]
		// The fire wrote its run row only: the stored runtime keeps the state and due time
		// it fired from, and the run row is the RUNNING marker (design.md, "Write path").
		stored, err := s.GetTask(ctx, "slowcron")
		if err != nil {
			t.Fatal(err)
		}
		if stored.Runtime.State != model.StateScheduled || stored.Runtime.NextTriggerTime != first.body.ScheduledAt {
			t.Fatalf("stored runtime during the run: %s next %d, want SCHEDULED at the fire's due %d",
				stored.Runtime.State, stored.Runtime.NextTriggerTime, first.body.ScheduledAt)
		}
		if r, err := s.GetRun(ctx, first.ticket); err != nil || r.Result != model.ResultRunning || r.ScheduledAt != first.body.ScheduledAt {
			t.Fatalf("fire record of the run in flight = %+v, %v", r, err)
		}
		if pt, err := e.API().GetTask(ctx, "slowcron"); err != nil || pt.Runtime.State != model.StateRunning || pt.Runtime.CurrentTicket != first.ticket {
			t.Fatalf("engine's view during the run = %+v, %v; want RUNNING with ticket %s", pt, err, first.ticket)
		}
		// Overrunning its next fires must not fire the kept due (or any other) again.
		runFor(clk, 1500*time.Millisecond, 50*time.Millisecond)
		if n := len(cs.got("slowcron")); n != 1 {
			t.Fatalf("%d calls while the first run hung, want 1", n)
		}

		pt, err := e.API().Kill(ctx, "slowcron", "test")
		if err != nil {
			t.Fatal(err)
		}
		if pt.Runtime.State != model.StateScheduled || pt.Runtime.NextTriggerTime <= first.body.ScheduledAt {
			t.Fatalf("after kill: %s next %d, want SCHEDULED after %d", pt.Runtime.State, pt.Runtime.NextTriggerTime, first.body.ScheduledAt)
		}
		cs.release()
		waitAdvancing(t, clk, 50*time.Millisecond, 5*time.Second, "a fire that ends with a result", func() bool {
			pt, err := e.API().GetTask(ctx, "slowcron")
			return err == nil && pt.Runtime.SuccessCount >= 1
		})
		waitFor(t, 3*time.Second, "the stored runtime after the result", func() bool {
			got, err := s.GetTask(ctx, "slowcron")
			return err == nil && got.Runtime.State == model.StateScheduled && got.Runtime.SuccessCount >= 1 &&
				got.Runtime.NextTriggerTime > got.Runtime.LastTriggerTime-1000
		})
		seen := map[int64]bool{}
		for _, c := range cs.got("slowcron") {
			if seen[c.body.ScheduledAt] {
				t.Fatalf("fire %d dispatched twice", c.body.ScheduledAt)
			}
			seen[c.body.ScheduledAt] = true
		}
	})
}

func TestRetriesWithBackoffThenFailed(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		cs.status = func(call) int { return 500 }
		clk := clock.NewFake(time.Now())
		cs.clk = clk
		e := startEngine(t, s, withFakeClock(clk))
		spec := httpSpec("flaky", cs.URL)
		spec.DelayMS = ptr(int64(0))
		spec.RetryCount = ptr(2)
		spec.RetryIntervalSec = ptr(1)
		mustCreate(t, e, spec)
		// The retries come due as the engine's clock moves: 100 ms per poll.
		waitAdvancing(t, clk, 100*time.Millisecond, 10*time.Second, "the final failure", func() bool {
			pt, err := e.API().GetTask(context.Background(), "flaky")
			return err == nil && pt.Runtime.State == model.StateFailed
		})
		calls := cs.got("flaky")
		if len(calls) != 3 {
			t.Fatalf("called %d times, want 3", len(calls))
		}
		for i, c := range calls {
			if c.attempt != i+1 {
				t.Errorf("call %d has attempt %d", i, c.attempt)
			}
			if i > 0 && c.at.Sub(calls[i-1].at) < 950*time.Millisecond {
				t.Errorf("retry %d came %s after the previous call, want >= 1s", i, c.at.Sub(calls[i-1].at))
			}
		}
		// The in-memory state leads the durable records by at most a writer flush.
		want := []string{ActCreate, ActDispatch, ActRetry, ActDispatch, ActRetry, ActDispatch, ActResult, AlertFinalFailure}
		var got []string
		waitFor(t, 15*time.Second, "the action records", func() bool {
			got = actionNames(t, e, "flaky")
			return len(got) >= len(want)
		})
		if !equalStrings(got, want) {
			t.Errorf("actions = %v, want %v", got, want)
		}
	})
}

func TestTimeoutFailsTheRun(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		cs.hang = make(chan struct{})
		e := startEngine(t, s)
		spec := httpSpec("slow", cs.URL)
		spec.DelayMS = ptr(int64(0))
		spec.TimeoutSec = ptr(1)
		mustCreate(t, e, spec)
		var runs []model.Run
		waitFor(t, 5*time.Second, "the run to end", func() bool {
			runs, _ = e.API().Runs(context.Background(), "slow", 1)
			return len(runs) == 1 && runs[0].EndedAt > 0
		})
		r := runs[0]
		if r.Result != model.ResultTimeout {
			t.Fatalf("run = %+v, want result timeout", r)
		}
		// Measured on the run's own timestamps, not the test's clock: a loaded machine may
		// delay the test's polling, and less the scheduler's decision. Never before the
		// timeout; after it by at most a second, stretched on a busy box (3.1 s beside a
		// CPU hog, on MariaDB).
		if d, most := time.Duration(r.EndedAt-r.DispatchedAt)*time.Millisecond, time.Second+testwait.Scale(time.Second); d < time.Second || d > most {
			t.Errorf("timed out %s after dispatch, want 1s..%s", d, most)
		}
		// A timeout is an action of its own in the audit log.
		waitFor(t, 2*time.Second, "the timeout action", func() bool {
			acts := actionNames(t, e, "slow")
			return len(acts) > 0 && slices.Contains(acts, ActTimeout)
		})
	})
}

func TestPauseResumeAndDelete(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk))
		for _, n := range []string{"p1", "p2"} {
			spec := httpSpec(n, cs.URL)
			spec.Cron = "*/1 * * * * *"
			spec.Group = "g"
			mustCreate(t, e, spec)
		}
		waitAdvancing(t, clk, 50*time.Millisecond, 5*time.Second, "both firing", func() bool { return len(cs.got("p1")) > 0 && len(cs.got("p2")) > 0 })
		pt, err := e.API().Pause(ctx, "p1", "maintenance", "test")
		if err != nil {
			t.Fatal(err)
		}
		// A run in flight finishes first; then the task rests in PAUSED.
		waitFor(t, 2*time.Second, "p1 to rest in PAUSED", func() bool {
			pt, err = e.API().GetTask(ctx, "p1")
			return err == nil && pt.Runtime.State == model.StatePaused
		})
		n1, n2 := len(cs.got("p1")), len(cs.got("p2"))
		runFor(clk, 2200*time.Millisecond, 50*time.Millisecond)
		// The fires of the 2.2 s the clock moved have come due; on a loaded box their calls
		// may still be on their way (the clock stays where it is meanwhile).
		waitFor(t, 30*time.Second, "p2 to fire twice while p1 is paused", func() bool { return len(cs.got("p2")) >= n2+2 })
		waitSettled(t, e)
		if got := len(cs.got("p1")); got != n1 {
			t.Errorf("paused p1 fired %d more times", got-n1)
		}
		if _, err := e.API().Resume(ctx, "p1", "", "test"); err != nil {
			t.Fatal(err)
		}
		waitAdvancing(t, clk, 50*time.Millisecond, 5*time.Second, "p1 firing again", func() bool { return len(cs.got("p1")) > n1 })

		if err := e.API().DeleteTask(ctx, "p2", "test"); err != nil {
			t.Fatal(err)
		}
		// Let a run in flight at delete time finish (the clock stands still: nothing new fires).
		waitFor(t, 5*time.Second, "the runs in flight to end", func() bool { return len(e.API().RunsInFlight()) == 0 })
		n2 = len(cs.got("p2"))
		runFor(clk, 1500*time.Millisecond, 50*time.Millisecond)
		if got := len(cs.got("p2")); got != n2 {
			t.Errorf("deleted p2 fired %d more times", got-n2)
		}
		if _, err := e.API().GetTask(ctx, "p2"); !errors.Is(err, ErrTaskNotFound) {
			t.Errorf("get deleted = %v, want ErrTaskNotFound", err)
		}
	})
}

func TestUpdateReArmsAtOnce(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		e := startEngine(t, s)
		spec := httpSpec("edit", cs.URL)
		spec.Cron = "0 0 0 1 1 ?" // new year only
		mustCreate(t, e, spec)
		spec.Cron = "*/1 * * * * *"
		pt, err := e.API().UpdateTask(ctx, "edit", spec, "test")
		if err != nil {
			t.Fatal(err)
		}
		if pt.Runtime.NextTriggerTime > time.Now().Add(2*time.Second).UnixMilli() {
			t.Errorf("next after update = %d, want within 2s", pt.Runtime.NextTriggerTime)
		}
		waitFor(t, 3*time.Second, "the edited schedule to fire", func() bool { return len(cs.got("edit")) > 0 })
		spec.Trigger = model.TriggerDelay
		spec.Cron = ""
		spec.DelayMS = ptr(int64(10))
		var fe *FieldError
		if _, err := e.API().UpdateTask(ctx, "edit", spec, "test"); !errors.As(err, &fe) || fe.Field != "trigger" {
			t.Errorf("changing the trigger type = %v, want a trigger field error", err)
		}
	})
}

func TestRunNowIsIndependentAndKillEndsRun(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		cs.hang = make(chan struct{})
		e := startEngine(t, s)
		spec := httpSpec("long", cs.URL)
		spec.DelayMS = ptr(int64(0))
		spec.TimeoutSec = ptr(30)
		mustCreate(t, e, spec)
		waitFor(t, 3*time.Second, "the periodic run in flight", func() bool { return len(cs.got("long")) == 1 })
		run, err := e.API().RunNow(ctx, "long", json.RawMessage(`{"override":true}`), "test")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Second, "the run-now instance", func() bool { return len(cs.got("long")) == 2 })
		calls := cs.got("long")
		if calls[1].ticket != run.Ticket || calls[1].ticket == calls[0].ticket || string(calls[1].body.Params) != `{"override":true}` {
			t.Errorf("run-now call = %+v (periodic %s)", calls[1], calls[0].ticket)
		}
		// The task's kill ends every run of it in flight: the periodic run and the run-now.
		pt, err := e.API().Kill(ctx, "long", "test")
		if err != nil {
			t.Fatal(err)
		}
		if pt.Runtime.State == model.StateRunning || pt.Runtime.LastResult != model.ResultKilled {
			t.Errorf("after the kill: state %s, last result %q", pt.Runtime.State, pt.Runtime.LastResult)
		}
		for _, ticket := range []string{calls[0].ticket, run.Ticket} {
			r, err := s.GetRun(ctx, ticket)
			if err != nil || r.Result != model.ResultKilled || r.Error != "killed by test" {
				t.Errorf("killed run %s = %+v, %v", ticket, r, err)
			}
		}
		if _, err := e.API().Kill(ctx, "long", "test"); !errors.Is(err, ErrConflict) {
			t.Errorf("second kill = %v, want ErrConflict", err)
		}
		// Let the downstream answer: the killed runs' late successes change nothing.
		cs.release()
		waitFor(t, 3*time.Second, "the runs in flight to end", func() bool { return len(e.API().RunsInFlight()) == 0 })
		for _, ticket := range []string{calls[0].ticket, run.Ticket} {
			if r, _ := s.GetRun(ctx, ticket); r == nil || r.Result != model.ResultKilled {
				t.Errorf("a late answer changed the killed run: %+v", r)
			}
		}
	})
}

func TestStateTable(t *testing.T) {
	t.Parallel()
	seed := map[model.State][]model.State{
		model.StateWaiting:   {model.StateScheduled, model.StatePaused},
		model.StateScheduled: {model.StateRunning, model.StateFailed},
		model.StateRunning:   {model.StateSuccess, model.StateFailed, model.StateRetrying, model.StateKilled},
		model.StateRetrying:  {model.StateRunning, model.StateFailed},
		model.StateSuccess:   {model.StateScheduled},
		model.StateFailed:    {model.StateRunning},
		model.StatePaused:    {model.StateWaiting, model.StateRunning},
		model.StateKilled:    {model.StateWaiting},
	}
	for from, tos := range seed {
		for _, to := range tos {
			if err := checkTransition(from, to); err != nil {
				t.Errorf("seed edge %s→%s refused: %v", from, to, err)
			}
		}
	}
	for _, bad := range [][2]model.State{
		{model.StateWaiting, model.StateRunning},
		{model.StateSuccess, model.StateRunning},
		{model.StateKilled, model.StateRunning},
		{model.StateRunning, model.StateScheduled},
		{model.StatePaused, model.StateSuccess},
	} {
		if err := checkTransition(bad[0], bad[1]); !errors.Is(err, ErrInvalidTransition) {
			t.Errorf("%s→%s = %v, want ErrInvalidTransition", bad[0], bad[1], err)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	iv := 30 * time.Second
	want := []time.Duration{30 * time.Second, 30 * time.Second, 60 * time.Second, 120 * time.Second,
		240 * time.Second, 480 * time.Second, 600 * time.Second, 600 * time.Second}
	for i, w := range want {
		if got := retryDelay(iv, i+1, 10*time.Minute); got != w {
			t.Errorf("retry %d: %s, want %s", i+1, got, w)
		}
	}
	if got := retryDelay(time.Hour, 5, 10*time.Minute); got != time.Hour {
		t.Errorf("an interval above the cap is kept: got %s", got)
	}
	if got := retryDelay(time.Second, 100, 10*time.Minute); got != 10*time.Minute {
		t.Errorf("retry 100 = %s, want the cap", got)
	}
}

// TestRateLimitedBurstRunsAllInPriorityOrder puts 1,000 fires due at the same instant
// behind a 100/s bucket: all run, none dropped, spread over >= 9 s, best priority first.
func TestRateLimitedBurstRunsAllInPriorityOrder(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("creates and checks 1,000 tasks per store")
	}
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		host := cs.Listener.Addr().String()
		due := time.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second).UnixMilli()
		const n = 1000
		for i := 0; i < n; i++ {
			def := model.TaskDef{
				Name: "burst-" + strconv.Itoa(i), Group: "burst", Trigger: model.TriggerDelay, DelayMS: 1,
				Timezone: "UTC", TimeoutSec: 30, RetryIntervalSec: 1, Priority: (i * 7) % 5,
				Callback: model.Callback{Type: model.CallbackHTTP, URL: cs.URL}, MisfirePolicy: model.MisfireFireOnce,
			}
			rt := model.Runtime{State: model.StateScheduled, NextTriggerTime: due, Version: 1}
			if err := s.CreateTask(ctx, &def, &rt); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().UnixMilli() > due {
			t.Skip("the store was too slow to create the tasks before their due time")
		}
		clk := clock.NewFake(time.Now())
		cs.clk = clk
		e := startEngine(t, s, withFakeClock(clk), func(c *Config) {
			c.RateLimit.PerKey = map[string]ratelimit.Limit{host: {Rate: 100, Burst: 1}}
		})
		// Move the clock to the due time and let every fire reach the gate (the one token
		// of the burst lets one through), then let tokens come 10 per poll.
		clk.Advance(time.Duration(due-clk.Now().UnixMilli()) * time.Millisecond)
		waitFor(t, 20*time.Second, "the fires buffered at the gate", func() bool { return e.gate.buffered.Load() == n-1 })
		waitAdvancing(t, clk, 100*time.Millisecond, 30*time.Second, "all 1000 runs", func() bool { return len(cs.got("")) == n })
		waitFor(t, 5*time.Second, "all runs recorded", func() bool {
			for i := 0; i < n; i += 97 {
				pt, err := s.GetTask(ctx, "burst-"+strconv.Itoa(i))
				if err != nil || pt.Runtime.State != model.StateSuccess {
					return false
				}
			}
			return true
		})
		calls := cs.got("")
		seen := map[string]bool{}
		for _, c := range calls {
			if seen[c.ticket] {
				t.Fatalf("ticket %s sent twice", c.ticket)
			}
			seen[c.ticket] = true
		}
		first, last := calls[0].at, calls[len(calls)-1].at
		if spread := last.Sub(first); spread < 9*time.Second {
			t.Errorf("1000 runs at 100/s spread over %s, want >= 9s", spread)
		}
		// Priority order of the dispatch decisions, from the run rows: one every 10 ms at
		// 100/s. (Sends follow each decision's commit; with several writer lanes two sends
		// a few milliseconds apart can arrive swapped, so arrival order is not the measure.)
		type fired struct {
			at   int64
			prio int
		}
		var order []fired
		for i := 0; i < n; i++ {
			pt, err := s.GetTask(ctx, "burst-"+strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			runs, err := s.ListRuns(ctx, pt.Def.ID, 5)
			if err != nil || len(runs) != 1 {
				t.Fatalf("runs of burst-%d: %v, %v", i, runs, err)
			}
			order = append(order, fired{runs[0].DispatchedAt, pt.Def.Priority})
		}
		sort.Slice(order, func(i, j int) bool { return order[i].at < order[j].at })
		inversions := 0
		for i := 2; i < len(order); i++ { // the first token (burst 1) goes to whoever came first
			if order[i].prio < order[i-1].prio && order[i].at > order[i-1].at {
				inversions++
			}
		}
		if inversions > 0 {
			t.Errorf("%d priority inversions in dispatch order", inversions)
		}
	})
}

func TestDependencyFanIn(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		e := startEngine(t, s)
		for _, n := range []string{"extract", "load"} {
			spec := httpSpec(n, cs.URL)
			spec.Trigger = model.TriggerManual
			mustCreate(t, e, spec)
		}
		down := httpSpec("report", cs.URL)
		down.DependsOn = []string{"extract", "load"}
		mustCreate(t, e, down)

		// A cycle, a self-dependency and an unknown upstream are refused.
		var fe *FieldError
		cyc := httpSpec("extract", cs.URL)
		cyc.DependsOn = []string{"report"}
		if _, err := e.API().UpdateTask(ctx, "extract", cyc, "test"); !errors.As(err, &fe) || fe.Field != "depends_on" {
			t.Errorf("cycle accepted: %v", err)
		}
		self := httpSpec("selfish", cs.URL)
		self.DependsOn = []string{"selfish"}
		if _, err := e.API().CreateTask(ctx, self, "test"); !errors.As(err, &fe) || fe.Field != "depends_on" {
			t.Errorf("self-dependency accepted: %v", err)
		}
		ghost := httpSpec("orphan", cs.URL)
		ghost.DependsOn = []string{"nope"}
		if _, err := e.API().CreateTask(ctx, ghost, "test"); !errors.As(err, &fe) || fe.Field != "depends_on" {
			t.Errorf("unknown upstream accepted: %v", err)
		}

		if _, err := e.API().RunNow(ctx, "extract", nil, "test"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 3*time.Second, "extract to run", func() bool { return len(cs.got("extract")) == 1 })
		decideRelease(t, e, "extract", 1, "report")
		if n := len(cs.got("report")); n != 0 {
			t.Fatalf("report fired after one of two upstreams")
		}
		if _, err := e.API().RunNow(ctx, "load", nil, "test"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 3*time.Second, "report to fire after both upstreams", func() bool { return len(cs.got("report")) == 1 })
		var runs []model.Run
		waitFor(t, 2*time.Second, "report's run recorded", func() bool {
			runs, _ = e.API().Runs(ctx, "report", 10)
			return len(runs) == 1 && runs[0].Result == model.ResultSuccess
		})
		if d := runs[0].Detail; !strings.Contains(d, "extract (") || !strings.Contains(d, "load (") {
			t.Errorf("run detail %q does not name the upstream runs that released it", d)
		}
		waitFor(t, 2*time.Second, "report waiting again", func() bool {
			pt, err := e.API().GetTask(ctx, "report")
			return err == nil && pt.Runtime.State == model.StateWaiting
		})
		// One more upstream success is not enough: fan-in needs both again.
		if _, err := e.API().RunNow(ctx, "load", nil, "test"); err != nil {
			t.Fatal(err)
		}
		decideRelease(t, e, "load", 2, "report")
		if n := len(cs.got("report")); n != 1 {
			t.Errorf("report fired %d times, want 1", n)
		}
	})
}

// decideRelease waits for upstream's n-th success to be recorded, then takes the release
// decision for downstream itself, as the goroutine the success started does, and lets the
// engine settle: a wrong release has then fired, without a sleep long enough for that
// goroutine to have run.
func decideRelease(t *testing.T, e *Engine, upstream string, n int, downstream string) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 3*time.Second, fmt.Sprintf("%s's success number %d recorded", upstream, n), func() bool {
		runs, err := e.API().Runs(ctx, upstream, 10)
		ok := 0
		for _, r := range runs {
			if r.Result == model.ResultSuccess {
				ok++
			}
		}
		return err == nil && ok >= n
	})
	pt, err := e.API().GetTask(ctx, downstream)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.deps.maybeRelease(ctx, pt.Def.ID); err != nil {
		t.Fatalf("release decision for %s: %v", downstream, err)
	}
	waitSettled(t, e)
}

func TestBreakerOpensAlertsAndSkips(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		cs.status = func(call) int { return 500 }
		alerts := make(chan wire.Alert, 16)
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var a wire.Alert
			if err := json.NewDecoder(r.Body).Decode(&a); err == nil {
				alerts <- a
			}
		}))
		defer hook.Close()
		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk), func(c *Config) {
			c.Breaker = BreakerConfig{MinSamples: 3, ProbeEvery: 4}
			c.AlertWebhooks = []string{hook.URL}
		})
		spec := httpSpec("failing", cs.URL)
		spec.Cron = "*/1 * * * * *"
		mustCreate(t, e, spec)
		var got wire.Alert
		// The cron fires, and the breaker's window moves, with the fake clock: 200 ms a poll.
		waitAdvancing(t, clk, 200*time.Millisecond, 15*time.Second, "the breaker_open webhook", func() bool {
			select {
			case a := <-alerts:
				if a.Kind == AlertBreakerOpen {
					got = a
					return true
				}
			default:
			}
			return false
		})
		if got.Task != "failing" || got.Message == "" {
			t.Errorf("alert = %+v", got)
		}
		calls := len(cs.got("failing"))
		waitAdvancing(t, clk, 200*time.Millisecond, 15*time.Second, "skipped fires", func() bool {
			n := 0
			for _, a := range actionNames(t, e, "failing") {
				if a == ActSkippedByBreaker {
					n++
				}
			}
			return n >= 3
		})
		if after := len(cs.got("failing")); after > calls+2 {
			t.Errorf("breaker open, yet %d more calls while skipping", after-calls)
		}
		_ = ctx
	})
}

func TestBreakerWindow(t *testing.T) {
	t.Parallel()
	cfg := BreakerConfig{Window: time.Minute, MinSamples: 4, FailureRate: 0.5, ProbeEvery: 3}.WithDefaults()
	var b breaker
	now := int64(1_000_000)
	for i := 0; i < 3; i++ {
		if b.record(cfg, now, false) {
			t.Fatalf("opened below the minimum sample after %d failures", i+1)
		}
	}
	if !b.record(cfg, now+10, false) || !b.open {
		t.Fatal("4 failures out of 4 did not open the breaker")
	}
	allowed := 0
	for i := 0; i < 9; i++ {
		if b.allow(cfg) {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("open breaker let %d of 9 fires through, want 3", allowed)
	}
	// Successes bring the rate back to 50%: it closes.
	for i := 0; i < 3; i++ {
		b.record(cfg, now+100, true)
	}
	if !b.open {
		t.Fatal("closed with 4 failures and 3 successes (57%)")
	}
	if !b.record(cfg, now+200, true) || b.open {
		t.Fatal("did not close at 50%")
	}
	// Failures age out of the window.
	var c breaker
	for i := 0; i < 4; i++ {
		c.record(cfg, now, false)
	}
	if !c.open || !c.evaluate(cfg, now+2*time.Minute.Milliseconds()) || c.open {
		t.Error("an open breaker did not close once its failures left the window")
	}
}

func TestDeleteWhileRunningStillRecordsTheRun(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		cs.hang = make(chan struct{})
		e := startEngine(t, s)
		spec := httpSpec("doomed", cs.URL)
		spec.DelayMS = ptr(int64(0))
		mustCreate(t, e, spec)
		waitFor(t, 3*time.Second, "the run in flight", func() bool { return len(cs.got("doomed")) == 1 })
		ticket := cs.got("doomed")[0].ticket
		if err := e.API().DeleteTask(ctx, "doomed", "test"); err != nil {
			t.Fatal(err)
		}
		cs.release()
		waitFor(t, 3*time.Second, "the run of the deleted task recorded", func() bool {
			r, err := s.GetRun(ctx, ticket)
			return err == nil && r.Result == model.ResultSuccess
		})
	})
}

func TestEditingAPausedTask(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		e := startEngine(t, s)
		spec := httpSpec("sleeper", "http://127.0.0.1:1/")
		spec.Cron = "0 0 0 1 1 ?"
		spec.Timezone = "UTC"
		spec.Paused = ptr(true)
		if pt := mustCreate(t, e, spec); pt.Runtime.State != model.StatePaused {
			t.Fatalf("created %s, want PAUSED", pt.Runtime.State)
		}
		// An edit that does not mention "paused" keeps the task paused, with the new schedule.
		spec.Paused = nil
		spec.Cron = "0 0 * * * *"
		pt, err := e.API().UpdateTask(ctx, "sleeper", spec, "test")
		if err != nil {
			t.Fatal(err)
		}
		nextHour := time.Now().UTC().Truncate(time.Hour).Add(time.Hour).UnixMilli()
		if pt.Runtime.State != model.StatePaused || pt.Runtime.NextTriggerTime != nextHour {
			t.Fatalf("after edit: %s next %d, want PAUSED next %d", pt.Runtime.State, pt.Runtime.NextTriggerTime, nextHour)
		}
		pt, err = e.API().Resume(ctx, "sleeper", "", "test")
		if err != nil {
			t.Fatal(err)
		}
		if pt.Runtime.State != model.StateScheduled || pt.Runtime.NextTriggerTime != nextHour {
			t.Errorf("after resume: %s next %d, want SCHEDULED next %d", pt.Runtime.State, pt.Runtime.NextTriggerTime, nextHour)
		}
		// An explicit "paused": true pauses through the edit.
		spec.Paused = ptr(true)
		if pt, err = e.API().UpdateTask(ctx, "sleeper", spec, "test"); err != nil || pt.Runtime.State != model.StatePaused {
			t.Errorf("edit with paused true: %v, %+v", err, pt)
		}
	})
}

// TestExecutorRunTimesOutOnTheEngineClock: a run an executor accepted and never reports is
// timed out by the scheduler when the engine's clock passes its deadline plus the grace, and
// not before; the fake clock moves, nobody sleeps through the timeout.
func TestExecutorRunTimesOutOnTheEngineClock(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		offers := make(chan string, 4)
		exec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			offers <- r.URL.Path
			w.WriteHeader(http.StatusAccepted) // accepted, and never reported
		}))
		defer exec.Close()
		clk := clock.NewFake(time.Now())
		e := startEngine(t, s, withFakeClock(clk))
		addr := exec.Listener.Addr().String()
		if err := e.API().Executors().Register(ctx, wire.ExecutorRegistration{App: "silent", Address: addr, Handlers: []string{"job"}}); err != nil {
			t.Fatal(err)
		}
		spec := &wire.TaskSpec{Name: "mute", Callback: &model.Callback{Type: model.CallbackExecutor, App: "silent", Handler: "job"}}
		spec.DelayMS = ptr(int64(0))
		spec.TimeoutSec = ptr(5)
		mustCreate(t, e, spec)
		select {
		case p := <-offers:
			if p != dispatch.RunPath {
				t.Fatalf("offered at %s, want %s", p, dispatch.RunPath)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the run was never offered")
		}
		waitFor(t, 5*time.Second, "the executor to hold the run", func() bool {
			runs := e.API().RunsInFlight()
			return len(runs) == 1 && runs[0].Executor == addr
		})
		clk.Advance(5*time.Second + timeoutGrace - 10*time.Millisecond)
		if runs, _ := e.API().Runs(ctx, "mute", 1); len(runs) != 1 || runs[0].EndedAt != 0 || len(e.API().RunsInFlight()) != 1 {
			t.Fatalf("before the deadline and grace: runs %+v, in flight %d", runs, len(e.API().RunsInFlight()))
		}
		clk.Advance(20 * time.Millisecond)
		var runs []model.Run
		waitFor(t, 5*time.Second, "the timeout to be recorded", func() bool {
			runs, _ = e.API().Runs(ctx, "mute", 1)
			return len(runs) == 1 && runs[0].EndedAt > 0
		})
		r := runs[0]
		if r.Result != model.ResultTimeout || r.Executor != addr {
			t.Fatalf("run = %+v, want a timeout on %s", r, addr)
		}
		if d := time.Duration(r.EndedAt-r.DispatchedAt) * time.Millisecond; d < 5*time.Second+timeoutGrace {
			t.Errorf("timed out %s after dispatch, want >= %s", d, 5*time.Second+timeoutGrace)
		}
	})
}
