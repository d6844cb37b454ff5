package persisttest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// taskBatchTests are the conformance tests of task writes in a batch (Batch.Creates,
// DefUpdates, Deletes).
var taskBatchTests = []struct {
	name string
	fn   func(t *testing.T, ctx context.Context, s persist.Store)
}{
	{"ApplyBatch/Creates", testApplyCreates},
	{"ApplyBatch/CreateConflict", testApplyCreateConflict},
	{"ApplyBatch/CreateSkipReplace", testApplyCreateSkipReplace},
	{"ApplyBatch/DefUpdateDelete", testApplyDefUpdateDelete},
}

func newCreate(name string, deps ...string) *persist.TaskCreate {
	def := newDef(name, deps...)
	return &persist.TaskCreate{
		Def:     def,
		Runtime: model.Runtime{State: model.StateScheduled, NextTriggerTime: 5000, Version: 1},
		Actions: []model.Action{{TaskName: name, Action: "create", To: model.StateScheduled, Actor: "test", At: 1}},
	}
}

// testApplyCreates: a batch of creates (with edges between them) lands with ids set on the
// definitions, runtimes and actions, beside a transition of another task.
func testApplyCreates(t *testing.T, ctx context.Context, s persist.Store) {
	old := create(t, ctx, s, newDef("old"), newRuntime(model.StateScheduled, 100))
	var cs []*persist.TaskCreate
	for i := range 600 { // more than one statement's rows
		c := newCreate(fmt.Sprintf("new-%03d", i))
		if i > 0 {
			c.Def.DependsOn = []string{fmt.Sprintf("new-%03d", i-1)}
		}
		cs = append(cs, c)
	}
	b := &persist.Batch{Creates: cs, Transitions: []persist.Transition{transition(old, model.StateRunning, 100)}}
	if err := s.ApplyBatch(ctx, b); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	ids := map[int64]bool{old.Def.ID: true}
	for i, c := range cs {
		if c.Def.ID == 0 || c.Runtime.TaskID != c.Def.ID || c.Actions[0].TaskID != c.Def.ID {
			t.Fatalf("create %d: ids def=%d runtime=%d action=%d", i, c.Def.ID, c.Runtime.TaskID, c.Actions[0].TaskID)
		}
		if ids[c.Def.ID] {
			t.Fatalf("create %d: id %d handed out twice", i, c.Def.ID)
		}
		ids[c.Def.ID] = true
		equal(t, "outcome", c.Outcome, persist.CreatedNew)
	}
	got := getByID(t, ctx, s, cs[7].Def.ID)
	equal(t, "name", got.Def.Name, "new-007")
	equal(t, "depends_on", got.Def.DependsOn, []string{"new-006"})
	equal(t, "state", got.Runtime.State, model.StateScheduled)
	equal(t, "next", got.Runtime.NextTriggerTime, int64(5000))
	equal(t, "params", string(got.Def.Params), string(cs[7].Def.Params))
	deps, err := s.Dependents(ctx, "new-006")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "dependents", names(deps), []string{"new-007"})
	wantActions(t, ctx, s, cs[599].Def.ID, 1)
	if n, err := s.CountTasks(ctx); err != nil || n != 601 {
		t.Fatalf("CountTasks = %d, %v; want 601", n, err)
	}
	equal(t, "old state", getByID(t, ctx, s, old.Def.ID).Runtime.State, model.StateRunning)
}

// testApplyCreateConflict: a taken name, or one repeated in the batch, fails the batch with a
// *ConflictError naming those creates, unwrapping to ErrTaskExists; nothing lands.
func testApplyCreateConflict(t *testing.T, ctx context.Context, s persist.Store) {
	create(t, ctx, s, newDef("taken"), newRuntime(model.StateWaiting, 0))
	cs := []*persist.TaskCreate{newCreate("a"), newCreate("taken"), newCreate("b"), newCreate("a")}
	err := s.ApplyBatch(ctx, &persist.Batch{Creates: cs})
	var ce *persist.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("ApplyBatch = %v, want *ConflictError", err)
	}
	equal(t, "conflicting creates", ce.Creates, []int{1, 3})
	if !errors.Is(err, model.ErrTaskExists) {
		t.Fatalf("conflict of creates does not unwrap to ErrTaskExists: %v", err)
	}
	if n, err := s.CountTasks(ctx); err != nil || n != 1 {
		t.Fatalf("CountTasks = %d, %v; want 1 (nothing of the batch)", n, err)
	}
}

