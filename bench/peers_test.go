package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// B5, peers: what users would pick instead of axe, on the same workload, on the same
// machine, in the same run.
//
//   - (a) BenchmarkPeersNaive: the scheduler the seed article started from, which polls the
//     task table every second with SELECT … FOR UPDATE and dispatches what is due, beside
//     axe, with n one-shot tasks falling due evenly over a window and dispatched to a no-op
//     HTTP endpoint. Compared: fire lateness (from the run rows both write) and database
//     load (commands sent to MariaDB, counted by a proxy in front of it).
//   - (b), (c) BenchmarkPeersBurst: n one-shot tasks due at the same instant with no-op
//     handlers, in axe (dispatched over HTTP to a no-op endpoint, every transition durable
//     in MariaDB), in hibiken/asynq on Redis, and with one time.AfterFunc per task (each
//     posting to the same no-op endpoint, nothing recorded). Compared: time from the
//     instant until every handler has run. B1 (wheel/wheel_timing_test.go) compares the
//     timing layers alone: the sharded wheel against time.AfterFunc and container/heap.
//
// Target: axe ahead of each, ratios reported as peer time / axe time (> 1: axe ahead).
//
//	go test -run '^$' -bench Peers -benchtime 5x ./bench/ -args -peers.size=1e5 -peers.window=60s

// peersWorkers is the naive scheduler's dispatch concurrency, and the asynq server's.
const peersWorkers = 64

// peersDB creates a database holding n one-shot tasks due at due(i) with an HTTP callback
// to url, and returns its DSN, a plain handle on it, and a drop function.
func peersDB(tb testing.TB, n int, due func(i int) int64, url string) (string, *sql.DB, func()) {
	tb.Helper()
	ctx := context.Background()
	dsn, drop := scratchDB(tb, serverDSN(tb))
	s, err := persist.Open(ctx, dsn) // creates the schema
	if err != nil {
		tb.Fatal(err)
	}
	_ = s.Close()
	db, err := benchkit.OpenSQL(dsn, peersWorkers+4)
	if err != nil {
		tb.Fatal(err)
	}
	err = benchkit.InsertTasks(ctx, db, benchkit.Tasks{
		N: n, Due: due, CreatedAt: time.Now().UnixMilli(),
		Callback: model.Callback{Type: model.CallbackHTTP, URL: url},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return dsn, db, func() { _ = db.Close(); drop() }
}

// peersLead is how far ahead the workload's first task falls due: time to insert the
// fixture and for the scheduler to start (axe loads its window), so that nothing is late
// before it is even running.
func peersLead(n int) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(envPeersLead)); err == nil && d > 0 {
		return d
	}
	return 2*time.Second + time.Duration(n)*40*time.Microsecond
}

// envPeersLead, a duration, replaces peersLead's default: on a loaded machine axe's start
// can take longer than the default leaves it.
const envPeersLead = "AXE_BENCH_PEERS_LEAD"

// burstInstant is when a burst falls due: at least peersLead(n) from now, on a whole second,
// because asynq keeps due times in whole seconds and would otherwise run tasks early.
func burstInstant(n int) time.Time {
	return time.Now().Add(peersLead(n)).Truncate(time.Second).Add(time.Second)
}

// peersTimeout bounds a run that should last about d.
func peersTimeout(d time.Duration) time.Duration { return 3*d + time.Minute }

// axeRun is what a run of axe on a peers workload measured.
type axeRun struct {
	allRun, recorded time.Time // the last request reached the endpoint; everything durable
	commands         int64     // commands sent to MariaDB from Start to the end
	commits          int       // batches the writer committed
	cpu              time.Duration
}

