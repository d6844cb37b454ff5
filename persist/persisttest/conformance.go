package persisttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// conformanceTimeout bounds each conformance test, so a lock that is never released fails
// the test instead of hanging the run.
const conformanceTimeout = 5 * time.Minute

// leaseName is the lease the fencing tests use.
const leaseName = "scheduler"

// RunConformance runs the conformance suite: every documented behaviour of persist.Store.
// newStore must return a fresh, empty, migrated store for each call; it is called from
// parallel subtests.
func RunConformance(t *testing.T, newStore func(t *testing.T) persist.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, s persist.Store)
	}{
		{"Migrate/Twice", testMigrateTwice},
		{"Migrate/Concurrent", testMigrateConcurrent},
		{"CreateTask/RoundTrip", testCreateRoundTrip},
		{"ExchangeDemand", testExchangeDemand},
		{"CreateTask/Duplicate", testCreateDuplicate},
		{"NotFound", testNotFound},
		{"ListTasks", testListTasks},
		{"UpdateTaskDef", testUpdateTaskDef},
		{"DeleteTask", testDeleteTask},
		{"Dependents", testDependents},
		{"LoadDue/RangeStatesOrder", testLoadDueRange},
		{"LoadDue/EarlyStop", testLoadDueEarlyStop},
		{"LoadDue/Stream", testLoadDueStream},
		{"LoadDueRefs", testLoadDueRefs},
		{"LoadByIDs", testLoadByIDs},
		{"LoadSharedCallbacks", testLoadSharedCallbacks},
		{"LoadByState", testLoadByState},
		{"ApplyBatch/Success", testApplySuccess},
		{"ApplyBatch/StaleVersion", testApplyStale},
		{"ApplyBatch/MissingRow", testApplyMissingRow},
		{"ApplyBatch/Chained", testApplyChained},
		{"ApplyBatch/ConflictRollsBackEverything", testApplyConflictRollsBack},
		{"ApplyBatch/RunUpsert", testApplyRunUpsert},
		{"ApplyBatch/NoTransitions", testApplyNoTransitions},
		{"ApplyBatch/Large", testApplyLarge},
		{"ApplyBatch/LargeConflict", testApplyLargeConflict},
		{"ApplyBatch/OversizedText", testApplyOversizedText},
		{"ApplyBatch/ConcurrentCAS", testApplyConcurrentCAS},
		{"ApplyBatch/EpochFencing", testApplyEpoch},
		{"Actions", testActions},
		{"Executors", testExecutors},
		{"Lease", testLease},
		{"Lease/Concurrent", testLeaseConcurrent},
		{"Nodes", testNodes},
		{"ApplyBatch/FireRecord", testFireRecord},
		{"ConcurrencyLimits", testConcurrencyLimits},
	}
	tests = append(tests, taskBatchTests...)
	tests = append(tests, browseTests...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Each test has its own store, so they can overlap their waits on the database.
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), conformanceTimeout)
			defer cancel()
			tc.fn(t, ctx, newStore(t))
		})
	}
}

// ---- fixtures ----

// newDef returns a definition with every field set, so a round trip checks every column.
func newDef(name string, deps ...string) *model.TaskDef {
	return &model.TaskDef{
		Name:             name,
		Group:            "default",
		Trigger:          model.TriggerCron,
		Cron:             "*/5 * * * * *",
		DelayMS:          1500,
		DependsOn:        deps,
		DependsMode:      "all",
		Timezone:         "Asia/Shanghai",
		TimeoutSec:       300,
		RetryCount:       3,
		RetryIntervalSec: 30,
		Priority:         2,
		Callback: model.Callback{Type: model.CallbackExecutor, URL: "http://x/run",
			App: "billing", Handler: "settle", Route: "hash"},
		Params:         json.RawMessage(`{"region":"eu","ids":[1,2,3]}`),
		MisfirePolicy:  model.MisfireFireOnce,
		ConcurrencyKey: "warehouse-db",
		RateKey:        "tenant:{params.region}",
		CreatedAt:      1_700_000_000_000,
		UpdatedAt:      1_700_000_000_001,
	}
}

func newRuntime(state model.State, next int64) *model.Runtime {
	return &model.Runtime{State: state, NextTriggerTime: next, Version: 1}
}

func create(t *testing.T, ctx context.Context, s persist.Store, def *model.TaskDef, rt *model.Runtime) *model.Task {
	t.Helper()
	if err := s.CreateTask(ctx, def, rt); err != nil {
		t.Fatalf("CreateTask(%q): %v", def.Name, err)
	}
	return &model.Task{Def: *def, Runtime: *rt}
}

// createMany creates n tasks named prefix-i and returns them in name order. next(i) gives
// each its next_trigger_time. They land in batches of createBatch (Batch.Creates), as the
// writer lands the API's creates: with a commit a task, the largest fixture (2,100 tasks)
// took 39 s of a whole-suite run on MariaDB and 77 s on Galera. CreateTask has tests of
// its own.
func createMany(t *testing.T, ctx context.Context, s persist.Store, prefix string, n int, next func(i int) int64) []*model.Task {
	t.Helper()
	const createBatch = 500
	out := make([]*model.Task, n)
	for from := 0; from < n; from += createBatch {
		cs := make([]*persist.TaskCreate, 0, min(createBatch, n-from))
		for i := from; i < min(from+createBatch, n); i++ {
			cs = append(cs, &persist.TaskCreate{Def: newDef(fmt.Sprintf("%s-%04d", prefix, i)), Runtime: *newRuntime(model.StateScheduled, next(i))})
		}
		if err := s.ApplyBatch(ctx, &persist.Batch{Creates: cs}); err != nil {
			t.Fatalf("ApplyBatch of %d creates (%s-%04d on): %v", len(cs), prefix, from, err)
		}
		for j, c := range cs {
			out[from+j] = &model.Task{Def: *c.Def, Runtime: c.Runtime}
		}
	}
	return out
}

func getByID(t *testing.T, ctx context.Context, s persist.Store, id int64) *model.Task {
	t.Helper()
	got, err := s.GetTaskByID(ctx, id)
	if err != nil {
		t.Fatalf("GetTaskByID(%d): %v", id, err)
	}
	return got
}

// transition moves task to state, expecting its current version.
func transition(task *model.Task, state model.State, next int64) persist.Transition {
	rt := task.Runtime
	rt.State = state
	rt.NextTriggerTime = next
	return persist.Transition{ExpectVersion: task.Runtime.Version, Runtime: rt}
}

func newRun(task *model.Task, ticket string, scheduledAt int64, result string) model.Run {
	return model.Run{Ticket: ticket, TaskID: task.Def.ID, TaskName: task.Def.Name,
		Kind: model.RunScheduled, Attempt: 1, ScheduledAt: scheduledAt,
		DispatchedAt: scheduledAt + 3, Executor: "10.0.0.1:9000", Result: result}
}

func newAction(task *model.Task, ticket, action string, from, to model.State, at int64) model.Action {
	return model.Action{TaskID: task.Def.ID, TaskName: task.Def.Name, Ticket: ticket,
		Action: action, From: from, To: to, Actor: "scheduler", At: at, Detail: "d:" + action}
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %+v\n want %+v", what, got, want)
	}
}

// names returns the task names in order, nil for no tasks.
func names(tasks []model.Task) []string {
	if len(tasks) == 0 {
		return nil
	}
	out := make([]string, len(tasks))
	for i := range tasks {
		out[i] = tasks[i].Def.Name
	}
	return out
}

func collect(t *testing.T, load func(fn func(*model.Task) error) error) []model.Task {
	t.Helper()
	var out []model.Task
	if err := load(func(task *model.Task) error {
		out = append(out, *task)
		return nil
	}); err != nil {
		t.Fatalf("load: %v", err)
	}
	return out
}

func wantConflict(t *testing.T, err error, indexes ...int) {
	t.Helper()
	var ce *persist.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("ApplyBatch = %v, want *ConflictError", err)
	}
	if !errors.Is(err, model.ErrVersionConflict) {
		t.Fatalf("ConflictError does not unwrap to ErrVersionConflict")
	}
	equal(t, "conflict indexes", ce.Indexes, indexes)
}

func wantNoRun(t *testing.T, ctx context.Context, s persist.Store, ticket string) {
	t.Helper()
	if _, err := s.GetRun(ctx, ticket); !errors.Is(err, model.ErrRunNotFound) {
		t.Fatalf("GetRun(%q) = %v, want ErrRunNotFound", ticket, err)
	}
}

func wantActions(t *testing.T, ctx context.Context, s persist.Store, taskID int64, n int) []model.Action {
	t.Helper()
	got, err := s.ListActions(ctx, taskID, 0)
	if err != nil {
		t.Fatalf("ListActions: %v", err)
	}
	if len(got) != n {
		t.Fatalf("ListActions(%d) has %d records, want %d: %+v", taskID, len(got), n, got)
	}
	return got
}

// ---- schema ----

func testMigrateTwice(t *testing.T, ctx context.Context, s persist.Store) {
	if k := s.Kind(); k != persist.SchemeSQLite && k != persist.SchemeMySQL {
		t.Fatalf("Kind() = %q", k)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	task := create(t, ctx, s, newDef("before"), newRuntime(model.StateWaiting, 0))
	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
	}
	// Migrating an up-to-date schema keeps the data.
	equal(t, "task after Migrate", getByID(t, ctx, s, task.Def.ID), task)
}

func testMigrateConcurrent(t *testing.T, ctx context.Context, s persist.Store) {
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = s.Migrate(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate %d: %v", i, err)
		}
	}
	create(t, ctx, s, newDef("after"), newRuntime(model.StateWaiting, 0))
}

// ---- tasks ----

