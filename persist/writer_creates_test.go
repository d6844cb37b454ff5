package persist_test

import (
	"errors"
	"testing"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

func createGroup(name string, o outcomes, seq int) *persist.Group {
	def := &persist.TaskDef{Name: name, Group: "g", Trigger: persist.TriggerManual, Timezone: "UTC",
		Callback: persist.Callback{Type: persist.CallbackHTTP, URL: "http://127.0.0.1:1/"}, MisfirePolicy: persist.MisfireFireOnce}
	return &persist.Group{
		Creates: []*persist.TaskCreate{{Def: def, Runtime: persist.Runtime{State: persist.StateWaiting, Version: 1},
			Actions: []persist.Action{{TaskName: name, Action: "create", Actor: "test"}}}},
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
					if !errors.As(r.err, &ce) || len(ce.Creates) != 1 || ce.Creates[0] != 0 || !errors.Is(r.err, persist.ErrTaskExists) {
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
