package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/ha"
	"github.com/axe-sched/axe/internal/test/galeratest"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// Shard takeover: three shard loops (ha.Shards) share the 256 shards of one store; one at a
// time is stopped without releasing anything, as a crashed node leaves its leases, and the
// time until the other two hold every shard it held is measured, then the loop is started
// again under the same id and the time until the shares are even again is measured. The loop
// alone is measured, in one process: what the lease design costs a takeover, not an engine's
// recovery. A crashed node's last renewal was sent up to a renew interval before it stopped,
// so takeovers fall between TTL − renew and TTL plus the survivors' reaction.
//
//	AXE_TEST_MYSQL_DSN='root:@tcp(127.0.0.1:3306)/' AXE_BENCH_SHARD_KILLS=10 \
//	go test -run '^$' -bench ShardTakeover -benchtime 1x ./bench/
//
// AXE_BENCH_SHARD_GALERA=1 runs the loops through a three-node Galera cluster the benchmark
// starts (each loop through its own node) instead of the one MariaDB.
const (
	envShardKills  = "AXE_BENCH_SHARD_KILLS"
	envShardTTL    = "AXE_BENCH_SHARD_TTL"
	envShardGalera = "AXE_BENCH_SHARD_GALERA"
)

type benchShardLoop struct {
	id   string
	loop *ha.Shards
	done chan struct{}
}

func startBenchShardLoop(b *testing.B, s persist.Store, id string, ttl time.Duration) *benchShardLoop {
	b.Helper()
	sh, err := ha.NewShards(ha.ShardsConfig{Store: s, NodeID: id, Advertise: "http://" + id, TTL: ttl, Renew: ttl / 5,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := sh.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	l := &benchShardLoop{id: id, loop: sh, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for range sh.Changes() {
		}
	}()
	return l
}

func (l *benchShardLoop) stop(release bool) {
	_ = l.loop.Stop(context.Background(), release)
	<-l.done
}

// shardHolders reads who holds each shard ("" for none).
func shardHolders(b *testing.B, s persist.Store) [model.ShardCount]string {
	b.Helper()
	ls, err := s.ShardLeases(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	var out [model.ShardCount]string
	for _, l := range ls {
		if l.Held {
			out[l.Shard] = l.Holder
		}
	}
	return out
}

// waitEven waits until the live loops hold every shard, each within one of the others.
func waitEven(b *testing.B, s persist.Store, ids []string, within time.Duration) time.Duration {
	b.Helper()
	start := time.Now()
	for time.Since(start) < within {
		h := shardHolders(b, s)
		counts := map[string]int{}
		for _, o := range h {
			counts[o]++
		}
		lo, hi := model.ShardCount, 0
		for _, id := range ids {
			lo, hi = min(lo, counts[id]), max(hi, counts[id])
		}
		if counts[""] == 0 && hi-lo <= 1 && lo > 0 {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("the shares of %v did not even out within %s", ids, within)
	return 0
}

func BenchmarkShardTakeover(b *testing.B) {
	kills := sizeParam(b, new(string), envShardKills, 2)
	ttl := durationParam(b, new(string), envShardTTL, 2*time.Second)
	stores := make([]persist.Store, 3)
	where := "one MariaDB"
	if os.Getenv(envShardGalera) == "1" {
		c := galeratest.Start(b)
		db := fmt.Sprintf("axe_bench_%016x", rand.Uint64())
		if err := c.Exec("CREATE DATABASE " + db); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.WaitSynced(ctx); err != nil {
			b.Fatal(err)
		}
		for i := range stores {
			s, err := persist.Open(ctx, persist.SchemeMySQL+":"+c.ServerDSN(i, (i+1)%3, (i+2)%3)+db)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			stores[i] = s
		}
		where = "a three-node Galera cluster, each loop through its own node"
	} else {
		s := persisttest.MySQL(b)
		for i := range stores {
			stores[i] = s
		}
	}
	ids := []string{"node-1", "node-2", "node-3"}
	loops := make([]*benchShardLoop, 3)
	for i, id := range ids {
		loops[i] = startBenchShardLoop(b, stores[i], id, ttl)
	}
	defer func() {
		for _, l := range loops {
			l.stop(true)
		}
	}()
	waitEven(b, stores[0], ids, time.Minute)
	b.ResetTimer()
	var takeovers, lates, rebalances []float64
	for k := range kills {
		i := k % 3
		reader := stores[(i+1)%3]
		// A kill at a random moment of the victim's renewal cycle.
		time.Sleep(ttl/5 + rand.N(ttl/5))
		ls, err := reader.ShardLeases(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		var victim []int
		left := ttl
		for _, l := range ls {
			if l.Held && l.Holder == ids[i] {
				victim = append(victim, l.Shard)
				left = min(left, l.Remaining)
			}
		}
		killed := time.Now()
		loops[i].stop(false)
		for {
			h := shardHolders(b, reader)
			if !slices.ContainsFunc(victim, func(n int) bool { return h[n] == "" || h[n] == ids[i] }) {
				break
			}
			if time.Since(killed) > 10*ttl {
				b.Fatalf("kill %d: %s's shards not taken within %s", k, ids[i], 10*ttl)
			}
			time.Sleep(5 * time.Millisecond)
		}
		took := time.Since(killed)
		takeovers = append(takeovers, took.Seconds())
		// How long after the leases ran out by the database's clock (less the read's own
		// time before the kill, a few milliseconds).
		lates = append(lates, (took - left).Seconds())
		// The node comes back under its id and is handed its share again.
		back := time.Now()
		loops[i] = startBenchShardLoop(b, stores[i], ids[i], ttl)
		waitEven(b, reader, ids, time.Minute)
		rebalances = append(rebalances, time.Since(back).Seconds())
		b.Logf("kill %d of %s (%d shards, leases %s from running out): taken over after %s, %s after they ran out; shares even %s after it came back",
			k+1, ids[i], len(victim), left.Round(time.Millisecond), took.Round(time.Millisecond), (took - left).Round(time.Millisecond),
			time.Since(back).Round(time.Millisecond))
	}
	b.StopTimer()
	to, late, rb := benchkit.Summarize(takeovers), benchkit.Summarize(lates), benchkit.Summarize(rebalances)
	b.Logf("shard takeover on %s, TTL %s, renew %s, %d kills: median %.3fs, max %.3fs (max − TTL %+.3fs); after the leases ran out: median %.3fs, max %.3fs; rebalance after a rejoin: median %.3fs, max %.3fs",
		where, ttl, ttl/5, kills, to.Median, to.Max, to.Max-ttl.Seconds(), late.Median, late.Max, rb.Median, rb.Max)
	b.ReportMetric(to.Median, "takeover-median-s")
	b.ReportMetric(to.Max, "takeover-max-s")
	b.ReportMetric(late.Median, "after-expiry-median-s")
	b.ReportMetric(late.Max, "after-expiry-max-s")
	b.ReportMetric(rb.Max, "rebalance-max-s")
	b.ReportMetric(rb.Median, "rebalance-median-s")
}
