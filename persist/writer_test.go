package persist_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.uber.org/goleak"

	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestMain is the only one of package persist_test: it checks that no test leaves a
// goroutine behind (the writer's, a store's connection pool).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every wait of these tests. A hang (a group never flushed, a Submit never
// released) fails the test at this deadline instead of blocking the run. Sized for a loaded
// box: 600 reads of one test took 54 s at load 30.
const testTimeout = 2 * time.Minute

// errTransient is what faultyStore returns in place of a commit.
var errTransient = errors.New("injected: connection reset by peer")

// countingStore is the real store, counting ApplyBatch calls. When gate is set, the first
// call waits for it to be closed, so a test can pile up groups behind a commit in flight.
type countingStore struct {
	persist.Store
	calls   atomic.Int64
	entered chan struct{} // closed when the first call starts (when gate is set)
	gate    chan struct{}
}

func (s *countingStore) ApplyBatch(ctx context.Context, b *persist.Batch) error {
	if s.calls.Add(1) == 1 && s.gate != nil {
		close(s.entered)
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.ApplyBatch(ctx, b)
}

// faultyStore is the real store whose first failFirst ApplyBatch calls fail before reaching
// the database, as a dropped connection would.
type faultyStore struct {
	persist.Store
	failFirst int64
	calls     atomic.Int64
	failed    chan struct{} // closed at the first injected failure
	once      sync.Once
}

func newFaultyStore(s persist.Store, failFirst int64) *faultyStore {
	return &faultyStore{Store: s, failFirst: failFirst, failed: make(chan struct{})}
}

func (s *faultyStore) ApplyBatch(ctx context.Context, b *persist.Batch) error {
	if s.calls.Add(1) <= s.failFirst {
		s.once.Do(func() { close(s.failed) })
		return errTransient
	}
	return s.Store.ApplyBatch(ctx, b)
}

// outcome is one Done call, in the order the writer made them.
type outcome struct {
	seq int
	err error
}

// outcomes collects Done calls. Its channel holds every expected call, so Done never blocks.
type outcomes chan outcome

func newOutcomes(n int) outcomes { return make(outcomes, n) }

func (o outcomes) done(seq int) func(error) {
	return func(err error) { o <- outcome{seq: seq, err: err} }
}

// wait returns the next n Done calls in the order they were made.
func (o outcomes) wait(t *testing.T, n int) []outcome {
	t.Helper()
	timeout := time.NewTimer(testTimeout)
	defer timeout.Stop()
	got := make([]outcome, 0, n)
	for len(got) < n {
		select {
		case r := <-o:
			got = append(got, r)
		case <-timeout.C:
			t.Fatalf("only %d of %d groups finished: %+v", len(got), n, got)
		}
	}
	return got
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newWriter returns a writer over s that the test stops at cleanup; start says whether it
// is started now.
func newWriter(t *testing.T, s persist.Store, cfg persist.WriterConfig, start bool) *persist.Writer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = testMetrics(t)
	}
	w, err := persist.NewWriter(s, cfg)
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("Stop at cleanup: %v", err)
		}
	})
	if start {
		if err := w.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
	}
	return w
}

// task is a test task and the runtime the next transition must expect.
type task struct {
	name string
	rt   model.Runtime
	seq  int
}

