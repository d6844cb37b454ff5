package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// casBypass is a faulty store for one engine: it rewrites every transition of a batch to
// expect the version the store holds, so the runtime CAS never refuses it. With the lease
// check off (no epoch), only the fire record can keep its engine from dispatching a fire
// the other engine dispatched already.
type casBypass struct {
	persist.Store
}

func (s casBypass) ApplyBatch(ctx context.Context, b *persist.Batch) error {
	next := map[int64]int64{}
	for i := range b.Transitions {
		id := b.Transitions[i].Runtime.TaskID
		v, ok := next[id]
		if !ok {
			pt, err := s.GetTaskByID(ctx, id)
			if err != nil {
				return err
			}
			v = pt.Runtime.Version
		}
		b.Transitions[i].ExpectVersion = v
		next[id] = v + 1
	}
	return s.Store.ApplyBatch(ctx, b)
}

// lagClock is the real clock behind by lag: its engine fires every fire lag after the other.
type lagClock struct {
	clock.Clock // the real clock's timers
	lag         time.Duration
}

func (c lagClock) Now() time.Time { return time.Now().Add(-c.lag) }

// TestFireRecordStopsWhatTheCASLetThrough runs two engines on one database, the second with its CAS
// bypassed, its clock behind and no lease: it fires every fire of an every-second task again, from
// a stale copy, after the first engine dispatched it. Only the fire record stands between the two
// dispatches; each (task, fire time, attempt) must reach the endpoint exactly once, and every
// refusal must be counted and recorded (docs/ha.md, "The fire record").
func TestFireRecordStopsWhatTheCASLetThrough(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		a := startEngine(t, s, func(c *Config) { c.NodeID = "a" })
		spec := httpSpec("contended", cs.URL)
		spec.Cron = "* * * * * *"
		mustCreate(t, a, spec)
		b := startEngine(t, casBypass{s}, func(c *Config) {
			c.NodeID = "b"
			c.Clock = lagClock{clock.Real, 1500 * time.Millisecond}
		})
		fires := func() int {
			seen := map[int64]bool{}
			for _, c := range cs.got("contended") {
				seen[c.body.ScheduledAt] = true
			}
			return len(seen)
		}
		waitFor(t, 15*time.Second, "four fires", func() bool { return fires() >= 4 })
		// The second engine tries each fire 1.5 s after the first dispatched it: wait until
		// the fire record has refused at least one of its tries (if it never does, the second
		// engine did not contend and the test would prove nothing).
		waitFor(t, 15*time.Second, "the fire record to refuse a second try", func() bool {
			return b.m.fireRefusals.Get() >= 1
		})
		calls := cs.got("contended")
		id := contendedID(t, a)
		seen := map[string]int{}
		for _, c := range calls {
			key := fmt.Sprintf("%d/%d", c.body.ScheduledAt, c.body.Attempt)
			seen[key]++
			if seen[key] > 1 {
				t.Errorf("fire %s dispatched %d times", key, seen[key])
			}
			if c.ticket != scheduledTicket(id, c.body.ScheduledAt, c.body.Attempt) {
				t.Errorf("call with ticket %s for fire %s", c.ticket, key)
			}
		}
		// After a refusal the second engine reloads the task, which may be RUNNING then and
		// is armed again only by a later load: it contends for some fires, not all.
		n := b.m.fireRefusals.Get()
		t.Logf("%d distinct fires dispatched, %d second tries suppressed by the fire record", len(seen), n)
		var acts []string
		waitFor(t, 5*time.Second, "the refusal recorded as a "+ActDuplicateFire+" action", func() bool {
			acts = actionNames(t, a, "contended")
			return slices.Contains(acts, ActDuplicateFire)
		})
	})
}

func contendedID(t *testing.T, e *Engine) int64 {
	t.Helper()
	pt, err := e.API().GetTask(context.Background(), "contended")
	if err != nil {
		t.Fatal(err)
	}
	return pt.Def.ID
}