func testCreateRoundTrip(t *testing.T, ctx context.Context, s persist.Store) {
	def := newDef("报表-nightly 🚀", "b", "a", "b")
	def.Paused = true
	rt := &model.Runtime{State: model.StatePaused, CurrentTicket: "t-1", Attempt: 2,
		NextTriggerTime: 1_700_000_100_000, LastTriggerTime: 11, LastEndTime: 12,
		LastExecutor: "10.0.0.9:9000", SuccessCount: 5, FailureCount: 6, Note: "paused by ops", Version: 7}
	if err := s.CreateTask(ctx, def, rt); err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	if def.ID <= 0 || rt.TaskID != def.ID {
		t.Fatalf("CreateTask set def.ID=%d rt.TaskID=%d", def.ID, rt.TaskID)
	}
	want := &model.Task{Def: *def, Runtime: *rt}
	want.Def.DependsOn = []string{"b", "a"} // deduplicated, order kept
	byName, err := s.GetTask(ctx, def.Name)
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	equal(t, "GetTask", byName, want)
	equal(t, "GetTaskByID", getByID(t, ctx, s, def.ID), want)

	// Zero values survive too: no params, no deps, no callback URL.
	bare := &model.TaskDef{Name: "bare", Group: "g", Trigger: model.TriggerManual,
		Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://h/x"}}
	bareRT := &model.Runtime{State: model.StateWaiting}
	create(t, ctx, s, bare, bareRT)
	equal(t, "bare task", getByID(t, ctx, s, bare.ID), &model.Task{Def: *bare, Runtime: *bareRT})
	if bare.ID <= def.ID {
		t.Fatalf("second id %d not above first %d", bare.ID, def.ID)
	}
}

func testCreateDuplicate(t *testing.T, ctx context.Context, s persist.Store) {
	first := create(t, ctx, s, newDef("job"), newRuntime(model.StateWaiting, 0))
	dup := newDef("job", "upstream-x")
	err := s.CreateTask(ctx, dup, newRuntime(model.StateScheduled, 5))
	if !errors.Is(err, model.ErrTaskExists) {
		t.Fatalf("CreateTask(duplicate) = %v, want ErrTaskExists", err)
	}
	// The failed create left nothing behind: no second runtime, no dependency edge.
	if n, err := s.CountTasks(ctx); err != nil || n != 1 {
		t.Fatalf("CountTasks = %d, %v; want 1", n, err)
	}
	if deps, err := s.Dependents(ctx, "upstream-x"); err != nil || len(deps) != 0 {
		t.Fatalf("Dependents(upstream-x) = %v, %v; want none", names(deps), err)
	}
	equal(t, "original task", getByID(t, ctx, s, first.Def.ID), first)
	// Names are case-sensitive on both stores.
	create(t, ctx, s, newDef("JOB"), newRuntime(model.StateWaiting, 0))
}

func testNotFound(t *testing.T, ctx context.Context, s persist.Store) {
	if _, err := s.GetTask(ctx, "nope"); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("GetTask = %v, want ErrTaskNotFound", err)
	}
	if _, err := s.GetTaskByID(ctx, 424242); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("GetTaskByID = %v, want ErrTaskNotFound", err)
	}
	def := newDef("ghost")
	def.ID = 424242
	if err := s.UpdateTaskDef(ctx, def); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("UpdateTaskDef = %v, want ErrTaskNotFound", err)
	}
	if err := s.DeleteTask(ctx, 424242); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("DeleteTask = %v, want ErrTaskNotFound", err)
	}
	wantNoRun(t, ctx, s, "no-such-ticket")
	if n, err := s.CountTasks(ctx); err != nil || n != 0 {
		t.Fatalf("CountTasks = %d, %v; want 0", n, err)
	}
	if tasks, err := s.ListTasks(ctx, persist.TaskFilter{}); err != nil || len(tasks) != 0 {
		t.Fatalf("ListTasks on empty store = %v, %v", names(tasks), err)
	}
}

func testListTasks(t *testing.T, ctx context.Context, s persist.Store) {
	var all []*model.Task
	for i, grp := range []string{"a", "b", "a", "b", "a"} {
		def := newDef(fmt.Sprintf("t%d", i))
		def.Group = grp
		all = append(all, create(t, ctx, s, def, newRuntime(model.StateWaiting, 0)))
	}
	// Move t1 and t4 to SCHEDULED.
	b := &persist.Batch{Transitions: []persist.Transition{
		transition(all[1], model.StateScheduled, 10), transition(all[4], model.StateScheduled, 20)}}
	if err := s.ApplyBatch(ctx, b); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	list := func(f persist.TaskFilter) []string {
		t.Helper()
		tasks, err := s.ListTasks(ctx, f)
		if err != nil {
			t.Fatalf("ListTasks(%+v): %v", f, err)
		}
		return names(tasks)
	}
	equal(t, "all", list(persist.TaskFilter{}), []string{"t0", "t1", "t2", "t3", "t4"})
	equal(t, "group a", list(persist.TaskFilter{Group: "a"}), []string{"t0", "t2", "t4"})
	equal(t, "scheduled", list(persist.TaskFilter{State: model.StateScheduled}), []string{"t1", "t4"})
	equal(t, "group a scheduled", list(persist.TaskFilter{Group: "a", State: model.StateScheduled}), []string{"t4"})
	equal(t, "limit", list(persist.TaskFilter{Limit: 2}), []string{"t0", "t1"})

	// Keyset pagination visits every task once.
	var paged []string
	after := int64(0)
	for {
		tasks, err := s.ListTasks(ctx, persist.TaskFilter{AfterID: after, Limit: 2})
		if err != nil {
			t.Fatalf("ListTasks: %v", err)
		}
		if len(tasks) == 0 {
			break
		}
		paged = append(paged, names(tasks)...)
		after = tasks[len(tasks)-1].Def.ID
	}
	equal(t, "pages", paged, []string{"t0", "t1", "t2", "t3", "t4"})

	// Listed tasks carry their runtime.
	tasks, err := s.ListTasks(ctx, persist.TaskFilter{AfterID: all[3].Def.ID})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("ListTasks(after t3) = %v, %v", names(tasks), err)
	}
	if rt := tasks[0].Runtime; rt.State != model.StateScheduled || rt.NextTriggerTime != 20 || rt.Version != 2 {
		t.Fatalf("t4 runtime = %+v", rt)
	}
	if n, err := s.CountTasks(ctx); err != nil || n != 5 {
		t.Fatalf("CountTasks = %d, %v; want 5", n, err)
	}
}

func testUpdateTaskDef(t *testing.T, ctx context.Context, s persist.Store) {
	task := create(t, ctx, s, newDef("report", "extract"), newRuntime(model.StateScheduled, 77))
	create(t, ctx, s, newDef("taken"), newRuntime(model.StateWaiting, 0))

	def := task.Def
	def.Name = "report-v2"
	def.Group = "finance"
	def.Trigger = model.TriggerDependency
	def.Cron = ""
	def.DelayMS = 0
	def.DependsOn = []string{"load", "transform"}
	def.DependsMode = "any"
	def.Timezone = "UTC"
	def.TimeoutSec, def.RetryCount, def.RetryIntervalSec, def.Priority = 60, 1, 10, 0
	def.Callback = model.Callback{Type: model.CallbackHTTP, URL: "http://svc/report"}
	def.Params = json.RawMessage(`{"v":2}`)
	def.MisfirePolicy = model.MisfireSkip
	def.Paused = true
	def.UpdatedAt = 1_800_000_000_000
	sent := def
	sent.CreatedAt = 1 // created_at is not replaced
	if err := s.UpdateTaskDef(ctx, &sent); err != nil {
		t.Fatalf("UpdateTaskDef: %v", err)
	}
	got := getByID(t, ctx, s, task.Def.ID)
	equal(t, "updated def", got.Def, def)
	equal(t, "runtime untouched", got.Runtime, task.Runtime)
	if _, err := s.GetTask(ctx, "report"); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("old name still found: %v", err)
	}
	if deps, _ := s.Dependents(ctx, "extract"); len(deps) != 0 {
		t.Fatalf("old edge extract still there: %v", names(deps))
	}
	for _, up := range []string{"load", "transform"} {
		deps, err := s.Dependents(ctx, up)
		if err != nil {
			t.Fatalf("Dependents(%s): %v", up, err)
		}
		equal(t, "Dependents("+up+")", names(deps), []string{"report-v2"})
	}
	ups, err := s.UpstreamNames(ctx)
	if err != nil {
		t.Fatalf("UpstreamNames: %v", err)
	}
	sort.Strings(ups)
	equal(t, "UpstreamNames", ups, []string{"load", "transform"})

	// An update that changes nothing still succeeds (MySQL reports 0 changed rows).
	if err := s.UpdateTaskDef(ctx, &sent); err != nil {
		t.Fatalf("UpdateTaskDef (no change): %v", err)
	}
	// Renaming onto another task's name fails and changes nothing.
	clash := def
	clash.Name = "taken"
	clash.DependsOn = []string{"zzz"}
	if err := s.UpdateTaskDef(ctx, &clash); !errors.Is(err, model.ErrTaskExists) {
		t.Fatalf("UpdateTaskDef(rename onto taken) = %v, want ErrTaskExists", err)
	}
	equal(t, "def after failed rename", getByID(t, ctx, s, task.Def.ID).Def, def)
	if deps, _ := s.Dependents(ctx, "zzz"); len(deps) != 0 {
		t.Fatalf("failed update left an edge: %v", names(deps))
	}
}

func testDeleteTask(t *testing.T, ctx context.Context, s persist.Store) {
	keep := create(t, ctx, s, newDef("keep"), newRuntime(model.StateScheduled, 100))
	gone := create(t, ctx, s, newDef("gone", "keep"), newRuntime(model.StateScheduled, 100))
	b := &persist.Batch{
		Transitions: []persist.Transition{transition(gone, model.StateRunning, 100)},
		Runs:        []model.Run{newRun(gone, "gone-1", 100, model.ResultRunning)},
		Actions:     []model.Action{newAction(gone, "gone-1", "dispatch", model.StateScheduled, model.StateRunning, 101)},
	}
	if err := s.ApplyBatch(ctx, b); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	if err := s.DeleteTask(ctx, gone.Def.ID); err != nil {
		t.Fatalf("DeleteTask: %v", err)
	}
	if _, err := s.GetTaskByID(ctx, gone.Def.ID); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("GetTaskByID(deleted) = %v", err)
	}
	if _, err := s.GetTask(ctx, "gone"); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("GetTask(deleted) = %v", err)
	}
	if deps, _ := s.Dependents(ctx, "keep"); len(deps) != 0 {
		t.Fatalf("deleted task still a dependent: %v", names(deps))
	}
	due := collect(t, func(fn func(*model.Task) error) error {
		return s.LoadByState(ctx, []model.State{model.StateRunning, model.StateScheduled}, fn)
	})
	equal(t, "tasks left", names(due), []string{"keep"})
	// The audit trail outlives the task.
	if _, err := s.GetRun(ctx, "gone-1"); err != nil {
		t.Fatalf("run of deleted task: %v", err)
	}
	wantActions(t, ctx, s, gone.Def.ID, 1)
	if err := s.DeleteTask(ctx, gone.Def.ID); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("DeleteTask twice = %v, want ErrTaskNotFound", err)
	}
	// Ids are never reused, even the highest one after its deletion.
	again := create(t, ctx, s, newDef("gone"), newRuntime(model.StateWaiting, 0))
	if again.Def.ID <= gone.Def.ID {
		t.Fatalf("new id %d reuses or precedes deleted id %d", again.Def.ID, gone.Def.ID)
	}
	equal(t, "untouched task", getByID(t, ctx, s, keep.Def.ID), keep)
}