func newTask(t testing.TB, s persist.Store, name string) *task {
	t.Helper()
	k, err := createTask(testCtx(t), s, name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// createTask is newTask for goroutines other than the test's, which must not call Fatal.
func createTask(ctx context.Context, s persist.Store, name string) (*task, error) {
	def := &model.TaskDef{
		Name:             name,
		Group:            "default",
		Trigger:          model.TriggerManual,
		Timezone:         "UTC",
		TimeoutSec:       300,
		RetryIntervalSec: 30,
		Priority:         2,
		Callback:         model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/run"},
		MisfirePolicy:    model.MisfireFireOnce,
	}
	if err := s.CreateTask(ctx, def, &model.Runtime{State: model.StateScheduled}); err != nil {
		return nil, fmt.Errorf("CreateTask %s: %w", name, err)
	}
	got, err := s.GetTask(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("GetTask %s: %w", name, err)
	}
	return &task{name: name, rt: got.Runtime}, nil
}

func reload(t testing.TB, s persist.Store, name string) model.Runtime {
	t.Helper()
	got, err := s.GetTask(testCtx(t), name)
	if err != nil {
		t.Fatalf("GetTask %s: %v", name, err)
	}
	return got.Runtime
}

// next returns a dispatch group (transition + run + action, 3 rows) that expects the task's
// current version, and advances the task as if it had landed.
func (k *task) next() *persist.Group {
	k.seq++
	ticket := fmt.Sprintf("%s-%d", k.name, k.seq)
	at := int64(1_700_000_000_000) + int64(k.seq)
	from, to := k.rt.State, model.StateRunning
	if from == model.StateRunning {
		to = model.StateScheduled
	}
	rt := k.rt
	rt.State, rt.CurrentTicket, rt.LastTriggerTime = to, ticket, at
	g := &persist.Group{
		Transitions: []persist.Transition{{ExpectVersion: k.rt.Version, Runtime: rt}},
		Runs: []model.Run{{
			Ticket: ticket, TaskID: rt.TaskID, TaskName: k.name, Kind: model.RunScheduled,
			Attempt: 1, ScheduledAt: at, DispatchedAt: at, Result: model.ResultRunning,
		}},
		Actions: []model.Action{{
			TaskID: rt.TaskID, TaskName: k.name, Ticket: ticket, Action: "dispatch",
			From: from, To: to, Actor: "scheduler", At: at,
		}},
	}
	rt.Version++
	k.rt = rt
	return g
}

// checkLanded asserts the task's runtime row is k.rt and that run and action number seq
// exist.
func (k *task) checkLanded(t *testing.T, s persist.Store) {
	t.Helper()
	got := reload(t, s, k.name)
	if got.Version != k.rt.Version || got.State != k.rt.State || got.CurrentTicket != k.rt.CurrentTicket {
		t.Errorf("%s runtime = v%d %s %q, want v%d %s %q", k.name,
			got.Version, got.State, got.CurrentTicket, k.rt.Version, k.rt.State, k.rt.CurrentTicket)
	}
	if k.rt.CurrentTicket != "" {
		checkRun(t, s, k.rt.CurrentTicket, true)
	}
}

func checkRun(t *testing.T, s persist.Store, ticket string, want bool) {
	t.Helper()
	_, err := s.GetRun(testCtx(t), ticket)
	switch {
	case want && err != nil:
		t.Errorf("GetRun %s: %v, want the run", ticket, err)
	case !want && !errors.Is(err, model.ErrRunNotFound):
		t.Errorf("GetRun %s: %v, want ErrRunNotFound", ticket, err)
	}
}

func submit(t *testing.T, w *persist.Writer, g *persist.Group) {
	t.Helper()
	if err := w.Submit(testCtx(t), g); err != nil {
		t.Fatalf("Submit: %v", err)
	}
}

// testSets holds each test's metrics set, by the test's full name: the writers (newWriter's)
// and the stores a test opens count into the set of that test, so tests running in parallel
// never read each other's series.
var testSets sync.Map

// testMetrics is the set of the test (or benchmark) t.
func testMetrics(t testing.TB) *metrics.Set {
	s, _ := testSets.LoadOrStore(t.Name(), metrics.NewSet())
	return s.(*metrics.Set)
}

// counterValue is the value of the counter name in t's set.
func counterValue(t testing.TB, name string) uint64 {
	return testMetrics(t).GetOrCreateCounter(name).Get()
}

// TestWriterPendingEndsAsDoneIsCalled: a group leaves Pending as its Done is called. Two
// groups committed in one batch, the second's Done held: the first's Write has returned by
// then and Pending counts neither, since each one's Done has been called.
func TestWriterPendingEndsAsDoneIsCalled(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		hold, first, second := newTask(t, s, "hold"), newTask(t, s, "first"), newTask(t, s, "second")
		w := newWriter(t, s, persist.WriterConfig{}, true)
		// hold's Done keeps the writer's goroutine while the next two groups queue, so that
		// they are committed together.
		holding, releaseHold := make(chan struct{}), make(chan struct{})
		inSecond, releaseSecond := make(chan struct{}), make(chan struct{})
		unhold, unsecond := sync.OnceFunc(func() { close(releaseHold) }), sync.OnceFunc(func() { close(releaseSecond) })
		t.Cleanup(unhold)
		t.Cleanup(unsecond)
		g := hold.next()
		g.Done = func(error) { close(holding); <-releaseHold }
		if err := w.Submit(ctx, g); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		<-holding
		base := w.Pending() // hold's own count is not what this test is about
		wrote := make(chan error, 1)
		go func() { wrote <- w.Write(ctx, first.next()) }()
		testwait.For(t, time.Minute, "first's Write queued", func() bool { return w.Pending() > base })
		g = second.next()
		g.Done = func(error) { close(inSecond); <-releaseSecond }
		if err := w.Submit(ctx, g); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		unhold()
		if err := <-wrote; err != nil {
			t.Fatalf("Write: %v", err)
		}
		<-inSecond
		if got := w.Pending(); got != 0 {
			t.Errorf("Pending() = %d while the last group's Done runs, after the first's Write returned; want 0", got)
		}
		unsecond()
		first.checkLanded(t, s)
		second.checkLanded(t, s)
	})
}

