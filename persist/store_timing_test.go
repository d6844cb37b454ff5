package persist_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// benchStores are the stores every benchmark here runs against.
var benchStores = []struct {
	name string
	open func(testing.TB) persist.Store
}{
	{persist.SchemeSQLite, persisttest.SQLite},
	{persist.SchemeMySQL, persisttest.MySQL},
}

// storeBenchSink keeps the compiler from discarding the measured calls.
var storeBenchSink error

// BenchmarkApplyBatch measures the group commit: each op is one batch of n transitions on
// n distinct tasks, plus one run row and one action per transition, as the writer sends
// them when dispatching. The metric to read is transitions/s.
func BenchmarkApplyBatch(b *testing.B) {
	for _, st := range benchStores {
		b.Run("store="+st.name, func(b *testing.B) {
			for _, n := range []int{500} {
				b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
					benchmarkApplyBatch(b, st.open(b), n)
				})
			}
		})
	}
}

func benchmarkApplyBatch(b *testing.B, s persist.Store, n int) {
	ctx := context.Background()
	// Four batches' worth of tasks, cycled, so consecutive batches touch different rows.
	tasks := storeBenchTasks(b, ctx, s, 4*n)
	b.ReportAllocs()
	batches, ticket := 0, 0
	cpu := processCPU(b)
	for b.Loop() {
		batch := &persist.Batch{
			Transitions: make([]persist.Transition, 0, n),
			Runs:        make([]model.Run, 0, n),
			Actions:     make([]model.Action, 0, n),
		}
		base := (batches * n) % len(tasks)
		for i := range n {
			rt := &tasks[base+i]
			next := *rt
			next.State, next.CurrentTicket = model.StateRunning, fmt.Sprintf("bench-%09d", ticket)
			if rt.State == model.StateRunning {
				next.State, next.SuccessCount = model.StateScheduled, rt.SuccessCount+1
			}
			next.NextTriggerTime += 60_000
			batch.Transitions = append(batch.Transitions, persist.Transition{ExpectVersion: rt.Version, Runtime: next})
			batch.Runs = append(batch.Runs, model.Run{Ticket: next.CurrentTicket, TaskID: rt.TaskID,
				TaskName: "bench", Kind: model.RunScheduled, Attempt: 1, ScheduledAt: rt.NextTriggerTime,
				DispatchedAt: rt.NextTriggerTime + 2, Executor: "10.0.0.1:9000", Result: model.ResultRunning})
			batch.Actions = append(batch.Actions, model.Action{TaskID: rt.TaskID, TaskName: "bench",
				Ticket: next.CurrentTicket, Action: "dispatch", From: rt.State, To: next.State,
				Actor: "scheduler", At: rt.NextTriggerTime + 2})
			ticket++
		}
		err := s.ApplyBatch(ctx, batch)
		if err != nil {
			b.Fatalf("ApplyBatch: %v", err)
		}
		storeBenchSink = err
		for i, tr := range batch.Transitions {
			tasks[base+i] = tr.Runtime
		}
		batches++
	}
	b.ReportMetric(float64(batches*n)/b.Elapsed().Seconds(), "transitions/s")
	// The store's own CPU (the database server runs in another process), building the
	// batches included: what a batch costs the scheduler.
	b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/float64(batches*n), "client-ns/transition")
}

// processCPU is the CPU time this process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// storeBenchTasks creates count tasks, a few at a time, and returns their runtimes.
func storeBenchTasks(b *testing.B, ctx context.Context, s persist.Store, count int) []model.Runtime {
	b.Helper()
	out := make([]model.Runtime, count)
	const workers = 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < count; i += workers {
				def := &model.TaskDef{Name: fmt.Sprintf("bench-%06d", i), Group: "bench",
					Trigger: model.TriggerCron, Cron: "* * * * *", Timezone: "UTC", TimeoutSec: 300,
					Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/run"}}
				rt := model.Runtime{State: model.StateScheduled, NextTriggerTime: int64(1_000_000 + i), Version: 1}
				if err := s.CreateTask(ctx, def, &rt); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				out[i] = rt
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatalf("CreateTask: %v", firstErr)
	}
	return out
}

// BenchmarkLoadByIDs measures reading whole tasks back, as the promoter does for the tasks
// of a burst: each op loads 1,000 tasks that share one callback, as the tasks of one
// handler do. The metrics to read are ns/task and B/task on the scheduler's side.
func BenchmarkLoadByIDs(b *testing.B) {
	for _, st := range benchStores {
		b.Run("store="+st.name, func(b *testing.B) {
			ctx := context.Background()
			s := st.open(b)
			tasks := storeBenchTasks(b, ctx, s, 1000)
			ids := make([]int64, len(tasks))
			for i, rt := range tasks {
				ids[i] = rt.TaskID
			}
			b.ReportAllocs()
			loaded := 0
			for b.Loop() {
				n := 0
				err := s.LoadByIDs(ctx, ids, func(*model.Task) error { n++; return nil })
				if err != nil || n != len(ids) {
					b.Fatalf("LoadByIDs: %d of %d tasks, %v", n, len(ids), err)
				}
				loaded += n
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(loaded), "ns/task")
		})
	}
}
