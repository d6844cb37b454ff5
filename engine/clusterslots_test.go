package engine

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wheel"
)

// busyServer answers each call after hold (or, while hung, once released), and counts the
// calls in flight at once, as a downstream sees them.
type busyServer struct {
	*httptest.Server
	hold time.Duration

	mu      sync.Mutex
	now     int
	most    int
	calls   map[string]int // by task
	firstAt map[string]time.Time
	hang    chan struct{}
}

func newBusyServer(t *testing.T, hold time.Duration) *busyServer {
	bs := &busyServer{hold: hold, calls: map[string]int{}, firstAt: map[string]time.Time{}}
	bs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		task := r.Header.Get("X-Axe-Task")
		bs.mu.Lock()
		bs.now++
		bs.most = max(bs.most, bs.now)
		bs.calls[task]++
		if _, ok := bs.firstAt[task]; !ok {
			bs.firstAt[task] = time.Now()
		}
		hang := bs.hang
		bs.mu.Unlock()
		// The downstream works on whatever the caller does: a caller gone (a node dropped,
		// killed) does not end the run here.
		if hang != nil {
			<-hang
		} else {
			time.Sleep(bs.hold)
		}
		bs.mu.Lock()
		bs.now--
		bs.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(func() {
		bs.unhang()
		bs.Close()
	})
	return bs
}

func (bs *busyServer) unhang() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.hang != nil {
		close(bs.hang)
		bs.hang = nil
	}
}

func (bs *busyServer) stats() (most int, calls map[string]int) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	out := make(map[string]int, len(bs.calls))
	for k, v := range bs.calls {
		out[k] = v
	}
	return bs.most, out
}

func slotsHeld(t *testing.T, s persist.Store, r persist.SlotRef) int {
	t.Helper()
	n, err := s.(persist.SlotStore).CountSlots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n[r]
}

// TestShardedConcurrencyLimitAcrossEngines: two sharded engines on one store, each with half
// the shards, keep one limit of 3 together: the downstream never has more than 3 runs of the
// group at once, every task runs once, and every slot row is gone once they end.
func TestShardedConcurrencyLimitAcrossEngines(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		bs := newBusyServer(t, 150*time.Millisecond)
		a, b := startEngine(t, s, sharded), startEngine(t, s, sharded)
		takeFor(t, s, a, "a", shardRange(0, 127), time.Minute)
		takeFor(t, s, b, "b", shardRange(128, 255), time.Minute)
		// The API sets a limit on every node at once (admin's fan-out).
		for _, e := range []*Engine{a, b} {
			if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitGroup, "etl", 3, "test"); err != nil {
				t.Fatal(err)
			}
		}
		names := map[*Engine][]string{a: namesIn("lim", 0, 127, 12), b: namesIn("lim", 128, 255, 12)}
		for e, ns := range names {
			for _, n := range ns {
				spec := httpSpec(n, bs.URL+"/hook")
				spec.Group = "etl"
				spec.DelayMS = ptr(int64(300))
				mustCreate(t, e, spec)
			}
		}
		waitFor(t, 60*time.Second, "every task to run", func() bool {
			_, calls := bs.stats()
			return len(calls) == 24
		})
		waitSettled(t, a)
		waitSettled(t, b)
		most, calls := bs.stats()
		if most > 3 {
			t.Errorf("the downstream had %d runs of group etl at once, over the limit of 3", most)
		}
		for n, c := range calls {
			if c != 1 {
				t.Errorf("%s ran %d times, want once", n, c)
			}
		}
		ref := persist.SlotRef{Kind: model.LimitGroup, Name: "etl"}
		waitFor(t, 10*time.Second, "every slot row to go", func() bool { return slotsHeld(t, s, ref) == 0 })
		v, err := a.API().ConcurrencyLimit(ctx, model.LimitGroup, "etl")
		if err != nil || v.InUse != 0 || v.Max != 3 {
			t.Errorf("the limit after every run ended = %+v, %v", v, err)
		}
		t.Logf("24 runs of 150 ms under a limit of 3 on two engines: at most %d at once", most)
	})
}

