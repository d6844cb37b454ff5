package e2e

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"

	"github.com/axe-sched/axe/lib/freeport"
)

// runPhase runs one phase: n tasks falling due evenly over span, on a database, engine, API
// server and executor processes of its own. The burst phase also measures the raw rate.
func runPhase(ctx context.Context, cfg Config, command []string, name string, n int, span time.Duration, rep *Report) (*Phase, error) {
	log := cfg.Logger.With("phase", name)
	lead := cfg.lead(n)
	if name == "steady" && cfg.Background != BackgroundNone {
		// The background's rows are written first too, more slowly than the tasks'.
		lead = cfg.lead(n) + time.Duration(3*cfg.BackgroundTasks)*150*time.Microsecond
	}
	ctx, cancel := context.WithTimeout(ctx, lead+cfg.timeout(n, span))
	defer cancel()

	dsn, drop, err := benchkit.CreateDatabase(ctx, cfg.DSN, "axe_e2e")
	if err != nil {
		return nil, err
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer dcancel()
		if err := drop(dctx); err != nil {
			log.Warn("cannot drop the benchmark database", "err", err)
		}
	}()
	store, err := persist.OpenWith(ctx, dsn, persist.OpenOptions{Metrics: processMetrics})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	db, err := benchkit.OpenSQL(dsn, 8)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if rep.DBVersion == "" {
		si, err := benchkit.ReadServerInfo(ctx, db)
		if err != nil {
			return nil, err
		}
		rep.DBVersion, rep.FlushLogAtTrxCommit = si.Version, si.FlushLogAtTrxCommit
	}

	// HTTP-callback tasks name the receiver of an executor process, so the processes start
	// before the fixture is written; they register with the API server once it serves.
	var procs []*executorProc
	defer func() {
		for _, pr := range procs {
			pr.stop()
		}
	}()
	api, err := reserveAddr()
	if err != nil {
		return nil, err
	}
	for i := range cfg.Executors {
		profile := ""
		if cfg.ProfileDir != "" {
			profile = filepath.Join(cfg.ProfileDir, fmt.Sprintf("executor-%s-%d.pprof", name, i))
		}
		pr, err := startExecutor(ctx, command, "http://"+api, profile)
		if err != nil {
			return nil, err
		}
		procs = append(procs, pr)
	}

	written := time.Now()
	first := written.Add(lead).Truncate(time.Millisecond)
	cb := model.Callback{Type: model.CallbackExecutor, App: benchApp, Handler: benchHandler}
	if cfg.Callback == CallbackHTTP {
		// The first executor process's receiver: one endpoint, as one executor serves the
		// executor tasks.
		cb = model.Callback{Type: model.CallbackHTTP, URL: "http://" + procs[0].ready.HTTPAddr + receiverPath}
	}
	err = benchkit.InsertTasks(ctx, db, benchkit.Tasks{
		N:         n,
		Due:       func(i int) int64 { return first.Add(time.Duration(i) * span / time.Duration(n)).UnixMilli() }, // span 0: all at once
		Callback:  cb,
		CreatedAt: written.UnixMilli(),
	})
	if err != nil {
		return nil, err
	}
	background := name == "steady" && cfg.Background != BackgroundNone
	if background {
		if err := seedBackground(ctx, cfg, db, n, written); err != nil {
			return nil, err
		}
	}
	log.Info("fixture written", "tasks", n, "due_over", span, "background", background, "took", time.Since(written))

	p := &Phase{Name: name, Tasks: n, Span: span, WriterLanes: cfg.Engine.WriterLanes}
	if p.WriterLanes == 0 {
		p.WriterLanes = engine.WriterLanesDefault
	}
	runtime.GC()
	debug.FreeOSMemory()
	rss0, err := benchkit.RSS()
	if err != nil {
		return nil, err
	}
	quiet := slog.New(minLevel{cfg.Logger.Handler(), slog.LevelWarn})
	ecfg := cfg.Engine
	ecfg.Store, ecfg.Logger = store, quiet
	if background {
		backgroundEngine(cfg, &ecfg, first, span)
	}
	var startShards func(context.Context, string, *engine.Engine, *slog.Logger) (func(), error)
	if cfg.HA && cfg.HAMode == HAModeShards {
		startShards = shardNode(store, &ecfg)
	} else if cfg.HA {
		stopHA, err := asPrimary(ctx, store, &ecfg, quiet)
		if err != nil {
			return nil, err
		}
		defer stopHA() // after the engine's stop, deferred below
	}
	ecfg.Metrics = metrics.NewSet()
	phaseMetrics.Store(ecfg.Metrics)
	eng, err := engine.New(ecfg)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := eng.Start(ctx); err != nil {
		_ = eng.Stop(ctx)
		return nil, err
	}
	if startShards != nil {
		stopShards, err := startShards(ctx, dsn, eng, quiet)
		if err != nil {
			_ = eng.Stop(ctx)
			return nil, err
		}
		defer stopShards() // after the engine's stop, deferred below
	}
	p.Load = time.Since(start)
	log.Info("window loaded", "took", p.Load)
	srv, err := admin.NewServer(admin.ServerConfig{Addr: api, Engine: eng, Store: store, Logger: quiet})
	if err != nil {
		_ = eng.Stop(ctx)
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		_ = eng.Stop(ctx)
		return nil, err
	}
	// Shutdown order: executors first (they deliver their last results to the API), then the
	// API server, then the engine (which flushes its writer); the store closes last.
	defer func() {
		for _, pr := range procs {
			pr.stop()
		}
		procs = nil
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := srv.Stop(sctx); err != nil {
			log.Warn("cannot stop the API server", "err", err)
		}
		if err := eng.Stop(sctx); err != nil {
			log.Warn("cannot stop the engine", "err", err)
		}
	}()
	if err := waitExecutors(ctx, eng, cfg.Executors); err != nil {
		return nil, err
	}
	if late := time.Since(first); late > 0 {
		return nil, fmt.Errorf("%w: phase %s: ready %s after the first due time (load took %s); raise Config.Lead",
			ErrLeadTooShort, name, late, p.Load)
	}

	dbPID := benchkit.ServerPID(ctx, db)
	// The writer's counts start before the first due instant, as the timeline's base (taken
	// at that instant by its own goroutine) does, so neither misses a commit.
	commits0, busy0 := promValue("axe_writer_commits_total"), promValue("axe_writer_commit_duration_seconds_sum")
	stopTimeline := sampleWriter(first, cfg.Timeline)
	// The phase's CPU is counted from its first due instant: what came before is start-up.
	// The scheduler's CPU over the last stretch before it (up to a second), with everything
	// started and nothing due, is its idle rate (SchedulerIdle).
	select {
	case <-time.After(time.Until(first.Add(-time.Second))): // at once when less is left
	case <-ctx.Done():
		stopTimeline()
		return nil, ctx.Err()
	}
	idle0, idleAt := benchkit.CPUTime(), time.Now()
	select {
	case <-time.After(time.Until(first)):
	case <-ctx.Done():
		stopTimeline()
		return nil, ctx.Err()
	}
	cpu0, exec0, db0 := benchkit.CPUTime(), execCPU(procs), dbCPU(dbPID)
	var mem0 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	if d := time.Since(idleAt); d >= 100*time.Millisecond {
		p.SchedulerIdle = (cpu0 - idle0).Seconds() / d.Seconds()
	}
	rss := startSampler()
	stopProfile := func() {}
	if cfg.ProfileDir != "" {
		if stopProfile, err = startProfiles(cfg.ProfileDir, "scheduler-"+name); err != nil {
			stopTimeline()
			rss.stop()
			return nil, err
		}
	}
	waitBackground := func() (*Background, error) { return nil, nil }
	if background {
		waitBackground = runBackground(ctx, cfg, "http://"+srv.Addr(), first, span)
	}
	done, err := waitDone(ctx, eng, n)
	p.Timeline = stopTimeline()
	stopProfile()
	if err != nil {
		rss.stop()
		return nil, fmt.Errorf("phase %s: %w", name, err)
	}
	if p.Background, err = waitBackground(); err != nil {
		rss.stop()
		return nil, fmt.Errorf("phase %s: %w", name, err)
	}
	p.SchedulerCPU, p.ExecutorCPU, p.DatabaseCPU = benchkit.CPUTime()-cpu0, execCPU(procs)-exec0, dbCPU(dbPID)-db0
	var mem1 runtime.MemStats
	runtime.ReadMemStats(&mem1)
	p.Allocs, p.AllocBytes = mem1.Mallocs-mem0.Mallocs, mem1.TotalAlloc-mem0.TotalAlloc
	p.WriterCommits = int(promValue("axe_writer_commits_total") - commits0)
	p.WriterBusy = time.Duration((promValue("axe_writer_commit_duration_seconds_sum") - busy0) * float64(time.Second))
	p.PeakRSS = rss.stop()
	p.RSSGrowth = p.PeakRSS - rss0
	p.Finish = done.Sub(first)
	p.Overrun = p.Finish - span
	p.Rate = float64(n) / p.Finish.Seconds()
	log.Info("phase drained", "finish", p.Finish, "rate", p.Rate)

	if name == "burst" {
		measure := measureRaw
		addr := procs[0].ready.RawAddr
		if cfg.Callback == CallbackHTTP {
			measure, addr = measureRawHTTP, procs[0].ready.HTTPAddr
		}
		rate, err := measure(ctx, addr, n, cfg.RawConcurrency)
		if err != nil {
			return nil, err
		}
		rep.RawRate = rate
		log.Info("raw rate measured", "requests_per_s", rate)
	}

	late, err := benchkit.LatenessSince(ctx, db, first.UnixMilli())
	if err != nil {
		return nil, err
	}
	p.LatenessP50 = time.Duration(benchkit.Percentile(late, 0.50)) * time.Millisecond
	p.LatenessP99 = time.Duration(benchkit.Percentile(late, 0.99)) * time.Millisecond
	if len(late) > 0 {
		p.LatenessMax = time.Duration(late[len(late)-1]) * time.Millisecond
	}
	if p.Runtimes, p.Runs, p.Actions, err = benchkit.Recorded(ctx, db, string(model.StateSuccess), model.ResultSuccess); err != nil {
		return nil, err
	}
	// A run's dispatch and its success are carried by its run row, which the timeline shows
	// as those two events (persist.Timeline); earlier builds also wrote each as an action
	// record, which p.Actions counts.
	if p.Runs != n || p.Runtimes != n {
		if p.Failures, err = benchkit.Failures(ctx, db); err != nil {
			p.Failures = err.Error()
		}
		return p, fmt.Errorf("%w: phase %s recorded %d successful runs, %d runtimes in SUCCESS and %d actions for %d tasks; failures: %s",
			ErrIncomplete, name, p.Runs, p.Runtimes, p.Actions, n, p.Failures)
	}
	return p, nil
}

