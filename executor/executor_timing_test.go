package executor_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/executor/internal/schedpeer"
)

var sinkCallbacks []schedpeer.Callback

// BenchmarkRunRoundTrip measures one run through a real executor on loopback: POST /axe/run,
// the 202, the handler on the pool, and the result callback to the scheduler peer. The
// baseline sub-benchmark is the bare HTTP exchange with the same peer client (a GET /axe/beat),
// so the difference is what the SDK adds.
func BenchmarkRunRoundTrip(b *testing.B) {
	peer, err := schedpeer.Start(schedpeer.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer peer.Close()
	exe, err := executor.New(executor.Config{App: "bench", Schedulers: []string{peer.URL()}, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	exe.Handle("noop", func(context.Context, executor.Run) (executor.Result, error) {
		return executor.Result{Output: "ok"}, nil
	})
	if err := exe.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer exe.Stop(context.Background())

	b.Run("baseline=beat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := peer.Beat(exe.Addr())
			if err != nil || resp.Status != http.StatusOK {
				b.Fatal(resp, err)
			}
		}
	})
	sent := 0
	b.Run("run+callback", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sent++
			tk := fmt.Sprintf("t-%d", sent)
			resp, err := peer.Dispatch(exe.Addr(), schedpeer.Run{Ticket: tk, Task: tk, Handler: "noop", Attempt: 1})
			if err != nil || resp.Status != http.StatusAccepted {
				b.Fatal(resp, err)
			}
			if err := peer.WaitCount(schedpeer.PathCallback, sent); err != nil {
				b.Fatal(err)
			}
		}
	})
	cbs, err := peer.WaitCallbacks(sent)
	if err != nil {
		b.Fatal(err)
	}
	sinkCallbacks = cbs
}
