package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// TestRefusedWritesLeaveMemoryAsTheStore: a create and an edit that the database refuses
// (here a trigger, as for any value it cannot store) fail at once with ErrRejected, and the
// task stays what the store holds, in memory too: the edit does not change what reads
// show, nor when the task fires. The writer is not stalled; the next create and edit land.
func TestRefusedWritesLeaveMemoryAsTheStore(t *testing.T) {
	t.Parallel()
	persisttest.EachDSN(t, func(t *testing.T, s persist.Store, dsn string) {
		ctx := context.Background()
		e := startEngine(t, s)
		delay := int64(8000) // within the window: the task is held in memory
		cb := &model.Callback{URL: "http://127.0.0.1:9/x"}
		before := mustCreate(t, e, &wire.TaskSpec{Name: "kept", DelayMS: &delay, Callback: cb, Params: json.RawMessage(`{"v":1}`)})
		persisttest.RefuseParams(t, dsn, "poison")

		later := int64(9000)
		_, err := e.API().UpdateTask(ctx, "kept", &wire.TaskSpec{Name: "kept", DelayMS: &later, Callback: cb, Params: json.RawMessage(`{"v":"poison"}`)}, "test")
		if !errors.Is(err, persist.ErrRejected) {
			t.Fatalf("refused edit = %v, want ErrRejected", err)
		}
		for _, read := range []func() (*model.Task, error){
			func() (*model.Task, error) { return e.API().GetTask(ctx, "kept") },
			func() (*model.Task, error) { return s.GetTask(ctx, "kept") },
		} {
			got, err := read()
			if err != nil || string(got.Def.Params) != `{"v":1}` || got.Def.DelayMS != delay ||
				got.Runtime.NextTriggerTime != before.Runtime.NextTriggerTime {
				t.Fatalf("after the refused edit: %+v, %v; want the task as it was", got, err)
			}
		}
		if _, err := e.API().CreateTask(ctx, &wire.TaskSpec{Name: "refused", Trigger: "manual", Callback: cb, Params: json.RawMessage(`["poison"]`)}, "test"); !errors.Is(err, persist.ErrRejected) {
			t.Fatalf("refused create = %v, want ErrRejected", err)
		}
		if _, err := e.API().GetTask(ctx, "refused"); !errors.Is(err, ErrTaskNotFound) {
			t.Fatalf("the refused create: %v, want no such task", err)
		}
		if err := e.API().WriteStalled(); err != nil {
			t.Fatalf("writer stalled after refusals: %v", err)
		}
		mustCreate(t, e, &wire.TaskSpec{Name: "next", Trigger: "manual", Callback: cb})
		got, err := e.API().UpdateTask(ctx, "kept", &wire.TaskSpec{Name: "kept", DelayMS: &later, Callback: cb, Params: json.RawMessage(`{"v":2}`)}, "test")
		if err != nil || string(got.Def.Params) != `{"v":2}` {
			t.Fatalf("an edit after the refused one = %+v, %v", got, err)
		}
		if stored, err := s.GetTask(ctx, "kept"); err != nil || string(stored.Def.Params) != `{"v":2}` {
			t.Fatalf("stored after the second edit: %+v, %v", stored, err)
		}
	})
}

// TestNormalizeRefusesWhatTheStoreCannotHold: each field the store would refuse, or that the
// API bounds below its column, is refused by name before anything is written.
func TestNormalizeRefusesWhatTheStoreCannotHold(t *testing.T) {
	t.Parallel()
	cb := func(c model.Callback) *model.Callback { return &c }
	long := func(n int) string { return strings.Repeat("k", n) }
	keys := make([]string, maxSensitiveParams)
	for i := range keys {
		keys[i] = long(127) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	for _, c := range []struct {
		name  string
		spec  wire.TaskSpec
		field string
	}{
		{"callback url over 8000 bytes", wire.TaskSpec{Callback: cb(model.Callback{URL: "http://h/" + long(MaxCallbackURLBytes)})}, "callback.url"},
		{"callback url over its column", wire.TaskSpec{Callback: cb(model.Callback{URL: "http://h/" + long(70_000)})}, "callback.url"},
		{"handler not a name", wire.TaskSpec{Callback: cb(model.Callback{App: "a", Handler: "<script>"})}, "callback.handler"},
		{"handler too long", wire.TaskSpec{Callback: cb(model.Callback{App: "a", Handler: long(300)})}, "callback.handler"},
		{"zone over its column", wire.TaskSpec{Timezone: "Asia/" + strings.Repeat("./", 40) + "Shanghai", Callback: cb(model.Callback{URL: "http://h/"})}, "timezone"},
		{"sensitive params over their column", wire.TaskSpec{SensitiveParams: keys, Callback: cb(model.Callback{URL: "http://h/"})}, "sensitive_params"},
		{"params not UTF-8", wire.TaskSpec{Params: json.RawMessage("{\"k\":\"\xff\"}"), Callback: cb(model.Callback{URL: "http://h/"})}, "params"},
	} {
		s := c.spec
		s.Name, s.Trigger = "t", "manual"
		_, err := Normalize(&s, "UTC")
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrInvalidTask) {
			t.Errorf("%s: %v, want a FieldError on %s", c.name, err, c.field)
		}
	}
	// The zone the long spelling names is accepted under its own name.
	s := wire.TaskSpec{Name: "t", Trigger: "manual", Timezone: "Asia/Shanghai", Callback: cb(model.Callback{URL: "http://h/"})}
	if _, err := Normalize(&s, "UTC"); err != nil {
		t.Errorf("Asia/Shanghai: %v", err)
	}
}

