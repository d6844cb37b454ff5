package persist_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// allShards is every shard number.
func allShards() []int {
	out := make([]int, model.ShardCount)
	for i := range out {
		out[i] = i
	}
	return out
}

func fencesOf(ls []persist.ShardLease) []persist.ShardFence {
	out := make([]persist.ShardFence, len(ls))
	for i, l := range ls {
		out[i] = persist.ShardFence{Shard: l.Shard, Epoch: l.Epoch}
	}
	return out
}

// holders reads who holds each shard, by the database's judgement ("" for none).
func holders(t *testing.T, s persist.Store) map[int]string {
	t.Helper()
	ls, err := s.ShardLeases(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, l := range ls {
		if l.Held {
			out[l.Shard] = l.Holder
		}
	}
	return out
}

// TestShardLeases walks the shard leases through a take, a refused take, renewals, a
// release and a takeover, and checks the database's view after each.
func TestShardLeases(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		a, err := s.TakeShards(ctx, "a", allShards(), time.Minute)
		if err != nil || len(a) != model.ShardCount {
			t.Fatalf("TakeShards(a, all) = %d shards, %v", len(a), err)
		}
		for i, l := range a {
			if l.Shard != i || l.Epoch != 1 || l.Holder != "a" || !l.Held || l.Remaining <= 50*time.Second {
				t.Fatalf("shard %d taken as %+v", i, l)
			}
		}
		if b, err := s.TakeShards(ctx, "b", allShards(), time.Minute); err != nil || len(b) != 0 {
			t.Fatalf("TakeShards(b) of shards a holds = %+v, %v; want none", b, err)
		}
		if lost, err := s.RenewShards(ctx, "a", fencesOf(a), time.Minute); err != nil || len(lost) != 0 {
			t.Fatalf("RenewShards(a) = lost %v, %v", lost, err)
		}
		// a gives back shards 10-19; b takes them at epoch 2 and a's next renewal loses them.
		if err := s.ReleaseShards(ctx, "a", fencesOf(a[10:20])); err != nil {
			t.Fatal(err)
		}
		b, err := s.TakeShards(ctx, "b", allShards(), time.Minute)
		if err != nil || len(b) != 10 || b[0].Shard != 10 || b[9].Shard != 19 || b[0].Epoch != 2 {
			t.Fatalf("TakeShards(b) after the release = %+v, %v; want 10-19 at epoch 2", b, err)
		}
		lost, err := s.RenewShards(ctx, "a", fencesOf(a), time.Minute)
		if want := []int{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}; err != nil || !slices.Equal(lost, want) {
			t.Fatalf("RenewShards(a) after b took 10-19 = lost %v, %v; want %v", lost, err, want)
		}
		h := holders(t, s)
		for n := range model.ShardCount {
			want := "a"
			if n >= 10 && n < 20 {
				want = "b"
			}
			if h[n] != want {
				t.Fatalf("shard %d is held by %q, want %q", n, h[n], want)
			}
		}
		// A renewal at a stale epoch renews nothing of that shard.
		stale := []persist.ShardFence{{Shard: 15, Epoch: 1}}
		if lost, err := s.RenewShards(ctx, "b", stale, time.Minute); err != nil || !slices.Equal(lost, []int{15}) {
			t.Fatalf("RenewShards(b, 15@1) = lost %v, %v; want [15]", lost, err)
		}
		// Leases that run out are taken by the next node; those still live are not.
		short, err := s.TakeShards(ctx, "b", []int{10}, 0)
		if err != nil || len(short) != 1 || short[0].Epoch != 3 {
			t.Fatalf("b retaking shard 10 = %+v, %v; want epoch 3", short, err)
		}
		c, err := s.TakeShards(ctx, "c", []int{10, 11}, time.Minute)
		if err != nil || len(c) != 1 || c[0].Shard != 10 || c[0].Epoch != 4 {
			t.Fatalf("TakeShards(c, 10 expired, 11 held) = %+v, %v; want 10 at epoch 4", c, err)
		}
	})
}

