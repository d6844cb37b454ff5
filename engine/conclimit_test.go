package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// slowEndpoint is a real HTTP endpoint on loopback whose every call takes hold before it
// answers 200, counting the calls in progress at once.
type slowEndpoint struct {
	*httptest.Server
	mu      sync.Mutex
	now     int
	most    int
	tickets map[string]int // calls per ticket
	order   []string       // tasks, in the order their calls arrived
}

func newSlowEndpoint(t *testing.T, hold time.Duration) *slowEndpoint {
	s := &slowEndpoint{tickets: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.now++
		s.most = max(s.most, s.now)
		s.tickets[r.Header.Get("X-Axe-Ticket")]++
		s.order = append(s.order, r.Header.Get("X-Axe-Task"))
		s.mu.Unlock()
		time.Sleep(hold)
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *slowEndpoint) stats() (most, calls int, dup bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.tickets {
		calls += n
		dup = dup || n > 1
	}
	return s.most, calls, dup
}

// maxOverlap is the most runs whose [dispatched_at, ended_at) intervals overlap at one
// instant.
func maxOverlap(runs []model.Run) int {
	type edge struct {
		at int64
		d  int
	}
	var es []edge
	for _, r := range runs {
		if r.DispatchedAt == 0 {
			continue
		}
		end := r.EndedAt
		if end == 0 {
			end = 1 << 62 // still running
		}
		es = append(es, edge{r.DispatchedAt, 1}, edge{end, -1})
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].at != es[j].at {
			return es[i].at < es[j].at
		}
		return es[i].d < es[j].d // an end at the instant of a start comes first: half-open
	})
	n, most := 0, 0
	for _, e := range es {
		n += e.d
		most = max(most, n)
	}
	return most
}

// groupRuns reads back from the store every run of the tasks named prefix-0..n-1.
func groupRuns(t *testing.T, s persist.Store, prefix string, n int) map[string][]model.Run {
	t.Helper()
	out := map[string][]model.Run{}
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		pt, err := s.GetTask(context.Background(), name)
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		runs, err := s.ListRuns(context.Background(), pt.Def.ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = runs
	}
	return out
}

func allRuns(m map[string][]model.Run) []model.Run {
	var out []model.Run
	for _, rs := range m {
		out = append(out, rs...)
	}
	return out
}

// TestConcurrencyLimitGroup: 20 one-shot tasks of group g, limit 3, all due at the same
// second, each run 300 ms on a real endpoint. The runs read back from the store never
// overlap more than 3 at once, the endpoint never sees more than 3 calls at once, every task
// ran exactly once, the fires that waited started best priority first and their runs say
// that they waited.
func TestConcurrencyLimitGroup(t *testing.T) {
	t.Parallel()
	ep := newSlowEndpoint(t, 300*time.Millisecond)
	s := persisttest.SQLite(t)
	e := startEngine(t, s)
	ctx := context.Background()
	if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitGroup, "g", 3, "test"); err != nil {
		t.Fatal(err)
	}
	const n = 20
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	for i := range n {
		spec := httpSpec(fmt.Sprintf("c-%d", i), ep.URL)
		spec.Group, spec.Trigger, spec.RunAt = "g", model.TriggerDelay, at.Format(time.RFC3339)
		spec.Priority = ptr(i % 5)
		mustCreate(t, e, spec)
	}
	// Another group's task is not held back by g's limit.
	other := httpSpec("free", ep.URL)
	other.Group, other.Trigger, other.RunAt = "h", model.TriggerDelay, at.Format(time.RFC3339)
	mustCreate(t, e, other)
	waitFor(t, 30*time.Second, "every run ended", func() bool {
		ended := 0
		for _, rs := range groupRuns(t, s, "c", n) {
			for _, r := range rs {
				if r.EndedAt > 0 {
					ended++
				}
			}
		}
		return ended == n
	})
	runs := groupRuns(t, s, "c", n)
	for name, rs := range runs {
		if len(rs) != 1 || rs[0].Result != model.ResultSuccess {
			t.Errorf("%s ran %d times (%+v), want once, successfully", name, len(rs), rs)
		}
	}
	if got := maxOverlap(allRuns(runs)); got > 3 {
		t.Errorf("runs of group g overlap %d at once in the store, limit 3", got)
	}
	most, calls, dup := ep.stats()
	if most > 4 || dup { // 3 of g, and the one of h beside them
		t.Errorf("the endpoint saw %d calls at once (dup %v), want at most 3 of g and 1 of h", most, dup)
	}
	if calls != n+1 {
		t.Errorf("the endpoint got %d calls, want %d", calls, n+1)
	}
	// The fires that waited started in priority order (then fire time, the same for all).
	var waited []model.Run
	for _, r := range allRuns(runs) {
		if strings.Contains(r.Detail, "for concurrency limit group g (3)") {
			waited = append(waited, r)
		}
	}
	if len(waited) < n-3 {
		t.Fatalf("%d runs say they waited, want at least %d", len(waited), n-3)
	}
	sort.Slice(waited, func(i, j int) bool { return waited[i].DispatchedAt < waited[j].DispatchedAt })
	prio := func(r model.Run) int {
		var i int
		fmt.Sscanf(r.TaskName, "c-%d", &i)
		return i % 5
	}
	for i := 1; i < len(waited); i++ {
		if a, b := waited[i-1], waited[i]; a.DispatchedAt < b.DispatchedAt && prio(a) > prio(b) {
			t.Errorf("%s (priority %d) started before %s (priority %d) after waiting", a.TaskName, prio(a), b.TaskName, prio(b))
		}
	}
	v, err := e.API().ConcurrencyLimit(ctx, model.LimitGroup, "g")
	if err != nil || v.InUse != 0 || v.Waiting != 0 || v.Max != 3 {
		t.Errorf("limit after the runs: %+v, %v", v, err)
	}
}