// waitExecutors waits until n executors of the benchmark's app are registered and alive.
func waitExecutors(ctx context.Context, eng *engine.Engine, n int) error {
	for {
		alive := 0
		for _, x := range eng.API().Executors().List() {
			if x.App == benchApp && x.Status == dispatch.StatusAlive {
				alive++
			}
		}
		if alive >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cannot wait for %d executors to register (%d did): %w", n, alive, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// results are the outcomes the engine counts; a run ends in exactly one of them.
var results = []string{model.ResultSuccess, model.ResultFailed, model.ResultTimeout, model.ResultLost, model.ResultKilled}

// waitDone waits until n runs have ended and every write they caused is durable: the
// results are counted and the writer queue is empty on two polls in a row (a result is
// counted just before its write is queued). It returns when that was first seen.
func waitDone(ctx context.Context, eng *engine.Engine, n int) (time.Time, error) {
	set := eng.API().Metrics()
	queued := set.GetOrCreateGauge("axe_writer_queue_depth", nil)
	// Looked up once: the poll runs 500 times a second in the process whose CPU is measured.
	counters := make([]*metrics.Counter, len(results))
	for i, r := range results {
		counters[i] = set.GetOrCreateCounter(`axe_results_total{result="` + r + `"}`)
	}
	ended := func() int {
		sum := 0
		for _, c := range counters {
			sum += int(c.Get())
		}
		return sum
	}
	// A run's result counts as its end is decided, before its end's write is submitted (the
	// last commit then escaped the writer's timeline on a busy box); RunsSettling counts it
	// until the write is submitted, so the queue is read after it: empty then, every end is
	// committed.
	settled := func() bool {
		return eng.API().RunsSettling() == 0 && queued.Get() == 0
	}
	var first time.Time
	for {
		now := time.Now()
		if ended() >= n && settled() {
			if !first.IsZero() {
				return first, nil
			}
			first = now
		} else {
			first = time.Time{}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%w: %d of %d runs ended, %v writes queued: %w", ErrIncomplete, ended(), n, queued.Get(), ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// measureRaw posts n runs straight to the raw executor at addr, keeping concurrency
// requests in flight, and returns the rate at which it accepted them. A 429 (the executor's
// queue is full) is retried: it is the executor's pace, not a lost run.
func measureRaw(ctx context.Context, addr string, n, concurrency int) (float64, error) {
	client := &fasthttp.HostClient{Addr: addr, MaxConns: concurrency, MaxConnWaitTimeout: time.Minute}
	defer client.CloseIdleConnections()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, concurrency)
	)
	deadline := time.Now().Add(5 * time.Minute).UnixMilli()
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			var body []byte
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				id := strconv.FormatInt(i, 10)
				body = append(body[:0], `{"task":"raw-`+id+`","handler":"`+benchHandler+`","group":"bench","ticket":"raw-`+id+
					`-1","attempt":1,"kind":"scheduled","scheduled_at":`+strconv.FormatInt(time.Now().UnixMilli(), 10)+
					`,"deadline":`+strconv.FormatInt(deadline, 10)+`,"dedup_ttl_ms":600000}`...)
				for {
					req.Reset()
					req.SetRequestURI(protocol.PathRun)
					req.SetHost(addr)
					req.Header.SetMethod(fasthttp.MethodPost)
					req.Header.SetContentType("application/json")
					req.SetBodyRaw(body)
					if err := client.Do(req, resp); err != nil {
						errs <- fmt.Errorf("cannot post a raw run: %w", err)
						return
					}
					if resp.StatusCode() == fasthttp.StatusAccepted {
						break
					}
					if resp.StatusCode() != fasthttp.StatusTooManyRequests || ctx.Err() != nil {
						errs <- fmt.Errorf("raw run refused: %d %s", resp.StatusCode(), resp.Body())
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n) / took.Seconds(), nil
}

// measureRawHTTP posts n requests shaped like axe's HTTP callbacks (the run JSON and its
// task, ticket and attempt headers) straight to the HTTP receiver at addr, keeping
// concurrency requests in flight, and returns the rate at which it answered them.
func measureRawHTTP(ctx context.Context, addr string, n, concurrency int) (float64, error) {
	client := &fasthttp.HostClient{Addr: addr, MaxConns: concurrency, MaxConnWaitTimeout: time.Minute}
	defer client.CloseIdleConnections()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, concurrency)
	)
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			var body []byte
			for i := next.Add(1); i <= int64(n) && ctx.Err() == nil; i = next.Add(1) {
				id := strconv.FormatInt(i, 10)
				body = append(body[:0], `{"task":"raw-`+id+`","group":"bench","ticket":"raw-`+id+
					`-1","attempt":1,"scheduled_at":`+strconv.FormatInt(time.Now().UnixMilli(), 10)+`}`...)
				req.Reset()
				req.SetRequestURI(receiverPath)
				req.SetHost(addr)
				req.Header.SetMethod(fasthttp.MethodPost)
				req.Header.SetContentType("application/json")
				req.Header.Set(protocol.HeaderTask, "raw-"+id)
				req.Header.Set(protocol.HeaderTicket, "raw-"+id+"-1")
				req.Header.Set(protocol.HeaderAttempt, "1")
				req.SetBodyRaw(body)
				if err := client.Do(req, resp); err != nil {
					errs <- fmt.Errorf("cannot post a raw HTTP call: %w", err)
					return
				}
				if resp.StatusCode() != fasthttp.StatusOK {
					errs <- fmt.Errorf("raw HTTP call answered %d", resp.StatusCode())
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(n) / took.Seconds(), nil
}

// reserveAddr returns a free loopback address for the API server, which the executor
// processes are told before it serves.
func reserveAddr() (string, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return "", fmt.Errorf("cannot find a free port for the API server: %w", err)
	}
	return addr, nil
}

// processMetrics holds the series that outlive a phase's engine: the store's and the HA
// elector's (axe_lease_epoch).
var processMetrics = metrics.NewSet()

// phaseMetrics is the metric set of the engine of the phase running now, its writer's and
// dispatcher's series included; nil before the first phase.
var phaseMetrics atomic.Pointer[metrics.Set]

// promValue reads one sample of the bench's metrics (processMetrics and the current
// phase's) by name, or 0 when it is absent.
func promValue(name string) float64 { return promValues(name)[0] }

// promValues reads the samples names from one rendering of the bench's metrics, each 0
// when absent.
func promValues(names ...string) []float64 {
	var buf bytes.Buffer
	processMetrics.WritePrometheus(&buf)
	if s := phaseMetrics.Load(); s != nil {
		s.WritePrometheus(&buf)
	}
	out := make([]float64, len(names))
	for _, line := range strings.Split(buf.String(), "\n") {
		for i, name := range names {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				out[i], _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
	}
	return out
}

// sampleWriter samples the writer's metrics every interval from first on, until the
// function it returns is called, which returns the samples (none for interval 0).
func sampleWriter(first time.Time, interval time.Duration) func() []WriterSample {
	if interval <= 0 {
		return func() []WriterSample { return nil }
	}
	read := func() WriterSample {
		v := promValues("axe_writer_batch_rows_sum", "axe_writer_commits_total",
			"axe_writer_commit_duration_seconds_sum", "axe_writer_queue_depth")
		return WriterSample{Rows: int(v[0]), Commits: int(v[1]), Busy: time.Duration(v[2] * float64(time.Second)), Queued: int(v[3])}
	}
	stop, done := make(chan struct{}), make(chan []WriterSample)
	go func() {
		var out []WriterSample
		var base WriterSample
		sample := func() {
			s := read()
			s.At = time.Since(first)
			s.Rows, s.Commits, s.Busy = s.Rows-base.Rows, s.Commits-base.Commits, s.Busy-base.Busy
			out = append(out, s)
		}
		select {
		case <-stop:
			done <- nil
			return
		case <-time.After(time.Until(first)):
		}
		base = read()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				sample()
				done <- out
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	return func() []WriterSample {
		close(stop)
		return <-done
	}
}

func execCPU(procs []*executorProc) time.Duration {
	var d time.Duration
	for _, p := range procs {
		d += p.cpu()
	}
	return d
}

func dbCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	d, _ := benchkit.ProcessCPU(pid)
	return d
}

// sampler records the peak RSS of this process every 100 ms.
type sampler struct {
	done chan struct{}
	peak chan int64
}

func startSampler() *sampler {
	s := &sampler{done: make(chan struct{}), peak: make(chan int64, 1)}
	go func() {
		var peak int64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, err := benchkit.RSS(); err == nil {
				peak = max(peak, rss)
			}
			select {
			case <-s.done:
				s.peak <- peak
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the peak.
func (s *sampler) stop() int64 {
	close(s.done)
	return <-s.peak
}

// minLevel drops records below min: the engine's Info logs would swamp a benchmark's output.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(attrs), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}

func memTotal() int64 { return benchkit.MemTotal() }

// tempDir makes a directory for the executor binary and returns its removal.
func tempDir() (string, func(), error) {
	dir, err := os.MkdirTemp("", "axe-bench-")
	if err != nil {
		return "", nil, fmt.Errorf("cannot make a directory for the executor: %w", err)
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}