// TestShardHandOverPoint: a shard released with a hand-over point reports it to its next
// take, once; one released without a point, or taken after a release of another epoch's,
// reports none, and a hand-over at a stale epoch neither releases nor marks anything.
func TestShardHandOverPoint(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		a, err := s.TakeShards(ctx, "a", []int{0, 1, 2, 3}, time.Minute)
		if err != nil || len(a) != 4 {
			t.Fatalf("TakeShards(a) = %+v, %v", a, err)
		}
		if err := s.HandOverShards(ctx, "a", fencesOf(a[:3]), map[int]int64{0: 1000, 1: 2000}); err != nil {
			t.Fatal(err)
		}
		stale := []persist.ShardFence{{Shard: 3, Epoch: 7}}
		if err := s.HandOverShards(ctx, "a", stale, map[int]int64{3: 3000}); err != nil {
			t.Fatal(err)
		}
		b, err := s.TakeShards(ctx, "b", []int{0, 1, 2, 3}, time.Minute)
		if err != nil || len(b) != 3 {
			t.Fatalf("TakeShards(b) after the hand-over = %+v, %v; want shards 0-2 (3 is still a's)", b, err)
		}
		want := map[int]int64{0: 1000, 1: 2000, 2: 0}
		for _, l := range b {
			if l.HandedOver != want[l.Shard] || l.Epoch != 2 {
				t.Errorf("shard %d taken at epoch %d handed over at %d, want epoch 2 and %d", l.Shard, l.Epoch, l.HandedOver, want[l.Shard])
			}
			if l.HandedOver > 0 && (l.HandedOverAgo < 0 || l.HandedOverAgo > time.Minute) {
				t.Errorf("shard %d released %s before its take, want a moment", l.Shard, l.HandedOverAgo)
			}
		}
		// b releases shard 0 without a point: the mark a left was epoch 1's, and is gone.
		if err := s.ReleaseShards(ctx, "b", fencesOf(b[:1])); err != nil {
			t.Fatal(err)
		}
		c, err := s.TakeShards(ctx, "c", []int{0}, time.Minute)
		if err != nil || len(c) != 1 || c[0].Epoch != 3 || c[0].HandedOver != 0 {
			t.Fatalf("TakeShards(c, 0) after a release without a point = %+v, %v; want epoch 3, no hand-over point", c, err)
		}
		// Each shard is held by its last taker; the stale hand-over left 3 with a.
		if h := holders(t, s); h[0] != "c" || h[1] != "b" || h[3] != "a" {
			t.Fatalf("holders after the hand-overs: %v", h)
		}
	})
}

// TestShardLeasesRefuseBadInput: a shard out of range, a repeat or an epoch no take gives is
// refused before anything is written.
func TestShardLeasesRefuseBadInput(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		for name, call := range map[string]func() error{
			"take 256":     func() error { _, err := s.TakeShards(ctx, "a", []int{1, 256}, time.Minute); return err },
			"take -1":      func() error { _, err := s.TakeShards(ctx, "a", []int{-1}, time.Minute); return err },
			"take twice":   func() error { _, err := s.TakeShards(ctx, "a", []int{3, 3}, time.Minute); return err },
			"take for nil": func() error { _, err := s.TakeShards(ctx, "", []int{3}, time.Minute); return err },
			"renew 0": func() error {
				_, err := s.RenewShards(ctx, "a", []persist.ShardFence{{Shard: 1}}, time.Minute)
				return err
			},
			"release 999": func() error { return s.ReleaseShards(ctx, "a", []persist.ShardFence{{Shard: 999, Epoch: 1}}) },
			"batch twice": func() error {
				return s.ApplyBatch(ctx, &persist.Batch{Shards: []persist.ShardFence{{Shard: 1, Epoch: 1}, {Shard: 1, Epoch: 2}},
					Actions: []model.Action{{TaskName: "x", Action: "note", At: 1}}})
			},
		} {
			if err := call(); err == nil {
				t.Errorf("%s: no error", name)
			}
		}
		if h := holders(t, s); len(h) != 0 {
			t.Errorf("refused calls left shards held: %v", h)
		}
	})
}

