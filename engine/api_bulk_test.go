package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// createDayLater creates n delay tasks named prefix-00000… due a day later, so none is held
// in memory once created.
func createDayLater(t *testing.T, e *Engine, prefix string, n int) {
	t.Helper()
	specs := make([]*wire.TaskSpec, n)
	for i := range specs {
		specs[i] = httpSpec(fmt.Sprintf("%s-%05d", prefix, i), "http://127.0.0.1:1/never")
		specs[i].DelayMS = ptr(int64(24 * time.Hour / time.Millisecond))
	}
	if _, err := e.API().CreateTasks(context.Background(), specs, "", "test"); err != nil {
		t.Fatal(err)
	}
}

// countActions counts the action records named action with detail note among a task's.
func countActions(t *testing.T, e *Engine, name, action, note string) int {
	t.Helper()
	acts, err := e.store.ListActions(context.Background(), bulkID(t, e, name), 100)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, a := range acts {
		if a.Action == action && a.Detail == note {
			n++
		}
	}
	return n
}

func bulkID(t *testing.T, e *Engine, name string) int64 {
	t.Helper()
	id, err := e.lookup(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestBulkOverSeveralPages pauses, resumes and deletes more tasks than a page holds: the
// count is exact, dry runs change nothing, and each task gets its own action record with
// the note, its definition and runtime changed together.
func TestBulkOverSeveralPages(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		e := startEngine(t, s)
		const n = 2*bulkPage + 37
		createDayLater(t, e, "pg", n)
		createDayLater(t, e, "other", 3)
		sel := wire.Selector{NamePrefix: "pg-", Note: "maint"}

		if got, err := e.API().Bulk(ctx, BulkPause, sel, true, "test"); err != nil || got != n {
			t.Fatalf("dry-run pause = %d, %v; want %d", got, err, n)
		}
		if pt, _ := e.API().GetTask(ctx, "pg-00000"); pt.Runtime.State != model.StateScheduled || pt.Def.Paused {
			t.Fatalf("after a dry run: %s paused=%v, want SCHEDULED", pt.Runtime.State, pt.Def.Paused)
		}
		if got, err := e.API().Bulk(ctx, BulkPause, sel, false, "test"); err != nil || got != n {
			t.Fatalf("pause = %d, %v; want %d", got, err, n)
		}
		for _, name := range []string{"pg-00000", "pg-00499", "pg-00500", fmt.Sprintf("pg-%05d", n-1)} {
			pt, err := s.GetTask(ctx, name) // durable, not the in-memory copy
			if err != nil {
				t.Fatal(err)
			}
			if pt.Runtime.State != model.StatePaused || !pt.Def.Paused || pt.Runtime.Note != "maint" {
				t.Errorf("%s stored as %s paused=%v note=%q, want PAUSED with the note", name, pt.Runtime.State, pt.Def.Paused, pt.Runtime.Note)
			}
			if c := countActions(t, e, name, ActPause, "maint"); c != 1 {
				t.Errorf("%s has %d pause actions with the note, want 1", name, c)
			}
		}
		if pt, _ := e.API().GetTask(ctx, "other-00000"); pt.Runtime.State != model.StateScheduled {
			t.Errorf("a task outside the selector is %s", pt.Runtime.State)
		}
		paused, err := e.API().ListTasks(ctx, persist.TaskFilter{State: model.StatePaused})
		if err != nil || len(paused) != n {
			t.Fatalf("stored paused tasks = %d, %v; want %d", len(paused), err, n)
		}

		// Pausing paused tasks writes nothing more, and still counts them.
		if got, err := e.API().Bulk(ctx, BulkPause, sel, false, "test"); err != nil || got != n {
			t.Fatalf("pause again = %d, %v; want %d", got, err, n)
		}
		if c := countActions(t, e, "pg-00007", ActPause, "maint"); c != 1 {
			t.Errorf("pausing again wrote %d pause actions in all, want 1", c)
		}

		if got, err := e.API().Bulk(ctx, BulkResume, wire.Selector{NamePrefix: "pg-", State: "paused"}, false, "test"); err != nil || got != n {
			t.Fatalf("resume = %d, %v; want %d", got, err, n)
		}
		if pt, _ := s.GetTask(ctx, "pg-00600"); pt.Runtime.State != model.StateScheduled || pt.Def.Paused {
			t.Errorf("resumed task stored as %s paused=%v", pt.Runtime.State, pt.Def.Paused)
		}

		if got, err := e.API().Bulk(ctx, BulkDelete, wire.Selector{NamePrefix: "pg-", Note: "gone"}, false, "test"); err != nil || got != n {
			t.Fatalf("delete = %d, %v; want %d", got, err, n)
		}
		left, err := e.API().ListTasks(ctx, persist.TaskFilter{NamePrefix: "pg-"})
		if err != nil || len(left) != 0 {
			t.Errorf("after bulk delete %d tasks left, %v", len(left), err)
		}
		acts, err := e.store.ListActions(ctx, mustIDOf(t, paused, "pg-00321"), 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(acts) == 0 || acts[0].Action != ActDelete || acts[0].Detail != "gone" {
			t.Errorf("newest action of a deleted task = %+v, want a delete with the note", acts)
		}
		if got, err := e.API().Bulk(ctx, BulkDelete, sel, false, "test"); err != nil || got != 0 {
			t.Errorf("delete of nothing = %d, %v; want 0", got, err)
		}
	})
}

func mustIDOf(t *testing.T, list []model.Task, name string) int64 {
	t.Helper()
	for _, pt := range list {
		if pt.Def.Name == name {
			return pt.Def.ID
		}
	}
	t.Fatalf("%s not listed", name)
	return 0
}

// TestBulkStaleListedTaskIsRetriedNotClobbered hands a page a task as it was listed before
// an edit: its write conflicts on the version, and the task is paused afresh from the store,
// the edit kept.
func TestBulkStaleListedTaskIsRetriedNotClobbered(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		e := startEngine(t, s)
		createDayLater(t, e, "st", 2)
		listed, err := s.ListTasks(ctx, persist.TaskFilter{NamePrefix: "st-"})
		if err != nil || len(listed) != 2 {
			t.Fatalf("list = %d, %v", len(listed), err)
		}
		spec := httpSpec("st-00000", "http://127.0.0.1:1/edited")
		spec.DelayMS = ptr(int64(24 * time.Hour / time.Millisecond))
		spec.Priority = ptr(3)
		if _, err := e.API().UpdateTask(ctx, "st-00000", spec, "test"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the edited task to leave memory", func() bool {
			return e.tasks.get(listed[0].Def.ID) == nil
		})
		match, err := compileSelector(&wire.Selector{NamePrefix: "st-"})
		if err != nil {
			t.Fatal(err)
		}
		apply := func(ctx context.Context, t *task) error {
			return e.API().pauseLocked(ctx, t, "n", model.PausedByBulk, "test")
		}
		got, err := e.API().bulkApply(ctx, listed, match, apply, true)
		if err != nil || got != 2 {
			t.Fatalf("bulkApply = %d, %v; want 2", got, err)
		}
		for _, name := range []string{"st-00000", "st-00001"} {
			pt, err := s.GetTask(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if pt.Runtime.State != model.StatePaused || !pt.Def.Paused {
				t.Errorf("%s stored as %s paused=%v, want PAUSED", name, pt.Runtime.State, pt.Def.Paused)
			}
			if c := countActions(t, e, name, ActPause, "n"); c != 1 {
				t.Errorf("%s has %d pause actions, want 1", name, c)
			}
		}
		pt, _ := s.GetTask(ctx, "st-00000")
		if pt.Def.Priority != 3 || pt.Def.Callback.URL != "http://127.0.0.1:1/edited" {
			t.Errorf("the edit was clobbered: priority %d, url %s", pt.Def.Priority, pt.Def.Callback.URL)
		}
	})
}