func testDependents(t *testing.T, ctx context.Context, s persist.Store) {
	create(t, ctx, s, newDef("a"), newRuntime(model.StateWaiting, 0))
	create(t, ctx, s, newDef("b"), newRuntime(model.StateWaiting, 0))
	c := create(t, ctx, s, newDef("c", "a", "b"), newRuntime(model.StateWaiting, 0))
	create(t, ctx, s, newDef("d", "a"), newRuntime(model.StateWaiting, 0))
	get := func(up string) []model.Task {
		t.Helper()
		deps, err := s.Dependents(ctx, up)
		if err != nil {
			t.Fatalf("Dependents(%s): %v", up, err)
		}
		return deps
	}
	equal(t, "Dependents(a)", names(get("a")), []string{"c", "d"})
	equal(t, "Dependents(b)", names(get("b")), []string{"c"})
	equal(t, "Dependents(c)", names(get("c")), []string(nil))
	if len(get("nobody")) != 0 {
		t.Fatalf("Dependents(nobody) not empty")
	}
	// A dependent comes back whole: definition and runtime.
	equal(t, "Dependents(b)[0]", &get("b")[0], c)
}

// ---- loading ----

func testLoadDueRange(t *testing.T, ctx context.Context, s persist.Store) {
	type row struct {
		name  string
		state model.State
		next  int64
	}
	rows := []row{
		{"never", model.StateScheduled, 0},  // 0 = no next fire: excluded even if from <= 0
		{"early", model.StateScheduled, 50}, // before the window
		{"first", model.StateScheduled, 100},
		{"paused", model.StatePaused, 150}, // wrong state
		{"tie-a", model.StateWaiting, 200},
		{"tie-b", model.StateScheduled, 200},
		{"last", model.StateRetrying, 299},
		{"edge", model.StateScheduled, 300}, // to is exclusive
		{"late", model.StateScheduled, 900},
	}
	// Insert out of time order so index order is not insertion order.
	for _, i := range []int{8, 6, 0, 5, 2, 7, 1, 4, 3} {
		create(t, ctx, s, newDef(rows[i].name), newRuntime(rows[i].state, rows[i].next))
	}
	due := func(from, to int64, states ...model.State) []string {
		t.Helper()
		return names(collect(t, func(fn func(*model.Task) error) error {
			return s.LoadDue(ctx, from, to, states, fn)
		}))
	}
	active := []model.State{model.StateScheduled, model.StateWaiting, model.StateRetrying}
	// Ties on next_trigger_time come in id order: tie-b was created before tie-a.
	equal(t, "[100,300)", due(100, 300, active...), []string{"first", "tie-b", "tie-a", "last"})
	equal(t, "[0,100)", due(0, 100, active...), []string{"early"})
	equal(t, "scheduled only", due(0, 1000, model.StateScheduled), []string{"early", "first", "tie-b", "edge", "late"})
	equal(t, "paused", due(0, 1000, model.StatePaused), []string{"paused"})
	equal(t, "empty window", due(300, 300, active...), []string(nil))
	equal(t, "inverted window", due(500, 100, active...), []string(nil))
	equal(t, "no states", due(0, 1000), []string(nil))
}

func testLoadDueEarlyStop(t *testing.T, ctx context.Context, s persist.Store) {
	createMany(t, ctx, s, "due", 40, func(i int) int64 { return int64(1000 + i) })
	stop := errors.New("window full")
	calls := 0
	err := s.LoadDue(ctx, 0, 1<<40, []model.State{model.StateScheduled}, func(*model.Task) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("LoadDue = %v, want the callback's error", err)
	}
	if calls != 3 {
		t.Fatalf("callback ran %d times after asking to stop at 3", calls)
	}
	// The store is usable after an abandoned stream.
	for range 3 {
		got := collect(t, func(fn func(*model.Task) error) error {
			return s.LoadDue(ctx, 1000, 1010, []model.State{model.StateScheduled}, fn)
		})
		if len(got) != 10 {
			t.Fatalf("LoadDue after early stop returned %d tasks, want 10", len(got))
		}
	}
}

func testLoadDueStream(t *testing.T, ctx context.Context, s persist.Store) {
	const n = 200
	// A scrambled, tie-rich order of fire times.
	created := createMany(t, ctx, s, "s", n, func(i int) int64 { return int64(5000 + (i*37)%101) })
	want := slices.Clone(created)
	slices.SortFunc(want, func(a, b *model.Task) int {
		if a.Runtime.NextTriggerTime != b.Runtime.NextTriggerTime {
			return int(a.Runtime.NextTriggerTime - b.Runtime.NextTriggerTime)
		}
		return int(a.Def.ID - b.Def.ID)
	})
	var got []*model.Task
	err := s.LoadDue(ctx, 0, 1<<40, []model.State{model.StateScheduled}, func(task *model.Task) error {
		// The stream does not hold the store: the callback may use it, as the engine does.
		if len(got)%50 == 0 {
			if _, err := s.GetTaskByID(ctx, task.Def.ID); err != nil {
				return fmt.Errorf("store call during stream: %w", err)
			}
		}
		got = append(got, task)
		return nil
	})
	if err != nil {
		t.Fatalf("LoadDue: %v", err)
	}
	equal(t, "streamed tasks", got, want)
}

// LoadDueRefs returns exactly LoadDue's rows, as (id, next trigger time) pairs.
func testLoadDueRefs(t *testing.T, ctx context.Context, s persist.Store) {
	created := createMany(t, ctx, s, "r", 120, func(i int) int64 { return int64((i * 53) % 97) })
	for _, st := range []model.State{model.StatePaused, model.StateRetrying} {
		create(t, ctx, s, newDef("state-"+string(st)), newRuntime(st, 40))
	}
	refs := func(from, to int64, states ...model.State) []persist.DueRef {
		t.Helper()
		var out []persist.DueRef
		if err := s.LoadDueRefs(ctx, from, to, states, func(r persist.DueRef) error {
			out = append(out, r)
			return nil
		}); err != nil {
			t.Fatalf("LoadDueRefs: %v", err)
		}
		slices.SortFunc(out, func(a, b persist.DueRef) int { return int(a.TaskID - b.TaskID) })
		return out
	}
	for _, w := range []struct {
		from, to int64
		states   []model.State
	}{
		{0, 1000, []model.State{model.StateScheduled}},
		{10, 40, []model.State{model.StateScheduled, model.StateRetrying}},
		{40, 41, []model.State{model.StateRetrying}},
		{50, 50, []model.State{model.StateScheduled}},
		{0, 1000, nil},
	} {
		var want []persist.DueRef
		for _, task := range collect(t, func(fn func(*model.Task) error) error {
			return s.LoadDue(ctx, w.from, w.to, w.states, fn)
		}) {
			want = append(want, persist.DueRef{TaskID: task.Def.ID, NextTriggerTime: task.Runtime.NextTriggerTime})
		}
		slices.SortFunc(want, func(a, b persist.DueRef) int { return int(a.TaskID - b.TaskID) })
		equal(t, fmt.Sprintf("refs [%d,%d) %v", w.from, w.to, w.states), refs(w.from, w.to, w.states...), want)
	}
	// The rows really are there: next trigger time 0 is excluded, as in LoadDue.
	if got := refs(0, 1000, model.StateScheduled); len(got) != len(created)-2 {
		t.Fatalf("LoadDueRefs over everything returned %d refs, want %d (two tasks have no next fire)", len(got), len(created)-2)
	}
	stop := errors.New("stop")
	calls := 0
	if err := s.LoadDueRefs(ctx, 0, 1000, []model.State{model.StateScheduled}, func(persist.DueRef) error {
		calls++
		return stop
	}); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("LoadDueRefs after the callback's error = %v after %d calls, want it back after 1", err, calls)
	}
}

// LoadByIDs returns whole tasks in id order, once each, and skips unknown ids.
func testLoadByIDs(t *testing.T, ctx context.Context, s persist.Store) {
	created := createMany(t, ctx, s, "b", 2100, func(i int) int64 { return int64(1000 + i) })
	var ids []int64
	var want []model.Task
	for i := len(created) - 1; i >= 0; i -= 2 { // every other task, in reverse order
		ids = append(ids, created[i].Def.ID)
		want = append(want, *created[i])
	}
	ids = append(ids, ids[0], 1<<40) // a repeat and an unknown id
	slices.SortFunc(want, func(a, b model.Task) int { return int(a.Def.ID - b.Def.ID) })
	got := collect(t, func(fn func(*model.Task) error) error { return s.LoadByIDs(ctx, ids, fn) })
	equal(t, "LoadByIDs", got, want)
	equal(t, "LoadByIDs(none)", collect(t, func(fn func(*model.Task) error) error { return s.LoadByIDs(ctx, nil, fn) }), []model.Task(nil))
}

// Loads decode each task's own callback when neighbouring rows share theirs or not
// (a stream decodes a callback only when it differs from the previous row's).
func testLoadSharedCallbacks(t *testing.T, ctx context.Context, s persist.Store) {
	a := model.Callback{Type: model.CallbackExecutor, App: "billing", Handler: "settle"}
	b := model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/hook"}
	c := model.Callback{Type: model.CallbackExecutor, App: "billing", Handler: "settle", Route: "hash"}
	var ids []int64
	var want []model.Task
	for i, cb := range []model.Callback{a, a, b, b, a, c, a} {
		def := newDef(fmt.Sprintf("cb-%d", i))
		def.Callback = cb
		rt := newRuntime(model.StateScheduled, int64(5000+i))
		if err := s.CreateTask(ctx, def, rt); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, def.ID)
		want = append(want, model.Task{Def: *def, Runtime: *rt})
	}
	got := collect(t, func(fn func(*model.Task) error) error { return s.LoadByIDs(ctx, ids, fn) })
	equal(t, "LoadByIDs", got, want)
	got = collect(t, func(fn func(*model.Task) error) error {
		return s.LoadDue(ctx, 5000, 5007, []model.State{model.StateScheduled}, fn)
	})
	equal(t, "LoadDue", got, want)
}

