package engine

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// TestAResultNotRecordedIsNotAcknowledgedOnItsResend: an executor's result whose record
// failed (here refused by the fence: another node took the lease, as it does while this one
// is cut off from the database) is answered with an error, and so is the executor's re-send
// of it to this node, with one that is not final (not 409 stale, not 404 unknown): a 200 or
// a final refusal would end the executor's re-sends, and the run, adopted by the next
// primary, would wait for a result that never comes and time out (issue 42, the partition
// scenarios' "executor results lost").
func TestAResultNotRecordedIsNotAcknowledgedOnItsResend(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		const lease = "primary"
		l, ok, err := s.TakeLease(ctx, lease, "me", time.Minute)
		if err != nil || !ok {
			t.Fatalf("take the lease: %v, %v", ok, err)
		}
		fenced, err := persist.Fenced(s, lease, l.Epoch, func(error) {})
		if err != nil {
			t.Fatal(err)
		}
		offers := make(chan string, 4)
		exec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			offers <- r.URL.Path
			w.WriteHeader(http.StatusAccepted) // accepted; the result comes by ReportResult
		}))
		defer exec.Close()
		e, err := New(Config{Store: fenced, Window: 10 * time.Second, LoadInterval: 2 * time.Second, Epoch: l.Epoch,
			Writer: persist.WriterConfig{LeaseName: lease, Epoch: func() int64 { return l.Epoch }}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// Stopped as a deposed primary's engine is: at once, nothing drained (its writes
			// are refused).
			stop, cancel := context.WithCancel(ctx)
			cancel()
			_ = e.Stop(stop)
		})
		addr := exec.Listener.Addr().String()
		if err := e.API().Executors().Register(ctx, wire.ExecutorRegistration{App: "app", Address: addr, Handlers: []string{"job"}}); err != nil {
			t.Fatal(err)
		}
		spec := &wire.TaskSpec{Name: "cut", Callback: &model.Callback{Type: model.CallbackExecutor, App: "app", Handler: "job"}}
		spec.DelayMS = ptr(int64(0))
		spec.TimeoutSec = ptr(60)
		mustCreate(t, e, spec)
		select {
		case <-offers:
		case <-time.After(30 * time.Second):
			t.Fatal("the run was never offered")
		}
		var ticket string
		waitFor(t, 30*time.Second, "the executor to hold the run", func() bool {
			runs := e.API().RunsInFlight()
			if len(runs) == 1 && runs[0].Executor == addr {
				ticket = runs[0].Ticket
				return true
			}
			return false
		})

		// Another node takes the lease: every write of this engine is refused from now on.
		if err := s.ReleaseLease(ctx, lease, "me", l.Epoch); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := s.TakeLease(ctx, lease, "other", time.Minute); err != nil || !ok {
			t.Fatalf("the other node takes the lease: %v, %v", ok, err)
		}
		rep := Report{Ticket: ticket, Task: "cut", Address: addr, Status: model.ResultSuccess, Output: "done"}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if dup, err := e.API().ReportResult(rctx, rep); err == nil {
			t.Fatalf("the result whose record was refused = duplicate %v, nil error; want an error", dup)
		}
		for i := range 3 {
			dup, err := e.API().ReportResult(rctx, rep)
			if err == nil || errors.Is(err, ErrStaleTicket) || errors.Is(err, ErrRunNotFound) {
				t.Fatalf("re-send %d of the result whose record was refused = duplicate %v, %v; want an error that is not final, so that the executor sends it again", i+1, dup, err)
			}
		}
		got, err := s.GetRun(ctx, ticket)
		if err != nil || got.Result != model.ResultRunning {
			t.Fatalf("the run in the database = %+v, %v; want it still running, for the next primary to adopt", got, err)
		}
	})
}

// TestARepeatedResultIsAcknowledgedOnlyOnceRecorded: a result delivered again while the first
// delivery's record is still on its way to the store (a database that stalls, or is cut off)
// is not acknowledged before that record is durable: a 200 then, and a record that failed
// after, lost the result for good. Once the record lands, the repeat is a duplicate.
func TestARepeatedResultIsAcknowledgedOnlyOnceRecorded(t *testing.T) {
	t.Parallel()
	persisttest.EachDSN(t, func(t *testing.T, s persist.Store, dsn string) {
		ctx := context.Background()
		offers := make(chan string, 4)
		exec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			offers <- r.URL.Path
			w.WriteHeader(http.StatusAccepted)
		}))
		defer exec.Close()
		e := startEngine(t, s)
		addr := exec.Listener.Addr().String()
		if err := e.API().Executors().Register(ctx, wire.ExecutorRegistration{App: "app", Address: addr, Handlers: []string{"job"}}); err != nil {
			t.Fatal(err)
		}
		spec := &wire.TaskSpec{Name: "slow", Callback: &model.Callback{Type: model.CallbackExecutor, App: "app", Handler: "job"}}
		spec.DelayMS = ptr(int64(0))
		spec.TimeoutSec = ptr(120)
		mustCreate(t, e, spec)
		select {
		case <-offers:
		case <-time.After(30 * time.Second):
			t.Fatal("the run was never offered")
		}
		var ticket string
		waitFor(t, 30*time.Second, "the executor to hold the run", func() bool {
			runs := e.API().RunsInFlight()
			if len(runs) == 1 && runs[0].Executor == addr {
				ticket = runs[0].Ticket
				return true
			}
			return false
		})
		release := persisttest.HoldWrites(t, dsn)
		rep := Report{Ticket: ticket, Task: "slow", Address: addr, Status: model.ResultSuccess, Output: "done"}
		first := e.API().BeginReport(ctx, rep)
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		dup, err := e.API().ReportResult(short, rep)
		cancel()
		if err == nil {
			t.Fatalf("a repeat while the first record waits on the store = duplicate %v, nil error; want no acknowledgement before it is durable", dup)
		}
		release()
		wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
		defer wcancel()
		if dup, err := first(wctx); err != nil || dup {
			t.Fatalf("the first delivery = duplicate %v, %v; want recorded", dup, err)
		}
		if dup, err := e.API().ReportResult(wctx, rep); err != nil || !dup {
			t.Fatalf("a repeat once recorded = duplicate %v, %v; want a duplicate", dup, err)
		}
		got, err := s.GetRun(ctx, ticket)
		if err != nil || got.Result != model.ResultSuccess {
			t.Fatalf("the run = %+v, %v; want success", got, err)
		}
	})
}
