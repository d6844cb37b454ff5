package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// failedStartLeavesNothingRunning checks, after a Start that failed, that the engine is not
// running and that the writer and the dispatcher it had started are stopped again; the
// package's goleak check then finds none of their goroutines left.
func failedStartLeavesNothingRunning(t *testing.T, e *Engine) {
	t.Helper()
	if e.API().Running() {
		t.Error("a failed Start left the engine running")
	}
	if err := e.writer.Submit(context.Background(), &persist.Group{}); !errors.Is(err, persist.ErrWriterClosed) {
		t.Errorf("writer after a failed Start: submit = %v, want ErrWriterClosed", err)
	}
	if err := e.disp.Go(func() {}); !errors.Is(err, dispatch.ErrStopped) {
		t.Errorf("dispatcher after a failed Start: go = %v, want ErrStopped", err)
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Errorf("stop after a failed Start = %v", err)
	}
	if err := e.Start(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Errorf("start after a failed Start = %v, want ErrNotRunning", err)
	}
}

func TestFailedRecoveryStopsWhatStarted(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	e, err := New(Config{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // every read of the start-up fails
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err == nil {
		t.Fatal("start on a closed store succeeded")
	}
	failedStartLeavesNothingRunning(t, e)
}

func TestStopWithoutStartAndTwice(t *testing.T) {
	t.Parallel()
	e, err := New(Config{Store: persisttest.SQLite(t)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := e.Stop(context.Background()); err != nil {
			t.Fatalf("stop %d without start = %v", i+1, err)
		}
	}
	if err := e.Start(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Errorf("start after stop = %v, want ErrNotRunning", err)
	}
}

// A Start whose writer cannot start (its context is already done) never started the
// dispatcher, whose worker pool dispatch.New had made: the failed Start releases it too.
func TestFailedWriterStartReleasesDispatcher(t *testing.T) {
	t.Parallel()
	e, err := New(Config{Store: persisttest.SQLite(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Start(ctx); err == nil {
		t.Fatal("start with a done context succeeded")
	}
	failedStartLeavesNothingRunning(t, e)
}