func testLoadByState(t *testing.T, ctx context.Context, s persist.Store) {
	var tasks []*model.Task
	for i, st := range []model.State{model.StateRunning, model.StateWaiting, model.StateRetrying,
		model.StateRunning, model.StateSuccess} {
		tasks = append(tasks, create(t, ctx, s, newDef(fmt.Sprintf("t%d", i)), newRuntime(st, int64(1000-i))))
	}
	load := func(states ...model.State) []string {
		t.Helper()
		return names(collect(t, func(fn func(*model.Task) error) error { return s.LoadByState(ctx, states, fn) }))
	}
	equal(t, "in flight", load(model.StateRunning, model.StateRetrying), []string{"t0", "t2", "t3"})
	equal(t, "success", load(model.StateSuccess), []string{"t4"})
	equal(t, "killed", load(model.StateKilled), []string(nil))
	equal(t, "no states", load(), []string(nil))

	stop := errors.New("stop")
	err := s.LoadByState(ctx, []model.State{model.StateRunning}, func(*model.Task) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("LoadByState = %v, want the callback's error", err)
	}
	loaded := collect(t, func(fn func(*model.Task) error) error {
		return s.LoadByState(ctx, []model.State{model.StateWaiting}, fn)
	})
	equal(t, "loaded task", &loaded[0], tasks[1])
}

// ---- batches ----

func testApplySuccess(t *testing.T, ctx context.Context, s persist.Store) {
	a := create(t, ctx, s, newDef("a"), newRuntime(model.StateScheduled, 100))
	b := create(t, ctx, s, newDef("b"), newRuntime(model.StateScheduled, 100))
	ta := transition(a, model.StateRunning, 160)
	ta.Runtime.CurrentTicket, ta.Runtime.Attempt, ta.Runtime.LastTriggerTime = "a-1", 1, 100
	ta.Runtime.LastExecutor, ta.Runtime.Note = "10.0.0.1:9000", "dispatched"
	tb := transition(b, model.StateFailed, 0)
	tb.Runtime.FailureCount, tb.Runtime.LastEndTime = 1, 130
	runA := newRun(a, "a-1", 100, model.ResultRunning)
	runB := newRun(b, "b-1", 100, model.ResultFailed)
	runB.EndedAt, runB.Error, runB.DurationMS, runB.Output, runB.Detail = 130, "exit 1", 27, "tail", "upstream x"
	batch := &persist.Batch{
		Transitions: []persist.Transition{ta, tb},
		Runs:        []model.Run{runA, runB},
		Actions: []model.Action{
			newAction(a, "a-1", "dispatch", model.StateScheduled, model.StateRunning, 101),
			newAction(b, "b-1", "result", model.StateScheduled, model.StateFailed, 130),
		},
	}
	if err := s.ApplyBatch(ctx, batch); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	for i, tr := range batch.Transitions {
		if tr.Runtime.Version != tr.ExpectVersion+1 {
			t.Fatalf("transition %d: Runtime.Version = %d, want %d", i, tr.Runtime.Version, tr.ExpectVersion+1)
		}
	}
	wantA := ta.Runtime
	wantA.Version = 2
	equal(t, "runtime a", getByID(t, ctx, s, a.Def.ID).Runtime, wantA)
	wantB := tb.Runtime
	wantB.Version = 2
	equal(t, "runtime b", getByID(t, ctx, s, b.Def.ID).Runtime, wantB)
	for _, want := range []model.Run{runA, runB} {
		got, err := s.GetRun(ctx, want.Ticket)
		if err != nil {
			t.Fatalf("GetRun(%s): %v", want.Ticket, err)
		}
		equal(t, "run "+want.Ticket, *got, want)
	}
	got := wantActions(t, ctx, s, a.Def.ID, 1)[0]
	want := batch.Actions[0]
	want.ID = got.ID
	equal(t, "action", got, want)
	if got.ID <= 0 {
		t.Fatalf("action id %d", got.ID)
	}
	// The definition is not touched by a batch.
	equal(t, "def a", getByID(t, ctx, s, a.Def.ID).Def, a.Def)
}

func testApplyStale(t *testing.T, ctx context.Context, s persist.Store) {
	a := create(t, ctx, s, newDef("a"), newRuntime(model.StateScheduled, 100))
	b := create(t, ctx, s, newDef("b"), newRuntime(model.StateScheduled, 100))
	stale := transition(b, model.StateRunning, 0)
	stale.ExpectVersion = 0 // b is at version 1
	ahead := transition(b, model.StateRunning, 0)
	ahead.ExpectVersion = 5
	batch := &persist.Batch{
		Transitions: []persist.Transition{transition(a, model.StateRunning, 0), stale, ahead},
		Runs:        []model.Run{newRun(a, "a-1", 100, model.ResultRunning)},
		Actions:     []model.Action{newAction(a, "a-1", "dispatch", model.StateScheduled, model.StateRunning, 101)},
	}
	wantConflict(t, s.ApplyBatch(ctx, batch), 1, 2)
	equal(t, "a untouched", getByID(t, ctx, s, a.Def.ID), a)
	equal(t, "b untouched", getByID(t, ctx, s, b.Def.ID), b)
	wantNoRun(t, ctx, s, "a-1")
	wantActions(t, ctx, s, a.Def.ID, 0)
}

func testApplyMissingRow(t *testing.T, ctx context.Context, s persist.Store) {
	live := create(t, ctx, s, newDef("live"), newRuntime(model.StateScheduled, 100))
	dead := create(t, ctx, s, newDef("dead"), newRuntime(model.StateScheduled, 100))
	if err := s.DeleteTask(ctx, dead.Def.ID); err != nil {
		t.Fatalf("DeleteTask: %v", err)
	}
	never := transition(live, model.StateRunning, 0)
	never.Runtime.TaskID = 987654
	batch := &persist.Batch{Transitions: []persist.Transition{
		transition(dead, model.StateRunning, 0), transition(live, model.StateRunning, 0), never}}
	wantConflict(t, s.ApplyBatch(ctx, batch), 0, 2)
	// No runtime row was created for the deleted or unknown task.
	all := collect(t, func(fn func(*model.Task) error) error {
		return s.LoadByState(ctx, []model.State{model.StateRunning, model.StateScheduled}, fn)
	})
	equal(t, "tasks", names(all), []string{"live"})
	equal(t, "live untouched", &all[0], live)
	// Once the conflicting transitions are dropped, the rest applies.
	if err := s.ApplyBatch(ctx, &persist.Batch{Transitions: batch.Transitions[1:2]}); err != nil {
		t.Fatalf("ApplyBatch(retry): %v", err)
	}
	if got := getByID(t, ctx, s, live.Def.ID).Runtime; got.State != model.StateRunning || got.Version != 2 {
		t.Fatalf("live after retry: %+v", got)
	}
}

func testApplyChained(t *testing.T, ctx context.Context, s persist.Store) {
	task := create(t, ctx, s, newDef("chain"), newRuntime(model.StateScheduled, 100))
	t1 := transition(task, model.StateRunning, 100)
	t2 := t1
	t2.ExpectVersion = 2
	t2.Runtime.State, t2.Runtime.SuccessCount = model.StateSuccess, 1
	t3 := t2
	t3.ExpectVersion = 3
	t3.Runtime.State, t3.Runtime.NextTriggerTime = model.StateScheduled, 200
	batch := &persist.Batch{Transitions: []persist.Transition{t1, t2, t3}}
	if err := s.ApplyBatch(ctx, batch); err != nil {
		t.Fatalf("ApplyBatch(chain): %v", err)
	}
	want := t3.Runtime
	want.Version = 4
	equal(t, "final runtime", getByID(t, ctx, s, task.Def.ID).Runtime, want)
	equal(t, "versions set", []int64{batch.Transitions[0].Runtime.Version,
		batch.Transitions[1].Runtime.Version, batch.Transitions[2].Runtime.Version}, []int64{2, 3, 4})

	// Chains of different lengths in one batch, one of them starting from a stale version:
	// the batch is rejected, naming the stale transition. The chain's second transition
	// expects what is stored, so on its own it would have applied; the whole batch does not.
	cur := getByID(t, ctx, s, task.Def.ID)
	other := create(t, ctx, s, newDef("chain-other"), newRuntime(model.StateScheduled, 100))
	staleStart := transition(cur, model.StateRunning, 0)
	staleStart.ExpectVersion = cur.Runtime.Version - 1
	thenRight := transition(cur, model.StateSuccess, 0)
	mixed := &persist.Batch{Transitions: []persist.Transition{
		transition(other, model.StateRunning, 0), staleStart, thenRight}}
	wantConflict(t, s.ApplyBatch(ctx, mixed), 1)
	equal(t, "chain after the rejected mix", getByID(t, ctx, s, task.Def.ID), cur)
	equal(t, "other after the rejected mix", getByID(t, ctx, s, other.Def.ID), other)
	// The same lengths, every chain right: both apply.
	o1 := transition(other, model.StateRunning, 0)
	o2 := o1
	o2.ExpectVersion++
	o2.Runtime.State = model.StateSuccess
	c1 := transition(cur, model.StateRunning, 0)
	mixed = &persist.Batch{Transitions: []persist.Transition{o1, c1, o2}}
	if err := s.ApplyBatch(ctx, mixed); err != nil {
		t.Fatalf("ApplyBatch(chains of 2 and 1): %v", err)
	}
	if got := getByID(t, ctx, s, other.Def.ID).Runtime; got.State != model.StateSuccess || got.Version != other.Runtime.Version+2 {
		t.Fatalf("other after its chain of 2: %+v", got)
	}
	if got := getByID(t, ctx, s, task.Def.ID).Runtime; got.State != model.StateRunning || got.Version != cur.Runtime.Version+1 {
		t.Fatalf("chain task after one more: %+v", got)
	}

	// Two transitions expecting the same version: the second one lost the race inside the
	// batch, and the whole batch is rejected.
	cur = getByID(t, ctx, s, task.Def.ID)
	twice := &persist.Batch{Transitions: []persist.Transition{
		transition(cur, model.StateRunning, 0), transition(cur, model.StateFailed, 0)}}
	wantConflict(t, s.ApplyBatch(ctx, twice), 1)
	equal(t, "after rejected chain", getByID(t, ctx, s, task.Def.ID), cur)
}