// testApplyCreateSkipReplace: CreateSkip leaves a taken name's task alone; CreateReplace puts
// a new task (new id) in its place, and the old one's actions stay.
func testApplyCreateSkipReplace(t *testing.T, ctx context.Context, s persist.Store) {
	keep := create(t, ctx, s, newDef("keep"), newRuntime(model.StateWaiting, 0))
	repl := create(t, ctx, s, newDef("repl", "keep"), newRuntime(model.StateScheduled, 77))
	if err := s.ApplyBatch(ctx, &persist.Batch{Actions: []model.Action{newAction(repl, "", "x", "", "", 1)}}); err != nil {
		t.Fatal(err)
	}
	skip := newCreate("keep")
	skip.IfExists = persist.CreateSkip
	skip.Def.Group = "changed"
	rc := newCreate("repl")
	rc.IfExists = persist.CreateReplace
	rc.Def.Group = "replaced"
	fresh := newCreate("fresh")
	fresh.IfExists = persist.CreateReplace
	if err := s.ApplyBatch(ctx, &persist.Batch{Creates: []*persist.TaskCreate{skip, rc, fresh}}); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	equal(t, "skip outcome", skip.Outcome, persist.CreateSkipped)
	equal(t, "replace outcome", rc.Outcome, persist.CreateReplaced)
	equal(t, "replaced id", rc.ReplacedID, repl.Def.ID)
	equal(t, "fresh outcome", fresh.Outcome, persist.CreatedNew)
	got, err := s.GetTask(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "kept group", got.Def.Group, keep.Def.Group)
	got, err = s.GetTask(ctx, "repl")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "replaced group", got.Def.Group, "replaced")
	if got.Def.ID == repl.Def.ID {
		t.Fatalf("replaced task kept its id %d", got.Def.ID)
	}
	if _, err := s.GetTaskByID(ctx, repl.Def.ID); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("old task still there: %v", err)
	}
	wantActions(t, ctx, s, repl.Def.ID, 1) // the audit trail outlives the task
	deps, err := s.Dependents(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "edges of the replaced task gone", names(deps), []string(nil))
}

// testApplyDefUpdateDelete: a definition update and a delete land with the batch's
// transitions, all or nothing.
func testApplyDefUpdateDelete(t *testing.T, ctx context.Context, s persist.Store) {
	up := create(t, ctx, s, newDef("up"), newRuntime(model.StateScheduled, 10))
	del := create(t, ctx, s, newDef("del", "up"), newRuntime(model.StateScheduled, 10))
	stale := create(t, ctx, s, newDef("stale"), newRuntime(model.StateScheduled, 10))

	def := up.Def
	def.Cron = "0 0 * * * *"
	def.DependsOn = []string{"stale"}
	bad := transition(stale, model.StateRunning, 10)
	bad.ExpectVersion = 42
	err := s.ApplyBatch(ctx, &persist.Batch{
		DefUpdates:  []model.TaskDef{def},
		Deletes:     []int64{del.Def.ID},
		Transitions: []persist.Transition{transition(up, model.StatePaused, 10), bad},
	})
	wantConflict(t, err, 1)
	equal(t, "cron after rollback", getByID(t, ctx, s, up.Def.ID).Def.Cron, up.Def.Cron)
	getByID(t, ctx, s, del.Def.ID)

	err = s.ApplyBatch(ctx, &persist.Batch{
		DefUpdates:  []model.TaskDef{def},
		Deletes:     []int64{del.Def.ID},
		Transitions: []persist.Transition{transition(up, model.StatePaused, 10)},
	})
	if err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	got := getByID(t, ctx, s, up.Def.ID)
	equal(t, "cron", got.Def.Cron, "0 0 * * * *")
	equal(t, "deps", got.Def.DependsOn, []string{"stale"})
	equal(t, "state", got.Runtime.State, model.StatePaused)
	if _, err := s.GetTaskByID(ctx, del.Def.ID); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("deleted task still there: %v", err)
	}
	deps, err := s.Dependents(ctx, "stale")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "dependents of stale", names(deps), []string{"up"})
}
