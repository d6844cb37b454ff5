package workflow

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestRerunAsSoonAsTheEndIsRead: a run's failure is durable (a read of the run shows it
// failed) while the node that drove it has not yet let the run go from memory. A rerun sent
// in that moment is taken: it acts on the run as the read showed it. Before, it was answered
// "still running" (409) from the node's memory while a GET said failed.
func TestRerunAsSoonAsTheEndIsRead(t *testing.T) {
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		var calls atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if calls.Add(1) == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte(`{"error": "the first call fails"}`))
				return
			}
			_, _ = w.Write([]byte(`{"ok": true}`))
		}))
		t.Cleanup(srv.Close)

		e, err := engine.New(engine.Config{Store: s})
		if err != nil {
			t.Fatal(err)
		}
		svc := New(Config{Engine: e.API(), Store: s, Poll: 50 * time.Millisecond})
		held, release := make(chan string, 1), make(chan struct{})
		svc.endWritten = func(id string) {
			select {
			case held <- id:
				<-release // only the first end is held
			default:
			}
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(ctx); err != nil {
			t.Fatal(err)
		}
		released := false
		t.Cleanup(func() {
			if !released {
				close(release)
			}
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = svc.Stop(sctx)
			if err := e.Stop(sctx); err != nil {
				t.Errorf("stop: %v", err)
			}
		})

		const name = "rerunwf"
		if _, err := svc.Create(ctx, model.WorkflowDef{Name: name, Trigger: model.TriggerManual,
			Steps: []model.WorkflowStep{{Name: "only", Callback: model.Callback{Type: model.CallbackHTTP, URL: srv.URL + "/step"}}}}, "test"); err != nil {
			t.Fatal(err)
		}
		wr, _, err := svc.RunNow(ctx, name, nil, "", "test")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-held:
			if id != wr.ID {
				t.Fatalf("the end of run %s was held, want %s", id, wr.ID)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the run did not end within 30 s")
		}
		r, _, err := s.GetWorkflowRun(ctx, wr.ID)
		if err != nil || r.State != model.WorkflowFailed {
			t.Fatalf("the stored run = %+v, %v; want failed", r, err)
		}
		got, err := svc.Rerun(ctx, wr.ID, "failed", "", "test")
		if err != nil {
			t.Fatalf("rerun while the run's end is durable but still in memory: %v (conflict: %v)", err, errors.Is(err, ErrConflict))
		}
		if got.State != model.WorkflowRunning {
			t.Errorf("the rerun answered the run %s, want running", got.State)
		}
		close(release)
		released = true
		waitUntil(t, 30*time.Second, "the rerun to succeed", func() bool {
			r, _, err := s.GetWorkflowRun(ctx, wr.ID)
			return err == nil && r.State == model.WorkflowSucceeded
		})
		if n := calls.Load(); n != 2 {
			t.Errorf("the step's endpoint was called %d times, want 2 (the failure, the rerun)", n)
		}
		// The end held back came after the rerun's start: it must not have taken the rerun
		// run out of memory, or cancelled anything of it.
		if _, err := svc.Rerun(ctx, wr.ID, "failed", "", "test"); !errors.Is(err, ErrConflict) {
			t.Errorf("a rerun of a succeeded run = %v, want a conflict (no failed step)", err)
		}
	})
}