// TestRunNowParamsAreBounded: run-now params are held to what a task's params are.
func TestRunNowParamsAreBounded(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	e := startEngine(t, s)
	mustCreate(t, e, &wire.TaskSpec{Name: "m", Trigger: "manual", Callback: &model.Callback{URL: "http://127.0.0.1:9/x"}})
	big := json.RawMessage(`{"x":"` + strings.Repeat("p", MaxParamsBytes) + `"}`)
	for _, p := range []json.RawMessage{big, json.RawMessage("{\"x\":\"\xff\"}")} {
		_, err := e.API().RunNow(context.Background(), "m", p, "test")
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "params" {
			t.Errorf("run-now with params of %d bytes: %v, want a FieldError on params", len(p), err)
		}
	}
	if runs, err := s.ListRuns(context.Background(), 1, 10); err != nil || len(runs) != 0 {
		t.Errorf("runs after refused run-nows: %v, %v; want none", runs, err)
	}
}

// TestResultsMustNameTheirRun: a result for a run the scheduler no longer holds (marked lost)
// is recorded only from the executor the run was sent to, and only naming the run's task:
// another executor of the same app, an address no executor registered, or another task's
// name is refused, and the run keeps its record.
func TestResultsMustNameTheirRun(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		e := startEngine(t, s)
		pt := mustCreate(t, e, &wire.TaskSpec{Name: "bill", Cron: "@hourly",
			Callback: &model.Callback{Type: model.CallbackExecutor, App: "app", Handler: "h"}})
		for _, addr := range []string{"10.0.0.1:7", "10.0.0.2:7"} {
			if err := e.API().Executors().Register(ctx, wire.ExecutorRegistration{App: "app", Address: addr, Handlers: []string{"h"}}); err != nil {
				t.Fatal(err)
			}
		}
		lost := model.Run{Ticket: "bill-1", TaskID: pt.Def.ID, TaskName: "bill", Kind: model.RunScheduled, Attempt: 1,
			ScheduledAt: 10, DispatchedAt: 10, EndedAt: 20, Result: model.ResultLost, Error: "executor 10.0.0.1:7 was lost",
			Executor: "10.0.0.1:7"}
		if err := s.ApplyBatch(ctx, &persist.Batch{Runs: []model.Run{lost}}); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			rep  Report
			want error
		}{
			{Report{Ticket: "bill-1", App: "app", Address: "10.0.0.2:7", Status: model.ResultSuccess}, ErrForeignExecutor},
			{Report{Ticket: "bill-1", App: "app", Address: "10.9.9.9:1", Status: model.ResultSuccess}, ErrForeignExecutor},
			{Report{Ticket: "bill-1", Task: "other", Address: "10.0.0.1:7", Status: model.ResultSuccess}, ErrInvalidTask},
		} {
			if _, err := e.API().ReportResult(ctx, c.rep); !errors.Is(err, c.want) {
				t.Errorf("%+v: %v, want %v", c.rep, err, c.want)
			}
			if got, err := s.GetRun(ctx, "bill-1"); err != nil || got.Result != model.ResultLost || got.Executor != "10.0.0.1:7" {
				t.Fatalf("run after a refused result: %+v, %v", got, err)
			}
		}
		rep := Report{Ticket: "bill-1", Task: "bill", App: "app", Address: "10.0.0.1:7", Status: model.ResultSuccess, Output: "ok"}
		if _, err := e.API().ReportResult(ctx, rep); err != nil {
			t.Fatalf("the result from the run's own executor: %v", err)
		}
		if got, err := s.GetRun(ctx, "bill-1"); err != nil || got.Result != model.ResultSuccess || got.Executor != "10.0.0.1:7" {
			t.Fatalf("run after its own result: %+v, %v", got, err)
		}
	})
}
