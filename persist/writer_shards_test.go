package persist_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// nameInShard returns a task name, with prefix, whose shard is n.
func nameInShard(prefix string, n int) string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if model.ShardOf(name) == n {
			return name
		}
	}
}

// TestWriterFencingPerShard: groups fenced by shards share batches; when another node takes
// one shard, only that shard's groups fail (with a *ShardsLostError wrapping ErrLeaseLost),
// the others of the same batch land, ShardLost hears of it once, and later groups at the
// stale epoch fail without reaching the database.
func TestWriterFencingPerShard(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		a, err := s.TakeShards(ctx, "a", []int{3, 7, 11}, time.Minute)
		if err != nil || len(a) != 3 {
			t.Fatalf("TakeShards = %+v, %v", a, err)
		}
		epochOf := map[int]int64{}
		for _, l := range a {
			epochOf[l.Shard] = l.Epoch
		}
		tasks := map[int]*task{}
		for _, n := range []int{3, 7, 11} {
			tasks[n] = newTask(t, s, nameInShard("fenced", n))
		}
		var mu sync.Mutex
		var heard []persist.ShardFence
		cs := &countingStore{Store: s, entered: make(chan struct{}), gate: make(chan struct{})}
		w := newWriter(t, cs, persist.WriterConfig{MaxDelay: time.Millisecond, ShardLost: func(f persist.ShardFence, err error) {
			mu.Lock()
			heard = append(heard, f)
			mu.Unlock()
		}}, true)
		fenced := func(n int) *persist.Group {
			g := tasks[n].next()
			g.Fence = persist.ShardFence{Shard: n, Epoch: epochOf[n]}
			return g
		}
		// A first group holds the writer in its commit while b takes shard 7 over.
		out := newOutcomes(8)
		first := fenced(3)
		first.Done = out.done(0)
		submit(t, w, first)
		<-cs.entered
		if err := s.ReleaseShards(ctx, "a", []persist.ShardFence{{Shard: 7, Epoch: epochOf[7]}}); err != nil {
			t.Fatal(err)
		}
		b, err := s.TakeShards(ctx, "b", []int{7}, time.Minute)
		if err != nil || len(b) != 1 {
			t.Fatalf("b's take of shard 7 = %+v, %v", b, err)
		}
		landed7 := tasks[7].rt
		g3, g7, g11 := fenced(3), fenced(7), fenced(11)
		g3.Done, g7.Done, g11.Done = out.done(1), out.done(2), out.done(3)
		for _, g := range []*persist.Group{g3, g7, g11} {
			submit(t, w, g)
		}
		close(cs.gate)
		got := out.wait(t, 4)
		for _, o := range got {
			switch o.seq {
			case 2:
				var lost *persist.ShardsLostError
				if !errors.Is(o.err, model.ErrLeaseLost) || !errors.As(o.err, &lost) ||
					len(lost.Lost) != 1 || lost.Lost[0] != (persist.ShardFence{Shard: 7, Epoch: epochOf[7]}) {
					t.Errorf("the group of the shard taken over = %v, want a *ShardsLostError naming shard 7 at epoch %d", o.err, epochOf[7])
				}
			default:
				if o.err != nil {
					t.Errorf("group %d of a shard still held = %v, want it landed", o.seq, o.err)
				}
			}
		}
		tasks[3].checkLanded(t, s)
		tasks[11].checkLanded(t, s)
		tasks[7].rt = landed7
		tasks[7].checkLanded(t, s)
		checkRun(t, s, g7.Runs[0].Ticket, false)
		mu.Lock()
		if len(heard) != 1 || heard[0] != (persist.ShardFence{Shard: 7, Epoch: epochOf[7]}) {
			t.Errorf("ShardLost heard %+v, want shard 7 at epoch %d once", heard, epochOf[7])
		}
		mu.Unlock()

		// A later group fenced by shard 7 at the stale epoch fails without a commit.
		calls := cs.calls.Load()
		again := fenced(7)
		if err := w.Write(ctx, again); !errors.Is(err, model.ErrLeaseLost) {
			t.Fatalf("a group at the known-stale epoch = %v, want ErrLeaseLost", err)
		}
		if n := cs.calls.Load() - calls; n != 0 {
			t.Errorf("ApplyBatch called %d times for a group at a known-stale epoch, want 0", n)
		}
		tasks[7].rt = landed7
		// The new holder's epoch lands.
		next := tasks[7].next()
		next.Fence = persist.ShardFence{Shard: 7, Epoch: b[0].Epoch}
		if err := w.Write(ctx, next); err != nil {
			t.Fatalf("a group at the new epoch of shard 7: %v", err)
		}
		tasks[7].checkLanded(t, s)
	})
}

