package engine

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wheel"
	"github.com/axe-sched/axe/wire"
)

var concBenchSize = flag.Int("conc.size", 2000, "one-shot tasks due at once per BenchmarkFireThroughput iteration")

// sinkFires keeps the benchmark's result alive.
var sinkFires float64

// BenchmarkFireThroughput fires -conc.size one-shot tasks of one group, all due at the same
// second, at a loopback endpoint that answers at once, and measures fires per second from
// their due time to the last call's arrival: with no concurrency limit (the gate only counts),
// and with a group limit and a key limit that are never reached. The two run in the same
// process, alternating, so that the ratio of their fires/s is the gate's cost.
func BenchmarkFireThroughput(b *testing.B) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	b.Cleanup(srv.Close)
	s := persisttest.SQLite(b)
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
	n := *concBenchSize
	round := 0
	// burst fires n tasks due at one second and returns how long from that second until the
	// last call arrived.
	burst := func(b *testing.B) time.Duration {
		round++
		at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
		for start := 0; start < n; start += BatchMaxTasks {
			specs := make([]*wire.TaskSpec, 0, BatchMaxTasks)
			for j := start; j < min(n, start+BatchMaxTasks); j++ {
				sp := httpSpec(fmt.Sprintf("fire-%d-%06d", round, j), srv.URL)
				sp.Group, sp.ConcurrencyKey = "bench", "bench-key"
				sp.Trigger, sp.RunAt = model.TriggerDelay, at.Format(time.RFC3339)
				specs = append(specs, sp)
			}
			if _, err := e.API().CreateTasks(ctx, specs, "", "bench"); err != nil {
				b.Fatal(err)
			}
		}
		want := calls.Load() + int64(n)
		time.Sleep(time.Until(at))
		for calls.Load() < want {
			time.Sleep(time.Millisecond)
		}
		return time.Since(at)
	}
	limit := func(b *testing.B, on bool) {
		if !on {
			_ = e.API().DeleteConcurrencyLimit(ctx, model.LimitGroup, "bench", "bench")
			_ = e.API().DeleteConcurrencyLimit(ctx, model.LimitKey, "bench-key", "bench")
			return
		}
		for _, kind := range []string{model.LimitGroup, model.LimitKey} {
			name := map[string]string{model.LimitGroup: "bench", model.LimitKey: "bench-key"}[kind]
			if _, err := e.API().SetConcurrencyLimit(ctx, kind, name, 10*n, "bench"); err != nil {
				b.Fatal(err)
			}
		}
	}
	burst(b) // warm up: connections, caches, the store's pages
	var none, limited time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Alternate which goes first, so that neither always follows the other's writes.
		for k := range 2 {
			on := (i+k)%2 == 1
			limit(b, on)
			d := burst(b)
			if on {
				limited += d
			} else {
				none += d
			}
		}
	}
	fires := float64(n * b.N)
	sinkFires = fires / limited.Seconds()
	b.ReportMetric(fires/none.Seconds(), "fires/s-nolimit")
	b.ReportMetric(sinkFires, "fires/s-limit")
	b.ReportMetric(none.Seconds()/limited.Seconds(), "ratio")
}

// BenchmarkConcGate measures the gate's own cost per run, a slot taken at the fire and given
// back at the end, from every core at once: with no limit (the gate only counts) and with a
// group and a key limit that are never reached, against a bare mutex-guarded counter as the
// baseline.
func BenchmarkConcGate(b *testing.B) {
	for _, mode := range []string{"baseline", "none", "never-reached"} {
		b.Run("limit="+mode, func(b *testing.B) {
			b.ReportAllocs()
			g := newConcGate(clock.Real)
			if mode == "never-reached" {
				g.setMax(limitRef{model.LimitGroup, "g"}, 1<<30)
				g.setMax(limitRef{model.LimitKey, "k"}, 1<<30)
			}
			var mu sync.Mutex
			count := 0
			var id atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				ent := &wheel.Entry[*task]{Key: uint64(id.Add(1))}
				for pb.Next() {
					if mode == "baseline" {
						mu.Lock()
						count++
						mu.Unlock()
						mu.Lock()
						count--
						mu.Unlock()
						continue
					}
					sl, ok := g.offer(int64(ent.Key), ent, "g", "k")
					if !ok {
						b.Fatal("a never-reached limit held a fire back")
					}
					g.release(sl)
				}
			})
			sinkFires = float64(count)
		})
	}
}
