package persist_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestWorkflowBackfillRows: a workflow's backfill row reads back as written; a second one is
// refused while it runs and replaces it once done; a cursor step commits with the run it
// starts, only from the cursor it expects and only under the shard's current fence, and a
// run already stored fails the step whole.
func TestWorkflowBackfillRows(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const wf = "bf-wf"
		shard := model.ShardOf(wf)
		a, err := s.TakeShards(ctx, "a", []int{shard}, time.Minute)
		if err != nil || len(a) != 1 {
			t.Fatalf("TakeShards = %+v, %v", a, err)
		}
		fence := []persist.ShardFence{{Shard: shard, Epoch: a[0].Epoch}}
		if _, err := s.GetWorkflowBackfill(ctx, wf); !errors.Is(err, persist.ErrWorkflowBackfillNotFound) {
			t.Fatalf("no backfill yet: %v", err)
		}
		bf := model.WorkflowBackfill{Workflow: wf, From: 60_000, To: 240_000, Parallel: 2, Cron: "* * * * *", Timezone: "UTC",
			Total: 3, Next: 60_000, State: model.BackfillRunning, Actor: "api:x", CreatedAt: 1, UpdatedAt: 1}
		put := func(b *persist.Batch) error { b.Shards = fence; return s.ApplyBatch(ctx, b) }
		if err := put(&persist.Batch{WorkflowBackfills: []persist.WorkflowBackfillPut{{Backfill: bf, Create: true}}}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetWorkflowBackfill(ctx, wf); err != nil || *got != bf {
			t.Fatalf("get = %+v, %v; want %+v", got, err, bf)
		}
		again := bf
		again.Actor = "api:y"
		if err := put(&persist.Batch{WorkflowBackfills: []persist.WorkflowBackfillPut{{Backfill: again, Create: true}}}); !errors.Is(err, persist.ErrWorkflowBackfillRunning) {
			t.Errorf("a second backfill while one runs = %v, want ErrWorkflowBackfillRunning", err)
		}
		if l, err := s.RunningWorkflowBackfills(persist.WithShards(ctx, shardSet(shard))); err != nil || len(l) != 1 {
			t.Errorf("running backfills of the shard = %+v, %v; want one", l, err)
		}
		run := model.WorkflowRun{ID: "t-bf-1", Workflow: wf, Version: 1, ScheduledAt: 60_000, Trigger: "backfill", State: model.WorkflowRunning, CreatedAt: 2}
		step := bf
		step.Next, step.Started = 120_000, 1
		if err := put(&persist.Batch{NewWorkflowRuns: []model.WorkflowRun{run},
			WorkflowBackfills: []persist.WorkflowBackfillPut{{Backfill: step, ExpectNext: 60_000}}}); err != nil {
			t.Fatal(err)
		}
		if n, err := s.CountOpenWorkflowRuns(ctx, wf, "backfill"); err != nil || n != 1 {
			t.Errorf("open backfill runs = %d, %v; want 1", n, err)
		}
		stale := step
		stale.Next, stale.Started = 180_000, 2
		if err := put(&persist.Batch{WorkflowBackfills: []persist.WorkflowBackfillPut{{Backfill: stale, ExpectNext: 60_000}}}); !errors.Is(err, model.ErrVersionConflict) {
			t.Errorf("a step from a cursor passed already = %v, want ErrVersionConflict", err)
		}
		// The same run again with the next step: refused whole, the cursor stays.
		if err := put(&persist.Batch{NewWorkflowRuns: []model.WorkflowRun{run},
			WorkflowBackfills: []persist.WorkflowBackfillPut{{Backfill: stale, ExpectNext: 120_000}}}); !errors.Is(err, persist.ErrWorkflowRunExists) {
			t.Errorf("a step with a stored run = %v, want ErrWorkflowRunExists", err)
		}
		if got, _ := s.GetWorkflowBackfill(ctx, wf); got == nil || got.Next != 120_000 || got.Started != 1 {
			t.Errorf("after the refused steps the row reads %+v; want it at 120000 with 1 started", got)
		}
		// Another node takes the shard: the old owner's step is refused.
		if err := s.ReleaseShards(ctx, "a", fence); err != nil {
			t.Fatal(err)
		}
		if got, err := s.TakeShards(ctx, "b", []int{shard}, time.Minute); err != nil || len(got) != 1 {
			t.Fatalf("b's take = %+v, %v", got, err)
		}
		if err := put(&persist.Batch{WorkflowBackfills: []persist.WorkflowBackfillPut{{Backfill: stale, ExpectNext: 120_000}}}); !errors.Is(err, model.ErrLeaseLost) {
			t.Errorf("a step under the old owner's fence = %v, want ErrLeaseLost", err)
		}
		done := step
		done.Next, done.State, done.EndedAt = 0, model.BackfillDone, 3
		if err := s.ApplyBatch(ctx, &persist.Batch{WorkflowBackfills: []persist.WorkflowBackfillPut{{Backfill: done, ExpectNext: 120_000}}}); err != nil {
			t.Fatal(err)
		}
		if l, err := s.RunningWorkflowBackfills(ctx); err != nil || len(l) != 0 {
			t.Errorf("running backfills after the last step = %+v, %v; want none", l, err)
		}
		if err := s.ApplyBatch(ctx, &persist.Batch{WorkflowBackfills: []persist.WorkflowBackfillPut{{Backfill: again, Create: true}}}); err != nil {
			t.Errorf("a new backfill once the last is done: %v", err)
		}
		if got, _ := s.GetWorkflowBackfill(ctx, wf); got == nil || got.Actor != "api:y" || got.Next != 60_000 {
			t.Errorf("the new backfill reads %+v", got)
		}
	})
}

func shardSet(n int) model.ShardSet {
	var set model.ShardSet
	set.Add(n)
	return set
}
