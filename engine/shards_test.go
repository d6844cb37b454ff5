package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// Tests of scheduling by shard (core_shards.go): two sharded engines on one store, each given
// its shards as the shard loop would give them (the store's shard leases, then GainShards).

// sharded makes an engine schedule by shard.
func sharded(c *Config) { c.Sharded = true }

// takeFor takes shards for holder in the store and gives them to e.
func takeFor(t *testing.T, s persist.Store, e *Engine, holder string, shards []int, ttl time.Duration) []persist.ShardFence {
	t.Helper()
	ctx := context.Background()
	got, err := s.(persist.ShardStore).TakeShards(ctx, holder, shards, ttl)
	if err != nil || len(got) != len(shards) {
		t.Fatalf("TakeShards(%s, %d shards) = %d, %v", holder, len(shards), len(got), err)
	}
	fs := make([]persist.ShardFence, len(got))
	handedOver := map[int]int64{}
	for i, l := range got {
		fs[i] = persist.ShardFence{Shard: l.Shard, Epoch: l.Epoch}
		if l.HandedOver > 0 {
			handedOver[l.Shard] = l.HandedOver
		}
	}
	if err := e.API().Ownership().Gain(ctx, fs, handedOver); err != nil {
		t.Fatalf("GainShards(%s): %v", holder, err)
	}
	return fs
}

// shardRange is the shards from lo to hi, both included.
func shardRange(lo, hi int) []int {
	var out []int
	for n := lo; n <= hi; n++ {
		out = append(out, n)
	}
	return out
}

// namesIn returns count task names, with prefix, whose shards are in [lo, hi].
func namesIn(prefix string, lo, hi, count int) []string {
	var out []string
	for i := 0; len(out) < count; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if n := model.ShardOf(name); n >= lo && n <= hi {
			out = append(out, name)
		}
	}
	return out
}

// TestShardedEnginesSplitTheWork: each engine fires the tasks of its shards, once each, and
// refuses, with model.ErrShardNotHeld, a create or a change of a task whose shard it does not
// schedule; it reads every task.
func TestShardedEnginesSplitTheWork(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		a, b := startEngine(t, s, sharded), startEngine(t, s, sharded)
		fa := takeFor(t, s, a, "a", shardRange(0, 127), time.Minute)
		fb := takeFor(t, s, b, "b", shardRange(128, 255), time.Minute)
		mine := map[*Engine][]string{a: namesIn("split", 0, 127, 10), b: namesIn("split", 128, 255, 10)}
		for e, names := range mine {
			for _, n := range names {
				spec := httpSpec(n, cs.URL+"/hook")
				spec.DelayMS = ptr(int64(200))
				mustCreate(t, e, spec)
			}
		}
		waitFor(t, 10*time.Second, "every task to fire", func() bool { return len(cs.got("")) == 20 })
		waitSettled(t, a)
		waitSettled(t, b)
		for e, names := range mine {
			want := fa
			if e == b {
				want = fb
			}
			for _, n := range names {
				calls := cs.got(n)
				if len(calls) != 1 {
					t.Fatalf("%s fired %d times, want once", n, len(calls))
				}
				body := calls[0].body
				if body.Shard == nil || *body.Shard != model.ShardOf(n) || body.Epoch != want[0].Epoch {
					t.Errorf("%s's run carries shard %v at epoch %d, want shard %d at its owner's epoch %d",
						n, body.Shard, body.Epoch, model.ShardOf(n), want[0].Epoch)
				}
			}
		}
		other := mine[b][0]
		spec := httpSpec(mine[b][0]+"-new", cs.URL)
		spec.Trigger = model.TriggerManual
		for model.ShardOf(spec.Name) < 128 {
			spec.Name += "x"
		}
		if _, err := a.API().CreateTask(ctx, spec, "test"); !errors.Is(err, model.ErrShardNotHeld) {
			t.Errorf("a create on the node that does not schedule its shard = %v, want model.ErrShardNotHeld", err)
		}
		if _, err := a.API().Pause(ctx, other, "", "test"); !errors.Is(err, model.ErrShardNotHeld) {
			t.Errorf("a pause on the node that does not schedule the task's shard = %v, want model.ErrShardNotHeld", err)
		}
		if _, err := a.API().RunNow(ctx, other, nil, "test"); !errors.Is(err, model.ErrShardNotHeld) {
			t.Errorf("a run-now on the node that does not schedule the task's shard = %v, want model.ErrShardNotHeld", err)
		}
		if pt, err := a.API().GetTask(ctx, other); err != nil || pt.Def.Name != other {
			t.Errorf("a read of another node's task = %v, %v", pt, err)
		}
		if n, _ := a.API().InMemory(); n != 0 {
			t.Errorf("engine a holds %d tasks in memory after reading and refusing another node's, want 0", n)
		}
	})
}