// TestOnLostResend: an HTTP run left RUNNING by a previous primary, on a task that says
// on_lost: resend, is recorded lost and sent again once, with the same X-Axe-Ticket, as
// attempt 2 of the same fire under a run record of its own.
func TestOnLostResend(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		ctx := context.Background()
		now := time.Now().UnixMilli()
		sched := now - 1000
		def := model.TaskDef{
			Name: "doubt", Group: "default", Trigger: model.TriggerCron, Cron: "0 0 * * * *",
			Timezone: "UTC", TimeoutSec: 10, RetryIntervalSec: 1, Priority: 2, OnLost: persist.OnLostResend,
			Callback: model.Callback{Type: model.CallbackHTTP, URL: cs.URL}, MisfirePolicy: model.MisfireFireOnce,
		}
		rt := model.Runtime{State: model.StateRunning, Attempt: 1, NextTriggerTime: sched, LastTriggerTime: sched, Version: 1}
		if err := s.CreateTask(ctx, &def, &rt); err != nil {
			t.Fatal(err)
		}
		first := scheduledTicket(def.ID, sched, 1)
		rt.CurrentTicket = first
		if err := s.ApplyBatch(ctx, &persist.Batch{
			Transitions: []persist.Transition{{ExpectVersion: 1, Runtime: rt}},
			Fires: []model.Run{{Ticket: first, TaskID: def.ID, TaskName: def.Name, Kind: model.RunScheduled,
				Attempt: 1, ScheduledAt: sched, DispatchedAt: sched, Result: model.ResultRunning}}}); err != nil {
			t.Fatal(err)
		}
		e := startEngine(t, s, func(c *Config) { c.Epoch = 0 })
		second := scheduledTicket(def.ID, sched, 2)
		waitFor(t, 5*time.Second, "the re-sent run to succeed", func() bool {
			r, err := s.GetRun(ctx, second)
			return err == nil && r.Result == model.ResultSuccess
		})
		calls := cs.got("doubt")
		if len(calls) != 1 || calls[0].ticket != first || calls[0].body.Ticket != first || calls[0].attempt != 2 ||
			calls[0].body.Attempt != 2 || calls[0].body.ScheduledAt != sched {
			t.Fatalf("calls = %+v, want one with ticket %s, attempt 2, fire %d", calls, first, sched)
		}
		lost, err := s.GetRun(ctx, first)
		if err != nil || lost.Result != model.ResultLost {
			t.Fatalf("first run = %+v, %v; want lost", lost, err)
		}
		re, _ := s.GetRun(ctx, second)
		if re.Attempt != 2 || re.ScheduledAt != sched || !strings.Contains(re.Detail, first) {
			t.Fatalf("re-sent run = %+v", re)
		}
		acts := actionNames(t, e, "doubt")
		if !slices.Contains(acts, ActLost) || !slices.Contains(acts, ActResend) {
			t.Fatalf("actions %v lack %s and %s", acts, ActLost, ActResend)
		}
		pt, err := e.API().GetTask(ctx, "doubt")
		if err != nil || pt.Runtime.State != model.StateScheduled || pt.Runtime.SuccessCount != 1 {
			t.Fatalf("task = %+v, %v; want SCHEDULED after one success", pt, err)
		}
	})
}

// TestOnLostValidation: on_lost is fail or resend, and resend only for HTTP callbacks.
func TestOnLostValidation(t *testing.T) {
	t.Parallel()
	base := func(onLost string, cb model.Callback) *wire.TaskSpec {
		return &wire.TaskSpec{Name: "v", Cron: "@hourly", Callback: &cb, OnLost: onLost}
	}
	httpCB := model.Callback{URL: "http://127.0.0.1:9/"}
	execCB := model.Callback{Type: model.CallbackExecutor, App: "app", Handler: "h"}
	for _, c := range []struct {
		spec *wire.TaskSpec
		ok   bool
	}{
		{base("", httpCB), true}, {base("fail", httpCB), true}, {base("resend", httpCB), true},
		{base("fail", execCB), true}, {base("resend", execCB), false}, {base("twice", httpCB), false},
	} {
		_, err := Normalize(c.spec, "UTC")
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "on_lost")) {
			t.Errorf("on_lost %q on %s: %v", c.spec.OnLost, c.spec.Callback.Type, err)
		}
	}
}

// TestLateResultForALostRun: a result for a run already marked lost is recorded, and the
// run's record and actions show both; a repeat is a duplicate.
func TestLateResultForALostRun(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		e := startEngine(t, s)
		pt := mustCreate(t, e, &wire.TaskSpec{Name: "late", Cron: "@hourly",
			Callback: &model.Callback{Type: model.CallbackExecutor, App: "app", Handler: "h"}})
		// The executor the run was sent to: lost executors stay registered.
		if err := e.API().Executors().Register(ctx, wire.ExecutorRegistration{App: "app", Address: "1.2.3.4:5", Handlers: []string{"h"}}); err != nil {
			t.Fatal(err)
		}
		lost := model.Run{Ticket: "late-1", TaskID: pt.Def.ID, TaskName: "late", Kind: model.RunScheduled, Attempt: 1,
			ScheduledAt: 10, DispatchedAt: 10, EndedAt: 20, Result: model.ResultLost, Error: "executor 1.2.3.4:5 was lost",
			Executor: "1.2.3.4:5"}
		if err := s.ApplyBatch(ctx, &persist.Batch{Runs: []model.Run{lost}}); err != nil {
			t.Fatal(err)
		}
		rep := Report{Ticket: "late-1", Task: "late", Address: "1.2.3.4:5", Status: model.ResultSuccess, Output: "done", DurationMS: 7}
		if dup, err := e.API().ReportResult(ctx, rep); err != nil || dup {
			t.Fatalf("late result = %v, %v; want recorded", dup, err)
		}
		got, err := s.GetRun(ctx, "late-1")
		if err != nil || got.Result != model.ResultSuccess || got.Output != "done" || !strings.Contains(got.Detail, "marked lost") ||
			!strings.Contains(got.Detail, lost.Error) {
			t.Fatalf("run after the late result = %+v, %v", got, err)
		}
		if !slices.Contains(actionNames(t, e, "late"), ActLateResult) {
			t.Fatalf("no %s action", ActLateResult)
		}
		if dup, err := e.API().ReportResult(ctx, rep); err != nil || !dup {
			t.Fatalf("repeated late result = %v, %v; want a duplicate", dup, err)
		}
	})
}
