package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

// B7 backfill: a backfill of a year of a once-a-minute schedule (525,600 fire times)
// against a no-op HTTP endpoint, beside ordinary every-second cron tasks. It reports the
// acceptance time of the whole year (the POST: counting its fire times and storing the
// row), the backfill's runs/s over the measured span, the process's peak Go heap and RSS,
// and the dispatch lateness (dispatched_at − scheduled_at of their run rows) of the
// every-second fires in a span without the backfill and in the same length of span beside
// it, in the same run.
var (
	flagBackfillSpan     = flag.String("backfill.span", "", "B7: how long the backfill is measured (env "+envBackfillSpan+"; default 10s); the year is canceled after it unless -backfill.full")
	flagBackfillParallel = flag.String("backfill.parallel", "", "B7: the backfill's parallelism (env "+envBackfillParallel+"; default 64)")
)

const (
	envBackfillSpan     = "AXE_BENCH_BACKFILL_SPAN"
	envBackfillParallel = "AXE_BENCH_BACKFILL_PARALLEL"
	// envBackfillFull set to 1 measures the whole year instead of a span of it.
	envBackfillFull = "AXE_BENCH_BACKFILL_FULL"
	// backfillSecondTasks is how many every-second cron tasks fire beside the backfill.
	backfillSecondTasks = 20
)

func BenchmarkBackfill(b *testing.B) {
	span := durationParam(b, flagBackfillSpan, envBackfillSpan, 10*time.Second)
	parallel := sizeParam(b, flagBackfillParallel, envBackfillParallel, 64)
	full := os.Getenv(envBackfillFull) == "1"
	for i := 0; i < b.N; i++ {
		runBackfillBench(b, span, parallel, full)
	}
}

func runBackfillBench(b *testing.B, span time.Duration, parallel int, full bool) {
	ctx := context.Background()
	store, db := scratchStore(b, 4)
	info, err := benchkit.ReadServerInfo(ctx, db)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("MariaDB: %s", info)
	noop, err := benchkit.StartNoopEndpoint(0)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = noop.Close() }()
	eng, err := engine.New(engine.Config{Store: store, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_ = eng.Stop(sctx)
	}()
	cbk := &model.Callback{Type: model.CallbackHTTP, URL: noop.URL()}
	for i := 0; i < backfillSecondTasks; i++ {
		_, err := eng.API().CreateTask(ctx, &wire.TaskSpec{Name: fmt.Sprintf("second-%02d", i), Cron: "* * * * * *",
			Timezone: "UTC", Callback: cbk}, "bench")
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := eng.API().CreateTask(ctx, &wire.TaskSpec{Name: "year", Cron: "* * * * *", Timezone: "UTC", Callback: cbk}, "bench"); err != nil {
		b.Fatal(err)
	}

	// Peak memory, sampled every 50 ms over both spans.
	var peakHeap, peakRSS atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if h := int64(ms.HeapInuse); h > peakHeap.Load() {
				peakHeap.Store(h)
			}
			if rss, err := benchkit.RSS(); err == nil && rss > peakRSS.Load() {
				peakRSS.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	// Without the backfill: the every-second fires alone, after a second to settle.
	time.Sleep(time.Second)
	quietFrom := time.Now()
	time.Sleep(span)
	quietTo := time.Now()
	quietHeap, quietRSS := peakHeap.Load(), peakRSS.Load()

	// The year, accepted at once.
	from := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(1, 0, 0).Add(-time.Minute)
	t0 := time.Now()
	bf, err := eng.API().Backfills().Create(ctx, "year", engine.BackfillRequest{From: from, To: to, Parallel: parallel}, "bench")
	if err != nil {
		b.Fatal(err)
	}
	accept := time.Since(t0)
	busyFrom := time.Now()
	var v *wire.BackfillView
	for {
		time.Sleep(200 * time.Millisecond)
		if v, err = eng.API().Backfills().Get(ctx, "year", bf.ID); err != nil {
			b.Fatal(err)
		}
		if v.Status != model.BackfillRunning || (!full && time.Since(busyFrom) >= span) {
			break
		}
	}
	busyTo := time.Now()
	elapsed := busyTo.Sub(busyFrom)
	if v.Status == model.BackfillRunning {
		if v, err = eng.API().Backfills().Cancel(ctx, "year", bf.ID, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	close(stop)
	<-sampled

	quiet := secondLateness(b, store, quietFrom, quietTo)
	busy := secondLateness(b, store, busyFrom, busyTo)
	rate := float64(v.Done) / elapsed.Seconds()
	b.ReportMetric(accept.Seconds(), "accept_s")
	b.ReportMetric(rate, "runs/s")
	b.ReportMetric(float64(peakHeap.Load())/(1<<20), "peak_heap_MiB")
	b.ReportMetric(float64(peakRSS.Load())/(1<<20), "peak_rss_MiB")
	b.ReportMetric(busy.p99, "p99_late_ms_beside")
	b.ReportMetric(quiet.p99, "p99_late_ms_alone")
	b.Logf("B7 backfill: year of %d fire times accepted in %s; %d done (%d succeeded, %d failed) in %s = %.0f runs/s at parallel %d; status %s",
		bf.Total, accept.Round(time.Millisecond), v.Done, v.Succeeded, v.Failed, elapsed.Round(time.Millisecond), rate, parallel, v.Status)
	b.Logf("B7 memory: peak Go heap in use %.1f MiB (%.1f MiB before the backfill), peak RSS %.1f MiB (%.1f MiB before)",
		float64(peakHeap.Load())/(1<<20), float64(quietHeap)/(1<<20), float64(peakRSS.Load())/(1<<20), float64(quietRSS)/(1<<20))
	b.Logf("B7 every-second fires (%d tasks): alone %d fires, p50 %.0f ms, p99 %.0f ms, max %.0f ms; beside the backfill %d fires, p50 %.0f ms, p99 %.0f ms, max %.0f ms",
		backfillSecondTasks, quiet.n, quiet.p50, quiet.p99, quiet.max, busy.n, busy.p50, busy.p99, busy.max)
}

type bfLateness struct {
	n             int
	p50, p99, max float64
}

// secondLateness is the dispatch lateness of the every-second tasks' runs scheduled in
// [from, to).
func secondLateness(b *testing.B, store persist.Store, from, to time.Time) bfLateness {
	ctx := context.Background()
	var ms []int64
	for i := 0; i < backfillSecondTasks; i++ {
		pt, err := store.GetTask(ctx, fmt.Sprintf("second-%02d", i))
		if err != nil {
			b.Fatal(err)
		}
		runs, err := store.ListRuns(ctx, pt.Def.ID, 0)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range runs {
			if r.DispatchedAt > 0 && r.ScheduledAt >= from.UnixMilli() && r.ScheduledAt < to.UnixMilli() {
				ms = append(ms, r.DispatchedAt-r.ScheduledAt)
			}
		}
	}
	slices.Sort(ms)
	if len(ms) == 0 {
		return bfLateness{}
	}
	return bfLateness{n: len(ms), p50: float64(benchkit.Percentile(ms, 0.5)), p99: float64(benchkit.Percentile(ms, 0.99)),
		max: float64(ms[len(ms)-1])}
}