func TestWriterDurable(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		k := newTask(t, s, "durable")
		w := newWriter(t, s, persist.WriterConfig{}, true)

		g := k.next()
		var calls atomic.Int32
		g.Done = func(err error) {
			if err != nil {
				t.Errorf("Done(%v), want nil", err)
			}
			calls.Add(1)
		}
		if err := w.Write(testCtx(t), g); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("caller's Done called %d times by the time Write returned, want 1", n)
		}
		// Write returned: the rows must be readable now, without waiting for anything.
		k.checkLanded(t, s)
		acts, err := s.ListActions(testCtx(t), k.rt.TaskID, 10)
		if err != nil {
			t.Fatalf("ListActions: %v", err)
		}
		if len(acts) != 1 || acts[0].Action != "dispatch" || acts[0].Ticket != k.rt.CurrentTicket {
			t.Errorf("actions = %+v, want the one dispatch of %s", acts, k.rt.CurrentTicket)
		}
		if got := w.Pending(); got != 0 {
			t.Errorf("Pending() = %d after Write, want 0", got)
		}
		// An empty group is a no-op that still completes in order.
		if err := w.Write(testCtx(t), &persist.Group{}); err != nil {
			t.Errorf("Write(empty group) = %v, want nil", err)
		}
	})
}

// TestWriterOrder chains transitions of one task, each expecting the version the previous
// one produced, through batches of a few groups: any reordering would fail a CAS.
func TestWriterOrder(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		const n = 40
		k := newTask(t, s, "ordered")
		// 3-row groups in batches of at most 7 rows: two groups per batch, so consecutive
		// transitions of the task share a batch and also cross batch boundaries.
		w := newWriter(t, s, persist.WriterConfig{MaxBatchRows: 7, MaxDelay: time.Hour}, false)
		out := newOutcomes(n)
		for i := range n {
			g := k.next()
			g.Done = out.done(i)
			submit(t, w, g)
		}
		if err := w.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		// The last batch is not full and MaxDelay is an hour: Stop must flush it.
		if err := w.Stop(testCtx(t)); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		for i, o := range out.wait(t, n) {
			if o.seq != i || o.err != nil {
				t.Fatalf("Done call %d = group %d with %v, want group %d with nil", i, o.seq, o.err, i)
			}
		}
		k.checkLanded(t, s)
		acts, err := s.ListActions(testCtx(t), k.rt.TaskID, n)
		if err != nil {
			t.Fatalf("ListActions: %v", err)
		}
		if len(acts) != n {
			t.Fatalf("%d actions, want %d", len(acts), n)
		}
		for i, a := range acts { // newest first
			if want := fmt.Sprintf("ordered-%d", n-i); a.Ticket != want {
				t.Errorf("action %d (newest first) has ticket %s, want %s", i, a.Ticket, want)
			}
		}
	})
}