// TestShardMovesBetweenEngines hands a shard over as the shard loop does (drain, release,
// drop; take, gain): its cron task fires on the giver until the hand-over and on the taker
// after, under the taker's epoch, each fire time once.
func TestShardMovesBetweenEngines(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		a, b := startEngine(t, s, sharded), startEngine(t, s, sharded)
		takeFor(t, s, a, "a", shardRange(0, 255), time.Minute)
		spec := httpSpec("mover", cs.URL+"/hook")
		spec.Trigger, spec.Cron, spec.CronDialect = model.TriggerCron, "* * * * * ?", "quartz"
		mustCreate(t, a, spec)
		shard := model.ShardOf("mover")
		waitFor(t, 5*time.Second, "two fires on a", func() bool { return len(cs.got("mover")) >= 2 })

		var set model.ShardSet
		set.Add(shard)
		a.API().Ownership().Drain(set)
		waitFor(t, 5*time.Second, "the drained shard to have nothing in flight", func() bool { return a.API().Ownership().InFlight(set).Len() == 0 })
		held := a.API().Ownership().Held()
		var f persist.ShardFence
		for _, h := range held {
			if h.Shard == shard {
				f = h
			}
		}
		if err := s.(persist.ShardStore).ReleaseShards(ctx, "a", []persist.ShardFence{f}); err != nil {
			t.Fatal(err)
		}
		a.API().Ownership().Drop(set)
		before := len(cs.got("mover"))
		fb := takeFor(t, s, b, "b", []int{shard}, time.Minute)
		waitFor(t, 5*time.Second, "two fires on b", func() bool { return len(cs.got("mover")) >= before+2 })
		calls := cs.got("mover")
		seen := map[string]bool{}
		for _, c := range calls {
			if seen[c.ticket] {
				t.Fatalf("ticket %s dispatched twice across the hand-over", c.ticket)
			}
			seen[c.ticket] = true
		}
		if last := calls[len(calls)-1].body; last.Epoch != fb[0].Epoch {
			t.Errorf("after the hand-over a fire carries epoch %d, want b's %d", last.Epoch, fb[0].Epoch)
		}
		if n, _ := a.API().InMemory(); n != 0 {
			t.Errorf("engine a still holds %d tasks after dropping their shard", n)
		}
		if _, err := a.API().Pause(ctx, "mover", "", "test"); !errors.Is(err, model.ErrShardNotHeld) {
			t.Errorf("a pause on the giver after the hand-over = %v, want model.ErrShardNotHeld", err)
		}
	})
}