// TestShardFencedBatch: a batch fenced by shards applies only while every shard it names is at the
// epoch given; one stale shard refuses all of it with ErrLeaseLost (the fence per shard,
// docs/scale-out.md).
func TestShardFencedBatch(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, testShardFencedBatch)
}

// TestShardFencedBatchGaleraFence is TestShardFencedBatch on one MariaDB with the fence a
// Galera node gets (an update of the fence rows), forced on a server without wsrep.
func TestShardFencedBatchGaleraFence(t *testing.T) {
	t.Parallel()
	s := persisttest.MySQL(t)
	persist.SetGalera(s, true)
	testShardFencedBatch(t, s)
}

func testShardFencedBatch(t *testing.T, s persist.Store) {
	ctx := testCtx(t)
	k := newTask(t, s, "sharded")
	a, err := s.TakeShards(ctx, "a", []int{4, 9}, time.Minute)
	if err != nil || len(a) != 2 {
		t.Fatalf("TakeShards = %+v, %v", a, err)
	}
	first := batchOf(k.next())
	first.Shards = fencesOf(a)
	if err := s.ApplyBatch(ctx, first); err != nil {
		t.Fatalf("a batch fenced by the current epochs: %v", err)
	}
	k.checkLanded(t, s)
	// b takes shard 9 over; a's batch naming 4 and 9 at their old epochs is refused whole.
	if err := s.ReleaseShards(ctx, "a", fencesOf(a[1:])); err != nil {
		t.Fatal(err)
	}
	b, err := s.TakeShards(ctx, "b", []int{9}, time.Minute)
	if err != nil || len(b) != 1 || b[0].Epoch != 2 {
		t.Fatalf("takeover of shard 9 = %+v, %v", b, err)
	}
	before := reload(t, s, "sharded")
	g := k.next()
	err = s.ApplyBatch(ctx, &persist.Batch{Shards: fencesOf(a), Transitions: g.Transitions, Runs: g.Runs, Actions: g.Actions})
	if !errors.Is(err, model.ErrLeaseLost) {
		t.Fatalf("a batch with shard 9 at a stale epoch = %v, want ErrLeaseLost", err)
	}
	if after := reload(t, s, "sharded"); after.Version != before.Version {
		t.Fatalf("the refused batch moved the runtime from v%d to v%d", before.Version, after.Version)
	}
	checkRun(t, s, g.Runs[0].Ticket, false)
	// The same writes fenced by the new owner's epoch land.
	fences := []persist.ShardFence{{Shard: 9, Epoch: b[0].Epoch}}
	if err := s.ApplyBatch(ctx, &persist.Batch{Shards: fences, Transitions: g.Transitions, Runs: g.Runs, Actions: g.Actions}); err != nil {
		t.Fatalf("the batch fenced by shard 9's new epoch: %v", err)
	}
	k.checkLanded(t, s)
	// A shard never taken has no fence row: a batch fenced by it is refused.
	never := batchOf(k.next())
	never.Shards = []persist.ShardFence{{Shard: 200, Epoch: 1}}
	err = s.ApplyBatch(ctx, never)
	if !errors.Is(err, model.ErrLeaseLost) {
		t.Fatalf("a batch fenced by a shard never taken = %v, want ErrLeaseLost", err)
	}

	// Every shard at once: c takes the rest, and a batch fenced by all 256 lands; with
	// one of them stale it is refused, naming that shard.
	var rest []int
	for n := range model.ShardCount {
		if n != 4 && n != 9 {
			rest = append(rest, n)
		}
	}
	cs, err := s.TakeShards(ctx, "c", rest, time.Minute)
	if err != nil || len(cs) != len(rest) {
		t.Fatalf("TakeShards(c, the rest) = %d, %v", len(cs), err)
	}
	all := append(fencesOf(cs), persist.ShardFence{Shard: 4, Epoch: a[0].Epoch}, persist.ShardFence{Shard: 9, Epoch: b[0].Epoch})
	never.Shards = all // the refused batch's writes, which the store has not seen
	if err := s.ApplyBatch(ctx, never); err != nil {
		t.Fatalf("a batch fenced by all %d shards at their epochs: %v", len(all), err)
	}
	k.checkLanded(t, s)
	// c gives shard 77 up and takes it again: epoch 2. A batch still naming epoch 1 for it,
	// among 255 current fences, is refused whole, naming it.
	if err := s.ReleaseShards(ctx, "c", []persist.ShardFence{{Shard: 77, Epoch: 1}}); err != nil {
		t.Fatal(err)
	}
	if again, err := s.TakeShards(ctx, "c", []int{77}, time.Minute); err != nil || len(again) != 1 || again[0].Epoch != 2 {
		t.Fatalf("c retaking shard 77 = %+v, %v", again, err)
	}
	before = reload(t, s, "sharded")
	stale := batchOf(k.next())
	stale.Shards = all
	err = s.ApplyBatch(ctx, stale)
	if !errors.Is(err, model.ErrLeaseLost) || !strings.Contains(err.Error(), "shard/077") {
		t.Fatalf("a batch with shard 77 stale among %d = %v, want ErrLeaseLost naming shard/077", len(all), err)
	}
	if after := reload(t, s, "sharded"); after.Version != before.Version {
		t.Fatalf("the refused batch moved the runtime from v%d to v%d", before.Version, after.Version)
	}
}