func testApplyConflictRollsBack(t *testing.T, ctx context.Context, s persist.Store) {
	tasks := createMany(t, ctx, s, "rb", 3, func(int) int64 { return 100 })
	stale := transition(tasks[1], model.StateRunning, 0)
	stale.ExpectVersion = 9
	batch := &persist.Batch{
		Transitions: []persist.Transition{
			transition(tasks[0], model.StateRunning, 0), stale, transition(tasks[2], model.StateRunning, 0)},
	}
	for i, task := range tasks {
		ticket := fmt.Sprintf("rb-run-%d", i)
		batch.Runs = append(batch.Runs, newRun(task, ticket, 100, model.ResultRunning))
		batch.Actions = append(batch.Actions, newAction(task, ticket, "dispatch", model.StateScheduled, model.StateRunning, 101))
	}
	wantConflict(t, s.ApplyBatch(ctx, batch), 1)
	for i, task := range tasks {
		equal(t, "task after rollback", getByID(t, ctx, s, task.Def.ID), task)
		wantNoRun(t, ctx, s, fmt.Sprintf("rb-run-%d", i))
		wantActions(t, ctx, s, task.Def.ID, 0)
	}
	// Without the stale transition the same batch applies completely.
	batch.Transitions[1].ExpectVersion = 1
	if err := s.ApplyBatch(ctx, batch); err != nil {
		t.Fatalf("ApplyBatch(fixed): %v", err)
	}
	for i, task := range tasks {
		if got := getByID(t, ctx, s, task.Def.ID).Runtime; got.State != model.StateRunning || got.Version != 2 {
			t.Fatalf("task %d after fixed batch: %+v", i, got)
		}
		if _, err := s.GetRun(ctx, fmt.Sprintf("rb-run-%d", i)); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		wantActions(t, ctx, s, task.Def.ID, 1)
	}
}

func testApplyRunUpsert(t *testing.T, ctx context.Context, s persist.Store) {
	task := create(t, ctx, s, newDef("runs"), newRuntime(model.StateScheduled, 100))
	other := create(t, ctx, s, newDef("other"), newRuntime(model.StateScheduled, 100))
	first := newRun(task, "r-1", 100, model.ResultRunning)
	first.Output = "first"
	later := first
	later.Result, later.EndedAt, later.DurationMS, later.Output = model.ResultSuccess, 150, 47, ""
	apply := func(runs ...model.Run) {
		t.Helper()
		if err := s.ApplyBatch(ctx, &persist.Batch{Runs: runs}); err != nil {
			t.Fatalf("ApplyBatch: %v", err)
		}
	}
	// Within one batch the later row wins, columns it zeroes included.
	apply(first, newRun(task, "r-2", 200, model.ResultRunning), later)
	got, err := s.GetRun(ctx, "r-1")
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	equal(t, "r-1 after one batch", *got, later)

	// Across batches too.
	final := newRun(task, "r-2", 200, model.ResultTimeout)
	final.Error, final.EndedAt = "no result within 300s", 500
	apply(final, newRun(task, "r-3", 200, model.ResultLost), newRun(task, "r-0", 50, model.ResultSuccess),
		newRun(other, "o-1", 10, model.ResultLost))
	got, err = s.GetRun(ctx, "r-2")
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	equal(t, "r-2 after second batch", *got, final)

	tickets := func(runs []model.Run, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatalf("list runs: %v", err)
		}
		out := make([]string, len(runs))
		for i, r := range runs {
			out[i] = r.Ticket
		}
		return out
	}
	// Newest first by scheduled_at, ties by ticket descending.
	equal(t, "ListRuns", tickets(s.ListRuns(ctx, task.Def.ID, 0)), []string{"r-3", "r-2", "r-1", "r-0"})
	equal(t, "ListRuns limit", tickets(s.ListRuns(ctx, task.Def.ID, 2)), []string{"r-3", "r-2"})
	equal(t, "ListRuns other", tickets(s.ListRuns(ctx, other.Def.ID, 0)), []string{"o-1"})
	// No run-now instance yet: periodic runs, running or not, are never listed.
	apply(newRun(task, "r-4", 300, model.ResultRunning))
	equal(t, "running manual, none", tickets(s.ListRunningManual(ctx, 0)), []string{})

	manual := func(ticket string, at int64, result string) model.Run {
		r := newRun(task, ticket, at, result)
		r.Kind = model.RunManual
		return r
	}
	apply(manual("m-2", 300, model.ResultRunning), manual("m-1", 300, model.ResultRunning),
		manual("m-0", 100, model.ResultRunning), manual("m-done", 50, model.ResultSuccess))
	// Oldest first, ties by ticket.
	equal(t, "running manual", tickets(s.ListRunningManual(ctx, 0)), []string{"m-0", "m-1", "m-2"})
	equal(t, "running manual limit", tickets(s.ListRunningManual(ctx, 1)), []string{"m-0"})
	// A finished instance leaves the list; one written again as running comes back.
	apply(manual("m-1", 300, model.ResultKilled), manual("m-done", 50, model.ResultRunning))
	equal(t, "running manual after results", tickets(s.ListRunningManual(ctx, 0)), []string{"m-done", "m-0", "m-2"})
}

func testApplyNoTransitions(t *testing.T, ctx context.Context, s persist.Store) {
	task := create(t, ctx, s, newDef("manual"), newRuntime(model.StateRunning, 0))
	// A run-now instance: a run and its action, without touching the state machine.
	batch := &persist.Batch{
		Runs:    []model.Run{newRun(task, "m-1", 10, model.ResultRunning)},
		Actions: []model.Action{newAction(task, "m-1", "run_now", "", "", 10)},
	}
	if err := s.ApplyBatch(ctx, batch); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	if _, err := s.GetRun(ctx, "m-1"); err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	wantActions(t, ctx, s, task.Def.ID, 1)
	equal(t, "runtime untouched", getByID(t, ctx, s, task.Def.ID), task)
	if err := s.ApplyBatch(ctx, &persist.Batch{}); err != nil {
		t.Fatalf("ApplyBatch(empty): %v", err)
	}
}

func testApplyLarge(t *testing.T, ctx context.Context, s persist.Store) {
	// More rows than one statement takes, so every write is split.
	const nTasks, perTask = 520, 3
	tasks := createMany(t, ctx, s, "big", nTasks, func(i int) int64 { return int64(i) + 1 })
	batch := &persist.Batch{}
	for i, task := range tasks {
		batch.Transitions = append(batch.Transitions, transition(task, model.StateRunning, int64(i)+1))
		for j := range perTask {
			ticket := fmt.Sprintf("big-%d-%d", i, j)
			batch.Runs = append(batch.Runs, newRun(task, ticket, int64(j), model.ResultRunning))
			batch.Actions = append(batch.Actions, newAction(task, ticket, "dispatch", model.StateScheduled, model.StateRunning, int64(j)))
		}
	}
	if err := s.ApplyBatch(ctx, batch); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	running := collect(t, func(fn func(*model.Task) error) error {
		return s.LoadByState(ctx, []model.State{model.StateRunning}, fn)
	})
	if len(running) != nTasks {
		t.Fatalf("%d tasks RUNNING, want %d", len(running), nTasks)
	}
	for _, task := range []*model.Task{tasks[0], tasks[nTasks/2], tasks[nTasks-1]} {
		runs, err := s.ListRuns(ctx, task.Def.ID, 0)
		if err != nil || len(runs) != perTask {
			t.Fatalf("ListRuns(%s) = %d runs, %v; want %d", task.Def.Name, len(runs), err, perTask)
		}
		acts := wantActions(t, ctx, s, task.Def.ID, perTask)
		// Action ids follow batch order.
		if !(acts[0].ID > acts[1].ID && acts[1].ID > acts[2].ID) || acts[0].At != perTask-1 {
			t.Fatalf("actions of %s out of order: %+v", task.Def.Name, acts)
		}
	}
}

// testApplyLargeConflict spreads one task per transition over more rows than one statement
// takes, with a stale version in the first statement and a deleted task in the last, so a
// store that writes the runtimes in several statements (and checks the versions within them)
// must still catch both, roll back the statements that applied and recreate nothing.
func testApplyLargeConflict(t *testing.T, ctx context.Context, s persist.Store) {
	const n, stale, gone = 300, 10, 290
	tasks := createMany(t, ctx, s, "lc", n, func(i int) int64 { return int64(i) + 1 })
	if err := s.DeleteTask(ctx, tasks[gone].Def.ID); err != nil {
		t.Fatalf("DeleteTask: %v", err)
	}
	batch := &persist.Batch{}
	for i, task := range tasks {
		tr := transition(task, model.StateRunning, 0)
		if i == stale {
			tr.ExpectVersion = 0 // the task is at version 1
		}
		batch.Transitions = append(batch.Transitions, tr)
		batch.Runs = append(batch.Runs, newRun(task, fmt.Sprintf("lc-%d", i), 100, model.ResultRunning))
	}
	wantConflict(t, s.ApplyBatch(ctx, batch), stale, gone)
	for _, i := range []int{0, stale, 255, 256, n - 1} {
		equal(t, fmt.Sprintf("task %d after the rejected batch", i), getByID(t, ctx, s, tasks[i].Def.ID), tasks[i])
		wantNoRun(t, ctx, s, fmt.Sprintf("lc-%d", i))
	}
	if _, err := s.GetTaskByID(ctx, tasks[gone].Def.ID); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("deleted task after the rejected batch: %v, want ErrTaskNotFound", err)
	}
	// Without the two the rest applies, every task once.
	batch.Transitions = slices.Delete(batch.Transitions, gone, gone+1)
	batch.Transitions = slices.Delete(batch.Transitions, stale, stale+1)
	batch.Runs = nil
	if err := s.ApplyBatch(ctx, batch); err != nil {
		t.Fatalf("ApplyBatch(without the conflicts): %v", err)
	}
	running := collect(t, func(fn func(*model.Task) error) error {
		return s.LoadByState(ctx, []model.State{model.StateRunning}, fn)
	})
	if len(running) != n-2 {
		t.Fatalf("%d tasks RUNNING, want %d", len(running), n-2)
	}
	for i, tr := range batch.Transitions {
		if tr.Runtime.Version != 2 {
			t.Fatalf("transition %d: version %d after apply, want 2", i, tr.Runtime.Version)
		}
	}
	if got := getByID(t, ctx, s, tasks[stale].Def.ID); got.Runtime.State != model.StateScheduled || got.Runtime.Version != 1 {
		t.Fatalf("the stale task changed: %+v", got.Runtime)
	}
}