// TestHandOverIsNoMisfire hands two shards over as the shard loop does (drain, release with
// the giver's hand-over point, drop; take, gain with the point) and leaves them unheld for
// three times the misfire threshold, as a hand-over on a loaded box can take: the taker fires
// every second's fire of the every-second tasks, under misfire_policy skip and fire_once
// alike, each once, late, and counts no misfire. The same hand-over released without the
// point (what a crash leaves) has the gap's fires consumed by the misfire and overlap
// policies: the point is what makes the difference.
func TestHandOverIsNoMisfire(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		for _, withPoint := range []bool{true, false} {
			ctx := context.Background()
			cs := newCallbackServer(t)
			threshold := func(c *Config) { c.MisfireThreshold = time.Second }
			a, b := startEngine(t, s, sharded, threshold), startEngine(t, s, sharded, threshold)
			prefix := fmt.Sprintf("handover-%v", withPoint)
			names := []string{prefix + "-skip", prefix + "-once"}
			for model.ShardOf(names[1]) == model.ShardOf(names[0]) {
				names[1] += "x"
			}
			var set model.ShardSet
			var shards []int
			for _, n := range names {
				set.Add(model.ShardOf(n))
				shards = append(shards, model.ShardOf(n))
			}
			takeFor(t, s, a, "a-"+prefix, shards, time.Minute)
			for i, n := range names {
				spec := httpSpec(n, cs.URL+"/hook")
				spec.Trigger, spec.Cron, spec.CronDialect = model.TriggerCron, "* * * * * ?", "quartz"
				spec.MisfirePolicy = []string{model.MisfireSkip, model.MisfireFireOnce}[i]
				mustCreate(t, a, spec)
			}
			waitFor(t, 10*time.Second, "two fires of each task on the giver", func() bool {
				return len(cs.got(names[0])) >= 2 && len(cs.got(names[1])) >= 2
			})

			before := time.Now().UnixMilli()
			a.API().Ownership().Drain(set)
			after := time.Now().UnixMilli()
			waitFor(t, 10*time.Second, "the drained shards to have nothing in flight", func() bool { return a.API().Ownership().InFlight(set).Len() == 0 })
			points := map[int]int64{}
			for _, n := range shards {
				at := a.API().Ownership().HandOverPoint(n)
				if at < before || at > after {
					t.Fatalf("the hand-over point of shard %d is %d, want the drain's start, within [%d, %d]", n, at, before, after)
				}
				points[n] = at
			}
			var held []persist.ShardFence
			for _, f := range a.API().Ownership().Held() {
				if set.Has(f.Shard) {
					held = append(held, f)
				}
			}
			if withPoint {
				if err := s.(persist.ShardStore).HandOverShards(ctx, "a-"+prefix, held, points); err != nil {
					t.Fatal(err)
				}
			} else if err := s.(persist.ShardStore).ReleaseShards(ctx, "a-"+prefix, held); err != nil {
				t.Fatal(err)
			}
			a.API().Ownership().Drop(set)
			// The shards stay unheld for three misfire thresholds: a hand-over as long as a
			// loaded box's.
			time.Sleep(3 * time.Second)
			misfires := b.m.misfires.Get()
			gained := time.Now()
			takeFor(t, s, b, "b-"+prefix, shards, time.Minute)
			// Every fire due until two seconds after the take, caught up or on time.
			upTo := gained.Add(2 * time.Second).Truncate(time.Second).UnixMilli()
			waitFor(t, 20*time.Second, "the taker's fires up to two seconds after the take", func() bool {
				for _, n := range names {
					calls := cs.got(n)
					if len(calls) == 0 || calls[len(calls)-1].body.ScheduledAt < upTo {
						return false
					}
				}
				return true
			})
			missed := 0
			for _, n := range names {
				seen := map[int64]int{}
				first, last := int64(0), int64(0)
				for _, c := range cs.got(n) {
					at := c.body.ScheduledAt
					seen[at]++
					if seen[at] > 1 {
						t.Errorf("%s: the fire of %d was dispatched twice across the hand-over", n, at)
					}
					if first == 0 || at < first {
						first = at
					}
					last = max(last, at)
				}
				for at := first; at <= last; at += 1000 {
					if seen[at] == 0 {
						missed++
						if withPoint {
							t.Errorf("%s: the fire of %s was not dispatched: a hand-over consumed it", n, time.UnixMilli(at).UTC().Format("15:04:05"))
						}
					}
				}
			}
			got := b.m.misfires.Get() - misfires
			switch {
			case withPoint && got != 0:
				t.Errorf("with the hand-over point the taker counted %d misfires, want 0", got)
			case !withPoint && missed == 0:
				t.Errorf("without the hand-over point the taker missed no fire: the gap's fires should have met the misfire or overlap policy (the test proves nothing)")
			}
			t.Logf("hand-over point %v: %d fires missed, %d misfires counted by the taker", withPoint, missed, got)
		}
	})
}

