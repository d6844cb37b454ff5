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

// TestBackfillRows: a backfill row reads back as written, its progress is replaced by a
// save, it is open while running or while its runs may be in flight, and the run queries
// of its recovery see only its own runs in its range.
func TestBackfillRows(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b := model.Backfill{TaskID: 7, TaskName: "t", From: 1000, To: 5000, Parallel: 4, Cron: "* * * * *",
			CronDialect: "unix", Timezone: "UTC", Total: 5, Next: 1000, Low: 1000, Status: model.BackfillRunning,
			Actor: "api:x", CreatedAt: 1, UpdatedAt: 1}
		if err := s.CreateBackfill(ctx, &b); err != nil || b.ID == 0 {
			t.Fatalf("create: id %d, %v", b.ID, err)
		}
		got, err := s.GetBackfill(ctx, b.ID)
		if err != nil || *got != b {
			t.Fatalf("get = %+v, %v; want %+v", got, err, b)
		}
		if _, err := s.GetBackfill(ctx, b.ID+100); !errors.Is(err, persist.ErrBackfillNotFound) {
			t.Errorf("unknown id: %v", err)
		}
		other := b
		other.TaskID, other.ID = 8, 0
		if err := s.CreateBackfill(ctx, &other); err != nil {
			t.Fatal(err)
		}
		if l, err := s.ListBackfills(ctx, 7, 0); err != nil || len(l) != 1 || l[0].ID != b.ID {
			t.Errorf("list of task 7 = %+v, %v", l, err)
		}
		if l, err := s.ListBackfills(ctx, 0, 0); err != nil || len(l) != 2 || l[0].ID != other.ID {
			t.Errorf("list of every task, newest first = %+v, %v", l, err)
		}
		b.Next, b.Low, b.Started, b.Skipped, b.Succeeded, b.Failed = 0, 3000, 5, 1, 2, 1
		b.Status, b.EndedAt, b.UpdatedAt, b.Note = model.BackfillCanceled, 9, 9, "canceled by api:x"
		if err := s.SaveBackfill(ctx, &b); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.GetBackfill(ctx, b.ID); *got != b {
			t.Errorf("after save = %+v, want %+v", got, b)
		}
		open, err := s.ListOpenBackfills(ctx)
		if err != nil || len(open) != 2 {
			t.Errorf("open = %+v, %v; want both (one running, one with runs in flight)", open, err)
		}
		b.Low = b.To + 1
		if err := s.SaveBackfill(ctx, &b); err != nil {
			t.Fatal(err)
		}
		if open, _ := s.ListOpenBackfills(ctx); len(open) != 1 || open[0].ID != other.ID {
			t.Errorf("open after its runs ended = %+v", open)
		}

		runs := []model.Run{
			{Ticket: "7-1000-1", TaskID: 7, Kind: model.RunBackfill, Attempt: 1, ScheduledAt: 1000, Result: model.ResultSuccess, Detail: "backfill 1"},
			{Ticket: "7-2000-1", TaskID: 7, Kind: model.RunBackfill, Attempt: 1, ScheduledAt: 2000, Result: model.ResultRunning, Detail: "backfill 1"},
			{Ticket: "7-3000-1", TaskID: 7, Kind: model.RunBackfill, Attempt: 1, ScheduledAt: 3000, Result: model.ResultRunning, Detail: "backfill 2"},
			{Ticket: "7-4000-1", TaskID: 7, Kind: model.RunScheduled, Attempt: 1, ScheduledAt: 4000, Result: model.ResultRunning},
			{Ticket: "7-9000-1", TaskID: 7, Kind: model.RunBackfill, Attempt: 1, ScheduledAt: 9000, Result: model.ResultRunning, Detail: "backfill 1"},
		}
		if err := s.ApplyBatch(ctx, &persist.Batch{Fires: runs}); err != nil {
			t.Fatal(err)
		}
		open2, err := s.ListBackfillOpenRuns(ctx, 7, 1000, 5000)
		if err != nil || len(open2) != 2 || open2[0].Ticket != "7-2000-1" || open2[1].Ticket != "7-3000-1" {
			t.Errorf("open backfill runs = %+v, %v", open2, err)
		}
		counts, err := s.CountBackfillRuns(ctx, 7, 1000, 5000, "backfill 1")
		if err != nil || len(counts) != 2 || counts[model.ResultSuccess] != 1 || counts[model.ResultRunning] != 1 {
			t.Errorf("counts = %v, %v", counts, err)
		}
		found, err := s.RunsByTicket(ctx, []string{"7-1000-1", "7-4000-1", "nope"})
		if err != nil || len(found) != 2 {
			t.Errorf("by ticket = %+v, %v", found, err)
		}
	})
}

// TestBackfillRowsFencedByShard: a backfill's row written with its task's shard fence in the
// context (persist.WithShardFences) lands while the shard is at that epoch, and is refused,
// with ErrLeaseLost and nothing written, once another node took the shard.
func TestBackfillRowsFencedByShard(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shard := model.ShardOf("fenced-bf")
		a, err := s.TakeShards(ctx, "a", []int{shard}, time.Minute)
		if err != nil || len(a) != 1 {
			t.Fatalf("TakeShards = %+v, %v", a, err)
		}
		fa := persist.WithShardFences(ctx, []persist.ShardFence{{Shard: shard, Epoch: a[0].Epoch}})
		b := model.Backfill{TaskID: 7, TaskName: "fenced-bf", From: 1000, To: 5000, Parallel: 4, Cron: "* * * * *",
			CronDialect: "unix", Timezone: "UTC", Total: 5, Next: 1000, Low: 1000, Status: model.BackfillRunning,
			Actor: "api:x", CreatedAt: 1, UpdatedAt: 1}
		if err := s.CreateBackfill(fa, &b); err != nil {
			t.Fatalf("a backfill row under the current fence: %v", err)
		}
		if err := s.ReleaseShards(ctx, "a", []persist.ShardFence{{Shard: shard, Epoch: a[0].Epoch}}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.TakeShards(ctx, "b", []int{shard}, time.Minute); err != nil || len(got) != 1 {
			t.Fatalf("b's take = %+v, %v", got, err)
		}
		saved := b
		saved.Next, saved.Started = 3000, 2
		if err := s.SaveBackfill(fa, &saved); !errors.Is(err, model.ErrLeaseLost) {
			t.Errorf("a save under the old owner's fence = %v, want ErrLeaseLost", err)
		}
		other := b
		other.ID = 0
		if err := s.CreateBackfill(fa, &other); !errors.Is(err, model.ErrLeaseLost) {
			t.Errorf("a create under the old owner's fence = %v, want ErrLeaseLost", err)
		}
		if got, err := s.GetBackfill(ctx, b.ID); err != nil || got.Next != b.Next || got.Started != b.Started {
			t.Errorf("after the refused save the row reads %+v, %v; want it unchanged", got, err)
		}
		if l, err := s.ListBackfills(ctx, 7, 0); err != nil || len(l) != 1 {
			t.Errorf("rows of the task after the refused create = %d, %v; want 1", len(l), err)
		}
	})
}