// countingProxy starts a command-counting proxy in front of dsn's server and returns it
// with the DSN that reaches the same database through it.
func countingProxy(tb testing.TB, dsn string) (*benchkit.CommandProxy, string) {
	tb.Helper()
	addr, err := benchkit.Addr(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	proxy, err := benchkit.NewCommandProxy(addr)
	if err != nil {
		tb.Fatal(err)
	}
	proxied, err := benchkit.WithAddr(dsn, proxy.Addr())
	if err != nil {
		_ = proxy.Close()
		tb.Fatal(err)
	}
	return proxy, proxied
}

// runAxe starts an engine on dsn through a command-counting proxy, waits until the endpoint
// has received n requests and every run is recorded, and stops it. first is when the first
// task falls due: Start must have loaded the window by then.
func runAxe(tb testing.TB, dsn string, n int, ep *benchkit.NoopEndpoint, first time.Time, expect time.Duration) axeRun {
	tb.Helper()
	ctx := context.Background()
	proxy, proxied := countingProxy(tb, dsn)
	defer proxy.Close()
	store, err := persist.Open(ctx, proxied)
	if err != nil {
		tb.Fatal(err)
	}
	defer store.Close()
	cfg := engine.Config{Store: store, Logger: discardLogger()}
	cfg.Writer.MaxBatchRows = writerBatchRows(tb)
	eng, err := engine.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	cmds0, commits0, cpu0 := proxy.Commands(), writerCommits(eng.API().Metrics()), benchkit.CPUTime()
	if err := eng.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = eng.Stop(ctx) }()
	if late := time.Since(first); late > 0 {
		tb.Fatalf("axe: Start returned %s after the first task was due; the lead is too short", late)
	}
	var r axeRun
	select {
	case <-ep.Reached():
		r.allRun = ep.ReachedAt()
	case <-time.After(peersTimeout(expect)):
		tb.Fatalf("axe: %d of %d runs reached the endpoint", ep.Count(), n)
	}
	r.recorded = waitRecorded(tb, eng, n, peersTimeout(expect))
	r.commands, r.commits, r.cpu = proxy.Commands()-cmds0, writerCommits(eng.API().Metrics())-commits0, benchkit.CPUTime()-cpu0
	if err := eng.Stop(ctx); err != nil {
		tb.Fatal(err)
	}
	return r
}

// naiveScheduler is the scheduler the seed article started from: every second it locks the
// due rows with SELECT … FOR UPDATE, marks them RUNNING and commits, then dispatches them;
// each result is written with one autocommitted INSERT of the run row and one UPDATE of the
// runtime row. It keeps nothing in memory between polls.
type naiveScheduler struct {
	db     *sql.DB
	client *fasthttp.HostClient
	path   string
	done   atomic.Int64
}

type naiveJob struct {
	id, due int64
}

func newNaiveScheduler(db *sql.DB, url string) *naiveScheduler {
	rest := strings.TrimPrefix(url, "http://")
	host, path, _ := strings.Cut(rest, "/")
	return &naiveScheduler{
		db:     db,
		client: &fasthttp.HostClient{Addr: host, MaxConns: 1024, MaxConnWaitTimeout: time.Minute},
		path:   "/" + path,
	}
}

