package executor_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/executor/internal/schedpeer"
	"github.com/axe-sched/axe/internal/test/leaktest"

	"github.com/axe-sched/axe/lib/freeport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Options()...)
}

// quiet keeps test output readable; failures are reported through assertions, not logs.
var quiet = slog.New(slog.DiscardHandler)

// stopTimeout is a generous bound for a graceful Stop in tests.
const stopTimeout = 10 * time.Second

func startPeer(t *testing.T, cfg schedpeer.Config) *schedpeer.Peer {
	t.Helper()
	p, err := schedpeer.Start(cfg)
	if err != nil {
		t.Fatalf("start peer: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// newExecutor creates an executor for the peers with quiet logs, stopped at test end (before
// the peers close, since cleanups run last-in first-out).
func newExecutor(t *testing.T, cfg executor.Config, peers ...*schedpeer.Peer) *executor.Executor {
	t.Helper()
	if cfg.App == "" {
		cfg.App = "billing"
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	for _, p := range peers {
		cfg.Schedulers = append(cfg.Schedulers, p.URL())
	}
	exe, err := executor.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := exe.Stop(ctx); err != nil {
			t.Errorf("Stop at cleanup: %v", err)
		}
	})
	return exe
}

func start(t *testing.T, exe *executor.Executor) {
	t.Helper()
	if err := exe.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
}

func stop(t *testing.T, exe *executor.Executor) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := exe.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// runFor builds a run the way the scheduler would, due now with a minute to go.
func runFor(ticket, task, handler string) schedpeer.Run {
	now := time.Now()
	return schedpeer.Run{
		Ticket:      ticket,
		Task:        task,
		Handler:     handler,
		Attempt:     1,
		ScheduledAt: now.UnixMilli(),
		Deadline:    now.Add(time.Minute).UnixMilli(),
	}
}

func dispatch(t *testing.T, p *schedpeer.Peer, exe *executor.Executor, run schedpeer.Run, wantStatus int) schedpeer.Response {
	t.Helper()
	resp, err := p.Dispatch(exe.Addr(), run)
	if err != nil {
		t.Fatalf("dispatch %s: %v", run.Ticket, err)
	}
	if resp.Status != wantStatus {
		t.Fatalf("dispatch %s: status %d %s, want %d", run.Ticket, resp.Status, resp.Body, wantStatus)
	}
	return resp
}

func waitCallbacks(t *testing.T, p *schedpeer.Peer, n int) []schedpeer.Callback {
	t.Helper()
	cbs, err := p.WaitCallbacks(n)
	if err != nil {
		t.Fatal(err)
	}
	return cbs
}

func waitCalls(t *testing.T, p *schedpeer.Peer, path string, n int) []schedpeer.Call {
	t.Helper()
	calls, err := p.WaitCalls(path, n)
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

// recv waits for a value from ch with a generous bound.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(schedpeer.WaitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.MustAddr(t)
}

func okHandler(output string) executor.HandlerFunc {
	return func(context.Context, executor.Run) (executor.Result, error) {
		return executor.Result{Output: output}, nil
	}
}

// blockingHandler signals each start on started and returns once release is closed or its
// context ends, reporting the context's cause.
func blockingHandler(started chan<- string, release <-chan struct{}) executor.HandlerFunc {
	return func(ctx context.Context, run executor.Run) (executor.Result, error) {
		started <- run.Ticket
		select {
		case <-release:
			return executor.Result{Output: "released"}, nil
		case <-ctx.Done():
			return executor.Result{}, context.Cause(ctx)
		}
	}
}