// TestWriterBatchesQueuedGroups checks that batches fill to MaxBatchRows: 100 queued 3-row
// groups at 30 rows per batch take exactly 10 commits.
func TestWriterBatchesQueuedGroups(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		const tasks, perTask = 20, 5
		cs := &countingStore{Store: s}
		ks := make([]*task, tasks)
		for i := range ks {
			ks[i] = newTask(t, s, fmt.Sprintf("batched-%d", i))
		}
		w := newWriter(t, cs, persist.WriterConfig{MaxBatchRows: 30, MaxDelay: time.Hour}, false)
		out := newOutcomes(tasks * perTask)
		for round := range perTask {
			for i, k := range ks {
				g := k.next()
				g.Done = out.done(round*tasks + i)
				submit(t, w, g)
			}
		}
		commits := counterValue(t, "axe_writer_commits_total")
		if err := w.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		// 100 groups fill 10 batches exactly: the last one is flushed for being full, not by
		// MaxDelay (an hour) nor by Stop.
		for i, o := range out.wait(t, tasks*perTask) {
			if o.seq != i || o.err != nil {
				t.Fatalf("Done call %d = group %d with %v, want group %d with nil", i, o.seq, o.err, i)
			}
		}
		if got := cs.calls.Load(); got != 10 {
			t.Errorf("ApplyBatch called %d times for 100 groups of 3 rows at 30 rows per batch, want 10", got)
		}
		if got := counterValue(t, "axe_writer_commits_total") - commits; got != 10 {
			t.Errorf("axe_writer_commits_total grew by %d, want 10", got)
		}
		for _, k := range ks {
			k.checkLanded(t, s)
		}
	})
}

// TestWriterBatchesConcurrentSubmits holds the first commit until many producers have
// submitted, then checks that what queued meanwhile went out in a batch or two rather than
// one commit per group.
func TestWriterBatchesConcurrentSubmits(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		const producers = 64
		cs := &countingStore{Store: s, entered: make(chan struct{}), gate: make(chan struct{})}
		ks := make([]*task, producers)
		for i := range ks {
			ks[i] = newTask(t, s, fmt.Sprintf("producer-%d", i))
		}
		w := newWriter(t, cs, persist.WriterConfig{}, true)
		out := newOutcomes(producers)
		var submitted sync.WaitGroup
		ctx := testCtx(t)
		for i, k := range ks {
			submitted.Go(func() {
				g := k.next()
				g.Done = out.done(i)
				if err := w.Submit(ctx, g); err != nil {
					t.Errorf("Submit: %v", err)
				}
			})
		}
		select {
		case <-cs.entered:
		case <-ctx.Done():
			t.Fatal("no commit started")
		}
		submitted.Wait()
		close(cs.gate)
		for _, o := range out.wait(t, producers) {
			if o.err != nil {
				t.Errorf("group %d: %v", o.seq, o.err)
			}
		}
		// The first commit carries what had queued when it began (at least one group); all
		// the others waited behind it and fit one 512-row batch.
		if got := cs.calls.Load(); got > 2 {
			t.Errorf("ApplyBatch called %d times for %d concurrent groups, want at most 2", got, producers)
		}
		for _, k := range ks {
			k.checkLanded(t, s)
		}
	})
}

func TestWriterFlushTriggers(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		t.Run("full batch goes at once", func(t *testing.T) {
			// MaxDelay is an hour: only the batch being full can flush it before the test's
			// deadline.
			k := newTask(t, s, "full-batch")
			w := newWriter(t, s, persist.WriterConfig{MaxBatchRows: 3, MaxDelay: time.Hour}, true)
			if err := w.Write(testCtx(t), k.next()); err != nil {
				t.Fatalf("Write: %v", err)
			}
			k.checkLanded(t, s)
		})
		t.Run("batch waits for company until MaxDelay", func(t *testing.T) {
			k1, k2 := newTask(t, s, "company-1"), newTask(t, s, "company-2")
			cs := &countingStore{Store: s}
			w := newWriter(t, cs, persist.WriterConfig{MaxBatchRows: 6, MaxDelay: time.Hour}, true)
			out := newOutcomes(1)
			g1 := k1.next()
			g1.Done = out.done(1)
			submit(t, w, g1)
			// The first group waits (MaxDelay is an hour) until the second fills the batch.
			if err := w.Write(testCtx(t), k2.next()); err != nil {
				t.Fatalf("Write: %v", err)
			}
			if o := out.wait(t, 1)[0]; o.err != nil {
				t.Errorf("first group: %v", o.err)
			}
			if got := cs.calls.Load(); got != 1 {
				t.Errorf("ApplyBatch called %d times, want 1 (both groups in one batch)", got)
			}
			k1.checkLanded(t, s)
			k2.checkLanded(t, s)
		})
		t.Run("lone group goes after MaxDelay", func(t *testing.T) {
			const maxDelay = 20 * time.Millisecond
			k := newTask(t, s, "lone")
			w := newWriter(t, s, persist.WriterConfig{MaxDelay: maxDelay}, true)
			start := time.Now()
			if err := w.Write(testCtx(t), k.next()); err != nil {
				t.Fatalf("Write: %v", err)
			}
			// A lower bound only (timers never fire early): the lone group waited for company
			// for MaxDelay instead of being committed on its own at once.
			if took := time.Since(start); took < maxDelay {
				t.Errorf("lone group durable after %s, want it held for MaxDelay (%s)", took, maxDelay)
			}
			k.checkLanded(t, s)
		})
		t.Run("oversized group goes whole and alone", func(t *testing.T) {
			k1, k2 := newTask(t, s, "big-1"), newTask(t, s, "big-2")
			cs := &countingStore{Store: s}
			w := newWriter(t, cs, persist.WriterConfig{MaxBatchRows: 2, MaxDelay: time.Hour}, false)
			out := newOutcomes(2)
			for i, k := range []*task{k1, k2} {
				g := k.next()
				g.Done = out.done(i)
				submit(t, w, g)
			}
			if err := w.Start(t.Context()); err != nil {
				t.Fatalf("Start: %v", err)
			}
			for _, o := range out.wait(t, 2) {
				if o.err != nil {
					t.Errorf("group %d: %v", o.seq, o.err)
				}
			}
			if got := cs.calls.Load(); got != 2 {
				t.Errorf("ApplyBatch called %d times, want 2 (one per oversized group)", got)
			}
			k1.checkLanded(t, s)
			k2.checkLanded(t, s)
		})
	})
}

