package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// envPostgresURL names the PostgreSQL server River runs on; defaults to the machine's.
const envPostgresURL = "AXE_BENCH_POSTGRES_URL"

func postgresURL() string {
	if u := os.Getenv(envPostgresURL); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

type riverNoop struct{}

func (riverNoop) Kind() string { return "axe_bench_noop" }

type riverWorker struct {
	river.WorkerDefaults[riverNoop]
	ran func()
}

func (w *riverWorker) Work(context.Context, *river.Job[riverNoop]) error { w.ran(); return nil }

// riverRun is what a River burst measured.
type riverRun struct {
	insertPerSec float64       // InsertMany of the n jobs, jobs/s
	fromDue      time.Duration // due instant until the last job ran
	processing   time.Duration // first job run until the last
}

// runRiver inserts n no-op jobs with InsertMany, all scheduled for one instant, on a
// database of their own, and runs them with 64 workers. River moves scheduled jobs to
// available on its scheduler's 5 s poll (not configurable), so both the time from the due
// instant and the processing time (first run to last) are reported.
func runRiver(tb testing.TB, n int, expect time.Duration) riverRun {
	tb.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, postgresURL())
	if err != nil {
		tb.Skipf("skipping River: no PostgreSQL at %s: %v", postgresURL(), err)
	}
	defer admin.Close(ctx)
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := "axe_river_" + hex.EncodeToString(r[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("River: cannot create database: %v", err)
	}
	defer func() { _, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") }()
	cfg, err := pgxpool.ParseConfig(postgresURL())
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ConnConfig.Database = name
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		tb.Fatalf("River migrations: %v", err)
	}

	var (
		ran       atomic.Int64
		mu        sync.Mutex
		first     time.Time
		last      time.Time
		reached   = make(chan struct{})
		closeOnce sync.Once
	)
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{ran: func() {
		now := time.Now()
		mu.Lock()
		if first.IsZero() {
			first = now
		}
		last = now
		mu.Unlock()
		if ran.Add(1) == int64(n) {
			closeOnce.Do(func() { close(reached) })
		}
	}})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: peersWorkers}},
		Workers:           workers,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 100 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}

	at := burstInstant(n)
	params := make([]river.InsertManyParams, 0, 1000)
	start := time.Now()
	for i := 0; i < n; i += 1000 {
		params = params[:0]
		for range min(1000, n-i) {
			params = append(params, river.InsertManyParams{Args: riverNoop{}, InsertOpts: &river.InsertOpts{ScheduledAt: at, MaxAttempts: 1}})
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			tb.Fatalf("River InsertMany: %v", err)
		}
	}
	out := riverRun{insertPerSec: float64(n) / time.Since(start).Seconds()}
	if late := time.Since(at); late > 0 {
		tb.Fatalf("River: inserting %d jobs overran their due time by %s", n, late)
	}
	if err := client.Start(ctx); err != nil {
		tb.Fatalf("River start: %v", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	select {
	case <-reached:
	case <-time.After(peersTimeout(expect) + 10*time.Second):
		tb.Fatalf("River: %d of %d jobs ran", ran.Load(), n)
	}
	mu.Lock()
	defer mu.Unlock()
	out.fromDue, out.processing = last.Sub(at), last.Sub(first)
	return out
}

// TestRiverSmoke runs River's burst at a small size: every job runs, after its due time.
func TestRiverSmoke(t *testing.T) {
	r := runRiver(t, 300, peersLead(300))
	if r.fromDue < 0 {
		t.Fatalf("River finished %s before the jobs were due", -r.fromDue)
	}
	t.Logf("River: insert %.0f jobs/s, all ran %s after the due instant, processing %s", r.insertPerSec, r.fromDue, r.processing)
}
