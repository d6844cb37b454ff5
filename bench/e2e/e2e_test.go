package e2e

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/persist/persisttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// ants starts the goroutines of its package-level default pool when it is imported.
		goleak.IgnoreCurrent(),
		// fasthttp keeps process-wide helpers (the Date header updater, the DNS cache
		// cleaner), and stopped servers' and clients' cleaners sleep out their idle period.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreTopFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
	)
}

// Environment variables that turn TestRun into a full run, e.g.
//
//	AXE_BENCH_E2E_TASKS=1e6 AXE_BENCH_E2E_WINDOW=5m AXE_BENCH_E2E_BURST=2e5 \
//	  go test -run TestRun -v -timeout 60m ./bench/e2e/
const (
	envTasks     = "AXE_BENCH_E2E_TASKS"
	envWindow    = "AXE_BENCH_E2E_WINDOW"
	envBurst     = "AXE_BENCH_E2E_BURST"
	envExecutors = "AXE_BENCH_E2E_EXECUTORS"
	// envWriterBatchRows overrides the engine writer's MaxBatchRows, to explore its tuning.
	envWriterBatchRows = "AXE_BENCH_E2E_WRITER_BATCH_ROWS"
	// envWriterLanes overrides the engine's WriterLanes, likewise.
	envWriterLanes = "AXE_BENCH_E2E_WRITER_LANES"
	// envProfile names a directory for CPU profiles of the scheduler and executors
	// (Config.ProfileDir).
	envProfile = "AXE_BENCH_E2E_PROFILE"
)

func envInt(t testing.TB, name string) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return 0
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%s=%q: want a number such as 1e6", name, s)
	}
	return int(f)
}

// envConfig is the default configuration, changed by the environment variables above.
func envConfig(tb testing.TB, dsn string) Config {
	tb.Helper()
	cfg := Config{
		DSN:       dsn,
		Tasks:     envInt(tb, envTasks),
		Burst:     envInt(tb, envBurst),
		Executors: envInt(tb, envExecutors),
	}
	cfg.Engine.Writer.MaxBatchRows = envInt(tb, envWriterBatchRows)
	cfg.Engine.WriterLanes = envInt(tb, envWriterLanes)
	cfg.ProfileDir = os.Getenv(envProfile)
	if w := os.Getenv(envWindow); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil {
			tb.Fatalf("%s=%q: %v", envWindow, w, err)
		}
		cfg.Window = d
	}
	return cfg
}

// serverDSN returns the MySQL server to run on, skipping without one unless
// AXE_REQUIRE_MYSQL=1.
func serverDSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv(persisttest.EnvMySQLDSN)
	if dsn == "" {
		if os.Getenv(persisttest.EnvRequireMySQL) == "1" {
			tb.Fatalf("%s is unset but %s=1", persisttest.EnvMySQLDSN, persisttest.EnvRequireMySQL)
		}
		tb.Skipf("skipping: set %s to a MySQL server DSN", persisttest.EnvMySQLDSN)
	}
	return dsn
}

// TestRun runs B4 (small unless the environment says otherwise) and checks that both
// phases recorded every task, that the figures are consistent with what was run, and that
// the raw rate was measured. It profiles into a directory Run has to create, unless the
// environment names one.
func TestRun(t *testing.T) {
	cfg := envConfig(t, serverDSN(t))
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	if cfg.ProfileDir == "" {
		cfg.ProfileDir = filepath.Join(t.TempDir(), "profiles")
	}
	cfg.Timeline = 100 * time.Millisecond
	rep, err := Run(context.Background(), cfg)
	t.Log("\n" + rep.Table())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Phase{rep.Steady, rep.Burst} {
		if p == nil {
			continue
		}
		for _, f := range []string{"scheduler-" + p.Name + ".pprof", "executor-" + p.Name + "-0.pprof"} {
			if st, err := os.Stat(filepath.Join(cfg.ProfileDir, f)); err != nil || st.Size() == 0 {
				t.Errorf("profile %s: %v, want a non-empty file", f, err)
			}
		}
	}
	cfg = cfg.WithDefaults()
	for _, c := range []struct {
		p    *Phase
		want int
	}{{rep.Steady, cfg.Tasks}, {rep.Burst, cfg.Burst}} {
		p := c.p
		if c.want < 0 {
			if p != nil {
				t.Errorf("phase %s ran but was skipped", p.Name)
			}
			continue
		}
		if p == nil {
			t.Fatal("a phase is missing from the report")
		}
		if p.Tasks != c.want || p.Runs != p.Tasks || p.Runtimes != p.Tasks {
			t.Errorf("%s: %d runs, %d runtimes, %d actions for %d tasks; want %d", p.Name, p.Runs, p.Runtimes, p.Actions, p.Tasks, c.want)
		}
		if p.Finish < p.Span || p.Rate <= 0 || p.LatenessP50 > p.LatenessP99 || p.LatenessP99 > p.LatenessMax {
			t.Errorf("%s: inconsistent figures: %+v", p.Name, *p)
		}
		if p.SchedulerCPU <= 0 || p.ExecutorCPU <= 0 || p.PeakRSS <= 0 {
			t.Errorf("%s: CPU or RSS not measured: %+v", p.Name, *p)
		}
		checkTimeline(t, p)
	}
	if cfg.Burst > 0 && (rep.RawRate <= 0 || rep.BurstVsRaw <= 0) {
		t.Errorf("raw rate %v, burst/raw %v: not measured", rep.RawRate, rep.BurstVsRaw)
	}
}