// TestConcurrencyLimitKey: a key limits the runs of tasks of different groups; a task's
// group limit and its key limit both hold; lifting the key's limit starts its waiters.
func TestConcurrencyLimitKey(t *testing.T) {
	t.Parallel()
	ep := newSlowEndpoint(t, 200*time.Millisecond)
	s := persisttest.SQLite(t)
	e := startEngine(t, s)
	ctx := context.Background()
	if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitKey, "db", 2, "test"); err != nil {
		t.Fatal(err)
	}
	const n = 8
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	for i := range n {
		spec := httpSpec(fmt.Sprintf("k-%d", i), ep.URL)
		spec.Group = fmt.Sprintf("grp%d", i%3)
		spec.Trigger, spec.RunAt, spec.ConcurrencyKey = model.TriggerDelay, at.Format(time.RFC3339), "db"
		mustCreate(t, e, spec)
	}
	waitFor(t, 30*time.Second, "every run ended", func() bool {
		return len(allRuns(groupRuns(t, s, "k", n))) == n && maxEnded(allRuns(groupRuns(t, s, "k", n)))
	})
	runs := allRuns(groupRuns(t, s, "k", n))
	if got := maxOverlap(runs); got > 2 {
		t.Errorf("runs of key db overlap %d at once, limit 2", got)
	}
	if most, calls, dup := ep.stats(); most > 2 || calls != n || dup {
		t.Errorf("endpoint: %d at once, %d calls, dup %v; want at most 2, %d, false", most, calls, dup, n)
	}
}

func maxEnded(runs []model.Run) bool {
	for _, r := range runs {
		if r.EndedAt == 0 {
			return false
		}
	}
	return true
}

