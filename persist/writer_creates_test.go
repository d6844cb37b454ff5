package persist_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

func createGroup(name string, o outcomes, seq int) *persist.Group {
	def := &model.TaskDef{Name: name, Group: "g", Trigger: model.TriggerManual, Timezone: "UTC",
		Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:1/"}, MisfirePolicy: model.MisfireFireOnce}
	return &persist.Group{
		Creates: []*persist.TaskCreate{{Def: def, Runtime: model.Runtime{State: model.StateWaiting, Version: 1},
			Actions: []model.Action{{TaskName: name, Action: "create", Actor: "test"}}}},
		Done: o.done(seq),
	}
}

// TestWriterCreates: creates of several groups share a batch; a taken name fails only its
// own group, with a *ConflictError that names the create and unwraps to ErrTaskExists, and
// the rest of the batch lands.
func TestWriterCreates(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := persisttest.SQLite(t)
			if kind == "mysql" {
				s = persisttest.MySQL(t)
			}
			ctx := testCtx(t)
			newTask(t, s, "taken")
			w := newWriter(t, s, persist.WriterConfig{}, false) // queued first, so one batch
			o := newOutcomes(4)
			groups := []*persist.Group{createGroup("a", o, 0), createGroup("taken", o, 1), createGroup("b", o, 2), createGroup("a", o, 3)}
			for _, g := range groups {
				submit(t, w, g)
			}
			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			got := o.wait(t, 4)
			for _, r := range got {
				switch r.seq {
				case 0, 2:
					if r.err != nil {
						t.Errorf("group %d: %v", r.seq, r.err)
					}
				default:
					var ce *persist.ConflictError
					if !errors.As(r.err, &ce) || len(ce.Creates) != 1 || ce.Creates[0] != 0 || !errors.Is(r.err, model.ErrTaskExists) {
						t.Errorf("group %d: %v, want a *ConflictError naming create 0 and unwrapping to ErrTaskExists", r.seq, r.err)
					}
				}
			}
			for _, name := range []string{"a", "b"} {
				got, err := s.GetTask(ctx, name)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				acts, err := s.ListActions(ctx, got.Def.ID, 0)
				if err != nil || len(acts) != 1 {
					t.Errorf("%s: %d actions (%v), want 1", name, len(acts), err)
				}
			}
			if groups[0].Creates[0].Def.ID == 0 || groups[0].Creates[0].Outcome != persist.CreatedNew {
				t.Errorf("create a: id %d outcome %d", groups[0].Creates[0].Def.ID, groups[0].Creates[0].Outcome)
			}
		})
	}
}

// TestWriterCreateMaxDelay: a batch holding a create waits for company CreateMaxDelay, also
// when it began with a group that may wait MaxDelay. MaxDelay is an hour, so only the
// create's bound can flush the batch before the test's deadline.
func TestWriterCreateMaxDelay(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		const createDelay = 20 * time.Millisecond
		k := newTask(t, s, "before-create")
		cs := &countingStore{Store: s}
		w := newWriter(t, cs, persist.WriterConfig{MaxDelay: time.Hour, CreateMaxDelay: createDelay}, true)
		o := newOutcomes(2)
		g := k.next()
		g.Done = o.done(0)
		submit(t, w, g)
		start := time.Now()
		submit(t, w, createGroup("joins", o, 1))
		for _, r := range o.wait(t, 2) {
			if r.err != nil {
				t.Errorf("group %d: %v", r.seq, r.err)
			}
		}
		// A lower bound only (timers never fire early): the create waited for company.
		if took := time.Since(start); took < createDelay {
			t.Errorf("batch durable %s after the create, want it held for CreateMaxDelay (%s)", took, createDelay)
		}
		if got := cs.calls.Load(); got != 1 {
			t.Errorf("ApplyBatch called %d times, want 1 (both groups in one batch)", got)
		}
		k.checkLanded(t, s)
		if _, err := s.GetTask(testCtx(t), "joins"); err != nil {
			t.Errorf("joins: %v", err)
		}
	})
}

// TestWriterOffer: Offer takes groups while the queue is less than half full, then refuses
// with ErrWriterBusy at once; Submit still queues past that.
func TestWriterOffer(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	w := newWriter(t, s, persist.WriterConfig{QueueSize: 4}, false)
	o := newOutcomes(8)
	for i := range 2 {
		if err := w.Offer(createGroup("o"+string(rune('a'+i)), o, i)); err != nil {
			t.Fatalf("Offer %d: %v", i, err)
		}
	}
	if err := w.Offer(createGroup("oc", o, 2)); !errors.Is(err, persist.ErrWriterBusy) {
		t.Fatalf("Offer past half the queue = %v, want ErrWriterBusy", err)
	}
	submit(t, w, createGroup("od", o, 3))
	if err := w.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for _, r := range o.wait(t, 3) {
		if r.err != nil {
			t.Errorf("group %d: %v", r.seq, r.err)
		}
	}
}

// TestApplyBatchCreateIDs: a batch of creates larger than every prepared statement size
// (so its definitions go in several statements, prepared and as text) gives each task its
// own id: the runtime and the action of every name are its own, wherever the store takes
// the ids from (LAST_INSERT_ID on MySQL, a read by name elsewhere).
func TestApplyBatchCreateIDs(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := persisttest.SQLite(t)
			if kind == "mysql" {
				s = persisttest.MySQL(t)
			}
			ctx := testCtx(t)
			newTask(t, s, "before") // ids do not start at 1
			const n = 301           // 256 + 32 + 8 prepared, 5 as text on MySQL
			b := &persist.Batch{}
			for i := range n {
				name := fmt.Sprintf("c%03d", i)
				def := &model.TaskDef{Name: name, Group: "g", Trigger: model.TriggerManual, Timezone: "UTC",
					Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:1/"}, MisfirePolicy: model.MisfireFireOnce}
				b.Creates = append(b.Creates, &persist.TaskCreate{Def: def,
					Runtime: model.Runtime{State: model.StateWaiting, Version: 1, Note: "note of " + name},
					Actions: []model.Action{{TaskName: name, Action: "create", Actor: "test", Detail: "detail of " + name}}})
			}
			if err := s.ApplyBatch(ctx, b); err != nil {
				t.Fatal(err)
			}
			seen := map[int64]bool{}
			for i, c := range b.Creates {
				name := c.Def.Name
				got, err := s.GetTask(ctx, name)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if got.Def.ID != c.Def.ID || seen[c.Def.ID] {
					t.Fatalf("create %d (%s): stored id %d, reported %d (seen before: %v)", i, name, got.Def.ID, c.Def.ID, seen[c.Def.ID])
				}
				seen[c.Def.ID] = true
				if got.Runtime.Note != "note of "+name {
					t.Errorf("%s: runtime note %q, want its own", name, got.Runtime.Note)
				}
				acts, err := s.ListActions(ctx, got.Def.ID, 0)
				if err != nil || len(acts) != 1 || acts[0].Detail != "detail of "+name {
					t.Errorf("%s: actions %+v (%v), want its own one", name, acts, err)
				}
			}
		})
	}
}
