package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// B3, batched writer: state transitions, each with its run row and action record (what a
// dispatch writes), group-committed through the writer lanes the engine uses (persist.Lanes)
// and through one persist.Writer, beside one autocommitted UPDATE … WHERE task_id=? AND
// version=? per transition, from the same number of goroutines in the same run (and, for
// scale, from one goroutine). The baseline writes only the runtime row, so it is flattered.
// Targets: >= 50K transitions/s and >= 20x the baseline.
//
//	go test -run '^$' -bench Writer -benchtime 5x ./bench/ -args -writer.size=2e5
//
// persist/writer_timing_test.go measures the writer alone on both stores; this suite is
// the side-by-side comparison on MariaDB.

// writerProducers is how many goroutines write at once in both modes: the engine's writes
// come from many consumers and dispatch workers. 64 stays well under MariaDB's default
// max_connections (151), and the baseline needs one connection per goroutine.
const writerProducers = 64

// writerTasksPerProducer spreads a producer's transitions over several tasks, so a batch
// touches mostly distinct runtime rows, as a burst of fires does.
const writerTasksPerProducer = 8

// writerUpdate is the baseline: one compare-and-swap per transition, autocommitted.
const writerUpdate = `UPDATE task_runtime SET state = ?, current_ticket = ?, last_trigger_time = ?,
	version = version + 1 WHERE task_id = ? AND version = ?`

// writerTask is a task a producer owns, with the version its last transition produced.
type writerTask struct {
	id      int64
	name    string
	version int64
	running bool
}

// writerProducer chains transitions over its tasks in turn; each expects the version the
// task's previous transition produced.
type writerProducer struct {
	id    int
	tasks []writerTask
	turn  int
	seq   int
}

// next returns the producer's next transition, alternating each task between SCHEDULED
// and RUNNING, with the run row and action record of a dispatch.
func (p *writerProducer) next(now int64) persist.Group {
	k := &p.tasks[p.turn%len(p.tasks)]
	p.turn++
	p.seq++
	from, to := model.StateScheduled, model.StateRunning
	if k.running {
		from, to = to, from
	}
	k.running = !k.running
	ticket := strconv.Itoa(p.id) + "-" + strconv.Itoa(p.seq) + "-" + strconv.FormatInt(now, 10)
	g := persist.Group{
		Transitions: []persist.Transition{{ExpectVersion: k.version, Runtime: model.Runtime{
			TaskID: k.id, State: to, CurrentTicket: ticket, Attempt: 1, LastTriggerTime: now,
		}}},
		Runs: []model.Run{{
			Ticket: ticket, TaskID: k.id, TaskName: k.name, Kind: model.RunScheduled, Attempt: 1,
			ScheduledAt: now, DispatchedAt: now, Executor: "127.0.0.1:9", Result: model.ResultRunning,
		}},
		Actions: []model.Action{{
			TaskID: k.id, TaskName: k.name, Ticket: ticket, Action: "dispatch", From: from, To: to,
			Actor: "scheduler", At: now, Detail: "attempt 1",
		}},
	}
	k.version++
	return g
}

type writerFixture struct {
	batchRows int // the writer's MaxBatchRows; 0 is its default
	store     persist.Store
	db        *sql.DB // one connection per producer, for the baseline
	producers []*writerProducer
}

func newWriterFixture(tb testing.TB) *writerFixture {
	tb.Helper()
	ctx := context.Background()
	store, db := scratchStore(tb, writerProducers)
	n := writerProducers * writerTasksPerProducer
	err := benchkit.InsertTasks(ctx, db, benchkit.Tasks{
		N: n, Prefix: "w", Due: func(int) int64 { return time.Now().Add(time.Hour).UnixMilli() },
		Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/never"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	f := &writerFixture{store: store, db: db}
	for i := range writerProducers {
		p := &writerProducer{id: i}
		for j := range writerTasksPerProducer {
			id := int64(i*writerTasksPerProducer + j + 1)
			p.tasks = append(p.tasks, writerTask{id: id, name: "w-" + strconv.FormatInt(id, 10), version: 1})
		}
		f.producers = append(f.producers, p)
	}
	return f
}

// share runs fn on every producer at once until n transitions have been taken.
func (f *writerFixture) share(n int, fn func(p *writerProducer) error) error {
	return f.shareAmong(f.producers, n, fn)
}

// shareAmong runs fn on each of producers at once until n transitions have been taken.
func (f *writerFixture) shareAmong(producers []*writerProducer, n int, fn func(p *writerProducer) error) error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, len(producers))
	)
	for _, p := range producers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := fn(p); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// autocommit applies n transitions as single-row autocommitted UPDATEs from the given
// producers, each on its own connection.
func (f *writerFixture) autocommit(ctx context.Context, producers []*writerProducer, n int) (time.Duration, error) {
	start := time.Now()
	err := f.shareAmong(producers, n, func(p *writerProducer) error {
		g := p.next(time.Now().UnixMilli())
		tr := g.Transitions[0]
		res, err := f.db.ExecContext(ctx, writerUpdate, string(tr.Runtime.State), tr.Runtime.CurrentTicket,
			tr.Runtime.LastTriggerTime, tr.Runtime.TaskID, tr.ExpectVersion)
		if err != nil {
			return fmt.Errorf("cannot update: %w", err)
		}
		if rows, err := res.RowsAffected(); err != nil || rows != 1 {
			return fmt.Errorf("UPDATE of task %d at version %d matched %d rows (%v), want 1", tr.Runtime.TaskID, tr.ExpectVersion, rows, err)
		}
		return nil
	})
	return time.Since(start), err
}