// run polls every second until n tasks have been dispatched and recorded.
func (s *naiveScheduler) run(ctx context.Context, n int) error {
	jobs := make(chan naiveJob, n)
	errs := make(chan error, peersWorkers+1)
	var wg sync.WaitGroup
	for range peersWorkers {
		wg.Go(func() {
			for j := range jobs {
				if err := s.dispatch(ctx, j); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	defer func() {
		close(jobs)
		wg.Wait()
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for s.done.Load() < int64(n) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("naive scheduler: %d of %d done: %w", s.done.Load(), n, ctx.Err())
		case err := <-errs:
			return err
		case <-tick.C:
			due, err := s.poll(ctx)
			if err != nil {
				errs <- err
				continue
			}
			for _, j := range due {
				jobs <- j
			}
		}
	}
	return nil
}

// poll locks and claims every due task in one transaction.
func (s *naiveScheduler) poll(ctx context.Context) ([]naiveJob, error) {
	now := time.Now().UnixMilli()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("naive poll: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, `SELECT task_id, next_trigger_time FROM task_runtime
		WHERE state = 'SCHEDULED' AND next_trigger_time > 0 AND next_trigger_time <= ?
		ORDER BY next_trigger_time FOR UPDATE`, now)
	if err != nil {
		return nil, fmt.Errorf("naive poll: %w", err)
	}
	var due []naiveJob
	for rows.Next() {
		var j naiveJob
		if err := rows.Scan(&j.id, &j.due); err != nil {
			rows.Close()
			return nil, fmt.Errorf("naive poll: %w", err)
		}
		due = append(due, j)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("naive poll: %w", err)
	}
	for from := 0; from < len(due); from += 1000 {
		var ids strings.Builder
		for i, j := range due[from:min(from+1000, len(due))] {
			if i > 0 {
				ids.WriteByte(',')
			}
			ids.WriteString(strconv.FormatInt(j.id, 10))
		}
		if _, err := tx.ExecContext(ctx, `UPDATE task_runtime SET state = 'RUNNING', next_trigger_time = 0,
			last_trigger_time = ?, version = version + 1 WHERE task_id IN (`+ids.String()+`)`, now); err != nil {
			return nil, fmt.Errorf("naive claim: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("naive commit: %w", err)
	}
	return due, nil
}

// dispatch sends one run and records its result.
func (s *naiveScheduler) dispatch(ctx context.Context, j naiveJob) error {
	ticket := strconv.FormatInt(j.id, 10) + "-" + strconv.FormatInt(j.due, 10) + "-1"
	sent := time.Now().UnixMilli()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI(s.path)
	req.SetHost(s.client.Addr)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.Set("X-Axe-Ticket", ticket)
	err := s.client.Do(req, resp)
	status := resp.StatusCode()
	fasthttp.ReleaseRequest(req)
	fasthttp.ReleaseResponse(resp)
	if err != nil || status != fasthttp.StatusOK {
		return fmt.Errorf("naive dispatch of task %d: status %d: %v", j.id, status, err)
	}
	ended := time.Now().UnixMilli()
	if _, err := s.db.ExecContext(ctx, `INSERT INTO task_run (ticket, task_id, task_name, kind, attempt,
		scheduled_at, dispatched_at, executor, ended_at, result, error, duration_ms, output, detail)
		VALUES (?, ?, ?, 'scheduled', 1, ?, ?, ?, ?, 'success', '', ?, '', '')`,
		ticket, j.id, "bench-"+strconv.FormatInt(j.id, 10), j.due, sent, s.client.Addr, ended, ended-sent); err != nil {
		return fmt.Errorf("naive run row of task %d: %w", j.id, err)
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE task_runtime SET state = 'SUCCESS', last_end_time = ?,
		success_count = success_count + 1, version = version + 1 WHERE task_id = ?`, ended, j.id); err != nil {
		return fmt.Errorf("naive result of task %d: %w", j.id, err)
	}
	s.done.Add(1)
	return nil
}

// naiveRun is what a run of the naive scheduler measured.
type naiveRun struct {
	commands int64
	cpu      time.Duration
}

// runNaive runs the naive scheduler on dsn through a command-counting proxy until n tasks
// are recorded.
func runNaive(tb testing.TB, dsn string, n int, url string, expect time.Duration) naiveRun {
	tb.Helper()
	proxy, proxied := countingProxy(tb, dsn)
	defer proxy.Close()
	db, err := benchkit.OpenSQL(proxied, peersWorkers+2)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), peersTimeout(expect))
	defer cancel()
	cpu0 := benchkit.CPUTime()
	if err := newNaiveScheduler(db, url).run(ctx, n); err != nil {
		tb.Fatal(err)
	}
	return naiveRun{commands: proxy.Commands(), cpu: benchkit.CPUTime() - cpu0}
}

// lateness reads the run rows' lateness and checks there is one per task.
func lateness(tb testing.TB, db *sql.DB, n int) []int64 {
	tb.Helper()
	late, err := benchkit.Lateness(context.Background(), db)
	if err != nil {
		tb.Fatal(err)
	}
	if len(late) != n {
		tb.Fatalf("%d run rows, want %d", len(late), n)
	}
	return late
}

// steadyDue spreads n tasks evenly over window, starting at start.
func steadyDue(start time.Time, window time.Duration, n int) func(int) int64 {
	return func(i int) int64 { return start.Add(time.Duration(i) * window / time.Duration(n)).UnixMilli() }
}

// peersSteady is one (a) comparison: the naive scheduler, then axe, on the same workload.
type peersSteady struct {
	naiveLate, axeLate []int64
	naive              naiveRun
	axe                axeRun
}

func runPeersSteady(tb testing.TB, n int, window time.Duration) peersSteady {
	tb.Helper()
	var r peersSteady
	expect := peersLead(n) + window

	ep, err := benchkit.StartNoopEndpoint(n)
	if err != nil {
		tb.Fatal(err)
	}
	dsn, db, drop := peersDB(tb, n, steadyDue(time.Now().Add(peersLead(n)), window, n), ep.URL())
	r.naive = runNaive(tb, dsn, n, ep.URL(), expect)
	r.naiveLate = lateness(tb, db, n)
	drop()
	if err := ep.Close(); err != nil {
		tb.Fatal(err)
	}

	ep, err = benchkit.StartNoopEndpoint(n)
	if err != nil {
		tb.Fatal(err)
	}
	defer ep.Close()
	first := time.Now().Add(peersLead(n))
	dsn, db, drop = peersDB(tb, n, steadyDue(first, window, n), ep.URL())
	defer drop()
	r.axe = runAxe(tb, dsn, n, ep, first, expect)
	r.axeLate = lateness(tb, db, n)
	return r
}

func BenchmarkPeersNaive(b *testing.B) {
	n := sizeParam(b, flagPeersSize, envPeersSize, 1e3)
	window := durationParam(b, flagPeersWindow, envPeersWindow, 3*time.Second)
	var s benchkit.Series
	b.Run(fmt.Sprintf("tasks=%s/window=%s", sizeName(n), window), func(b *testing.B) {
		for range b.N {
			r := runPeersSteady(b, n, window)
			for _, p := range []struct {
				name string
				late []int64
			}{{"naive", r.naiveLate}, {"axe", r.axeLate}} {
				s.Add(p.name+" p50 lateness ms", float64(benchkit.Percentile(p.late, 0.50)))
				s.Add(p.name+" p99 lateness ms", float64(benchkit.Percentile(p.late, 0.99)))
				s.Add(p.name+" max lateness ms", float64(p.late[len(p.late)-1]))
			}
			s.Add("naive DB commands/task", float64(r.naive.commands)/float64(n))
			s.Add("axe DB commands/task", float64(r.axe.commands)/float64(n))
			s.Add("naive CPU ms/1K tasks", float64(r.naive.cpu.Milliseconds())*1000/float64(n))
			s.Add("axe CPU ms/1K tasks", float64(r.axe.cpu.Milliseconds())*1000/float64(n))
			s.Add("p99 lateness naive / axe", float64(benchkit.Percentile(r.naiveLate, 0.99))/
				float64(max(benchkit.Percentile(r.axeLate, 0.99), 1)))
			s.Add("DB commands naive / axe", float64(r.naive.commands)/float64(r.axe.commands))
			s.Add("axe writer commits", float64(r.axe.commits))
		}
		b.ReportMetric(s.Summary("axe p99 lateness ms").Median, "axe-p99-ms")
		b.ReportMetric(s.Summary("naive p99 lateness ms").Median, "naive-p99-ms")
		b.ReportMetric(s.Summary("p99 lateness naive / axe").Median, "x-lateness")
		b.ReportMetric(s.Summary("DB commands naive / axe").Median, "x-commands")
	})
	summarize(b, "B5a naive poller vs axe: %d tasks due over %s (lateness 1 ms resolution); load average %s\n%s",
		n, window, benchkit.LoadAverage(), s.Table())
}

// peersBurst is one (b)/(c) comparison: n tasks due at one instant, time until all ran.
type peersBurst struct {
	axe, axeRecorded, asynq, afterFunc time.Duration
	asynqRan                           bool
	river                              riverRun
}

func runPeersBurst(tb testing.TB, n int, redis string) peersBurst {
	tb.Helper()
	var r peersBurst
	expect := peersLead(n) + time.Duration(n)*100*time.Microsecond

	// axe: every RUNNING and SUCCESS transition, run row and action durable in MariaDB.
	ep, err := benchkit.StartNoopEndpoint(n)
	if err != nil {
		tb.Fatal(err)
	}
	defer ep.Close()
	at := burstInstant(n)
	dsn, _, drop := peersDB(tb, n, func(int) int64 { return at.UnixMilli() }, ep.URL())
	defer drop()
	a := runAxe(tb, dsn, n, ep, at, expect)
	r.axe, r.axeRecorded = a.allRun.Sub(at), a.recorded.Sub(at)

	if redis != "" {
		r.asynq, r.asynqRan = runAsynq(tb, redis, n, expect), true
	}
	r.afterFunc = runAfterFunc(tb, n, expect)
	r.river = runRiver(tb, n, expect)
	return r
}

// asynqLogger keeps asynq quiet; its errors would surface as a run that never completes.
type asynqLogger struct{}

func (asynqLogger) Debug(...any) {}
func (asynqLogger) Info(...any)  {}
func (asynqLogger) Warn(...any)  {}
func (asynqLogger) Error(...any) {}
func (asynqLogger) Fatal(...any) {}

// runAsynq enqueues n no-op tasks on a queue of their own, all to be processed at the same
// instant, and returns how long after that instant the last handler ran. asynq keeps due
// times in whole seconds (a task due at 12:00:00.900 runs from 12:00:00.000), so the
// instant is a whole second. asynq gets
// generous settings: it moves due tasks every 100 ms and looks for work every 100 ms (its
// defaults are 5 s and 1 s), with 64 workers.
func runAsynq(tb testing.TB, addr string, n int, expect time.Duration) time.Duration {
	tb.Helper()
	var r [6]byte
	_, _ = rand.Read(r[:])
	queue := "axe_bench_" + hex.EncodeToString(r[:])
	opt := asynq.RedisClientOpt{Addr: addr}
	client := asynq.NewClient(opt)
	defer client.Close()
	inspector := asynq.NewInspector(opt)
	defer inspector.Close()
	defer func() { _ = inspector.DeleteQueue(queue, true) }()

	at := burstInstant(n)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, 16)
	)
	for range 16 { // enqueue is one round trip per task: overlap them
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				_, err := client.Enqueue(asynq.NewTask("noop", nil), asynq.Queue(queue), asynq.ProcessAt(at), asynq.MaxRetry(0))
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		tb.Fatalf("asynq enqueue: %v", err)
	}
	if late := time.Since(at); late > 0 {
		tb.Fatalf("asynq: enqueueing %d tasks overran their due time by %s; the lead is too short", n, late)
	}

	var (
		ran       atomic.Int64
		reached   = make(chan struct{})
		reachedAt time.Time
	)
	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency:              peersWorkers,
		Queues:                   map[string]int{queue: 1},
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval:        100 * time.Millisecond,
		Logger:                   asynqLogger{},
		LogLevel:                 asynq.FatalLevel,
		ShutdownTimeout:          10 * time.Second,
	})
	err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if ran.Add(1) == int64(n) {
			reachedAt = time.Now()
			close(reached)
		}
		return nil
	}))
	if err != nil {
		tb.Fatalf("asynq server: %v", err)
	}
	defer srv.Shutdown()
	select {
	case <-reached:
	case <-time.After(peersTimeout(expect)):
		tb.Fatalf("asynq: %d of %d handlers ran", ran.Load(), n)
	}
	return reachedAt.Sub(at)
}

