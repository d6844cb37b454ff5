package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/executor"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"

	"github.com/axe-sched/axe/lib/freeport"
)

// e2eDaemon runs a full daemon with short executor timings and returns its base URL and a
// client.
func e2eDaemon(t *testing.T, db string, mods ...func(*engine.Config)) (string, *client.Client) {
	t.Helper()
	ecfg := engine.Config{HeartbeatInterval: 300 * time.Millisecond, LostAfter: 1500 * time.Millisecond}
	for _, m := range mods {
		m(&ecfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- axedaemon.Serve(ctx, axedaemon.Config{
			Addr: "127.0.0.1:0", DB: db, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnListen: func(a string) { addrCh <- a },
			Engine:   ecfg,
		})
	}()
	var addr string
	select {
	case addr = <-addrCh:
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon stop: %v", err)
		}
	})
	c, err := client.New("http://"+addr, "", "test")
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + addr, c
}

// sdkExecutor is an executor built with the Go SDK that counts the runs it handled.
type sdkExecutor struct {
	exe  *executor.Executor
	addr string
	mu   sync.Mutex
	runs []executor.Run
}

func startSDK(t *testing.T, base, listen string) *sdkExecutor {
	t.Helper()
	s := &sdkExecutor{}
	exe, err := executor.New(executor.Config{
		App: "billing", Addr: listen, Schedulers: []string{base},
		HeartbeatInterval: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	exe.Handle("charge", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		s.mu.Lock()
		s.runs = append(s.runs, run)
		s.mu.Unlock()
		return executor.Result{Output: "charged " + run.Ticket}, nil
	})
	if err := exe.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.exe, s.addr = exe, exe.Addr()
	t.Cleanup(func() { _ = exe.Stop(context.Background()) })
	return s
}

func (s *sdkExecutor) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.runs)
}