// groupWriter is what the engine writes through: one persist.Writer, or persist.Lanes of
// several writers keyed by task.
type groupWriter interface {
	Start(ctx context.Context) error
	Submit(ctx context.Context, g *persist.Group) error
	Stop(ctx context.Context) error
}

// batched submits n groups without waiting on each to lanes writers (one is a plain
// persist.Writer), and returns once every group is durable, with how many groups each
// commit carried.
func (f *writerFixture) batched(ctx context.Context, lanes, n int) (time.Duration, float64, error) {
	cfg := persist.WriterConfig{MaxBatchRows: f.batchRows, Logger: discardLogger(), Metrics: metrics.NewSet()}
	var (
		w   groupWriter
		err error
	)
	if lanes == 1 {
		w, err = persist.NewWriter(f.store, cfg)
	} else {
		w, err = persist.NewLanes(f.store, cfg, lanes)
	}
	if err != nil {
		return 0, 0, err
	}
	if err := w.Start(ctx); err != nil {
		return 0, 0, err
	}
	var (
		remaining atomic.Int64
		failed    atomic.Int64
		allDone   = make(chan struct{})
	)
	remaining.Store(int64(n))
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		}
		if remaining.Add(-1) == 0 {
			close(allDone)
		}
	}
	commits := writerCommits(cfg.Metrics)
	start := time.Now()
	err = f.share(n, func(p *writerProducer) error {
		g := p.next(time.Now().UnixMilli())
		g.Done = done
		return w.Submit(ctx, &g)
	})
	if err == nil {
		<-allDone
	}
	took := time.Since(start)
	perCommit := float64(n) / float64(max(writerCommits(cfg.Metrics)-commits, 1))
	if stopErr := w.Stop(ctx); err == nil {
		err = stopErr
	}
	if err == nil && failed.Load() > 0 {
		err = fmt.Errorf("%d of %d groups failed", failed.Load(), n)
	}
	return took, perCommit, err
}

func BenchmarkWriter(b *testing.B) {
	n := sizeParam(b, flagWriterSize, envWriterSize, 2e3)
	f := newWriterFixture(b)
	f.batchRows = writerBatchRows(b)
	var s benchkit.Series
	b.Run("transitions="+sizeName(n), func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for range b.N {
			auto, err := f.autocommit(ctx, f.producers, n)
			if err != nil {
				b.Fatal(err)
			}
			// The per-connection figure, for scale: what one caller waiting on each commit
			// gets, on a twentieth of the work.
			single := max(n/20, 100)
			auto1, err := f.autocommit(ctx, f.producers[:1], single)
			if err != nil {
				b.Fatal(err)
			}
			one, perCommit, err := f.batched(ctx, 1, n)
			if err != nil {
				b.Fatal(err)
			}
			lanes, _, err := f.batched(ctx, engine.WriterLanesDefault, n)
			if err != nil {
				b.Fatal(err)
			}
			rate := func(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }
			s.Add(fmt.Sprintf("lanes (%d writers) transitions/s", engine.WriterLanesDefault), rate(n, lanes))
			s.Add("one writer transitions/s", rate(n, one))
			s.Add("autocommit transitions/s", rate(n, auto))
			s.Add("autocommit transitions/s, 1 goroutine", rate(single, auto1))
			s.Add("lanes / autocommit", auto.Seconds()/lanes.Seconds())
			s.Add("one writer / autocommit", auto.Seconds()/one.Seconds())
			s.Add("lanes / autocommit, 1 goroutine", rate(n, lanes)/rate(single, auto1))
			s.Add("lanes rows/s (transition+run+action)", 3*rate(n, lanes))
			s.Add("groups per commit, one writer", perCommit)
		}
		b.ReportMetric(s.Summary(fmt.Sprintf("lanes (%d writers) transitions/s", engine.WriterLanesDefault)).Median, "transitions/s")
		b.ReportMetric(s.Summary("one writer transitions/s").Median, "one-writer-transitions/s")
		b.ReportMetric(s.Summary("autocommit transitions/s").Median, "autocommit-transitions/s")
		b.ReportMetric(s.Summary("lanes / autocommit").Median, "x-autocommit")
	})
	batch := "default"
	if f.batchRows > 0 {
		batch = strconv.Itoa(f.batchRows)
	}
	summarize(b, "B3 batched writer: %d transitions per mode per run, %d goroutines, MaxBatchRows %s; load average %s\n%s",
		n, writerProducers, batch, benchkit.LoadAverage(), s.Table())
}

// TestWriterSmoke runs B3's workload once at a small size and checks that every mode
// applied every transition exactly once: the stored versions are the ones the producers
// chained to, and the writers stored one run row and one action record per transition.
func TestWriterSmoke(t *testing.T) {
	f := newWriterFixture(t)
	ctx := context.Background()
	const n = 1000
	if _, err := f.autocommit(ctx, f.producers, n); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.batched(ctx, 1, n); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.batched(ctx, engine.WriterLanesDefault, n); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, p := range f.producers {
		for _, k := range p.tasks {
			sum += k.version
		}
	}
	var stored int64
	var runs, actions int
	if err := f.db.QueryRowContext(ctx, `SELECT (SELECT SUM(version) FROM task_runtime),
		(SELECT COUNT(*) FROM task_run), (SELECT COUNT(*) FROM task_action)`).Scan(&stored, &runs, &actions); err != nil {
		t.Fatal(err)
	}
	if tasks := int64(writerProducers * writerTasksPerProducer); stored != sum || sum != tasks+3*n {
		t.Errorf("stored versions sum to %d, producers chained to %d; want %d (one bump per transition)", stored, sum, tasks+3*n)
	}
	if runs != 2*n || actions != 2*n {
		t.Errorf("the writers stored %d run rows and %d action records, want %d each", runs, actions, 2*n)
	}
}