func testApplyOversizedText(t *testing.T, ctx context.Context, s persist.Store) {
	task := create(t, ctx, s, newDef("noisy"), newRuntime(model.StateRunning, 0))
	huge := strings.Repeat("é", 50_000) // 100,000 bytes of two-byte runes
	bad := "ok\xffbad"                  // not UTF-8
	batch := &persist.Batch{}
	// Twenty 60 KB outputs: more than one statement's byte budget.
	for i := range 20 {
		r := newRun(task, fmt.Sprintf("n-%02d", i), int64(i), model.ResultFailed)
		r.Output = strings.Repeat("x", 60_000)
		batch.Runs = append(batch.Runs, r)
	}
	batch.Runs[0].Output, batch.Runs[0].Error = huge, bad
	if err := s.ApplyBatch(ctx, batch); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	got, err := s.GetRun(ctx, "n-00")
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	if len(got.Output) > 65535 || len(got.Output) < 65000 || !strings.HasPrefix(huge, got.Output) {
		t.Fatalf("oversized output stored as %d bytes, want a prefix of at most 65535", len(got.Output))
	}
	if got.Error != "ok\uFFFDbad" {
		t.Fatalf("invalid UTF-8 stored as %q", got.Error)
	}
	runs, err := s.ListRuns(ctx, task.Def.ID, 0)
	if err != nil || len(runs) != 20 {
		t.Fatalf("ListRuns = %d, %v; want 20", len(runs), err)
	}
	if len(runs[0].Output) != 60_000 {
		t.Fatalf("60 KB output stored as %d bytes", len(runs[0].Output))
	}
}

func testApplyConcurrentCAS(t *testing.T, ctx context.Context, s persist.Store) {
	task := create(t, ctx, s, newDef("contended"), newRuntime(model.StateScheduled, 100))
	const racers, rounds = 8, 4
	for round := range rounds {
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				tr := transition(task, model.StateRunning, 100)
				tr.Runtime.CurrentTicket = fmt.Sprintf("c-%d-%d", round, i)
				b := &persist.Batch{
					Transitions: []persist.Transition{tr},
					Runs:        []model.Run{newRun(task, tr.Runtime.CurrentTicket, 100, model.ResultRunning)},
				}
				<-start // all racers read the same version at (nearly) the same time
				errs[i] = s.ApplyBatch(ctx, b)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: two dispatchers won the same CAS: %d and %d", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, model.ErrVersionConflict):
				t.Fatalf("round %d: loser %d: %v, want a version conflict", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no dispatcher won", round)
		}
		cur := getByID(t, ctx, s, task.Def.ID)
		ticket := fmt.Sprintf("c-%d-%d", round, winner)
		if cur.Runtime.Version != task.Runtime.Version+1 || cur.Runtime.CurrentTicket != ticket {
			t.Fatalf("round %d: runtime %+v, want version %d and the winner's ticket %s",
				round, cur.Runtime, task.Runtime.Version+1, ticket)
		}
		task = cur
	}
	runs, err := s.ListRuns(ctx, task.Def.ID, 0)
	if err != nil || len(runs) != rounds {
		t.Fatalf("ListRuns = %d runs, %v; only the %d winners' runs may exist", len(runs), err, rounds)
	}
}

func testApplyEpoch(t *testing.T, ctx context.Context, s persist.Store) {
	task := create(t, ctx, s, newDef("fenced"), newRuntime(model.StateScheduled, 100))
	fenced := func(epoch int64, cur *model.Task, ticket string) *persist.Batch {
		return &persist.Batch{Epoch: epoch, LeaseName: leaseName,
			Transitions: []persist.Transition{transition(cur, model.StateRunning, 100)},
			Runs:        []model.Run{newRun(cur, ticket, 100, model.ResultRunning)},
			Actions:     []model.Action{newAction(cur, ticket, "dispatch", model.StateScheduled, model.StateRunning, 100)},
		}
	}
	// No lease yet: a fenced batch cannot prove its epoch.
	if err := s.ApplyBatch(ctx, fenced(1, task, "e-0")); !errors.Is(err, model.ErrLeaseLost) {
		t.Fatalf("ApplyBatch without a lease row = %v, want ErrLeaseLost", err)
	}
	if err := s.ApplyBatch(ctx, &persist.Batch{Epoch: 1, Runs: []model.Run{newRun(task, "e-x", 1, "")}}); err == nil {
		t.Fatalf("ApplyBatch with an epoch and no lease name succeeded")
	}
	l1, ok, err := s.TakeLease(ctx, leaseName, "node-1", time.Minute)
	if err != nil || !ok || l1.Epoch != 1 {
		t.Fatalf("TakeLease = %+v, %v, %v", l1, ok, err)
	}
	if err := s.ApplyBatch(ctx, fenced(1, task, "e-1")); err != nil {
		t.Fatalf("ApplyBatch(current epoch): %v", err)
	}
	cur := getByID(t, ctx, s, task.Def.ID)
	// node-1 lets go and node-2 takes over: node-1's writes must now fail.
	if err := s.ReleaseLease(ctx, leaseName, "node-1", 1); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	l2, ok, err := s.TakeLease(ctx, leaseName, "node-2", time.Minute)
	if err != nil || !ok || l2.Epoch != 2 {
		t.Fatalf("takeover = %+v, %v, %v", l2, ok, err)
	}
	if err := s.ApplyBatch(ctx, fenced(1, cur, "e-2")); !errors.Is(err, model.ErrLeaseLost) {
		t.Fatalf("ApplyBatch(stale epoch) = %v, want ErrLeaseLost", err)
	}
	equal(t, "task after fenced batch", getByID(t, ctx, s, task.Def.ID), cur)
	wantNoRun(t, ctx, s, "e-2")
	wantActions(t, ctx, s, task.Def.ID, 1)
	if err := s.ApplyBatch(ctx, fenced(2, cur, "e-3")); err != nil {
		t.Fatalf("ApplyBatch(new epoch): %v", err)
	}
	// An unfenced batch (Epoch 0) is not checked: single-node mode.
	if err := s.ApplyBatch(ctx, &persist.Batch{Runs: []model.Run{newRun(task, "e-4", 1, "")}}); err != nil {
		t.Fatalf("ApplyBatch(unfenced): %v", err)
	}
}

func testActions(t *testing.T, ctx context.Context, s persist.Store) {
	a := create(t, ctx, s, newDef("a"), newRuntime(model.StateScheduled, 0))
	b := create(t, ctx, s, newDef("b"), newRuntime(model.StateScheduled, 0))
	for i := range 3 {
		batch := &persist.Batch{Actions: []model.Action{
			newAction(a, "", fmt.Sprintf("a%d", i), model.StateWaiting, model.StateScheduled, int64(i)),
			newAction(b, "", fmt.Sprintf("b%d", i), "", "", int64(i)),
		}}
		if err := s.ApplyBatch(ctx, batch); err != nil {
			t.Fatalf("ApplyBatch: %v", err)
		}
	}
	acts := wantActions(t, ctx, s, a.Def.ID, 3)
	var got []string
	for _, act := range acts {
		got = append(got, act.Action)
		if act.TaskID != a.Def.ID || act.From != model.StateWaiting || act.To != model.StateScheduled {
			t.Fatalf("action %+v", act)
		}
	}
	equal(t, "newest first", got, []string{"a2", "a1", "a0"})
	limited, err := s.ListActions(ctx, b.Def.ID, 2)
	if err != nil || len(limited) != 2 || limited[0].Action != "b2" || limited[1].Action != "b1" {
		t.Fatalf("ListActions(limit 2) = %+v, %v", limited, err)
	}
	if limited[1].ID >= limited[0].ID {
		t.Fatalf("ids not increasing with append order: %+v", limited)
	}
}

// ---- executors ----

func testExecutors(t *testing.T, ctx context.Context, s persist.Store) {
	upsert := func(e model.Executor) {
		t.Helper()
		if err := s.UpsertExecutor(ctx, &e); err != nil {
			t.Fatalf("UpsertExecutor(%s@%s): %v", e.App, e.Address, err)
		}
	}
	list := func() []model.Executor {
		t.Helper()
		es, err := s.ListExecutors(ctx)
		if err != nil {
			t.Fatalf("ListExecutors: %v", err)
		}
		return es
	}
	if len(list()) != 0 {
		t.Fatalf("fresh store has executors")
	}
	e := model.Executor{App: "billing", Address: "10.0.0.2:9000", Protocol: "http",
		Handlers: []string{"settle"}, RegisteredAt: 100, LastHeartbeat: 100, Status: "alive",
		DispatchKey: strings.Repeat("ab", 32), Incarnation: "0123456789abcdef0123456789abcdef"}
	upsert(e)
	upsert(model.Executor{App: "billing", Address: "10.0.0.1:9000", Protocol: "http", RegisteredAt: 50, LastHeartbeat: 50, Status: "alive"})
	upsert(model.Executor{App: "alpha", Address: "10.0.0.9:9000", Protocol: "http", Handlers: []string{}, RegisteredAt: 70, LastHeartbeat: 70, Status: "lost"})

	// A restart re-registers: same row, new handlers, heartbeat and dispatch key (another
	// token), first registration kept. A registration without a key clears it.
	again := e
	again.Protocol, again.Handlers, again.RegisteredAt, again.LastHeartbeat = "http2", []string{"settle", "refund"}, 900, 900
	legacy := again
	legacy.DispatchKey = ""
	upsert(legacy)
	if got := list(); len(got) != 3 || got[2].DispatchKey != "" {
		t.Fatalf("after a registration without a key: %+v", got)
	}
	// A restarted executor of protocol version 2 registers its new incarnation.
	again.DispatchKey, again.Incarnation = strings.Repeat("cd", 32), "fedcba9876543210fedcba9876543210"
	upsert(again)
	upsert(again) // idempotent
	want := again
	want.RegisteredAt = 100
	es := list()
	if len(es) != 3 {
		t.Fatalf("ListExecutors = %+v, want 3 (no ghost executors)", es)
	}
	equal(t, "order", []string{es[0].App + "@" + es[0].Address, es[1].App + "@" + es[1].Address, es[2].App + "@" + es[2].Address},
		[]string{"alpha@10.0.0.9:9000", "billing@10.0.0.1:9000", "billing@10.0.0.2:9000"})
	equal(t, "re-registered", es[2], want)

	if err := s.SetExecutorStatus(ctx, "billing", "10.0.0.2:9000", "lost"); err != nil {
		t.Fatalf("SetExecutorStatus: %v", err)
	}
	if err := s.SetExecutorStatus(ctx, "billing", "10.0.0.2:9000", "lost"); err != nil {
		t.Fatalf("SetExecutorStatus (unchanged): %v", err)
	}
	if got := list()[2]; got.Status != "lost" || got.LastHeartbeat != 900 {
		t.Fatalf("after SetExecutorStatus: %+v", got)
	}
	for range 2 { // the second heartbeat changes nothing and still succeeds
		if err := s.Heartbeat(ctx, "billing", "10.0.0.2:9000", 1000); err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
	}
	got := list()[2]
	want.LastHeartbeat, want.Status = 1000, "alive"
	equal(t, "after heartbeat", got, want)
	equal(t, "others untouched", list()[1].LastHeartbeat, int64(50))

	// A deregistered executor stays "left" through its heartbeats, until it registers again.
	if err := s.SetExecutorStatus(ctx, "billing", "10.0.0.2:9000", "left"); err != nil {
		t.Fatalf("SetExecutorStatus(left): %v", err)
	}
	if err := s.Heartbeat(ctx, "billing", "10.0.0.2:9000", 1100); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if got := list()[2]; got.Status != "left" || got.LastHeartbeat != 1100 {
		t.Fatalf("a heartbeat after leaving: %+v, want left with the new heartbeat", got)
	}
	upsert(want)
	if err := s.Heartbeat(ctx, "billing", "10.0.0.2:9000", 1000); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	equal(t, "registered again", list()[2], want)

	if err := s.Heartbeat(ctx, "billing", "10.0.0.3:9000", 1); !errors.Is(err, model.ErrExecutorNotFound) {
		t.Fatalf("Heartbeat(unknown) = %v, want ErrExecutorNotFound", err)
	}
	if err := s.SetExecutorStatus(ctx, "nobody", "x", "lost"); !errors.Is(err, model.ErrExecutorNotFound) {
		t.Fatalf("SetExecutorStatus(unknown) = %v, want ErrExecutorNotFound", err)
	}

	// DeleteExecutor forgets one row, and an unknown one is not an error.
	for range 2 {
		if err := s.DeleteExecutor(ctx, "billing", "10.0.0.1:9000"); err != nil {
			t.Fatalf("DeleteExecutor: %v", err)
		}
	}
	es = list()
	equal(t, "after DeleteExecutor", []string{es[0].App + "@" + es[0].Address, es[1].App + "@" + es[1].Address},
		[]string{"alpha@10.0.0.9:9000", "billing@10.0.0.2:9000"})
	if err := s.Heartbeat(ctx, "billing", "10.0.0.1:9000", 2000); !errors.Is(err, model.ErrExecutorNotFound) {
		t.Fatalf("Heartbeat(deleted) = %v, want ErrExecutorNotFound", err)
	}
}