// TestWriterConflictIsolation puts stale groups in a batch between good ones: each stale group
// fails alone with indexes relative to itself, the good ones land, and Done keeps order.
func TestWriterConflictIsolation(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		a, b, c, d := newTask(t, s, "a"), newTask(t, s, "b"), newTask(t, s, "c"), newTask(t, s, "d")
		cs := &countingStore{Store: s}
		w := newWriter(t, cs, persist.WriterConfig{MaxDelay: time.Hour}, false)
		out := newOutcomes(4)

		g0 := a.next()

		// g1: a good transition of b, then a stale one of d. The group is atomic, so b's
		// transition must not land either.
		bBefore, dBefore := b.rt, d.rt
		g1 := b.next()
		stale := d.next()
		stale.Transitions[0].ExpectVersion += 7
		g1.Transitions = append(g1.Transitions, stale.Transitions...)
		g1.Runs = append(g1.Runs, stale.Runs...)
		b.rt, d.rt = bBefore, dBefore
		lostTickets := []string{g1.Runs[0].Ticket, g1.Runs[1].Ticket}

		// g2: a stale transition of c.
		cBefore := c.rt
		g2 := c.next()
		g2.Transitions[0].ExpectVersion--
		c.rt = cBefore
		lostTickets = append(lostTickets, g2.Runs[0].Ticket)

		g3 := d.next() // expects d's real version: lands

		for i, g := range []*persist.Group{g0, g1, g2, g3} {
			g.Done = out.done(i)
			submit(t, w, g)
		}
		conflicts := counterValue(t, "axe_writer_conflicts_total")
		// Stop flushes the one batch holding all four groups.
		if err := w.Stop(testCtx(t)); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		got := out.wait(t, 4)
		for i, o := range got {
			if o.seq != i {
				t.Fatalf("Done call %d was for group %d, want submission order", i, o.seq)
			}
		}
		for _, i := range []int{0, 3} {
			if got[i].err != nil {
				t.Errorf("group %d: %v, want nil", i, got[i].err)
			}
		}
		for i, want := range map[int][]int{1: {1}, 2: {0}} {
			var ce *persist.ConflictError
			if !errors.As(got[i].err, &ce) {
				t.Errorf("group %d: %v, want a *ConflictError", i, got[i].err)
				continue
			}
			if !slices.Equal(ce.Indexes, want) || !errors.Is(got[i].err, model.ErrVersionConflict) {
				t.Errorf("group %d: conflict indexes %v, want %v", i, ce.Indexes, want)
			}
		}
		if calls := cs.calls.Load(); calls < 2 || calls > 3 {
			t.Errorf("ApplyBatch called %d times, want 2 or 3 (one try, then without the stale groups)", calls)
		}
		if delta := counterValue(t, "axe_writer_conflicts_total") - conflicts; delta != 2 {
			t.Errorf("axe_writer_conflicts_total grew by %d, want 2", delta)
		}
		for _, k := range []*task{a, b, c, d} {
			k.checkLanded(t, s)
		}
		for _, ticket := range lostTickets {
			checkRun(t, s, ticket, false)
		}
	})
}

