package bench

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// Size knobs of the suites. The flags work when this package is tested alone
// (go test ./bench/ -args -size=2e6); the environment variables work everywhere, including
// go test ./bench/..., where -args would reach bench/e2e too and fail there.
var (
	flagSize        = flag.String("size", "", "B2: tasks in the table, half due in the window (env "+envSize+"; default 2e4)")
	flagWriterSize  = flag.String("writer.size", "", "B3: transitions per measured run (env "+envWriterSize+"; default 2e3)")
	flagPeersSize   = flag.String("peers.size", "", "B5: tasks per peer run (env "+envPeersSize+"; default 1e3)")
	flagPeersWindow = flag.String("peers.window", "", "B5a: span the tasks fall due over (env "+envPeersWindow+"; default 3s)")
)

const (
	envSize        = "AXE_BENCH_SIZE"
	envWriterSize  = "AXE_BENCH_WRITER_SIZE"
	envPeersSize   = "AXE_BENCH_PEERS_SIZE"
	envPeersWindow = "AXE_BENCH_PEERS_WINDOW"
	// envHeapProfile names a file B2 writes the live heap to once the window is loaded.
	envHeapProfile = "AXE_BENCH_HEAPPROFILE"
	// envWriterBatchRows overrides the MaxBatchRows of axe's writer in B3 and B5, to explore
	// its tuning.
	envWriterBatchRows = "AXE_BENCH_WRITER_BATCH_ROWS"
	// envRedisAddr names the Redis server of the asynq peer; defaults to 127.0.0.1:6379.
	envRedisAddr = "AXE_BENCH_REDIS_ADDR"
	// envRequireRedis set to 1 turns an unreachable Redis from a skip into a failure.
	envRequireRedis = "AXE_REQUIRE_REDIS"
)

// sizeParam returns the flag's value, else the environment variable's, else def. Sizes may
// be written 2e6 or 2000000.
func sizeParam(tb testing.TB, flagVal *string, env string, def int) int {
	tb.Helper()
	s := *flagVal
	if s == "" {
		s = os.Getenv(env)
	}
	if s == "" {
		return def
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 1 {
		tb.Fatalf("size %q (flag or %s) must be a positive number such as 2e6", s, env)
	}
	return int(f)
}

// writerBatchRows is the MaxBatchRows the suites give axe's writer: 0 (persist's default)
// unless AXE_BENCH_WRITER_BATCH_ROWS sets it, a tuning experiment.
func writerBatchRows(tb testing.TB) int {
	tb.Helper()
	if os.Getenv(envWriterBatchRows) == "" {
		return 0
	}
	return sizeParam(tb, new(string), envWriterBatchRows, 0)
}

// durationParam is sizeParam for durations such as 60s.
func durationParam(tb testing.TB, flagVal *string, env string, def time.Duration) time.Duration {
	tb.Helper()
	s := *flagVal
	if s == "" {
		s = os.Getenv(env)
	}
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		tb.Fatalf("duration %q (flag or %s) must be positive, such as 60s", s, env)
	}
	return d
}

// sizeName writes n as benchmark names do: 2e6, 1.5e5, 1e3.
func sizeName(n int) string {
	s := strconv.FormatFloat(float64(n), 'e', -1, 64)
	return strings.NewReplacer("e+0", "e", "e+", "e").Replace(s)
}

// serverDSN returns the MySQL server the suites create their databases on: the one the
// persist tests use. Without it the benchmark is skipped, or fails under AXE_REQUIRE_MYSQL=1.
func serverDSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv(persisttest.EnvMySQLDSN)
	if dsn == "" {
		if os.Getenv(persisttest.EnvRequireMySQL) == "1" {
			tb.Fatalf("%s is unset but %s=1", persisttest.EnvMySQLDSN, persisttest.EnvRequireMySQL)
		}
		tb.Skipf("skipping: set %s to a MySQL server DSN, e.g. root:@tcp(127.0.0.1:3306)/", persisttest.EnvMySQLDSN)
	}
	return dsn
}

// scratchDB creates a fresh database axe_b_<random> and returns its DSN and a drop function
// that the caller should call as soon as the database is no longer needed (large fixtures
// should not pile up); it also runs when the test ends.
func scratchDB(tb testing.TB, server string) (dsn string, drop func()) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, dropCtx, err := benchkit.CreateDatabase(ctx, server, "axe_b")
	if err != nil {
		tb.Fatal(err)
	}
	dropped := false
	drop = func() {
		if dropped {
			return
		}
		dropped = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := dropCtx(ctx); err != nil {
			tb.Error(err)
		}
	}
	tb.Cleanup(drop)
	return dsn, drop
}

// scratchStore creates a scratch database (scratchDB) and opens it twice: as an axe store,
// migrated, and as a plain pool of up to conns connections for fixtures and baselines. Both
// close when the test ends, before the database is dropped.
func scratchStore(tb testing.TB, conns int) (persist.Store, *sql.DB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, _ := scratchDB(tb, serverDSN(tb))
	store, err := persist.Open(ctx, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = store.Close() })
	db, err := benchkit.OpenSQL(dsn, conns)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return store, db
}

// redisAddr returns the Redis server of the asynq peer, skipping the test when nothing
// answers there unless AXE_REQUIRE_REDIS=1.
func redisAddr(tb testing.TB) string {
	tb.Helper()
	addr, err := findRedis(tb)
	if err != nil {
		tb.Skip(err)
	}
	return addr
}

// findRedis returns the Redis server of the asynq peer, or why there is none; it fails the
// test instead when AXE_REQUIRE_REDIS=1.
func findRedis(tb testing.TB) (string, error) {
	tb.Helper()
	addr := os.Getenv(envRedisAddr)
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		if os.Getenv(envRequireRedis) == "1" {
			tb.Fatalf("Redis is unreachable at %s but %s=1: %v", addr, envRequireRedis, err)
		}
		return "", fmt.Errorf("skipping the asynq peer: Redis is unreachable at %s (%v); set %s to its address", addr, err, envRedisAddr)
	}
	_ = c.Close()
	return addr, nil
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// successes is how many runs of eng have ended in success (its axe_results_total counter).
func successes(eng *engine.Engine) int {
	return int(eng.API().Metrics().GetOrCreateCounter(`axe_results_total{result="success"}`).Get())
}

// writerQueued is how many groups the batched writers of eng still hold (the
// axe_writer_queue_depth gauge in its metric set).
func writerQueued(eng *engine.Engine) int {
	return int(eng.API().Metrics().GetOrCreateGauge("axe_writer_queue_depth", nil).Get())
}

// writerCommits is the count of batches the writers registered in s have committed.
func writerCommits(s *metrics.Set) int {
	return int(s.GetOrCreateCounter("axe_writer_commits_total").Get())
}

// waitRecorded waits until n runs of eng have succeeded and every write they caused is
// durable: the success count is reached and the writer queue is empty on two polls in a row
// (the last result is counted just before its write is queued). It returns when that was
// first seen, or fails after timeout.
func waitRecorded(tb testing.TB, eng *engine.Engine, n int, timeout time.Duration) time.Time {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var first time.Time
	for {
		now := time.Now()
		if successes(eng) >= n && writerQueued(eng) == 0 {
			if !first.IsZero() {
				return first
			}
			first = now
		} else {
			first = time.Time{}
		}
		if now.After(deadline) {
			tb.Fatalf("after %s: %d of %d runs succeeded, %d writes still queued", timeout, successes(eng), n, writerQueued(eng))
		}
		time.Sleep(2 * time.Millisecond)
	}
}