// ---- lease ----

func testLease(t *testing.T, ctx context.Context, s persist.Store) {
	take := func(holder string, ttl time.Duration) (persist.LeaseState, bool) {
		t.Helper()
		l, ok, err := s.TakeLease(ctx, leaseName, holder, ttl)
		if err != nil {
			t.Fatalf("TakeLease(%s): %v", holder, err)
		}
		return l, ok
	}
	state := func() persist.LeaseState {
		t.Helper()
		l, err := s.LeaseState(ctx, leaseName)
		if err != nil {
			t.Fatalf("LeaseState: %v", err)
		}
		return l
	}
	renew := func(holder string, epoch int64, ttl time.Duration) error {
		t.Helper()
		return s.RenewLease(ctx, leaseName, holder, epoch, ttl)
	}
	// who is the part of a lease the database's clock does not move.
	who := func(l persist.LeaseState) []any { return []any{l.Holder, l.Epoch, l.Held} }
	equal(t, "no lease yet", state(), persist.LeaseState{})
	if l, err := s.ReadLease(ctx, leaseName); err != nil || l != (model.Lease{}) {
		t.Fatalf("ReadLease with no lease = %+v, %v", l, err)
	}

	// Nodes pass no time: the database's clock sets and judges every expiry.
	l, ok := take("n1", time.Minute)
	equal(t, "first take", []any{who(l), ok}, []any{[]any{"n1", int64(1), true}, true})
	if l.Remaining <= 50*time.Second || l.Remaining > time.Minute {
		t.Fatalf("remaining after a 1m take = %s, want just under 1m", l.Remaining)
	}
	l, ok = take("n2", time.Minute)
	equal(t, "held by another", []any{who(l), ok}, []any{[]any{"n1", int64(1), true}, false})
	if rl, err := s.ReadLease(ctx, leaseName); err != nil || rl.Holder != "n1" || rl.Epoch != 1 || rl.ExpiresAt <= 0 {
		t.Fatalf("ReadLease = %+v, %v", rl, err)
	}

	// Renewal is a CAS on holder and epoch.
	if err := renew("n1", 1, time.Minute); err != nil {
		t.Fatalf("renewal by the holder: %v", err)
	}
	for _, c := range []struct {
		holder string
		epoch  int64
	}{{"n1", 2}, {"n2", 1}, {"n1", 0}} {
		if err := renew(c.holder, c.epoch, time.Minute); !errors.Is(err, model.ErrLeaseLost) {
			t.Fatalf("renew(%s, %d) = %v, want ErrLeaseLost", c.holder, c.epoch, err)
		}
	}
	equal(t, "after refused renewals", who(state()), []any{"n1", int64(1), true})

	// A holder taking its own lease again starts a new epoch; the old one cannot renew.
	l, ok = take("n1", time.Minute)
	equal(t, "re-take by the holder", []any{who(l), ok}, []any{[]any{"n1", int64(2), true}, true})
	if err := renew("n1", 1, time.Minute); !errors.Is(err, model.ErrLeaseLost) {
		t.Fatalf("renew at the old epoch = %v, want ErrLeaseLost", err)
	}

	// Expiry by the database's clock, then a takeover with epoch+1. A renewal of the
	// deposed holder then fails: it must give up at once.
	if err := renew("n1", 2, 300*time.Millisecond); err != nil {
		t.Fatalf("short renewal: %v", err)
	}
	waitUntil(t, "the lease to expire", func() bool { return !state().Held })
	equal(t, "expired", who(state()), []any{"n1", int64(2), false})
	l, ok = take("n2", time.Minute)
	equal(t, "takeover", []any{who(l), ok}, []any{[]any{"n2", int64(3), true}, true})
	if err := renew("n1", 2, time.Minute); !errors.Is(err, model.ErrLeaseLost) {
		t.Fatalf("renewal after takeover = %v, want ErrLeaseLost", err)
	}

	// Release keeps the epoch and frees the lease at once; a stale release changes nothing.
	if err := s.ReleaseLease(ctx, leaseName, "n2", 3); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	equal(t, "released", who(state()), []any{"", int64(3), false})
	l, ok = take("n1", time.Minute)
	equal(t, "take after release", []any{who(l), ok}, []any{[]any{"n1", int64(4), true}, true})
	if err := s.ReleaseLease(ctx, leaseName, "n2", 3); err != nil {
		t.Fatalf("stale ReleaseLease: %v", err)
	}
	equal(t, "after a stale release", who(state()), []any{"n1", int64(4), true})

	// Leases are independent by name.
	other, ok, err := s.TakeLease(ctx, "other", "n2", time.Minute)
	if err != nil || !ok || other.Epoch != 1 {
		t.Fatalf("other lease = %+v, %v, %v", other, ok, err)
	}
	equal(t, "after the other lease", who(state()), []any{"n1", int64(4), true})
}

// waitUntil polls cond for up to 20 s: for what the database's clock decides.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testNodes checks the nodes table: one live instance per id.
func testNodes(t *testing.T, ctx context.Context, s persist.Store) {
	a1 := persist.Node{ID: "a", Advertise: "http://a:7070", Role: persist.RoleBackup, Instance: "i1"}
	if _, err := s.ClaimNode(ctx, a1, time.Minute); err != nil {
		t.Fatalf("ClaimNode(a, i1): %v", err)
	}
	if _, err := s.ClaimNode(ctx, a1, time.Minute); err != nil {
		t.Fatalf("ClaimNode(a, i1) again: %v", err)
	}
	a2 := a1
	a2.Instance, a2.Advertise = "i2", "http://other:7070"
	live, err := s.ClaimNode(ctx, a2, time.Minute)
	if !errors.Is(err, persist.ErrNodeIDTaken) || live.Instance != "i1" || live.Advertise != "http://a:7070" {
		t.Fatalf("ClaimNode(a, i2) while i1 is live = %+v, %v; want ErrNodeIDTaken naming i1", live, err)
	}
	if err := s.TouchNode(ctx, "a", "i1", persist.RolePrimary); err != nil {
		t.Fatalf("TouchNode(i1): %v", err)
	}
	if err := s.TouchNode(ctx, "a", "i2", persist.RolePrimary); !errors.Is(err, persist.ErrNodeIDTaken) {
		t.Fatalf("TouchNode(i2) = %v, want ErrNodeIDTaken", err)
	}
	b := persist.Node{ID: "b", Advertise: "http://b:7070", Role: persist.RoleBackup, Instance: "j1"}
	if _, err := s.ClaimNode(ctx, b, time.Minute); err != nil {
		t.Fatalf("ClaimNode(b): %v", err)
	}
	nodes, err := s.ListNodes(ctx)
	if err != nil {
		t.Fatalf("ListNodes: %v", err)
	}
	if len(nodes) != 2 || nodes[0].ID != "a" || nodes[0].Role != persist.RolePrimary || nodes[1].ID != "b" ||
		nodes[0].Age < -time.Second || nodes[0].Age > 30*time.Second || nodes[0].LastSeen <= 0 {
		t.Fatalf("ListNodes = %+v", nodes)
	}
	// Not seen for longer than liveWithin: the id is free again.
	if _, err := s.ClaimNode(ctx, a2, time.Microsecond); err != nil {
		t.Fatalf("ClaimNode(a, i2) of a silent node: %v", err)
	}
	if err := s.TouchNode(ctx, "a", "i1", persist.RolePrimary); !errors.Is(err, persist.ErrNodeIDTaken) {
		t.Fatalf("TouchNode(i1) after i2 claimed = %v, want ErrNodeIDTaken", err)
	}
	// A stopped node frees its id at once.
	if err := s.TouchNode(ctx, "a", "i2", persist.RoleStopped); err != nil {
		t.Fatalf("TouchNode(stopped): %v", err)
	}
	if _, err := s.ClaimNode(ctx, a1, time.Minute); err != nil {
		t.Fatalf("ClaimNode(a, i1) after i2 stopped: %v", err)
	}
	if ro, err := s.ReadOnly(ctx); err != nil || ro {
		t.Fatalf("ReadOnly = %v, %v; want a writable test server", ro, err)
	}
}