// TestWriterFencing deposes the writer's lease holder and checks that its next batches fail
// with ErrLeaseLost and write nothing (docs/ha.md, "Fencing").
func TestWriterFencing(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		const lease, ttl = "scheduler", time.Minute
		ctx := testCtx(t)
		held, ok, err := s.TakeLease(ctx, lease, "node-a", ttl)
		if err != nil || !ok || held.Epoch <= 0 {
			t.Fatalf("TakeLease(node-a) = %+v, %v, %v; want it held with a positive epoch", held, ok, err)
		}
		var epoch atomic.Int64
		epoch.Store(held.Epoch)

		k := newTask(t, s, "fenced")
		cs := &countingStore{Store: s}
		w := newWriter(t, cs, persist.WriterConfig{LeaseName: lease, Epoch: epoch.Load}, true)
		if err := w.Write(ctx, k.next()); err != nil {
			t.Fatalf("Write under a current epoch: %v", err)
		}
		k.checkLanded(t, s)
		landed := k.rt

		// node-a's lease ends and node-b takes it over: node-a's epoch is stale.
		if err := s.ReleaseLease(ctx, lease, "node-a", held.Epoch); err != nil {
			t.Fatalf("ReleaseLease(node-a): %v", err)
		}
		took, ok, err := s.TakeLease(ctx, lease, "node-b", ttl)
		if err != nil || !ok || took.Epoch != held.Epoch+1 {
			t.Fatalf("TakeLease(node-b) after release = %+v, %v, %v; want a takeover at epoch %d", took, ok, err, held.Epoch+1)
		}
		leaseLost := counterValue(t, `axe_writer_commit_errors_total{reason="lease_lost"}`)
		g := k.next()
		if err := w.Write(ctx, g); !errors.Is(err, model.ErrLeaseLost) {
			t.Fatalf("Write after takeover = %v, want ErrLeaseLost", err)
		}
		if delta := counterValue(t, `axe_writer_commit_errors_total{reason="lease_lost"}`) - leaseLost; delta != 1 {
			t.Errorf("lease_lost errors grew by %d, want 1", delta)
		}
		checkRun(t, s, g.Runs[0].Ticket, false)
		k.rt = landed
		k.checkLanded(t, s)

		// While the epoch stays stale, batches fail without reaching the database.
		calls := cs.calls.Load()
		g = k.next()
		if err := w.Write(ctx, g); !errors.Is(err, model.ErrLeaseLost) {
			t.Fatalf("second Write at the stale epoch = %v, want ErrLeaseLost", err)
		}
		if got := cs.calls.Load(); got != calls {
			t.Errorf("ApplyBatch called %d more times at a known-stale epoch, want 0", got-calls)
		}
		checkRun(t, s, g.Runs[0].Ticket, false)
		k.rt = landed

		// A current epoch (here node-b's) is tried again, and lands.
		epoch.Store(took.Epoch)
		if err := w.Write(ctx, k.next()); err != nil {
			t.Fatalf("Write at the current epoch: %v", err)
		}
		k.checkLanded(t, s)
	})
}

// TestWriterRetriesTransientFailures fails the first commits the way a dropped connection
// does, and checks that every group still lands, in order, once the database answers.
func TestWriterRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		const n, failures = 6, 3
		k := newTask(t, s, "retried")
		fs := newFaultyStore(s, failures)
		w := newWriter(t, fs, persist.WriterConfig{
			MaxBatchRows: 6, MaxDelay: time.Hour, RetryMin: time.Millisecond, RetryMax: 2 * time.Millisecond,
		}, false)
		out := newOutcomes(n)
		for i := range n {
			g := k.next()
			g.Done = out.done(i)
			submit(t, w, g)
		}
		transient := counterValue(t, `axe_writer_commit_errors_total{reason="transient"}`)
		if err := w.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		for i, o := range out.wait(t, n) {
			if o.seq != i || o.err != nil {
				t.Fatalf("Done call %d = group %d with %v, want group %d with nil", i, o.seq, o.err, i)
			}
		}
		// Three batches of two groups; the first batch failed three times first.
		if got := fs.calls.Load(); got != failures+3 {
			t.Errorf("ApplyBatch called %d times, want %d", got, failures+3)
		}
		if delta := counterValue(t, `axe_writer_commit_errors_total{reason="transient"}`) - transient; delta != failures {
			t.Errorf("transient commit errors grew by %d, want %d", delta, failures)
		}
		k.checkLanded(t, s)
	})
}