// checkTimeline checks a phase's writer samples: taken in time order, never going back, and
// ending with every row of the drain. A one-shot fire writes three rows (its fire record at
// dispatch, its runtime and its run's result at the end), and the fixture was written before
// the first due time, when the counts start.
func checkTimeline(t *testing.T, p *Phase) {
	t.Helper()
	if len(p.Timeline) == 0 {
		t.Errorf("%s: no writer samples", p.Name)
		return
	}
	var prev WriterSample
	for i, s := range p.Timeline {
		if s.At <= prev.At && i > 0 || s.Rows < prev.Rows || s.Commits < prev.Commits || s.Busy < prev.Busy || s.Queued < 0 {
			t.Errorf("%s: sample %d %+v after %+v: out of order", p.Name, i, s, prev)
		}
		prev = s
	}
	if last := p.Timeline[len(p.Timeline)-1]; last.Rows != 3*p.Tasks || last.Commits < 1 || last.Commits > p.WriterCommits || last.At < p.Finish {
		t.Errorf("%s: last sample %+v: want %d rows, 1 to %d commits, at or after the drain (%s)",
			p.Name, last, 3*p.Tasks, p.WriterCommits, p.Finish)
	}
}

// TestRunHTTPCallbacks runs a small burst of HTTP-callback tasks (Config.Callback http, issue
// 48's measurement) and checks that every run was recorded a success, that the receiver's
// process did the work and that the raw rate to the same receiver was measured.
func TestRunHTTPCallbacks(t *testing.T) {
	cfg := Config{DSN: serverDSN(t), Tasks: -1, Burst: 500, Callback: CallbackHTTP,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	rep, err := Run(context.Background(), cfg)
	t.Log("\n" + rep.Table())
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Burst
	if p == nil || rep.Steady != nil {
		t.Fatalf("phases: steady %v, burst %v; want the burst alone", rep.Steady, p)
	}
	if p.Runs != 500 || p.Runtimes != 500 {
		t.Errorf("%d successful runs and %d runtimes in SUCCESS for 500 tasks", p.Runs, p.Runtimes)
	}
	if p.SchedulerCPU <= 0 || p.ExecutorCPU <= 0 {
		t.Errorf("CPU not measured: scheduler %s, receiver %s", p.SchedulerCPU, p.ExecutorCPU)
	}
	if rep.Callback != CallbackHTTP || rep.RawRate <= 0 || !strings.Contains(rep.Table(), "same HTTP receiver") {
		t.Errorf("callback %q, raw rate %v: the raw rate to the HTTP receiver was not measured", rep.Callback, rep.RawRate)
	}
}

// TestConfigValidate checks that Run refuses configurations it cannot run.
func TestConfigValidate(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no DSN":            {},
		"both skipped":      {DSN: "mysql:root:@tcp(127.0.0.1:3306)/", Tasks: -1, Burst: -1},
		"negative lead":     {DSN: "mysql:root:@tcp(127.0.0.1:3306)/", Lead: -time.Second},
		"negative timeline": {DSN: "mysql:root:@tcp(127.0.0.1:3306)/", Timeline: -time.Second},
		"unknown callback":  {DSN: "mysql:root:@tcp(127.0.0.1:3306)/", Callback: "grpc"},
		"sqlite":            {DSN: "sqlite:axe.db", Tasks: 10, Burst: -1, ExecutorCommand: []string{"/bin/false"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Run(context.Background(), cfg)
			if err == nil {
				t.Fatal("Run accepted the configuration")
			}
			if name == "sqlite" && !errors.Is(err, benchkit.ErrNotMySQL) {
				t.Fatalf("got %v, want an error saying the DSN is not MySQL", err)
			}
		})
	}
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// BenchmarkRun runs B4 once per iteration, so that `make bench` smoke-runs it too, and
// reports the burst's drain rate and its ratio to the raw rate, and the steady phase's
// lateness. The environment variables above set the size.
func BenchmarkRun(b *testing.B) {
	cfg := envConfig(b, serverDSN(b))
	cfg.Logger = slog.New(slog.DiscardHandler)
	var last Report
	for range b.N {
		rep, err := Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		last = rep
	}
	if p := last.Steady; p != nil {
		b.ReportMetric(float64(p.LatenessP99.Milliseconds()), "steady-p99-ms")
		b.ReportMetric(float64(p.Overrun.Milliseconds()), "steady-overrun-ms")
	}
	if p := last.Burst; p != nil {
		b.ReportMetric(p.Rate, "burst-recorded/s")
		b.ReportMetric(last.BurstVsRaw, "x-raw")
	}
	b.Log("\n" + last.Table())
}
