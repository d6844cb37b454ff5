package engine

import (
	"context"
	"flag"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

var bulkBenchSize = flag.Int("bulk.size", 2000, "tasks a BenchmarkBulkPause iteration pauses")

// BenchmarkBulkPause measures a bulk pause (then, untimed, a bulk resume) of -bulk.size tasks
// due a day later, on MySQL: tasks/s and the process's CPU per task (the engine and the test,
// not the database server).
func BenchmarkBulkPause(b *testing.B) {
	s := persisttest.MySQL(b)
	e, err := New(Config{Store: s, Window: 10 * time.Second, LoadInterval: 2 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := e.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.Stop(sctx)
	})
	n := *bulkBenchSize
	for start := 0; start < n; start += BatchMaxTasks {
		specs := make([]*wire.TaskSpec, 0, BatchMaxTasks)
		for i := start; i < min(n, start+BatchMaxTasks); i++ {
			sp := httpSpec(fmt.Sprintf("bulk-%07d", i), "http://127.0.0.1:1/never")
			sp.Trigger, sp.DelayMS = "delay", ptr(int64(24*time.Hour/time.Millisecond))
			specs = append(specs, sp)
		}
		if _, err := e.API().CreateTasks(ctx, specs, "", "bench"); err != nil {
			b.Fatal(err)
		}
	}
	sel := wire.Selector{NamePrefix: "bulk-", Note: "bench"}
	var elapsed, cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0, t0 := cpuTime(), time.Now()
		got, err := e.API().Bulk(ctx, BulkPause, sel, false, "bench")
		elapsed += time.Since(t0)
		cpu += cpuTime() - c0
		if err != nil || got != n {
			b.Fatalf("bulk pause = %d, %v; want %d", got, err, n)
		}
		b.StopTimer()
		if got, err := e.API().Bulk(ctx, BulkResume, sel, false, "bench"); err != nil || got != n {
			b.Fatalf("bulk resume = %d, %v; want %d", got, err, n)
		}
		b.StartTimer()
	}
	tasks := float64(n * b.N)
	b.ReportMetric(tasks/elapsed.Seconds(), "tasks/s")
	b.ReportMetric(float64(cpu.Microseconds())/tasks, "cpu-µs/task")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