// TestBulkSkipsTaskThatNoLongerMatches: a task that left the selector after its page was
// read (here paused, against a selector of scheduled tasks) is skipped and not counted.
func TestBulkSkipsTaskThatNoLongerMatches(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		e := startEngine(t, s)
		createDayLater(t, e, "sk", 3)
		sel := wire.Selector{NamePrefix: "sk-", State: "scheduled"}
		match, err := compileSelector(&sel)
		if err != nil {
			t.Fatal(err)
		}
		listed, err := e.API().ListTasks(ctx, persist.TaskFilter{NamePrefix: "sk-"})
		if err != nil || len(listed) != 3 {
			t.Fatalf("list = %d, %v", len(listed), err)
		}
		if _, err := e.API().Pause(ctx, "sk-00001", "by hand", "test"); err != nil {
			t.Fatal(err)
		}
		apply := func(ctx context.Context, t *task) error { return e.API().bulkDeleteLocked(ctx, t, "bulk", "test") }
		got, err := e.API().bulkApply(ctx, listed, match, apply, false)
		if err != nil || got != 2 {
			t.Fatalf("bulkApply = %d, %v; want 2", got, err)
		}
		left, err := e.API().ListTasks(ctx, persist.TaskFilter{NamePrefix: "sk-"})
		if err != nil || len(left) != 1 || left[0].Def.Name != "sk-00001" || left[0].Runtime.State != model.StatePaused {
			t.Errorf("left = %+v, %v; want only sk-00001, paused", left, err)
		}
	})
}

// TestBulkStaleListedTaskThatNoLongerMatches: a task paused by hand after its page was read
// is built from the stale row (SCHEDULED), so a bulk pause of scheduled tasks writes it and
// conflicts; tried again from the store it no longer matches, and is neither written nor
// counted.
func TestBulkStaleListedTaskThatNoLongerMatches(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		e := startEngine(t, s)
		createDayLater(t, e, "sm", 2)
		match, err := compileSelector(&wire.Selector{NamePrefix: "sm-", State: "scheduled"})
		if err != nil {
			t.Fatal(err)
		}
		listed, err := e.API().ListTasks(ctx, persist.TaskFilter{NamePrefix: "sm-"})
		if err != nil || len(listed) != 2 {
			t.Fatalf("list = %d, %v", len(listed), err)
		}
		if _, err := e.API().Pause(ctx, "sm-00000", "by hand", "test"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the paused task to leave memory", func() bool {
			return e.tasks.get(listed[0].Def.ID) == nil
		})
		apply := func(ctx context.Context, t *task) error {
			return e.API().pauseLocked(ctx, t, "bulk", model.PausedByBulk, "test")
		}
		got, err := e.API().bulkApply(ctx, listed, match, apply, true)
		if err != nil || got != 1 {
			t.Fatalf("bulkApply = %d, %v; want 1", got, err)
		}
		if c := countActions(t, e, "sm-00000", ActPause, "bulk"); c != 0 {
			t.Errorf("the task paused by hand got %d bulk pause actions, want 0", c)
		}
		if pt, _ := s.GetTask(ctx, "sm-00000"); pt.Runtime.Note != "by hand" {
			t.Errorf("the hand pause's note became %q", pt.Runtime.Note)
		}
		if c := countActions(t, e, "sm-00001", ActPause, "bulk"); c != 1 {
			t.Errorf("sm-00001 has %d bulk pause actions, want 1", c)
		}
	})
}