func TestSDKExecutorsEndToEnd(t *testing.T) {
	t.Parallel() // its own daemons, executors and databases; it mostly waits on every-second fires
	stores := map[string]func(t *testing.T) string{
		"sqlite": func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "axe.db") },
		"mysql":  func(t *testing.T) string { return persisttest.MySQLSchemaDSN(t) },
	}
	for name, dsn := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			// Lost after 4 s of silence: heartbeats every 300 ms, so only a box starved for
			// seconds names a running executor lost (1.5 s did, beside a CPU hog, and the
			// spread and the last alive check read it as a fault of dispatch).
			base, c := e2eDaemon(t, dsn(t), func(c *engine.Config) { c.LostAfter = 4 * time.Second })
			var exes []*sdkExecutor
			for i := 0; i < 3; i++ {
				exes = append(exes, startSDK(t, base, "127.0.0.1:0"))
			}
			testwait.For(t, daemontest.WaitTimeout, "three executors registered", func() bool {
				list, err := c.Executors(ctx)
				return err == nil && len(list) == 3
			})
			_, err := c.CreateTask(ctx, []byte(`{"name":"charge","cron":"*/1 * * * * *",
				"callback":{"type":"executor","app":"billing","handler":"charge"}}`))
			if err != nil {
				t.Fatal(err)
			}
			testwait.For(t, daemontest.WaitTimeout, "six runs", func() bool {
				n := 0
				for _, x := range exes {
					n += x.count()
				}
				return n >= 6
			})
			// Round robin: with one task, consecutive fires go to consecutive executors.
			lo, hi := 1<<30, 0
			for _, x := range exes {
				lo, hi = min(lo, x.count()), max(hi, x.count())
			}
			if lo == 0 || hi-lo > 1 {
				t.Errorf("round robin spread = %d..%d runs per executor, want even", lo, hi)
			}
			var runs []model.Run
			testwait.For(t, daemontest.WaitTimeout, "recorded successful runs", func() bool {
				runs, err = c.Runs(ctx, "charge", 100)
				ok := 0
				for _, r := range runs {
					if r.Result == model.ResultSuccess {
						ok++
					}
				}
				return err == nil && ok >= 5
			})
			for _, r := range runs {
				if r.Result == model.ResultSuccess && (r.Executor == "" || r.Output != "charged "+r.Ticket) {
					t.Errorf("run %+v lacks its executor or output", r)
				}
			}

			// The callback endpoint is idempotent by ticket and refuses stale or unknown ones.
			var done model.Run
			for _, r := range runs {
				if r.Result == model.ResultSuccess {
					done = r
					break
				}
			}
			post := func(body string) (int, string) { return postTo(t, base+"/api/v1/callback", body) }
			from := done.Executor // the executor that ran it
			if code, body := post(`{"ticket":"` + done.Ticket + `","status":"success","address":"` + from + `"}`); code != 200 || !strings.Contains(body, "duplicate") {
				t.Errorf("repeated callback = %d %s, want 200 duplicate", code, body)
			}
			if code, body := post(`{"ticket":"` + done.Ticket + `","status":"failed","address":"` + from + `"}`); code != 409 || !strings.Contains(body, "error") {
				t.Errorf("contradicting callback = %d %s, want 409", code, body)
			}
			// Another address, registered or not, cannot speak for the run.
			if code, body := post(`{"ticket":"` + done.Ticket + `","status":"success","address":"x:1"}`); code != 403 || !strings.Contains(body, from) {
				t.Errorf("callback from another address = %d %s, want 403 naming %s", code, body, from)
			}
			if code, body := post(`{"ticket":"` + done.Ticket + `","status":"success","task":"another","address":"` + from + `"}`); code != 400 || !strings.Contains(body, "task") {
				t.Errorf("callback naming another task = %d %s, want 400 naming the task", code, body)
			}
			if code, body := post(`{"ticket":"no-such-ticket","status":"success","address":"x:1"}`); code != 404 || !strings.Contains(body, "error") {
				t.Errorf("unknown ticket = %d %s, want 404", code, body)
			}
			if code, _ := post(`{"ticket":"t","status":"maybe"}`); code != 400 {
				t.Errorf("bad status = %d, want 400", code)
			}
			// The batch endpoint answers each result as the single one would, in order.
			code, body := postTo(t, base+"/api/v1/callback/batch", `{"results":[
				{"ticket":"`+done.Ticket+`","status":"success","address":"`+from+`"},
				{"ticket":"`+done.Ticket+`","status":"failed","address":"`+from+`"},
				{"ticket":"no-such-ticket","status":"success","address":"x:1"},
				{"ticket":"t","status":"maybe"},
				{"ticket":"`+done.Ticket+`","status":"success","address":"x:1"}]}`)
			var batch struct {
				Results []struct {
					Status    int    `json:"status"`
					OK        bool   `json:"ok"`
					Duplicate bool   `json:"duplicate"`
					Error     string `json:"error"`
				} `json:"results"`
			}
			if err := json.Unmarshal([]byte(body), &batch); code != 200 || err != nil || len(batch.Results) != 5 {
				t.Fatalf("batch callback = %d %s (%v), want 200 with 5 answers", code, body, err)
			}
			for i, want := range []int{200, 409, 404, 400, 403} {
				got := batch.Results[i]
				if got.Status != want || (want == 200) != (got.OK && got.Duplicate && got.Error == "") || (want != 200 && got.Error == "") {
					t.Errorf("batch answer %d = %+v, want status %d (200: ok duplicate; else an error)", i, got, want)
				}
			}
			for _, bad := range []string{`{"results":[]}`, `[{"ticket":"t"}]`, `{"results":` + strings.Repeat(`{},`, 1000) + `{}]}`, `nope`} {
				if code, body := postTo(t, base+"/api/v1/callback/batch", bad); code != 400 || !strings.Contains(body, `"error"`) {
					t.Errorf("batch %.40q = %d %s, want 400 with an error", bad, code, body)
				}
			}
			testwait.For(t, daemontest.WaitTimeout, "the refused results recorded", func() bool {
				acts, _ := c.Actions(ctx, "charge", 500)
				sys, _ := c.Alerts(ctx, 50)
				found := 0
				for _, a := range append(acts, sys...) {
					if a.Action == engine.ActRefusedResult {
						found++
					}
				}
				return found >= 2
			})

			// Stop one executor: it deregisters at once (status "left", no new run), then stops
			// heartbeating and is marked lost, without an executor_lost alert: it said it
			// was going.
			dead := exes[0]
			// Alerts from before the stop do not count: on a starved box every executor may
			// miss its heartbeats for 1.5 s and be named lost, truly, while it runs.
			stopAt := time.Now().UnixMilli()
			if err := dead.exe.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			statusOf := func(addr string) string {
				list, _ := c.Executors(ctx)
				for _, x := range list {
					if x.Address == addr {
						return x.Status
					}
				}
				return ""
			}
			if st := statusOf(dead.addr); st != "left" && st != "lost" {
				t.Errorf("right after a graceful stop the executor is %q, want left (deregistered)", st)
			}
			// Lost after 1.5 s of silence, found by a reap every 150 ms: bounded for a loaded
			// box (4 s was not enough beside a CPU hog).
			testwait.For(t, daemontest.WaitTimeout, "the silent executor marked lost", func() bool { return statusOf(dead.addr) == "lost" })
			if acts, err := c.Alerts(ctx, 50); err != nil {
				t.Fatal(err)
			} else {
				for _, a := range acts {
					if a.Action == engine.AlertExecutorLost && a.At >= stopAt && strings.Contains(a.Detail, dead.addr) {
						t.Errorf("an executor that deregistered raised %s: %s", a.Action, a.Detail)
					}
				}
			}
			before := dead.count()
			others := exes[1].count() + exes[2].count()
			testwait.For(t, daemontest.WaitTimeout, "runs on the others", func() bool { return exes[1].count()+exes[2].count() >= others+3 })
			if dead.count() != before {
				t.Errorf("a lost executor received %d runs", dead.count()-before)
			}

			// Restart it on the same address: same row, no ghost, dispatch resumes.
			var back *sdkExecutor
			testwait.For(t, daemontest.WaitTimeout, "the port to be free", func() bool {
				ln, err := net.Listen("tcp", dead.addr)
				if err != nil {
					return false
				}
				ln.Close()
				return true
			})
			back = startSDK(t, base, dead.addr)
			testwait.For(t, daemontest.WaitTimeout, "dispatch to the restarted executor", func() bool { return back.count() >= 1 })
			// Three rows, all alive: a ghost row stays (left or lost) whatever the wait.
			var list []model.Executor
			testwait.For(t, daemontest.WaitTimeout, "three executors alive after the restart", func() bool {
				list, err = c.Executors(ctx)
				if err != nil || len(list) != 3 {
					return false
				}
				for _, x := range list {
					if x.Status != "alive" {
						return false
					}
				}
				return true
			})
		})
	}
}

