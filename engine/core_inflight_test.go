package engine

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
)

// TestRunsInFlightSettleOnce races a result against the timeout for many runs: exactly one
// of them ends each run, and the drain count reaches zero only after both returned.
func TestRunsInFlightSettleOnce(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	var r runsInFlight
	r.init(clk, newConcGate(clk))
	const n = 200
	var timeouts, results atomic.Int32
	for i := range n {
		ticket := "t-" + strconv.Itoa(i)
		if !r.add(nil, model.Run{Ticket: ticket}, concSlot{}) {
			t.Fatalf("add %s refused", ticket)
		}
		if r.add(nil, model.Run{Ticket: ticket}, concSlot{}) {
			t.Fatalf("a second add of %s accepted", ticket)
		}
		if !r.arm(ticket, clk.Now().Add(time.Second), clk.Now().Add(time.Second), func(*flight) { timeouts.Add(1) }) {
			t.Fatalf("arm %s refused", ticket)
		}
	}
	if got := r.count(); got != n {
		t.Fatalf("count = %d, want %d", got, n)
	}
	var wg sync.WaitGroup
	for _, run := range r.list() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.take(run.Ticket, nil, func(*flight) { results.Add(1) })
		}()
	}
	clk.Advance(time.Second)
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.wait(ctx); err != nil {
		t.Fatalf("drain: %v (%d left)", err, r.count())
	}
	if got := timeouts.Load() + results.Load(); got != n {
		t.Fatalf("%d timeouts + %d results = %d ends for %d runs, want exactly one each", timeouts.Load(), results.Load(), got, n)
	}
	if r.take("t-0", nil, func(*flight) { t.Error("a taken ticket taken again") }) {
		t.Error("take of a taken ticket reported true")
	}
}

// TestRunsInFlightTimeoutFromTheClock: the timeout fires when the engine's clock reaches the
// deadline, not before, and a refused executor's report can no longer end the run.
func TestRunsInFlightTimeoutFromTheClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.UnixMilli(1_700_000_000_000))
	var r runsInFlight
	r.init(clk, newConcGate(clk))
	x := &dispatch.Executor{App: "a", Address: "127.0.0.1:1"}
	r.add(nil, model.Run{Ticket: "k", Executor: "a"}, concSlot{})
	if !r.assign("k", x) || x.Inflight() != 1 || r.executorOf("k") != x {
		t.Fatalf("assign: inflight %d, executor %v", x.Inflight(), r.executorOf("k"))
	}
	if !r.unassign("k", x) || x.Inflight() != 0 {
		t.Fatalf("unassign: inflight %d", x.Inflight())
	}
	if r.take("k", waitingReport, nil) {
		t.Fatal("a report ended a run no executor holds")
	}
	r.assign("k", x)
	fired := make(chan model.Run, 1)
	r.arm("k", clk.Now().Add(10*time.Second), clk.Now().Add(10*time.Second), func(f *flight) { fired <- f.run })
	clk.Advance(9 * time.Second)
	select {
	case <-fired:
		t.Fatal("timed out before the deadline")
	case <-time.After(20 * time.Millisecond):
	}
	clk.Advance(time.Second)
	select {
	case run := <-fired:
		if run.Executor != x.Address {
			t.Errorf("timed-out run names executor %q, want %q", run.Executor, x.Address)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no timeout at the deadline")
	}
	// The timeout's callback runs before the settling goroutine counts the run down.
	waitFor(t, 5*time.Second, "the timed-out run to leave", func() bool { return r.count() == 0 })
	if x.Inflight() != 0 {
		t.Errorf("after the timeout: executor inflight %d", x.Inflight())
	}
}
