package persist_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestConcurrencySlots walks the slots of a limit through claims up to the limit, a refusal,
// a release, a claim of a shard lost, and the reconcile of a shard's next owner.
func TestConcurrencySlots(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		ss, ok := s.(persist.SlotStore)
		if !ok {
			t.Fatalf("%T is no SlotStore", s)
		}
		a, err := s.TakeShards(ctx, "a", []int{1, 2}, time.Minute)
		if err != nil || len(a) != 2 {
			t.Fatalf("TakeShards = %+v, %v", a, err)
		}
		if err := s.PutConcurrencyLimit(ctx, model.ConcurrencyLimit{Kind: model.LimitKey, Name: "db", Max: 3, UpdatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		key := persist.SlotRef{Kind: model.LimitKey, Name: "db"}
		grp := persist.SlotRef{Kind: model.LimitGroup, Name: "free"} // no limit row: always room
		claim := func(ticket string, shard int) persist.SlotClaim {
			return persist.SlotClaim{Ticket: ticket, Shard: shard, Epoch: a[shard-1].Epoch, Refs: []persist.SlotRef{grp, key}}
		}
		var claims []persist.SlotClaim
		for i := range 5 {
			claims = append(claims, claim(fmt.Sprintf("t%d", i), 1+i%2))
		}
		outs, counts, err := ss.TakeSlots(ctx, "", nil, claims, 10)
		want := []int{persist.SlotGranted, persist.SlotGranted, persist.SlotGranted, persist.SlotFull, persist.SlotFull}
		if err != nil || !slices.Equal(outs, want) || counts[key] != 3 || counts[grp] != 3 {
			t.Fatalf("TakeSlots(5 claims, limit 3) = %v, %v, %v; want %v and 3 held", outs, counts, err, want)
		}
		// A release and a claim in one transaction: the release makes the room.
		outs, counts, err = ss.TakeSlots(ctx, "", []persist.SlotRelease{{Ticket: "t0", Epoch: a[0].Epoch}}, claims[3:], 11)
		if err != nil || !slices.Equal(outs, []int{persist.SlotGranted, persist.SlotFull}) || counts[key] != 3 {
			t.Fatalf("TakeSlots after a release = %v, %v, %v", outs, counts, err)
		}
		all, err := ss.CountSlots(ctx)
		if err != nil || all[key] != 3 || all[grp] != 3 {
			t.Fatalf("CountSlots = %v, %v", all, err)
		}
		// A release at an epoch below the row's deletes nothing: that row is a later owner's.
		if err := ss.ReleaseSlots(ctx, []persist.SlotRelease{{Ticket: "t1", Epoch: a[1].Epoch - 1}}); err != nil {
			t.Fatal(err)
		}
		if all, _ := ss.CountSlots(ctx); all[key] != 3 {
			t.Fatalf("a release of an older epoch deleted a slot: %v", all)
		}
		// Shard 2 goes to b: a's claims there are refused whole, and b's reconcile keeps the
		// slot of the run it adopted (t1) and deletes the one it did not find (t3).
		if err := s.ReleaseShards(ctx, "a", []persist.ShardFence{{Shard: 2, Epoch: a[1].Epoch}}); err != nil {
			t.Fatal(err)
		}
		b, err := s.TakeShards(ctx, "b", []int{2}, time.Minute)
		if err != nil || len(b) != 1 {
			t.Fatalf("TakeShards(b) = %+v, %v", b, err)
		}
		outs, _, err = ss.TakeSlots(ctx, "", nil, []persist.SlotClaim{claim("t9", 2), claim("t8", 1)}, 12)
		if err != nil || !slices.Equal(outs, []int{persist.SlotShardLost, persist.SlotFull}) {
			t.Fatalf("TakeSlots of a lost shard = %v, %v", outs, err)
		}
		keep := []persist.SlotRow{{Ticket: "t1", Ref: key, Shard: 2, Epoch: b[0].Epoch}, {Ticket: "t1", Ref: grp, Shard: 2, Epoch: b[0].Epoch}}
		if _, err := ss.ReconcileSlots(ctx, []persist.ShardFence{{Shard: 2, Epoch: b[0].Epoch}}, keep, true, 13); err != nil {
			t.Fatal(err)
		}
		if all, _ := ss.CountSlots(ctx); all[key] != 2 || all[grp] != 2 {
			t.Fatalf("after the reconcile: %v; want t1 and t2 (t3 gone)", all)
		}
		// a's late release of t1 (its old epoch) leaves b's row.
		if err := ss.ReleaseSlots(ctx, []persist.SlotRelease{{Ticket: "t1", Epoch: a[1].Epoch}}); err != nil {
			t.Fatal(err)
		}
		if all, _ := ss.CountSlots(ctx); all[key] != 2 {
			t.Fatalf("a stale owner's release deleted the adopted slot: %v", all)
		}
		// A reconcile at a stale epoch is refused.
		if _, err := ss.ReconcileSlots(ctx, []persist.ShardFence{{Shard: 2, Epoch: a[1].Epoch}}, nil, true, 14); err == nil {
			t.Fatal("a reconcile at a stale epoch went through")
		}
	})
}