// TestHandOverRunEndingOnTheGiver: a run in flight when its shard's hand-over begins ends on
// the giver after two more fires came due. Its end arms the first of them, not the latest
// (buffer_one would pass over the other), and the taker catches both up: every second's fire
// runs once across the hand-over.
func TestHandOverRunEndingOnTheGiver(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		a, b := startEngine(t, s, sharded), startEngine(t, s, sharded)
		name := "giver-end"
		shard := model.ShardOf(name)
		var set model.ShardSet
		set.Add(shard)
		takeFor(t, s, a, "a", []int{shard}, time.Minute)
		cs.mu.Lock()
		cs.hang = make(chan struct{}) // the first run stays in flight
		cs.mu.Unlock()
		spec := httpSpec(name, cs.URL+"/hook")
		spec.Trigger, spec.Cron, spec.CronDialect = model.TriggerCron, "* * * * * ?", "quartz"
		spec.MisfirePolicy = model.MisfireSkip
		mustCreate(t, a, spec)
		waitFor(t, 10*time.Second, "the first fire on the giver", func() bool { return len(cs.got(name)) >= 1 })
		first := cs.got(name)[0].body.ScheduledAt
		a.API().Ownership().Drain(set)
		time.Sleep(time.Until(time.UnixMilli(first + 2500))) // two more fires come due meanwhile
		cs.release()
		waitFor(t, 10*time.Second, "the run to end on the giver", func() bool { return a.API().Ownership().InFlight(set).Len() == 0 })
		var held []persist.ShardFence
		for _, f := range a.API().Ownership().Held() {
			if f.Shard == shard {
				held = append(held, f)
			}
		}
		if err := s.(persist.ShardStore).HandOverShards(ctx, "a", held, map[int]int64{shard: a.API().Ownership().HandOverPoint(shard)}); err != nil {
			t.Fatal(err)
		}
		a.API().Ownership().Drop(set)
		takeFor(t, s, b, "b", []int{shard}, time.Minute)
		waitFor(t, 20*time.Second, "the taker's fires up to two seconds after the hand-over", func() bool {
			calls := cs.got(name)
			return calls[len(calls)-1].body.ScheduledAt >= first+4000
		})
		seen := map[int64]int{}
		last := first
		for _, c := range cs.got(name) {
			seen[c.body.ScheduledAt]++
			last = max(last, c.body.ScheduledAt)
		}
		for at := first; at <= last; at += 1000 {
			if seen[at] != 1 {
				t.Errorf("the fire of %s was dispatched %d times, want once", time.UnixMilli(at).UTC().Format("15:04:05"), seen[at])
			}
		}
	})
}

// TestShardTakenFromUnderARun: a node whose shard is taken while it has a run in flight (it
// is frozen, or cut off, and does not know) cannot record that run's end: the fence refuses
// it, the writer says which shard it lost, and the run stays as the new owner resolved it
// (an HTTP run left in doubt: lost). The run was sent once.
func TestShardTakenFromUnderARun(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		cs.hang = make(chan struct{})
		var mu sync.Mutex
		var lost []persist.ShardFence
		a := startEngine(t, s, sharded, func(c *Config) {
			c.Writer.ShardLost = func(f persist.ShardFence, err error) {
				mu.Lock()
				lost = append(lost, f)
				mu.Unlock()
			}
		})
		b := startEngine(t, s, sharded)
		shard := model.ShardOf("stuck")
		fa := takeFor(t, s, a, "a", []int{shard}, 300*time.Millisecond)
		spec := httpSpec("stuck", cs.URL+"/hook")
		spec.Trigger = model.TriggerManual
		mustCreate(t, a, spec)
		run, err := a.API().RunNow(ctx, "stuck", nil, "test")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the run to reach its endpoint", func() bool { return len(cs.got("stuck")) == 1 })
		time.Sleep(400 * time.Millisecond) // a's lease runs out: it was not renewed
		fb := takeFor(t, s, b, "b", []int{shard}, time.Minute)
		if fb[0].Epoch <= fa[0].Epoch {
			t.Fatalf("b took shard %d at epoch %d, not above a's %d", shard, fb[0].Epoch, fa[0].Epoch)
		}
		var got *model.Run
		waitFor(t, 5*time.Second, "b to resolve the run left in flight", func() bool {
			got, err = s.GetRun(ctx, run.Ticket)
			return err == nil && got.Result != model.ResultRunning
		})
		if got.Result != model.ResultLost {
			t.Fatalf("the run b found in flight ended %s, want lost", got.Result)
		}
		cs.release() // a's run answers now: its end must not land
		waitFor(t, 5*time.Second, "a's writer to report the lost shard", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(lost) > 0
		})
		mu.Lock()
		if lost[0] != fa[0] {
			t.Errorf("a's writer reported %+v lost, want %+v", lost[0], fa[0])
		}
		mu.Unlock()
		waitSettled(t, a)
		if again, _ := s.GetRun(ctx, run.Ticket); again.Result != model.ResultLost {
			t.Errorf("after a's end was refused the run reads %s, want it left lost", again.Result)
		}
		if n := len(cs.got("stuck")); n != 1 {
			t.Errorf("the run was sent %d times, want once", n)
		}
	})
}

