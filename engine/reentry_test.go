package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestStoppedDispatcherDoesNotBlockTheWriter: with the dispatcher stopped, every durable fire
// fails to send and its failure is recorded. That failure must not be submitted from the
// writer goroutine that reported the fire durable: on a full lane the submit would wait for
// the very goroutine making it, and no write would complete again.
func TestStoppedDispatcherDoesNotBlockTheWriter(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	ctx := context.Background()
	e := startEngine(t, s, func(c *Config) {
		c.WriterLanes = 1
		c.Writer.QueueSize = 1
	})
	if err := e.disp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		spec := httpSpec(fmt.Sprintf("unsent-%02d", i), "http://127.0.0.1:1/")
		spec.DelayMS = ptr(int64(200))
		// A one-slot writer queue refuses creates while it is busy (the API answers 429):
		// retry, as a client would.
		testwait.For(t, 20*time.Second, "the writer to take the create of "+spec.Name, func() bool {
			_, err := e.API().CreateTask(ctx, spec, "test")
			if err != nil && !errors.Is(err, persist.ErrWriterBusy) {
				t.Fatalf("create %s: %v", spec.Name, err)
			}
			return err == nil
		})
	}
	waitFor(t, 20*time.Second, "every fire to be recorded as not sent", func() bool {
		for i := range n {
			runs, err := s.ListRuns(ctx, mustID(t, s, fmt.Sprintf("unsent-%02d", i)), 1)
			if err != nil || len(runs) != 1 || runs[0].Result != model.ResultFailed {
				return false
			}
		}
		return true
	})
}

func mustID(t *testing.T, s persist.Store, name string) int64 {
	t.Helper()
	pt, err := s.GetTask(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return pt.Def.ID
}