// TestExecutorResultSurvivesSchedulerRestart stops the scheduler while an SDK executor runs
// a task, starts a new one on the same store and address, and checks that the executor's
// re-sent result is recorded: the run is neither lost nor run twice.
func TestExecutorResultSurvivesSchedulerRestart(t *testing.T) {
	addr := freeport.MustAddr(t) // the restarted scheduler binds it again
	db := "sqlite:" + filepath.Join(t.TempDir(), "axe.db")
	serve := func() (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		up := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- axedaemon.Serve(ctx, axedaemon.Config{
				Addr: addr, DB: db, ShutdownTimeout: 500 * time.Millisecond,
				Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
				OnListen: func(string) { close(up) },
			})
		}()
		select {
		case <-up:
		case err := <-done:
			t.Fatalf("serve: %v", err)
		}
		return cancel, done
	}
	stop1, done1 := serve()
	base := "http://" + addr
	release := make(chan struct{})
	var calls atomic.Int32
	exe, err := executor.New(executor.Config{App: "billing", Schedulers: []string{base},
		ResendMin: 100 * time.Millisecond, ResendMax: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	exe.Handle("charge", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		calls.Add(1)
		<-release
		return executor.Result{Output: "done"}, nil
	})
	if err := exe.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer exe.Stop(context.Background())
	c, _ := client.New(base, "", "test")
	ctx := context.Background()
	if _, err := c.CreateTask(ctx, []byte(`{"name":"once","trigger":"delay","delay_ms":0,"timeout_sec":60,
		"callback":{"type":"executor","app":"billing","handler":"charge"}}`)); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, daemontest.WaitTimeout, "the run in flight", func() bool { return calls.Load() == 1 })
	stop1() // the shutdown timeout passes with the run still in flight
	<-done1
	stop2, done2 := serve()
	defer func() { stop2(); <-done2 }()
	close(release)
	testwait.For(t, daemontest.WaitTimeout, "the re-sent result recorded", func() bool {
		runs, err := c.Runs(ctx, "once", 10)
		return err == nil && len(runs) == 1 && runs[0].Result == model.ResultSuccess && runs[0].Output == "done"
	})
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times", n)
	}
}

// postTo posts a JSON body and returns the status and body of the answer.
func postTo(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
