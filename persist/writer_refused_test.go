package persist_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"pgregory.net/rapid"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// refusedMarker is what the test trigger (persisttest.RefuseParams) refuses in params.
const refusedMarker = "poison"

// newTestDef is a manual task's definition, as the engine would write it.
func newTestDef(name, params string) *model.TaskDef {
	return &model.TaskDef{
		Name: name, Group: "default", Trigger: model.TriggerManual, Timezone: "UTC",
		TimeoutSec: 300, RetryIntervalSec: 30, Priority: 2, MisfirePolicy: model.MisfireFireOnce,
		Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/run"},
		Params:   json.RawMessage(params),
	}
}

// createWithParams is the group of one create, as the engine submits it.
func createWithParams(name, params string) *persist.Group {
	return &persist.Group{Creates: []*persist.TaskCreate{{
		Def:     newTestDef(name, params),
		Runtime: model.Runtime{State: model.StateWaiting},
		Actions: []model.Action{{TaskName: name, Action: "create", To: model.StateWaiting, Actor: "test", At: 1}},
	}}}
}

// transientAt is the real store whose call number at fails once with a transient error, as
// a dropped connection would.
type transientAt struct {
	persist.Store
	at    int64
	calls atomic.Int64
}

func (s *transientAt) ApplyBatch(ctx context.Context, b *persist.Batch) error {
	if s.calls.Add(1) == s.at {
		return errTransient
	}
	return s.Store.ApplyBatch(ctx, b)
}

