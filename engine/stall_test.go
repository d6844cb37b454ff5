package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// stallDeadline bounds each wait after the stall is released. A healthy engine needs well
// under a second of it; only a deadlock uses it up.
const stallDeadline = 60 * time.Second

// TestStoreStallWithFullWriterQueueDoesNotDeadlock: a real engine on a real store, with a
// writer queue of four groups, while a second connection holds the store's write lock (a
// stall: commits wait, nothing fails). Runs sent before the stall come back from a real HTTP
// callback on loopback, so their ends are submitted; the tasks fire again in memory; the
// queue fills, and the submitters wait on it. Then an operator pauses every task, as one
// would during an outage: each pause writes a task whose end or fire is queued ahead of it.
// Once the lock is released the engine must drain all of it: every call returns, every run
// ends, every fire is recorded once and sent at most once. A lock cycle between the writer
// and a task (the writer reporting a group of the task while the task's lock is held by a
// submitter waiting for room in the writer's queue) never drains: the test then prints
// every goroutine's stack and exits, since an engine stuck that way cannot be stopped.
func TestStoreStallWithFullWriterQueueDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	persisttest.EachDSN(t, func(t *testing.T, s persist.Store, dsn string) {
		const n = 24
		cs := newCallbackServer(t)
		cs.mu.Lock()
		cs.hang = make(chan struct{}) // the first runs stay in flight until the stall has begun
		cs.mu.Unlock()
		e := startEngine(t, s, func(c *Config) {
			c.WriterLanes = 1
			c.Writer.QueueSize = 4
		})
		t.Cleanup(cs.release) // before the engine stops, should the test fail with runs hung
		for i := 0; i < n; i++ {
			spec := httpSpec(fmt.Sprintf("stall-%02d", i), cs.URL)
			spec.Cron = "*/1 * * * * *"
			createRetrying(t, e, spec)
		}
		waitFor(t, 30*time.Second, "a run of every task in flight", func() bool { return len(cs.got("")) >= n })

		release := persisttest.HoldWrites(t, dsn)
		cs.release() // the runs end: their ends queue behind the held lock, new fires after them
		waitFor(t, 30*time.Second, "the writer queue to fill", func() bool { return e.writer.Busy() >= 1 })

		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		ctx, cancel := context.WithTimeout(context.Background(), 2*stallDeadline)
		defer cancel()
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := e.API().Pause(ctx, fmt.Sprintf("stall-%02d", i), "store outage", "test"); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
		// Give the pauses time to take their tasks' locks and reach the full queue; without
		// it the test still passes, it only exercises less.
		time.Sleep(200 * time.Millisecond)
		release()

		paused := make(chan struct{})
		go func() { wg.Wait(); close(paused) }()
		drained := func() bool {
			select {
			case <-paused:
			default:
				return false
			}
			return e.runs.count() == 0 && e.writer.Pending() == 0
		}
		mustProgress(t, stallDeadline, "every pause to return and every run and write to drain", drained)
		for _, err := range errs {
			t.Errorf("pause during the stall: %v", err)
		}

		sent := map[string]int{}
		for _, c := range cs.got("") {
			sent[c.ticket]++
		}
		for ticket, k := range sent {
			if k > 1 {
				t.Errorf("run %s sent %d times", ticket, k)
			}
		}
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("stall-%02d", i)
			pt, err := s.GetTask(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			if pt.Runtime.State != model.StatePaused {
				t.Errorf("%s is %s after the pause, want PAUSED", name, pt.Runtime.State)
			}
			runs, err := s.ListRuns(context.Background(), pt.Def.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, r := range runs {
				if seen[r.Ticket] {
					t.Errorf("%s: fire %s recorded twice", name, r.Ticket)
				}
				seen[r.Ticket] = true
				if r.Result == model.ResultRunning {
					t.Errorf("%s: run %s still running in the store after the drain", name, r.Ticket)
				}
				if r.Result == model.ResultSuccess && sent[r.Ticket] != 1 {
					t.Errorf("%s: run %s recorded successful but sent %d times", name, r.Ticket, sent[r.Ticket])
				}
			}
			for ticket := range sent {
				if len(ticket) > 0 && ticketTask(ticket) == pt.Def.ID && !seen[ticket] {
					t.Errorf("%s: run %s was sent but has no run record", name, ticket)
				}
			}
		}
	})
}

// createRetrying creates spec as a client does that is told 429: a create is refused while
// the writer's queue is half full, and the tiny queue here fills with the fires of the tasks
// created before.
func createRetrying(t *testing.T, e *Engine, spec *wire.TaskSpec) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := e.API().CreateTask(context.Background(), spec, "test")
		if err == nil {
			return
		}
		if !errors.Is(err, persist.ErrWriterBusy) || time.Now().After(deadline) {
			t.Fatalf("create %s: %v", spec.Name, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ticketTask is the task id a scheduled ticket names (scheduledTicket), or 0.
func ticketTask(ticket string) int64 {
	var id, sched int64
	var attempt int
	if _, err := fmt.Sscanf(ticket, "%d-%d-%d", &id, &sched, &attempt); err != nil {
		return 0
	}
	return id
}

// mustProgress waits up to d of real time for cond. When it does not hold by then the engine
// is taken to be deadlocked: every goroutine's stack goes to stderr and the test binary exits,
// because a deadlocked engine cannot be stopped and the test's cleanup would hang.
func mustProgress(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			buf := make([]byte, 64<<20)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Fprintf(os.Stderr, "--- FAIL: %s: no progress after %s waiting for %s: deadlock; all goroutines:\n%s\n", t.Name(), d, what, buf)
			os.Exit(1)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