func TestWriterBackpressure(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		k := newTask(t, s, "pressed")
		// Not started: nothing drains the queue of two.
		w := newWriter(t, s, persist.WriterConfig{QueueSize: 2}, false)
		out := newOutcomes(3)
		for i := range 2 {
			g := k.next()
			g.Done = out.done(i)
			submit(t, w, g)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		if err := w.Submit(ctx, &persist.Group{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Submit on a full queue = %v, want context.DeadlineExceeded", err)
		}
		if got := w.Pending(); got != 2 {
			t.Errorf("Pending() = %d, want 2 (the refused group is not pending)", got)
		}

		// A blocked Submit goes through once the writer drains the queue.
		g := k.next()
		g.Done = out.done(2)
		submitted := make(chan error, 1)
		ctx = testCtx(t)
		go func() { submitted <- w.Submit(ctx, g) }()
		if err := w.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if err := <-submitted; err != nil {
			t.Fatalf("blocked Submit = %v, want nil once the queue drains", err)
		}
		for i, o := range out.wait(t, 3) {
			if o.seq != i || o.err != nil {
				t.Fatalf("Done call %d = group %d with %v, want group %d with nil", i, o.seq, o.err, i)
			}
		}
		k.checkLanded(t, s)
	})
}

func TestWriterStop(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		t.Run("flushes queued groups", func(t *testing.T) {
			k := newTask(t, s, "flushed")
			// MaxDelay of an hour and a batch far from full: only Stop flushes these.
			w := newWriter(t, s, persist.WriterConfig{MaxDelay: time.Hour}, true)
			out := newOutcomes(5)
			for i := range 5 {
				g := k.next()
				g.Done = out.done(i)
				submit(t, w, g)
			}
			if err := w.Stop(testCtx(t)); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			// Stop returned: every Done has been called already.
			if len(out) != 5 {
				t.Fatalf("%d Done calls when Stop returned, want 5", len(out))
			}
			for i, o := range out.wait(t, 5) {
				if o.seq != i || o.err != nil {
					t.Errorf("Done call %d = group %d with %v, want group %d with nil", i, o.seq, o.err, i)
				}
			}
			if got := w.Pending(); got != 0 {
				t.Errorf("Pending() = %d after Stop, want 0", got)
			}
			k.checkLanded(t, s)
		})
		t.Run("flushes without Start", func(t *testing.T) {
			k := newTask(t, s, "never-started")
			w := newWriter(t, s, persist.WriterConfig{}, false)
			out := newOutcomes(2)
			for i := range 2 {
				g := k.next()
				g.Done = out.done(i)
				submit(t, w, g)
			}
			if err := w.Stop(testCtx(t)); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			for _, o := range out.wait(t, 2) {
				if o.err != nil {
					t.Errorf("group %d: %v", o.seq, o.err)
				}
			}
			k.checkLanded(t, s)
		})
		t.Run("twice, then closed", func(t *testing.T) {
			k := newTask(t, s, "closed")
			w := newWriter(t, s, persist.WriterConfig{}, true)
			for range 2 {
				if err := w.Stop(testCtx(t)); err != nil {
					t.Fatalf("Stop: %v", err)
				}
			}
			g := k.next()
			if err := w.Submit(testCtx(t), g); !errors.Is(err, persist.ErrWriterClosed) {
				t.Errorf("Submit after Stop = %v, want ErrWriterClosed", err)
			}
			if err := w.Write(testCtx(t), g); !errors.Is(err, persist.ErrWriterClosed) {
				t.Errorf("Write after Stop = %v, want ErrWriterClosed", err)
			}
			if err := w.Start(t.Context()); !errors.Is(err, persist.ErrWriterClosed) {
				t.Errorf("Start after Stop = %v, want ErrWriterClosed", err)
			}
			checkRun(t, s, g.Runs[0].Ticket, false)
		})
		t.Run("never started, twice", func(t *testing.T) {
			w := newWriter(t, s, persist.WriterConfig{}, false)
			for range 2 {
				if err := w.Stop(testCtx(t)); err != nil {
					t.Fatalf("Stop: %v", err)
				}
			}
		})
		t.Run("releases a blocked Submit", func(t *testing.T) {
			w := newWriter(t, s, persist.WriterConfig{QueueSize: 1}, false)
			submit(t, w, &persist.Group{})
			blocked := make(chan error, 1)
			ctx := testCtx(t)
			go func() { blocked <- w.Submit(ctx, &persist.Group{}) }()
			if err := w.Stop(testCtx(t)); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			// Nothing drains a never-started writer's queue before Stop closes it, so whether
			// the call was blocked or arrived after Stop began, it is refused.
			if err := <-blocked; !errors.Is(err, persist.ErrWriterClosed) {
				t.Errorf("Submit blocked across Stop = %v, want ErrWriterClosed", err)
			}
		})
		t.Run("deadline fails what is unwritten", func(t *testing.T) {
			k := newTask(t, s, "unwritten")
			fs := newFaultyStore(s, 1<<62) // the database never comes back
			w := newWriter(t, fs, persist.WriterConfig{RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond}, true)
			out := newOutcomes(2)
			var tickets []string
			for i := range 2 {
				g := k.next()
				g.Done = out.done(i)
				tickets = append(tickets, g.Runs[0].Ticket)
				submit(t, w, g)
			}
			select { // wait until the writer is retrying
			case <-fs.failed:
			case <-time.After(testTimeout):
				t.Fatal("no commit was tried")
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
			defer cancel()
			if err := w.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Stop = %v, want context.DeadlineExceeded", err)
			}
			for i, o := range out.wait(t, 2) {
				if o.seq != i || !errors.Is(o.err, context.DeadlineExceeded) {
					t.Errorf("Done call %d = group %d with %v, want group %d with DeadlineExceeded", i, o.seq, o.err, i)
				}
			}
			for _, ticket := range tickets {
				checkRun(t, s, ticket, false)
			}
		})
	})
}