// TestConcurrencyLimitLiftAndRunNow: fires waiting for a limit all start when it is removed;
// a run-now over a limit is refused at once with ErrConcurrencyLimit and records nothing.
func TestConcurrencyLimitLiftAndRunNow(t *testing.T) {
	t.Parallel()
	cs := newCallbackServer(t)
	cs.hang = make(chan struct{})
	s := persisttest.SQLite(t)
	e := startEngine(t, s)
	ctx := context.Background()
	if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitGroup, "g", 1, "test"); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	for i := range 4 {
		spec := httpSpec(fmt.Sprintf("l-%d", i), cs.URL)
		spec.Group, spec.Trigger, spec.RunAt = "g", model.TriggerDelay, at.Format(time.RFC3339)
		mustCreate(t, e, spec)
	}
	manual := httpSpec("l-manual", cs.URL)
	manual.Group, manual.Trigger = "g", model.TriggerManual
	mustCreate(t, e, manual)
	waitFor(t, 30*time.Second, "one run in flight and three waiting", func() bool {
		v, _ := e.API().ConcurrencyLimit(ctx, model.LimitGroup, "g")
		return v.InUse == 1 && v.Waiting == 3
	})
	if _, err := e.API().RunNow(ctx, "l-manual", nil, "test"); !errors.Is(err, ErrConcurrencyLimit) ||
		!strings.Contains(err.Error(), "group g is full (1 of 1") {
		t.Fatalf("run-now over the limit: %v, want ErrConcurrencyLimit naming group g", err)
	}
	pt, _ := s.GetTask(ctx, "l-manual")
	if runs, _ := s.ListRuns(ctx, pt.Def.ID, 10); len(runs) != 0 {
		t.Fatalf("a refused run-now left runs %+v", runs)
	}
	// Lowering to the same count changes nothing; removing the limit starts the three.
	if err := e.API().DeleteConcurrencyLimit(ctx, model.LimitGroup, "g", "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "all four in flight", func() bool { return len(cs.got("")) == 4 })
	if err := e.API().DeleteConcurrencyLimit(ctx, model.LimitGroup, "g", "test"); !errors.Is(err, ErrLimitNotFound) {
		t.Fatalf("second delete: %v, want ErrLimitNotFound", err)
	}
	cs.release()
	var fe *FieldError
	for _, bad := range []struct {
		kind, name string
		max        int
		field      string
	}{{"team", "g", 1, "kind"}, {"group", "", 1, "name"}, {"group", "a b", 1, "name"}, {"key", "k", 0, "max"}, {"key", "k", MaxConcurrencyLimit + 1, "max"}} {
		if _, err := e.API().SetConcurrencyLimit(ctx, bad.kind, bad.name, bad.max, "test"); !errors.As(err, &fe) || fe.Field != bad.field {
			t.Errorf("SetConcurrencyLimit(%q, %q, %d) = %v, want a FieldError on %s", bad.kind, bad.name, bad.max, err, bad.field)
		}
	}
	if ls, err := e.API().ConcurrencyLimits(ctx); err != nil || len(ls) != 0 {
		t.Errorf("limits after the bad puts: %+v, %v; want none", ls, err)
	}
	bad := httpSpec("bad-key", cs.URL)
	bad.ConcurrencyKey = "no spaces"
	if _, err := e.API().CreateTask(ctx, bad, "test"); !errors.As(err, &fe) || fe.Field != "concurrency_key" {
		t.Errorf("create with a bad concurrency_key: %v", err)
	}
}

// TestConcurrencyLimitRestart: a restart with runs in flight at the limit keeps the count.
// Three runs of g (limit 3) are in flight on an endpoint that takes 1.5 s when the engine
// stops without waiting for them; the next engine on the same store records them lost, holds
// their slots to their deadline (timeout_sec 3), and the two other tasks of g start only
// then: the endpoint never has more than 3 calls of g at once, and each task ran once.
func TestConcurrencyLimitRestart(t *testing.T) {
	t.Parallel()
	ep := newSlowEndpoint(t, 1500*time.Millisecond)
	s := persisttest.SQLite(t)
	ctx := context.Background()
	e1, err := New(Config{Store: s, Window: 10 * time.Second, LoadInterval: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := e1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e1.API().SetConcurrencyLimit(ctx, model.LimitGroup, "g", 3, "test"); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	for i := range 5 {
		spec := httpSpec(fmt.Sprintf("r-%d", i), ep.URL)
		spec.Group, spec.Trigger, spec.RunAt, spec.TimeoutSec = "g", model.TriggerDelay, at.Format(time.RFC3339), ptr(3)
		mustCreate(t, e1, spec)
	}
	waitFor(t, 30*time.Second, "three calls at the endpoint", func() bool { _, calls, _ := ep.stats(); return calls == 3 })
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_ = e1.Stop(sctx) // the drain gives up: the three runs stay open in the store
	cancel()
	e2 := startEngine(t, s)
	if v, err := e2.API().ConcurrencyLimit(ctx, model.LimitGroup, "g"); err != nil || v.InUse < 3 || v.Max != 3 {
		t.Fatalf("after the restart the limit is %+v, %v; want 3 of 3 in use", v, err)
	}
	waitFor(t, 30*time.Second, "every task ran", func() bool {
		rs := allRuns(groupRuns(t, s, "r", 5))
		return len(rs) == 5 && maxEnded(rs)
	})
	most, calls, dup := ep.stats()
	if most > 3 || calls != 5 || dup {
		t.Errorf("endpoint: %d calls at once, %d calls, dup %v; want at most 3, 5, false", most, calls, dup)
	}
	lost := 0
	for _, r := range allRuns(groupRuns(t, s, "r", 5)) {
		if r.Result == model.ResultLost {
			lost++
		}
	}
	if lost != 3 {
		t.Errorf("%d runs recorded lost at the restart, want 3", lost)
	}
}
