package admin_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/protocol"
)

// TestExecutorDeadlineIsATimeout, on SQLite and MariaDB with a real SDK executor over HTTP:
// a handler that honours its context's deadline reports "failed: context deadline exceeded"
// before the scheduler's own timer (deadline + grace) fires; the run ended because its
// deadline passed, so it is recorded timeout, the task's last result is timeout, the record
// is a timeout record and axe_timeouts_total counts it. A handler that fails at once, well
// before its deadline, with the same error text (a call of its own that timed out) stays a
// failure: the deadline decides, not the text.
func TestExecutorDeadlineIsATimeout(t *testing.T) {
	for _, store := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "axe.db") }},
		{"mysql", func(t *testing.T) string { return persisttest.MySQLSchemaDSN(t) }},
	} {
		t.Run(store.name, func(t *testing.T) { testExecutorDeadlineIsATimeout(t, store.dsn(t)) })
	}
}

func testExecutorDeadlineIsATimeout(t *testing.T, dsn string) {
	ctx := context.Background()
	base, c := e2eDaemon(t, dsn)
	reported := make(chan time.Time, 4)
	exe, err := executor.New(executor.Config{
		App: "billing", Addr: "127.0.0.1:0", Schedulers: []string{base},
		HeartbeatInterval: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	exe.Handle("honour", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		<-ctx.Done()
		reported <- time.Now()
		return executor.Result{}, ctx.Err() // context.DeadlineExceeded
	})
	exe.Handle("ownTimeout", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		return executor.Result{}, context.DeadlineExceeded // its own call timed out, at once
	})
	if err := exe.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = exe.Stop(sctx)
	})
	testwait.For(t, daemontest.WaitTimeout, "the executor registered", func() bool {
		list, err := c.Executors(ctx)
		return err == nil && len(list) == 1
	})
	before := timeoutsTotal(t, base)
	for _, spec := range []string{
		`{"name":"slow","trigger":"delay","delay_ms":100,"timeout_sec":2,"callback":{"type":"executor","app":"billing","handler":"honour"}}`,
		`{"name":"quick","trigger":"delay","delay_ms":100,"timeout_sec":30,"callback":{"type":"executor","app":"billing","handler":"ownTimeout"}}`,
	} {
		if _, err := c.CreateTask(ctx, []byte(spec)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"slow": model.ResultTimeout, "quick": model.ResultFailed}
	for name, result := range want {
		var run model.Run
		testwait.For(t, 30*time.Second, name+"'s run to end", func() bool {
			runs, err := c.Runs(ctx, name, 10)
			if err != nil || len(runs) != 1 || runs[0].Result == model.ResultRunning {
				return false
			}
			run = runs[0]
			return true
		})
		if run.Result != result || !strings.Contains(run.Error, "deadline exceeded") {
			t.Errorf("%s's run = %s %q; want %s, with the executor's error kept", name, run.Result, run.Error, result)
		}
		tv, err := c.GetTask(ctx, name)
		if err != nil || tv.Runtime.LastResult != result {
			t.Errorf("%s's last result = %+v, %v; want %s", name, tv, err, result)
		}
	}
	// The executor's report delivered again (its acknowledgement lost) is a duplicate of the
	// recorded timeout, not a refused result.
	slow, err := c.Runs(ctx, "slow", 1)
	if err != nil || len(slow) != 1 {
		t.Fatalf("slow's runs = %+v, %v", slow, err)
	}
	resp, err := http.Post(base+protocol.PathCallback, "application/json", strings.NewReader(
		`{"ticket":"`+slow[0].Ticket+`","task":"slow","app":"billing","status":"failed","error":"context deadline exceeded"}`))
	if err != nil {
		t.Fatal(err)
	}
	dup, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(dup), `"duplicate":true`) {
		t.Errorf("the report delivered again = %d %s; want 200 duplicate", resp.StatusCode, dup)
	}
	select {
	case <-reported:
	default:
		t.Error("the slow handler never saw its deadline: the scheduler's timer, not the executor, ended the run")
	}
	acts, err := c.Actions(ctx, "slow", 20)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range acts {
		found = found || a.Action == engine.ActTimeout
	}
	if !found {
		t.Errorf("slow's actions %+v lack a timeout record", acts)
	}
	testwait.For(t, daemontest.WaitTimeout, "axe_timeouts_total to count the timeout", func() bool {
		return timeoutsTotal(t, base) == before+1
	})
}

// timeoutsTotal reads axe_timeouts_total from the daemon's /metrics.
func timeoutsTotal(t *testing.T, base string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "axe_timeouts_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return 0
}
