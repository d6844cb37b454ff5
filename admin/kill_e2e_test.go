package admin_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
)

// TestKillReachesTheExecutor: killing a task whose run is on an SDK executor makes the
// scheduler call the executor's kill endpoint (through dispatch), so the handler's context
// is cancelled with executor.ErrKilled, and the run is recorded killed.
func TestKillReachesTheExecutor(t *testing.T) {
	ctx := context.Background()
	base, c := e2eDaemon(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"))
	started := make(chan string, 1)
	cause := make(chan error, 1)
	exe, err := executor.New(executor.Config{
		App: "billing", Addr: "127.0.0.1:0", Schedulers: []string{base},
		HeartbeatInterval: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	exe.Handle("hang", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		started <- run.Ticket
		<-ctx.Done()
		select {
		case cause <- context.Cause(ctx):
		default:
		}
		return executor.Result{}, context.Cause(ctx)
	})
	if err := exe.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A handler still hanging (the test failed) is cancelled when this runs out.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = exe.Stop(sctx)
	})
	testwait.For(t, daemontest.WaitTimeout, "the executor registered", func() bool {
		list, err := c.Executors(ctx)
		return err == nil && len(list) == 1
	})
	if _, err := c.CreateTask(ctx, []byte(`{"name":"stuck","trigger":"delay","delay_ms":100,"timeout_sec":300,
		"callback":{"type":"executor","app":"billing","handler":"hang"}}`)); err != nil {
		t.Fatal(err)
	}
	var ticket string
	select {
	case ticket = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the run never reached the executor")
	}
	if _, err := c.TaskOp(ctx, "stuck", "kill", "test"); err != nil {
		t.Fatalf("kill: %v", err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, executor.ErrKilled) {
			t.Fatalf("the handler's context ended with %v, want executor.ErrKilled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the executor's handler was never cancelled: the kill did not reach it")
	}
	// The run is recorded killed; the one-shot task passes KILLED and waits for nothing more.
	testwait.For(t, daemontest.WaitTimeout, "the run recorded killed", func() bool {
		runs, err := c.Runs(ctx, "stuck", 10)
		return err == nil && len(runs) == 1 && runs[0].Ticket == ticket && runs[0].Result == model.ResultKilled
	})
	acts, err := c.Actions(ctx, "stuck", 10)
	if err != nil {
		t.Fatal(err)
	}
	killed := false
	for _, a := range acts {
		killed = killed || (a.Ticket == ticket && a.From == model.StateRunning && a.To == model.StateKilled)
	}
	if !killed {
		t.Fatalf("actions %+v lack RUNNING→KILLED for %s", acts, ticket)
	}
}