// TestDependentInAnotherShard: a downstream scheduled by another engine than its upstream is
// released by its own engine, once: asked by the upstream's (ReleaseElsewhere) or, when that
// call never comes, by its own sweep of its waiting dependents.
func TestDependentInAnotherShard(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		for _, asked := range []bool{true, false} {
			t.Run(fmt.Sprintf("asked=%v", asked), func(t *testing.T) {
				ctx := context.Background()
				cs := newCallbackServer(t)
				var bp *Engine
				var calls sync.WaitGroup
				a := startEngine(t, s, sharded, func(c *Config) {
					if asked {
						c.ReleaseElsewhere = func(_ int, up string) {
							calls.Add(1)
							go func() { defer calls.Done(); _ = bp.API().Dependents().Release(ctx, up) }()
						}
					}
				})
				b := startEngine(t, s, sharded)
				bp = b
				t.Cleanup(calls.Wait)
				up, down := namesIn(fmt.Sprintf("up%v", asked), 0, 127, 1)[0], namesIn(fmt.Sprintf("down%v", asked), 128, 255, 1)[0]
				takeFor(t, s, a, "a", shardRange(0, 127), time.Minute)
				takeFor(t, s, b, "b", shardRange(128, 255), time.Minute)
				u := httpSpec(up, cs.URL)
				u.Trigger = model.TriggerManual
				mustCreate(t, a, u)
				d := httpSpec(down, cs.URL)
				d.DependsOn = []string{up}
				mustCreate(t, b, d)
				if _, err := a.API().RunNow(ctx, up, nil, "test"); err != nil {
					t.Fatal(err)
				}
				// Asked, the release is at once; left to the sweep, within a load interval
				// (2 s here) or two.
				waitFor(t, 10*time.Second, "the downstream to fire", func() bool { return len(cs.got(down)) == 1 })
				waitSettled(t, b)
				time.Sleep(2500 * time.Millisecond) // a sweep more: it must not release again
				if n := len(cs.got(down)); n != 1 {
					t.Errorf("the downstream fired %d times after one upstream success, want once", n)
				}
				acts, err := b.API().Actions(ctx, down, 100)
				if err != nil {
					t.Fatal(err)
				}
				released := 0
				for _, act := range acts {
					if act.Action == ActSchedule && act.From == model.StateWaiting {
						released++
					}
				}
				if released != 1 {
					t.Errorf("the downstream was released %d times, want once", released)
				}
			})
		}
	})
}

// TestShardedRateShare: a sharded engine gives out the share of every rate limit that its
// shards are of all (being handed over not counted), and one shard's when it holds none.
func TestShardedRateShare(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	e := startEngine(t, s, sharded)
	if got := e.gate.lim.Share(); got != 1.0/model.ShardCount {
		t.Errorf("share with no shard = %v, want one shard's", got)
	}
	takeFor(t, s, e, "a", shardRange(0, 63), time.Minute)
	if got := e.gate.lim.Share(); got != 64.0/model.ShardCount {
		t.Errorf("share with 64 shards = %v, want 64/256", got)
	}
	var half model.ShardSet
	for n := range 32 {
		half.Add(n)
	}
	e.API().Ownership().Drain(half)
	if got := e.gate.lim.Share(); got != 32.0/model.ShardCount {
		t.Errorf("share with 32 of 64 shards being handed over = %v, want 32/256", got)
	}
	e.API().Ownership().Drop(half)
	if got := e.gate.lim.Share(); got != 32.0/model.ShardCount {
		t.Errorf("share after dropping them = %v, want 32/256", got)
	}
}