// testFireRecord checks that a fire record is an insert the database refuses when the run
// exists, that the refusal applies nothing of the batch, and that later writes of the run
// are updates (docs/ha.md, "The fire record").
func testFireRecord(t *testing.T, ctx context.Context, s persist.Store) {
	task := create(t, ctx, s, newDef("fired"), newRuntime(model.StateScheduled, 100))
	fire := func(cur *model.Task, ticket string) *persist.Batch {
		return &persist.Batch{
			Transitions: []persist.Transition{transition(cur, model.StateRunning, 100)},
			Fires:       []model.Run{newRun(cur, ticket, 100, model.ResultRunning)},
			Actions:     []model.Action{newAction(cur, ticket, "dispatch", model.StateScheduled, model.StateRunning, 100)},
		}
	}
	if err := s.ApplyBatch(ctx, fire(task, "f-1")); err != nil {
		t.Fatalf("first fire: %v", err)
	}
	cur := getByID(t, ctx, s, task.Def.ID)
	// The same fire again, with a CAS that passes: only the fire record refuses it.
	var re *persist.FireRefusedError
	err := s.ApplyBatch(ctx, fire(cur, "f-1"))
	if !errors.As(err, &re) || !errors.Is(err, persist.ErrDuplicateFire) || !slices.Equal(re.Indexes, []int{0}) {
		t.Fatalf("second fire of one ticket = %v, want *FireRefusedError{[0]}", err)
	}
	equal(t, "task after the refused fire", getByID(t, ctx, s, task.Def.ID), cur)
	wantActions(t, ctx, s, task.Def.ID, 1)
	// Two records of one ticket in one batch: the second is refused before the database.
	b := fire(cur, "f-2")
	b.Fires = append(b.Fires, newRun(cur, "f-3", 100, model.ResultRunning), newRun(cur, "f-2", 100, model.ResultRunning))
	if err := s.ApplyBatch(ctx, b); !errors.As(err, &re) || !slices.Equal(re.Indexes, []int{2}) {
		t.Fatalf("a ticket twice in one batch = %v, want *FireRefusedError{[2]}", err)
	}
	wantNoRun(t, ctx, s, "f-2")
	wantNoRun(t, ctx, s, "f-3")
	// The result of a fire is an update of its record, even in the same batch.
	b = fire(cur, "f-4")
	done := newRun(cur, "f-4", 100, model.ResultSuccess)
	b.Runs = []model.Run{done}
	if err := s.ApplyBatch(ctx, b); err != nil {
		t.Fatalf("fire and result in one batch: %v", err)
	}
	got, err := s.GetRun(ctx, "f-4")
	if err != nil || got.Result != model.ResultSuccess {
		t.Fatalf("GetRun(f-4) = %+v, %v; want the result", got, err)
	}
	if err := s.ApplyBatch(ctx, &persist.Batch{Runs: []model.Run{newRun(cur, "f-1", 100, model.ResultFailed)}}); err != nil {
		t.Fatalf("result of f-1: %v", err)
	}
	if got, err := s.GetRun(ctx, "f-1"); err != nil || got.Result != model.ResultFailed {
		t.Fatalf("GetRun(f-1) = %+v, %v; want the result", got, err)
	}
}

func testLeaseConcurrent(t *testing.T, ctx context.Context, s persist.Store) {
	const n = 6
	type result struct {
		l   persist.LeaseState
		ok  bool
		err error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l, ok, err := s.TakeLease(ctx, leaseName, fmt.Sprintf("n%d", i), time.Minute)
			results[i] = result{l, ok, err}
		})
	}
	wg.Wait()
	winner := ""
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("TakeLease %d: %v", i, r.err)
		}
		if r.ok {
			if winner != "" {
				t.Fatalf("two holders: %s and n%d", winner, i)
			}
			winner = r.l.Holder
		}
	}
	if winner == "" {
		t.Fatalf("nobody got the lease")
	}
	for i, r := range results {
		if r.l.Holder != winner || r.l.Epoch != 1 {
			t.Fatalf("result %d reports %+v, want holder %s at epoch 1", i, r.l, winner)
		}
	}
}

// testConcurrencyLimits: limits are kept by (kind, name), replaced by a second put, listed in
// (kind, name) order and deleted once.
func testConcurrencyLimits(t *testing.T, ctx context.Context, s persist.Store) {
	if got, err := s.ListConcurrencyLimits(ctx); err != nil || len(got) != 0 {
		t.Fatalf("ListConcurrencyLimits on an empty store = %v, %v; want none", got, err)
	}
	put := []model.ConcurrencyLimit{
		{Kind: model.LimitKey, Name: "warehouse-db", Max: 2, UpdatedAt: 10},
		{Kind: model.LimitGroup, Name: "etl", Max: 3, UpdatedAt: 11},
		{Kind: model.LimitGroup, Name: "Etl", Max: 9, UpdatedAt: 12}, // names are byte-compared
		{Kind: model.LimitGroup, Name: "etl", Max: 5, UpdatedAt: 13}, // replaces the first etl
	}
	for _, l := range put {
		if err := s.PutConcurrencyLimit(ctx, l); err != nil {
			t.Fatalf("PutConcurrencyLimit(%+v): %v", l, err)
		}
	}
	want := []model.ConcurrencyLimit{put[2], put[3], put[0]}
	got, err := s.ListConcurrencyLimits(ctx)
	if err != nil {
		t.Fatalf("ListConcurrencyLimits: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ListConcurrencyLimits = %+v, want %+v", got, want)
	}
	if ok, err := s.DeleteConcurrencyLimit(ctx, model.LimitGroup, "etl"); err != nil || !ok {
		t.Fatalf("DeleteConcurrencyLimit(group etl) = %v, %v; want true", ok, err)
	}
	if ok, err := s.DeleteConcurrencyLimit(ctx, model.LimitGroup, "etl"); err != nil || ok {
		t.Fatalf("second DeleteConcurrencyLimit(group etl) = %v, %v; want false", ok, err)
	}
	got, err = s.ListConcurrencyLimits(ctx)
	if err != nil || !reflect.DeepEqual(got, []model.ConcurrencyLimit{put[2], put[0]}) {
		t.Fatalf("ListConcurrencyLimits after delete = %+v, %v", got, err)
	}
}

// testExchangeDemand: each node's exchange reads every node's fresh rows (its own earlier
// ones among them) and replaces its own with what it decides; a row older than the TTL is
// not read, and one older than DemandStaleMS is deleted.
func testExchangeDemand(t *testing.T, ctx context.Context, s persist.Store) {
	ds, ok := s.(persist.DemandStore)
	if !ok {
		t.Skip("the store keeps no rate demand")
	}
	const now = 1_700_000_000_000
	exchange := func(node string, demand map[string]float64, at, ttl int64) map[string]map[string]float64 {
		t.Helper()
		var read map[string]map[string]float64
		got, err := ds.ExchangeDemand(ctx, node, ttl, func() int64 { return at }, func(rows map[string]map[string]float64) map[string]float64 {
			read = rows
			return demand
		})
		if err != nil || got != at {
			t.Fatalf("%s's exchange at %d = %d, %v", node, at, got, err)
		}
		return read
	}
	if got := exchange("n1", map[string]float64{"api:443": 12.5, "tenant:a": 3}, now, 1000); len(got) != 0 {
		t.Fatalf("the first exchange read %v, want nothing", got)
	}
	// " nodes" is the engine's row of a node's share by shards: a leading space is kept.
	got := exchange("n2", map[string]float64{"api:443": 0, " nodes": 0.25}, now+100, 1000)
	if want := (map[string]map[string]float64{"api:443": {"n1": 12.5}, "tenant:a": {"n1": 3}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("n2 read %v, want %v", got, want)
	}
	// n1 again, without tenant:a: it reads its own earlier rows and n2's.
	got = exchange("n1", map[string]float64{"api:443": 4}, now+200, 1000)
	want := map[string]map[string]float64{"api:443": {"n1": 12.5, "n2": 0}, "tenant:a": {"n1": 3}, " nodes": {"n2": 0.25}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("n1's second exchange read %v, want %v", got, want)
	}
	// Past the TTL n2's rows are not read; n1's tenant:a row went with its last exchange.
	got = exchange("n1", map[string]float64{"api:443": 5}, now+1150, 1000)
	if want := (map[string]map[string]float64{"api:443": {"n1": 4}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("n1's third exchange read %v, want %v", got, want)
	}
	// Past DemandStaleMS n2's rows are deleted: a TTL reaching back to them reads nothing of them.
	exchange("n1", nil, now+persist.DemandStaleMS+300, persist.DemandStaleMS+1000)
	if got := exchange("n1", nil, now+persist.DemandStaleMS+400, persist.DemandStaleMS+1000); len(got) != 0 {
		t.Fatalf("after n2's rows went stale and n1 wrote none: %v, want nothing", got)
	}

	// Two exchanges at once run one after the other: of the two decisions written, the later
	// one was made from rows holding the earlier one's (a decision is made again when its
	// transaction is tried again; the last one made is what was written).
	var mu sync.Mutex
	last := map[string]map[string]map[string]float64{}
	inside, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	done := make(chan error, 2)
	at := int64(now + persist.DemandStaleMS + 500)
	go func() {
		_, err := ds.ExchangeDemand(ctx, "a", 1000, func() int64 { return at }, func(rows map[string]map[string]float64) map[string]float64 {
			mu.Lock()
			last["a"] = rows
			mu.Unlock()
			first.Do(func() {
				close(inside)
				<-release // b's exchange begins meanwhile
			})
			return map[string]float64{"from:a": 1}
		})
		done <- err
	}()
	<-inside
	go func() {
		_, err := ds.ExchangeDemand(ctx, "b", 1000, func() int64 { return at }, func(rows map[string]map[string]float64) map[string]float64 {
			mu.Lock()
			last["b"] = rows
			mu.Unlock()
			return map[string]float64{"from:b": 1}
		})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // b waits for a's lock (or, on Galera, commits first)
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("concurrent exchange: %v", err)
		}
	}
	_, aSawB := last["a"]["from:b"]
	_, bSawA := last["b"]["from:a"]
	if !aSawB && !bSawA {
		t.Fatalf("two exchanges at once each decided without the other's rows: a read %v, b read %v", last["a"], last["b"])
	}
}