// TestShardStatementsLockOnlyTheirRows: a batch's fence check holds only the fence rows of
// its own shards, so another node's renewal, take and release of other shards, and its own
// batches, never wait for it (on MySQL a statement that scanned the lease table whole locked
// every row it read: renewals then waited out the other nodes' batches, and nodes dropped
// every shard under a burst).
func TestShardStatementsLockOnlyTheirRows(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		if s.Kind() == persist.SchemeSQLite {
			t.Skip("the embedded store has one writer at a time by design")
		}
		ctx := testCtx(t)
		a, err := s.TakeShards(ctx, "a", shardRangeOf(0, 84), time.Minute)
		if err != nil || len(a) != 85 {
			t.Fatalf("TakeShards(a) = %d, %v", len(a), err)
		}
		b, err := s.TakeShards(ctx, "b", shardRangeOf(85, 169), time.Minute)
		if err != nil || len(b) != 85 {
			t.Fatalf("TakeShards(b) = %d, %v", len(b), err)
		}
		release, err := persist.HoldShardFences(ctx, s, fencesOf(a))
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		// Each of b's calls must go through at once, not wait for a's open batch.
		quick := func(what string, fn func(ctx context.Context) error) {
			t.Helper()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			start := time.Now()
			if err := fn(cctx); err != nil {
				t.Errorf("%s while another node's batch holds its fences: %v (after %s)", what, err, time.Since(start))
			}
		}
		quick("b's renewal", func(ctx context.Context) error {
			lost, err := s.RenewShards(ctx, "b", fencesOf(b), time.Minute)
			if err == nil && len(lost) > 0 {
				err = fmt.Errorf("lost %v", lost)
			}
			return err
		})
		quick("a's own renewal", func(ctx context.Context) error {
			_, err := s.RenewShards(ctx, "a", fencesOf(a), time.Minute)
			return err
		})
		quick("b's fence check of its shards", func(ctx context.Context) error {
			rel, err := persist.HoldShardFences(ctx, s, fencesOf(b))
			if err == nil {
				rel()
			}
			return err
		})
		quick("c's take of unheld shards", func(ctx context.Context) error {
			got, err := s.TakeShards(ctx, "c", shardRangeOf(170, 255), time.Minute)
			if err == nil && len(got) != 86 {
				err = fmt.Errorf("took %d of 86", len(got))
			}
			return err
		})
		quick("b's release", func(ctx context.Context) error { return s.ReleaseShards(ctx, "b", fencesOf(b[:5])) })
	})
}

func shardRangeOf(lo, hi int) []int {
	var out []int
	for n := lo; n <= hi; n++ {
		out = append(out, n)
	}
	return out
}