// TestShardedConcurrencyLimitSurvivesADrop: engine a's two runs hold the limit's two slots
// when a loses its shards (dropped without a write, as a dead node's are). Their rows stay;
// b, taking the shards, records the HTTP runs lost and holds their slots until their
// deadline, so b's own waiting fire starts only then, and every row is gone at the end.
func TestShardedConcurrencyLimitSurvivesADrop(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		bs := newBusyServer(t, 0)
		bs.hang = make(chan struct{})
		a, b := startEngine(t, s, sharded), startEngine(t, s, sharded)
		fa := takeFor(t, s, a, "a", shardRange(0, 127), time.Minute)
		takeFor(t, s, b, "b", shardRange(128, 255), time.Minute)
		for _, e := range []*Engine{a, b} {
			if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitKey, "db", 2, "test"); err != nil {
				t.Fatal(err)
			}
		}
		ref := persist.SlotRef{Kind: model.LimitKey, Name: "db"}
		for _, n := range namesIn("held", 0, 127, 2) {
			spec := httpSpec(n, bs.URL+"/hook")
			spec.ConcurrencyKey = "db"
			spec.TimeoutSec = ptr(3)
			spec.DelayMS = ptr(int64(100))
			mustCreate(t, a, spec)
		}
		waitFor(t, 20*time.Second, "a's two runs to reach the downstream", func() bool {
			_, calls := bs.stats()
			return len(calls) == 2
		})
		if n := slotsHeld(t, s, ref); n != 2 {
			t.Fatalf("%d slot rows held by a's two runs, want 2", n)
		}
		waiter := namesIn("waits", 128, 255, 1)[0]
		spec := httpSpec(waiter, bs.URL+"/hook")
		spec.ConcurrencyKey = "db"
		spec.DelayMS = ptr(int64(100))
		mustCreate(t, b, spec)
		// a loses its shards with its runs in flight: nothing is written, the rows stay.
		dropAt := time.Now()
		var set model.ShardSet
		for _, f := range fa {
			set.Add(f.Shard)
		}
		a.API().Ownership().Drop(set)
		if err := s.(persist.ShardStore).ReleaseShards(ctx, "a", fa); err != nil {
			t.Fatal(err)
		}
		if n := slotsHeld(t, s, ref); n != 2 {
			t.Fatalf("%d slot rows after a dropped its shards, want its runs' 2", n)
		}
		takeFor(t, s, b, "b", shardRange(0, 127), time.Minute)
		bs.unhang() // the downstream ends a's runs; no node waits for them any more
		waitFor(t, 30*time.Second, "b's waiting fire to run", func() bool {
			_, calls := bs.stats()
			return calls[waiter] == 1
		})
		bs.mu.Lock()
		started := bs.firstAt[waiter]
		bs.mu.Unlock()
		waitSettled(t, b)
		waitFor(t, 20*time.Second, "every slot row to go", func() bool { return slotsHeld(t, s, ref) == 0 })
		var firstDispatch int64
		for _, n := range namesIn("held", 0, 127, 2) {
			pt, err := s.GetTask(ctx, n)
			if err != nil {
				t.Fatal(err)
			}
			runs, err := s.ListRuns(ctx, pt.Def.ID, 5)
			if err != nil || len(runs) != 1 || runs[0].Result != model.ResultLost {
				t.Errorf("%s's runs = %+v, %v; want one, recorded lost by b", n, runs, err)
				continue
			}
			if firstDispatch == 0 || runs[0].DispatchedAt < firstDispatch {
				firstDispatch = runs[0].DispatchedAt
			}
		}
		// a's runs hold their slots until their deadline, 3 s after their dispatch (as
		// recorded; a loaded box may take seconds between the dispatch and the drop), so b's
		// fire waited for the holds. 100 ms for the records' millisecond rounding.
		if deadline := time.UnixMilli(firstDispatch).Add(3*time.Second - 100*time.Millisecond); firstDispatch > 0 && started.Before(deadline) {
			t.Errorf("b's fire started %s after a's shards were dropped and %s after a's first run was dispatched, before the held slots' deadline (3 s after dispatch)",
				started.Sub(dropAt), started.Sub(time.UnixMilli(firstDispatch)))
		}
	})
}

// TestWaitHeapBest: the k best waiters of a heap, read without touching it, are the first k
// of the whole queue sorted, in that order, for any k, with ties of priority and fire time.
func TestWaitHeapBest(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 46))
	for round := range 50 {
		var h waitHeap
		n := r.IntN(300)
		for i := range n {
			w := &concWaiter{ent: &wheel.Entry[*task]{Priority: uint8(r.IntN(3)), When: int64(r.IntN(20))}, seq: uint64(i)}
			heap.Push(&h, w)
		}
		orig := slices.Clone(h)
		sorted := slices.Clone(h)
		slices.SortFunc(sorted, func(a, b *concWaiter) int {
			if before(a, b) {
				return -1
			}
			return 1
		})
		for _, k := range []int{0, 1, 5, n / 2, n, n + 3} {
			got := h.best(k)
			if want := sorted[:min(max(k, 0), n)]; !slices.Equal(got, want) {
				t.Fatalf("round %d, %d waiters: best(%d) differs from the sorted queue's first %d", round, n, k, len(want))
			}
		}
		if !slices.Equal(h, orig) {
			t.Fatalf("round %d: best changed the heap", round)
		}
	}
}

// TestHoldRowsWrittenTogether: the holds a recovery queues (holdRows) are written by the slot
// loop, those of a shard no longer held at their epoch left out and the others written.
func TestHoldRowsWrittenTogether(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		a := startEngine(t, s, sharded)
		fa := takeFor(t, s, a, "a", shardRange(0, 3), time.Minute)
		if _, err := a.API().SetConcurrencyLimit(ctx, model.LimitKey, "db", 2, "test"); err != nil {
			t.Fatal(err)
		}
		ref := persist.SlotRef{Kind: model.LimitKey, Name: "db"}
		a.gates.holdRows("", "db", persist.HoldTicket("1-1-1", time.Now().Add(time.Hour).UnixMilli()), uint8(fa[0].Shard), fa[0].Epoch)
		a.gates.holdRows("", "db", "2-1-1", uint8(fa[0].Shard), fa[0].Epoch)
		a.gates.holdRows("", "db", "3-1-1", uint8(fa[1].Shard), fa[1].Epoch+1) // an epoch not held
		a.gates.holdRows("", "db", "4-1-1", uint8(fa[2].Shard), fa[2].Epoch)
		waitFor(t, 20*time.Second, "the holds of the shards held to be written", func() bool { return slotsHeld(t, s, ref) == 3 })
		time.Sleep(200 * time.Millisecond) // a pass or more later, nothing more was written
		if n := slotsHeld(t, s, ref); n != 3 {
			t.Fatalf("%d slot rows, want the 3 of the shards held at their epoch", n)
		}
	})
}