// runAfterFunc arms one time.AfterFunc per task, all due at the same instant, each posting
// to a no-op endpoint with the same client limits as axe's dispatcher, and returns how long
// after that instant the last request arrived. Nothing is recorded anywhere.
func runAfterFunc(tb testing.TB, n int, expect time.Duration) time.Duration {
	tb.Helper()
	ep, err := benchkit.StartNoopEndpoint(n)
	if err != nil {
		tb.Fatal(err)
	}
	defer ep.Close()
	rest := strings.TrimPrefix(ep.URL(), "http://")
	host, path, _ := strings.Cut(rest, "/")
	client := &fasthttp.HostClient{Addr: host, MaxConns: 1024, MaxConnWaitTimeout: time.Minute}
	var failed atomic.Int64
	post := func() {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("/" + path)
		req.SetHost(host)
		req.Header.SetMethod(fasthttp.MethodPost)
		if err := client.Do(req, resp); err != nil || resp.StatusCode() != fasthttp.StatusOK {
			failed.Add(1)
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	at := burstInstant(n)
	timers := make([]*time.Timer, n)
	for i := range timers {
		timers[i] = time.AfterFunc(time.Until(at), post)
	}
	select {
	case <-ep.Reached():
	case <-time.After(peersTimeout(expect)):
		for _, t := range timers {
			t.Stop()
		}
		tb.Fatalf("time.AfterFunc: %d of %d requests arrived, %d failed", ep.Count(), n, failed.Load())
	}
	if f := failed.Load(); f > 0 {
		tb.Fatalf("time.AfterFunc: %d requests failed", f)
	}
	return ep.ReachedAt().Sub(at)
}

func BenchmarkPeersBurst(b *testing.B) {
	n := sizeParam(b, flagPeersSize, envPeersSize, 1e3)
	redis, err := findRedis(b)
	if err != nil {
		b.Log(err)
	}
	var s benchkit.Series
	b.Run("tasks="+sizeName(n), func(b *testing.B) {
		for range b.N {
			r := runPeersBurst(b, n, redis)
			s.Add("axe: all run s", r.axe.Seconds())
			s.Add("axe: all recorded s", r.axeRecorded.Seconds())
			if r.asynqRan {
				s.Add("asynq: all run s", r.asynq.Seconds())
			}
			s.Add("AfterFunc: all run s", r.afterFunc.Seconds())
			if r.asynqRan {
				s.Add("asynq / axe", r.asynq.Seconds()/r.axe.Seconds())
			}
			s.Add("AfterFunc / axe", r.afterFunc.Seconds()/r.axe.Seconds())
			s.Add("River: all run s (from the due instant)", r.river.fromDue.Seconds())
			s.Add("River: processing s (first run to last)", r.river.processing.Seconds())
			s.Add("River: InsertMany jobs/s", r.river.insertPerSec)
			s.Add("River / axe", r.river.fromDue.Seconds()/r.axe.Seconds())
		}
		b.ReportMetric(s.Summary("axe: all run s").Median, "axe-s")
		b.ReportMetric(s.Summary("AfterFunc: all run s").Median, "afterfunc-s")
		if redis != "" {
			b.ReportMetric(s.Summary("asynq: all run s").Median, "asynq-s")
			b.ReportMetric(s.Summary("asynq / axe").Median, "x-asynq")
		}
		b.ReportMetric(s.Summary("AfterFunc / axe").Median, "x-afterfunc")
	})
	summarize(b, "B5b/c burst: %d one-shot tasks due at one instant, time from it until every handler ran; load average %s\n%s",
		n, benchkit.LoadAverage(), s.Table())
}

// TestPeersSmoke runs B5's workloads once at a small size and checks that every scheduler
// ran every task, and that the naive scheduler and axe each recorded one run per task.
func TestPeersSmoke(t *testing.T) {
	const n = 300
	// A smoke run checks that every task ran, not how fast: a lead long enough for an
	// engine's start on a loaded box (the default's 2 s was overrun by 31 ms in a suite run).
	if os.Getenv(envPeersLead) == "" {
		t.Setenv(envPeersLead, "8s")
	}
	steady := runPeersSteady(t, n, 2*time.Second)
	if len(steady.naiveLate) != n || len(steady.axeLate) != n {
		t.Fatalf("run rows: naive %d, axe %d; want %d each", len(steady.naiveLate), len(steady.axeLate), n)
	}
	if steady.naive.commands == 0 || steady.axe.commands == 0 {
		t.Fatalf("the proxy counted %d naive and %d axe commands; want both > 0", steady.naive.commands, steady.axe.commands)
	}
	t.Run("asynq", func(t *testing.T) {
		if d := runAsynq(t, redisAddr(t), n, peersLead(n)); d < 0 {
			t.Fatalf("asynq finished %s before the tasks were due", -d)
		}
	})
	if d := runAfterFunc(t, n, peersLead(n)); d < 0 {
		t.Fatalf("time.AfterFunc finished %s before the tasks were due", -d)
	}
}