// TestWriterFencingPerShardOlderEpochInBatch: of two groups of one shard at two epochs in
// one batch, the older fails without taking the batch down; the newer lands.
func TestWriterFencingPerShardOlderEpochInBatch(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		first, err := s.TakeShards(ctx, "a", []int{5}, time.Minute)
		if err != nil || len(first) != 1 {
			t.Fatalf("TakeShards = %+v, %v", first, err)
		}
		second, err := s.TakeShards(ctx, "a", []int{5}, time.Minute) // retaken: epoch + 1
		if err != nil || len(second) != 1 || second[0].Epoch != first[0].Epoch+1 {
			t.Fatalf("TakeShards again = %+v, %v", second, err)
		}
		old, cur := newTask(t, s, nameInShard("old", 5)), newTask(t, s, nameInShard("cur", 5))
		cs := &countingStore{Store: s, entered: make(chan struct{}), gate: make(chan struct{})}
		w := newWriter(t, cs, persist.WriterConfig{MaxDelay: time.Millisecond}, true)
		out := newOutcomes(3)
		hold := cur.next()
		hold.Fence = persist.ShardFence{Shard: 5, Epoch: second[0].Epoch}
		hold.Done = out.done(0)
		submit(t, w, hold)
		<-cs.entered
		landedOld := old.rt
		gOld, gCur := old.next(), cur.next()
		gOld.Fence = persist.ShardFence{Shard: 5, Epoch: first[0].Epoch}
		gCur.Fence = persist.ShardFence{Shard: 5, Epoch: second[0].Epoch}
		gOld.Done, gCur.Done = out.done(1), out.done(2)
		submit(t, w, gOld)
		submit(t, w, gCur)
		close(cs.gate)
		for _, o := range out.wait(t, 3) {
			if o.seq == 1 {
				if !errors.Is(o.err, model.ErrLeaseLost) {
					t.Errorf("the group at the older epoch = %v, want ErrLeaseLost", o.err)
				}
			} else if o.err != nil {
				t.Errorf("group %d at the current epoch = %v, want it landed", o.seq, o.err)
			}
		}
		cur.checkLanded(t, s)
		old.rt = landedOld
		old.checkLanded(t, s)
	})
}

// TestWriterRefusesFenceOfNoShard: a group fenced by a number that is no shard is refused
// at Submit and at Offer and nothing reaches the store.
func TestWriterRefusesFenceOfNoShard(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		tk := newTask(t, s, "no-shard")
		cs := &countingStore{Store: s}
		w := newWriter(t, cs, persist.WriterConfig{MaxDelay: time.Millisecond}, true)
		for _, n := range []int{-1, model.ShardCount} {
			g := tk.next()
			g.Fence = persist.ShardFence{Shard: n, Epoch: 1}
			if err := w.Submit(ctx, g); err == nil {
				t.Errorf("Submit of a group fenced by shard %d = nil, want an error", n)
			}
			if err := w.Offer(g); err == nil {
				t.Errorf("Offer of a group fenced by shard %d = nil, want an error", n)
			}
		}
		if n := cs.calls.Load(); n != 0 {
			t.Errorf("ApplyBatch called %d times for refused groups, want 0", n)
		}
	})
}
