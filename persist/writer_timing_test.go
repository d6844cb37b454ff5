package persist_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// benchProducers is how many goroutines submit at once in both benchmarks, so the writer and
// the autocommit baseline face the same concurrency. 64 stays well under MariaDB's default
// max_connections (151), which the baseline needs one connection per producer of.
const benchProducers = 64

// benchTasksPerProducer spreads a producer's transitions over several tasks so that a full
// batch (170 dispatches) touches mostly distinct runtime rows, as a real fire burst does.
const benchTasksPerProducer = 8

// benchSink keeps the measured work observable, so the compiler cannot drop it.
var benchSink int64

// producer owns a few tasks and chains transitions on them in turn, each expecting the
// version its task's previous transition produced.
type producer struct {
	tasks []*task
	turn  int
}

func (p *producer) next() *persist.Group {
	k := p.tasks[p.turn%len(p.tasks)]
	p.turn++
	return k.next()
}

// benchProducersOn creates benchProducers producers and their tasks (concurrently: creating
// 512 tasks one by one on MariaDB would dominate a short benchmark's setup).
func benchProducersOn(b *testing.B, s persist.Store) []*producer {
	b.Helper()
	ps := make([]*producer, benchProducers)
	var wg sync.WaitGroup
	for i := range ps {
		ps[i] = &producer{tasks: make([]*task, benchTasksPerProducer)}
		wg.Go(func() {
			for j := range ps[i].tasks {
				k, err := createTask(b.Context(), s, fmt.Sprintf("bench-%d-%d", i, j))
				if err != nil {
					b.Error(err)
					return
				}
				ps[i].tasks[j] = k
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return ps
}

// BenchmarkWriter measures group-committed dispatches: benchProducers goroutines each submit,
// without waiting, groups of one transition + one run + one action (what a dispatch writes).
// b.N counts transitions; the clock stops once every group is durable. groups/commit shows
// whether batches fill up (a 3-row group fills a 512-row batch at 170).
func BenchmarkWriter(b *testing.B) {
	b.Run("store=sqlite", func(b *testing.B) { benchmarkWriter(b, persisttest.SQLite(b)) })
	b.Run("store=mysql", func(b *testing.B) { benchmarkWriter(b, persisttest.MySQL(b)) })
}

func benchmarkWriter(b *testing.B, s persist.Store) {
	ps := benchProducersOn(b, s)
	w, err := persist.NewWriter(s, persist.WriterConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: testMetrics(b)})
	if err != nil {
		b.Fatalf("NewWriter: %v", err)
	}
	ctx := context.Background()
	if err := w.Start(ctx); err != nil {
		b.Fatalf("Start: %v", err)
	}
	defer func() {
		if err := w.Stop(ctx); err != nil {
			b.Errorf("Stop: %v", err)
		}
	}()

	var (
		remaining atomic.Int64
		failed    atomic.Int64
		landed    atomic.Int64
		next      atomic.Int64
		producers sync.WaitGroup
	)
	remaining.Store(int64(b.N))
	allDone := make(chan struct{})
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		} else {
			landed.Add(1)
		}
		if remaining.Add(-1) == 0 {
			close(allDone)
		}
	}

	commits := counterValue(b, "axe_writer_commits_total")
	b.ReportAllocs()
	b.ResetTimer()
	for _, p := range ps {
		producers.Go(func() {
			for next.Add(1) <= int64(b.N) {
				g := p.next()
				g.Done = done
				if err := w.Submit(ctx, g); err != nil {
					b.Errorf("Submit: %v", err)
					done(err)
				}
			}
		})
	}
	producers.Wait()
	<-allDone
	b.StopTimer()

	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d groups failed", n, b.N)
	}
	benchSink += landed.Load()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "transitions/s")
	b.ReportMetric(float64(b.N)/float64(counterValue(b, "axe_writer_commits_total")-commits), "groups/commit")
}

// BenchmarkAutocommitBaseline is what BenchmarkWriter is measured against: the same
// transitions from the same number of goroutines, each one its own autocommitted
// UPDATE … WHERE task_id=? AND version=? on a plain *sql.DB (one connection per goroutine,
// parameters interpolated client-side as the store does). Only the runtime row is written,
// not the run and action rows the writer also commits, so the baseline is flattered.
func BenchmarkAutocommitBaseline(b *testing.B) {
	b.Run("store=mysql", func(b *testing.B) {
		dsn := persisttest.MySQLDSN(b)
		ctx := context.Background()
		s, err := persist.Open(ctx, dsn)
		if err != nil {
			b.Fatalf("Open: %v", err)
		}
		defer s.Close()
		ps := benchProducersOn(b, s)

		cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
		if err != nil {
			b.Fatalf("ParseDSN: %v", err)
		}
		cfg.InterpolateParams = true
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			b.Fatalf("NewConnector: %v", err)
		}
		db := sql.OpenDB(connector)
		defer db.Close()
		db.SetMaxOpenConns(benchProducers)
		db.SetMaxIdleConns(benchProducers)

		const update = `UPDATE task_runtime SET state = ?, current_ticket = ?, last_trigger_time = ?,
			version = version + 1 WHERE task_id = ? AND version = ?`
		var (
			next      atomic.Int64
			landed    atomic.Int64
			producers sync.WaitGroup
		)
		b.ReportAllocs()
		b.ResetTimer()
		for _, p := range ps {
			producers.Go(func() {
				for next.Add(1) <= int64(b.N) {
					g := p.next()
					tr := g.Transitions[0]
					res, err := db.ExecContext(ctx, update, string(tr.Runtime.State), tr.Runtime.CurrentTicket,
						tr.Runtime.LastTriggerTime, tr.Runtime.TaskID, tr.ExpectVersion)
					if err != nil {
						b.Errorf("UPDATE: %v", err)
						return
					}
					if n, err := res.RowsAffected(); err != nil || n != 1 {
						b.Errorf("UPDATE matched %d rows (%v), want 1", n, err)
						return
					}
					landed.Add(1)
				}
			})
		}
		producers.Wait()
		b.StopTimer()

		benchSink += landed.Load()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "transitions/s")
	})
}