// TestWriterFailsOnlyRefusedGroups: groups the database refuses for their values, in one
// batch with groups it takes, fail alone with a RejectedError, at once and in submission
// order, and every other group lands, a transient failure in the middle included. Then the
// writer is not stalled and takes the next write. On MySQL the refusals are the server's own
// (an invalid UTF-8 byte, a callback over its TEXT column) besides a trigger's; SQLite stores
// any bytes, so there only its trigger refuses.
func TestWriterFailsOnlyRefusedGroups(t *testing.T) {
	t.Parallel()
	persisttest.EachDSN(t, func(t *testing.T, s persist.Store, dsn string) {
		ctx := testCtx(t)
		persisttest.RefuseParams(t, dsn, refusedMarker)
		kept := newTask(t, s, "kept")
		k := newTask(t, s, "dispatched")
		keptDef, err := s.GetTask(ctx, "kept")
		if err != nil {
			t.Fatal(err)
		}
		editKept := func(change func(d *model.TaskDef)) *persist.Group {
			d := keptDef.Def
			change(&d)
			return &persist.Group{DefUpdates: []model.TaskDef{d}}
		}
		onMySQL := strings.HasPrefix(dsn, persist.SchemeMySQL+":")

		type step struct {
			g    *persist.Group
			code uint16 // the MySQL error of a refused group (0: it lands)
			bad  bool
		}
		steps := []step{
			{g: createWithParams("ok-0", `{"v":1}`)},
			{g: k.next()},
			{g: createWithParams("refused-2", `{"v":"`+refusedMarker+`"}`), bad: true, code: 1644},
			{g: createWithParams("ok-3", `{"v":3}`)},
			{g: editKept(func(d *model.TaskDef) { d.Params = json.RawMessage(`{"v":"` + refusedMarker + `"}`) }), bad: true, code: 1644},
			{g: k.next()},
			{g: createWithParams("ok-6", `{"v":6}`)},
		}
		if onMySQL {
			steps = append(steps,
				step{g: createWithParams("refused-7", "{\"v\":\"\xff\"}"), bad: true, code: 1366}, // not UTF-8
				step{g: editKept(func(d *model.TaskDef) { d.Callback.URL = "http://h/" + strings.Repeat("u", 70_000) }), bad: true, code: 1406},
				step{g: createWithParams("ok-9", `{"v":9}`)})
		}
		refusedBefore := counterValue(t, "axe_writer_rejected_groups_total")
		// The second commit (the first of the isolation) fails transiently: it is retried.
		store := &transientAt{Store: s, at: 2}
		w := newWriter(t, store, persist.WriterConfig{RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond}, false)
		out := newOutcomes(len(steps))
		for i, st := range steps {
			st.g.Done = out.done(i)
			submit(t, w, st.g) // all queued before the start: they form one batch
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i, o := range out.wait(t, len(steps)) {
			st := steps[o.seq]
			switch {
			case o.seq != i:
				t.Errorf("Done %d was for group %d: not in submission order", i, o.seq)
			case !st.bad && o.err != nil:
				t.Errorf("group %d failed: %v", o.seq, o.err)
			case st.bad:
				bad++
				var re *persist.RejectedError
				var me *mysql.MySQLError
				if !errors.Is(o.err, persist.ErrRejected) || !errors.As(o.err, &re) {
					t.Errorf("group %d: %v, want a RejectedError", o.seq, o.err)
				} else if onMySQL && (!errors.As(o.err, &me) || me.Number != st.code) {
					t.Errorf("group %d: %v, want MySQL error %d", o.seq, o.err, st.code)
				}
			}
		}
		for _, name := range []string{"ok-0", "ok-3", "ok-6"} {
			if _, err := s.GetTask(ctx, name); err != nil {
				t.Errorf("%s did not land: %v", name, err)
			}
		}
		for _, name := range []string{"refused-2", "refused-7"} {
			if _, err := s.GetTask(ctx, name); !errors.Is(err, model.ErrTaskNotFound) {
				t.Errorf("%s: %v, want it not created", name, err)
			}
		}
		now, err := s.GetTask(ctx, "kept")
		if err != nil || len(now.Def.Params) != 0 || now.Def.Callback.URL != keptDef.Def.Callback.URL || now.Runtime.Version != kept.rt.Version {
			t.Errorf("kept after its refused edits = %+v, %v; want it as it was", now, err)
		}
		k.checkLanded(t, s)
		if st := w.Stalled(); st != nil {
			t.Errorf("writer stalled after refusals: %+v", st)
		}
		if got := counterValue(t, "axe_writer_rejected_groups_total") - refusedBefore; got != uint64(bad) {
			t.Errorf("axe_writer_rejected_groups_total rose by %d, want %d", got, bad)
		}
		// Isolating costs about 2·log2(n) commits per refused group, not a retry without end.
		n := len(steps)
		limit := int64(1 + 1 + bad*(2*bits.Len(uint(n))+1))
		if calls := store.calls.Load(); calls > limit {
			t.Errorf("%d commits for %d groups with %d refused, want at most %d", calls, n, bad, limit)
		}
		if err := w.Write(ctx, createWithParams("after", `{}`)); err != nil {
			t.Errorf("a write after the refusals: %v", err)
		}
	})
}

// TestWriterIsolatesRefusalsProperty: whatever groups of a batch the store refuses, exactly
// those fail, with a RejectedError, groups of a stale version fail alone with a
// ConflictError as ever, the others land, and Done comes in submission order. SQLite, whose
// trigger refuses (persisttest.RefuseParams); a fresh writer per case.
func TestWriterIsolatesRefusalsProperty(t *testing.T) {
	t.Parallel()
	dsn := persist.SchemeSQLite + ":" + t.TempDir() + "/axe.db"
	s, err := persist.Open(testCtx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	persisttest.RefuseParams(t, dsn, refusedMarker)
	var round atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		r := round.Add(1)
		refused := rapid.SliceOfN(rapid.Bool(), 1, 24).Draw(rt, "refused")
		stale := rapid.SliceOfN(rapid.Bool(), len(refused), len(refused)).Draw(rt, "stale")
		ctx := testCtx(t)
		k, err := createTask(ctx, s, fmt.Sprintf("chain-%d", r))
		if err != nil {
			rt.Fatal(err)
		}
		old, err := createTask(ctx, s, fmt.Sprintf("stale-%d", r))
		if err != nil {
			rt.Fatal(err)
		}
		old.rt.Version += 7 // every transition of it expects a version the store does not hold
		w, err := persist.NewWriter(s, persist.WriterConfig{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			rt.Fatal(err)
		}
		out := newOutcomes(3 * len(refused))
		type want int
		const (
			lands want = iota
			rejected
			conflicts
		)
		var wants []want
		for i, bad := range refused {
			params, w0 := `{"i":1}`, lands
			if bad {
				params, w0 = `{"i":"`+refusedMarker+`"}`, rejected
			}
			g := createWithParams(fmt.Sprintf("p%d-%d", r, i), params)
			// A transition of one task after each create: each expects the last one's version.
			groups, kinds := []*persist.Group{g, k.next()}, []want{w0, lands}
			if stale[i] {
				groups, kinds = append(groups, old.next()), append(kinds, conflicts)
			}
			for j, g := range groups {
				g.Done = out.done(len(wants))
				wants = append(wants, kinds[j])
				if err := w.Submit(ctx, g); err != nil {
					rt.Fatal(err)
				}
			}
		}
		if err := w.Start(ctx); err != nil {
			rt.Fatal(err)
		}
		got := out.wait(t, len(wants))
		if err := w.Stop(ctx); err != nil {
			rt.Fatal(err)
		}
		for i, o := range got {
			if o.seq != i {
				rt.Fatalf("Done %d was for group %d", i, o.seq)
			}
			var ce *persist.ConflictError
			switch wants[i] {
			case lands:
				if o.err != nil {
					rt.Fatalf("group %d failed: %v", i, o.err)
				}
			case rejected:
				if !errors.Is(o.err, persist.ErrRejected) {
					rt.Fatalf("group %d: %v, want ErrRejected", i, o.err)
				}
			case conflicts:
				if !errors.As(o.err, &ce) {
					rt.Fatalf("group %d: %v, want a ConflictError", i, o.err)
				}
			}
		}
		for i, bad := range refused {
			_, err := s.GetTask(ctx, fmt.Sprintf("p%d-%d", r, i))
			if bad != errors.Is(err, model.ErrTaskNotFound) || (!bad && err != nil) {
				rt.Fatalf("create %d (refused: %v): %v", i, bad, err)
			}
		}
		if got, err := s.GetTask(ctx, k.name); err != nil || got.Runtime.Version != k.rt.Version {
			rt.Fatalf("%s at version %d (%v), want %d: a chained transition was lost", k.name, got.Runtime.Version, err, k.rt.Version)
		}
	})
}