// TestConcurrencySlotHoldsOutliveTheirShard: the hold of a run recorded lost (HoldTicket)
// stays counted when its shard moves on before its deadline: the next owner's reconcile keeps
// it, moved to its epoch, and returns it to be given back then; a hold past its deadline and
// a run's row not in flight go. Its writer's late release leaves it; its new owner's deletes
// it.
func TestConcurrencySlotHoldsOutliveTheirShard(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		ss := s.(persist.SlotStore)
		a, err := s.TakeShards(ctx, "a", []int{3}, time.Minute)
		if err != nil || len(a) != 1 {
			t.Fatalf("TakeShards(a) = %+v, %v", a, err)
		}
		if err := s.PutConcurrencyLimit(ctx, model.ConcurrencyLimit{Kind: model.LimitKey, Name: "api", Max: 2, UpdatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		key := persist.SlotRef{Kind: model.LimitKey, Name: "api"}
		live, past := persist.HoldTicket("r1", 5000), persist.HoldTicket("r2", 90)
		if d, ok := persist.HoldDeadline(live); !ok || d != 5000 {
			t.Fatalf("HoldDeadline(%q) = %d, %v", live, d, ok)
		}
		if _, ok := persist.HoldDeadline("12-3400-1"); ok {
			t.Fatal("a run's ticket read as a hold")
		}
		rows := []persist.SlotRow{{Ticket: live, Ref: key, Shard: 3, Epoch: a[0].Epoch}, {Ticket: past, Ref: key, Shard: 3, Epoch: a[0].Epoch}}
		if _, err := ss.ReconcileSlots(ctx, []persist.ShardFence{{Shard: 3, Epoch: a[0].Epoch}}, rows, false, 50); err != nil {
			t.Fatal(err)
		}
		outs, _, err := ss.TakeSlots(ctx, "", nil, []persist.SlotClaim{{Ticket: "r3", Shard: 3, Epoch: a[0].Epoch, Refs: []persist.SlotRef{key}}}, 60)
		if err != nil || !slices.Equal(outs, []int{persist.SlotFull}) {
			t.Fatalf("a claim beside two holds of a limit of 2 = %v, %v; want full", outs, err)
		}
		// a stops holding shard 3 (dies, or hands it over); b takes it at 100, between the
		// two deadlines, with nothing of it in flight.
		if err := s.ReleaseShards(ctx, "a", []persist.ShardFence{{Shard: 3, Epoch: a[0].Epoch}}); err != nil {
			t.Fatal(err)
		}
		b, err := s.TakeShards(ctx, "b", []int{3}, time.Minute)
		if err != nil || len(b) != 1 {
			t.Fatalf("TakeShards(b) = %+v, %v", b, err)
		}
		held, err := ss.ReconcileSlots(ctx, []persist.ShardFence{{Shard: 3, Epoch: b[0].Epoch}}, nil, true, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(held) != 1 || held[0].Ticket != live || held[0].Epoch != b[0].Epoch || held[0].Ref != key {
			t.Fatalf("the reconcile kept %+v; want the live hold at b's epoch %d", held, b[0].Epoch)
		}
		if all, _ := ss.CountSlots(ctx); all[key] != 1 {
			t.Fatalf("after b's reconcile the limit holds %d; want 1 (the live hold; the one past its deadline gone)", all[key])
		}
		// a's release at its deadline (at a's epoch) leaves it; b's deletes it.
		if err := ss.ReleaseSlots(ctx, []persist.SlotRelease{{Ticket: live, Epoch: a[0].Epoch}}); err != nil {
			t.Fatal(err)
		}
		if all, _ := ss.CountSlots(ctx); all[key] != 1 {
			t.Fatalf("a's late release deleted the hold b keeps: %v", all)
		}
		if err := ss.ReleaseSlots(ctx, []persist.SlotRelease{{Ticket: held[0].Ticket, Epoch: held[0].Epoch}}); err != nil {
			t.Fatal(err)
		}
		if all, _ := ss.CountSlots(ctx); all[key] != 0 {
			t.Fatalf("b's release left %v", all)
		}
	})
}

// TestConcurrencySlotsReconcileManyShards: one reconcile of several shards gained at
// different epochs (a takeover's) keeps the rows of the runs adopted and the live holds,
// moved to each shard's own epoch, deletes the rest of the earlier owners' rows, and leaves
// the rows of shards it was not given and of the taker's own epoch.
func TestConcurrencySlotsReconcileManyShards(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		ss := s.(persist.SlotStore)
		shards := []int{4, 5, 6}
		a, err := s.TakeShards(ctx, "a", shards, time.Minute)
		if err != nil || len(a) != 3 {
			t.Fatalf("TakeShards(a) = %+v, %v", a, err)
		}
		key := persist.SlotRef{Kind: model.LimitKey, Name: "k"}
		fence := func(l persist.ShardLease) persist.ShardFence {
			return persist.ShardFence{Shard: l.Shard, Epoch: l.Epoch}
		}
		epochA := map[int]int64{}
		var fa []persist.ShardFence
		for _, l := range a {
			epochA[l.Shard] = l.Epoch
			fa = append(fa, fence(l))
		}
		// Shard 4: adopted r4a, forgotten r4b; shard 5: a live hold and forgotten r5b; shard 6
		// stays a's (not in the reconcile).
		hold := persist.HoldTicket("r5a", 5000)
		var rows []persist.SlotRow
		for _, r := range []struct {
			ticket string
			shard  int
		}{{"r4a", 4}, {"r4b", 4}, {hold, 5}, {"r5b", 5}, {"r6a", 6}} {
			rows = append(rows, persist.SlotRow{Ticket: r.ticket, Ref: key, Shard: r.shard, Epoch: epochA[r.shard]})
		}
		if _, err := ss.ReconcileSlots(ctx, fa, rows, false, 10); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseShards(ctx, "a", fa[:2]); err != nil {
			t.Fatal(err)
		}
		// Shard 5 is taken twice by b, so the two shards' epochs differ.
		b, err := s.TakeShards(ctx, "b", []int{4, 5}, time.Minute)
		if err != nil || len(b) != 2 {
			t.Fatalf("TakeShards(b) = %+v, %v", b, err)
		}
		slices.SortFunc(b, func(x, y persist.ShardLease) int { return x.Shard - y.Shard })
		if err := s.ReleaseShards(ctx, "b", []persist.ShardFence{fence(b[1])}); err != nil {
			t.Fatal(err)
		}
		b5, err := s.TakeShards(ctx, "b", []int{5}, time.Minute)
		if err != nil || len(b5) != 1 {
			t.Fatalf("TakeShards(b, 5) = %+v, %v", b5, err)
		}
		fences := []persist.ShardFence{fence(b[0]), fence(b5[0])}
		if fences[0].Epoch == fences[1].Epoch {
			t.Fatalf("shards 4 and 5 at one epoch %d: the test wants two", fences[0].Epoch)
		}
		// b's own run of shard 4, at its epoch already: the reconcile leaves it.
		own := persist.SlotRow{Ticket: "r4c", Ref: key, Shard: 4, Epoch: fences[0].Epoch}
		if _, err := ss.ReconcileSlots(ctx, fences[:1], []persist.SlotRow{own}, false, 20); err != nil {
			t.Fatal(err)
		}
		keep := []persist.SlotRow{{Ticket: "r4a", Ref: key, Shard: 4, Epoch: fences[0].Epoch}}
		held, err := ss.ReconcileSlots(ctx, fences, keep, true, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(held) != 1 || held[0].Ticket != hold || held[0].Shard != 5 || held[0].Epoch != fences[1].Epoch {
			t.Fatalf("the reconcile kept the holds %+v; want %s of shard 5 at epoch %d", held, hold, fences[1].Epoch)
		}
		if all, _ := ss.CountSlots(ctx); all[key] != 4 {
			t.Fatalf("after the reconcile the limit holds %d; want 4 (r4a, r4c, the hold, r6a)", all[key])
		}
		// What stays is what a release at each row's epoch deletes, one row each.
		for _, r := range []persist.SlotRelease{
			{Ticket: "r4b", Epoch: fences[0].Epoch}, {Ticket: "r5b", Epoch: fences[1].Epoch}, // gone already
			{Ticket: "r4a", Epoch: fences[0].Epoch}, {Ticket: "r4c", Epoch: fences[0].Epoch},
			{Ticket: hold, Epoch: fences[1].Epoch}, {Ticket: "r6a", Epoch: epochA[6]},
		} {
			if err := ss.ReleaseSlots(ctx, []persist.SlotRelease{r}); err != nil {
				t.Fatal(err)
			}
		}
		if all, _ := ss.CountSlots(ctx); all[key] != 0 {
			t.Fatalf("after releasing every row at its epoch: %v", all)
		}
	})
}