func TestWriterConfig(t *testing.T) {
	t.Parallel()
	got := persist.WriterConfig{}.WithDefaults()
	if got.MaxBatchRows != persist.WriterMaxBatchRowsDefault || got.MaxDelay != persist.WriterMaxDelayDefault ||
		got.QueueSize != persist.WriterQueueSizeDefault || got.RetryMin != persist.WriterRetryMinDefault ||
		got.RetryMax != persist.WriterRetryMaxDefault || got.CreateMaxDelay != persist.WriterCreateMaxDelayDefault ||
		got.Logger == nil {
		t.Errorf("WithDefaults() = %+v, want every default", got)
	}
	set := persist.WriterConfig{MaxBatchRows: 9, MaxDelay: time.Second, CreateMaxDelay: time.Millisecond, QueueSize: 3,
		RetryMin: time.Second, RetryMax: time.Minute}
	if got := set.WithDefaults(); got.MaxBatchRows != 9 || got.MaxDelay != time.Second || got.QueueSize != 3 ||
		got.CreateMaxDelay != time.Millisecond || got.RetryMin != time.Second || got.RetryMax != time.Minute {
		t.Errorf("WithDefaults() changed set fields: %+v", got)
	}

	s := persisttest.SQLite(t)
	for name, cfg := range map[string]persist.WriterConfig{
		"negative MaxBatchRows":   {MaxBatchRows: -1},
		"negative MaxDelay":       {MaxDelay: -time.Millisecond},
		"negative CreateMaxDelay": {CreateMaxDelay: -time.Millisecond},
		"negative QueueSize":      {QueueSize: -1},
		"RetryMax below RetryMin": {RetryMin: time.Second, RetryMax: time.Millisecond},
		"Epoch without LeaseName": {Epoch: func() int64 { return 1 }},
	} {
		if w, err := persist.NewWriter(s, cfg); err == nil {
			_ = w.Stop(t.Context())
			t.Errorf("%s: NewWriter accepted %+v", name, cfg)
		}
	}
	if _, err := persist.NewWriter(nil, persist.WriterConfig{}); err == nil {
		t.Error("NewWriter accepted a nil store")
	}
}