// TestConcurrencySlotsRace has several goroutines claim slots of one limit at once, each in
// its own transaction, as the nodes of a cluster do: never more than the limit is granted.
func TestConcurrencySlotsRace(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		ss := s.(persist.SlotStore)
		a, err := s.TakeShards(ctx, "a", []int{7}, time.Minute)
		if err != nil || len(a) != 1 {
			t.Fatalf("TakeShards = %+v, %v", a, err)
		}
		if err := s.PutConcurrencyLimit(ctx, model.ConcurrencyLimit{Kind: model.LimitGroup, Name: "etl", Max: 4, UpdatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		ref := persist.SlotRef{Kind: model.LimitGroup, Name: "etl"}
		var mu sync.Mutex
		granted := 0
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 5 {
					c := persist.SlotClaim{Ticket: fmt.Sprintf("w%d-%d", w, i), Shard: 7, Epoch: a[0].Epoch, Refs: []persist.SlotRef{ref}}
					outs, _, err := ss.TakeSlots(ctx, "", nil, []persist.SlotClaim{c}, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if outs[0] == persist.SlotGranted {
						mu.Lock()
						granted++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		all, err := ss.CountSlots(ctx)
		if err != nil || granted != 4 || all[ref] != 4 {
			t.Fatalf("30 claims of a limit of 4 from 6 goroutines: %d granted, %v held (%v); want 4", granted, all[ref], err)
		}
	})
}

// TestConcurrencySlotsLeaveRoomForBetterWaiters: a node whose claim was refused writes its
// best waiting fire; another node's worse claim then leaves the slot freed for it, until the
// waiting fire is older than WaitTTL (its node died) or its node took the slot.
func TestConcurrencySlotsLeaveRoomForBetterWaiters(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		ss := s.(persist.SlotStore)
		sh, err := s.TakeShards(ctx, "x", []int{3}, time.Minute)
		if err != nil || len(sh) != 1 {
			t.Fatalf("TakeShards = %+v, %v", sh, err)
		}
		if err := s.PutConcurrencyLimit(ctx, model.ConcurrencyLimit{Kind: model.LimitGroup, Name: "g", Max: 1, UpdatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		ref := persist.SlotRef{Kind: model.LimitGroup, Name: "g"}
		claim := func(ticket string, prio int, at int64) []persist.SlotClaim {
			return []persist.SlotClaim{{Ticket: ticket, Shard: 3, Epoch: sh[0].Epoch, Refs: []persist.SlotRef{ref}, Priority: prio, FireAt: at}}
		}
		const now = 1_000_000
		if outs, _, err := ss.TakeSlots(ctx, "b", nil, claim("b1", 5, 100), now); err != nil || outs[0] != persist.SlotGranted {
			t.Fatalf("b's first claim = %v, %v", outs, err)
		}
		// a's better fire (priority 1) finds the limit full and waits.
		if outs, _, err := ss.TakeSlots(ctx, "a", nil, claim("a1", 1, 200), now); err != nil || outs[0] != persist.SlotFull {
			t.Fatalf("a's claim on a full limit = %v, %v", outs, err)
		}
		// b gives its slot back and claims again for a worse fire: the slot is left to a.
		outs, _, err := ss.TakeSlots(ctx, "b", []persist.SlotRelease{{Ticket: "b1", Epoch: sh[0].Epoch}}, claim("b2", 5, 150), now+10)
		if err != nil || outs[0] != persist.SlotFull {
			t.Fatalf("b's worse claim while a waits = %v, %v; want it refused", outs, err)
		}
		if outs, _, err := ss.TakeSlots(ctx, "a", nil, claim("a1", 1, 200), now+20); err != nil || outs[0] != persist.SlotGranted {
			t.Fatalf("a's claim after b left the slot = %v, %v", outs, err)
		}
		// a waits again (limit full), then goes silent: past WaitTTL b's claim is no longer
		// held back by it.
		if outs, _, err := ss.TakeSlots(ctx, "a", []persist.SlotRelease{{Ticket: "a1", Epoch: sh[0].Epoch}}, claim("a0", 1, 50), now+30); err != nil || outs[0] != persist.SlotGranted {
			t.Fatalf("a's second claim = %v, %v", outs, err)
		}
		if outs, _, err := ss.TakeSlots(ctx, "a", nil, claim("a2", 1, 60), now+40); err != nil || outs[0] != persist.SlotFull {
			t.Fatalf("a's third claim = %v, %v", outs, err)
		}
		if err := ss.ReleaseSlots(ctx, []persist.SlotRelease{{Ticket: "a0", Epoch: sh[0].Epoch}}); err != nil {
			t.Fatal(err)
		}
		if outs, _, err := ss.TakeSlots(ctx, "b", nil, claim("b2", 5, 150), now+50); err != nil || outs[0] != persist.SlotFull {
			t.Fatalf("b's claim while a's better fire waits = %v, %v", outs, err)
		}
		late := now + 40 + persist.WaitTTL.Milliseconds() + 1
		if outs, _, err := ss.TakeSlots(ctx, "b", nil, claim("b2", 5, 150), late); err != nil || outs[0] != persist.SlotGranted {
			t.Fatalf("b's claim once a's waiting fire is stale = %v, %v", outs, err)
		}
	})
}

// TestConcurrencySlotsTieOnWaitingTime: two nodes' fires of one priority and fire time (a
// burst falling due at one instant) go in the order they began to wait: the node that frees
// the slot leaves it to the other's fire that has waited longer than its own next one.
func TestConcurrencySlotsTieOnWaitingTime(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		ss := s.(persist.SlotStore)
		sh, err := s.TakeShards(ctx, "x", []int{4}, time.Minute)
		if err != nil || len(sh) != 1 {
			t.Fatalf("TakeShards = %+v, %v", sh, err)
		}
		if err := s.PutConcurrencyLimit(ctx, model.ConcurrencyLimit{Kind: model.LimitKey, Name: "k", Max: 1, UpdatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		ref := persist.SlotRef{Kind: model.LimitKey, Name: "k"}
		claim := func(ticket string, since int64) []persist.SlotClaim {
			return []persist.SlotClaim{{Ticket: ticket, Shard: 4, Epoch: sh[0].Epoch, Refs: []persist.SlotRef{ref}, FireAt: 500, Since: since}}
		}
		const now = 2_000_000
		if outs, _, err := ss.TakeSlots(ctx, "b", nil, claim("b1", 10), now); err != nil || outs[0] != persist.SlotGranted {
			t.Fatalf("b's first claim = %v, %v", outs, err)
		}
		if outs, _, err := ss.TakeSlots(ctx, "a", nil, claim("a1", 11), now); err != nil || outs[0] != persist.SlotFull {
			t.Fatalf("a's claim on the full limit = %v, %v", outs, err)
		}
		// b's next fire began to wait after a's: b leaves the slot it frees to a.
		outs, _, err := ss.TakeSlots(ctx, "b", []persist.SlotRelease{{Ticket: "b1", Epoch: sh[0].Epoch}}, claim("b2", 12), now+1)
		if err != nil || outs[0] != persist.SlotFull {
			t.Fatalf("b's claim for a fire that waited less than a's = %v, %v; want refused", outs, err)
		}
		if outs, _, err := ss.TakeSlots(ctx, "a", nil, claim("a1", 11), now+2); err != nil || outs[0] != persist.SlotGranted {
			t.Fatalf("a's claim = %v, %v", outs, err)
		}
	})
}

// TestConcurrencyLimitPutRace: the nodes of a sharded cluster write one limit at once (the
// API fans the call out); every write succeeds and the row holds one of them.
func TestConcurrencyLimitPutRace(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		var wg sync.WaitGroup
		errs := make(chan error, 3*20)
		for node := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					l := model.ConcurrencyLimit{Kind: model.LimitKey, Name: fmt.Sprintf("k%02d", i), Max: 2 + i, UpdatedAt: int64(100 + node)}
					if err := s.PutConcurrencyLimit(ctx, l); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		ls, err := s.ListConcurrencyLimits(ctx)
		if err != nil || len(ls) != 20 {
			t.Fatalf("ListConcurrencyLimits = %d limits, %v; want 20", len(ls), err)
		}
		for _, l := range ls {
			if want := fmt.Sprintf("k%02d", l.Max-2); l.Name != want {
				t.Errorf("limit %s holds max %d", l.Name, l.Max)
			}
		}
	})
}
