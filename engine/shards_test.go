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
	for i, l := range got {
		fs[i] = persist.ShardFence{Shard: l.Shard, Epoch: l.Epoch}
	}
	if err := e.Ownership().Gain(ctx, fs); err != nil {
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
		if _, err := a.CreateTask(ctx, spec, "test"); !errors.Is(err, model.ErrShardNotHeld) {
			t.Errorf("a create on the node that does not schedule its shard = %v, want model.ErrShardNotHeld", err)
		}
		if _, err := a.Pause(ctx, other, "", "test"); !errors.Is(err, model.ErrShardNotHeld) {
			t.Errorf("a pause on the node that does not schedule the task's shard = %v, want model.ErrShardNotHeld", err)
		}
		if _, err := a.RunNow(ctx, other, nil, "test"); !errors.Is(err, model.ErrShardNotHeld) {
			t.Errorf("a run-now on the node that does not schedule the task's shard = %v, want model.ErrShardNotHeld", err)
		}
		if pt, err := a.GetTask(ctx, other); err != nil || pt.Def.Name != other {
			t.Errorf("a read of another node's task = %v, %v", pt, err)
		}
		if n, _ := a.InMemory(); n != 0 {
			t.Errorf("engine a holds %d tasks in memory after reading and refusing another node's, want 0", n)
		}
	})
}

// TestShardMovesBetweenEngines hands a shard over as the shard loop does (drain, release,
// drop; take, gain): its cron task fires on the giver until the hand-over and on the taker
// after, under the taker's epoch, each fire time once.
func TestShardMovesBetweenEngines(t *testing.T) {
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
		a.Ownership().Drain(set)
		waitFor(t, 5*time.Second, "the drained shard to have nothing in flight", func() bool { return a.Ownership().InFlight(set).Len() == 0 })
		held := a.Ownership().Held()
		var f persist.ShardFence
		for _, h := range held {
			if h.Shard == shard {
				f = h
			}
		}
		if err := s.(persist.ShardStore).ReleaseShards(ctx, "a", []persist.ShardFence{f}); err != nil {
			t.Fatal(err)
		}
		a.Ownership().Drop(set)
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
		if n, _ := a.InMemory(); n != 0 {
			t.Errorf("engine a still holds %d tasks after dropping their shard", n)
		}
		if _, err := a.Pause(ctx, "mover", "", "test"); !errors.Is(err, model.ErrShardNotHeld) {
			t.Errorf("a pause on the giver after the hand-over = %v, want model.ErrShardNotHeld", err)
		}
	})
}

// TestShardTakenFromUnderARun: a node whose shard is taken while it has a run in flight (it
// is frozen, or cut off, and does not know) cannot record that run's end: the fence refuses
// it, the writer says which shard it lost, and the run stays as the new owner resolved it
// (an HTTP run left in doubt: lost). The run was sent once.
func TestShardTakenFromUnderARun(t *testing.T) {
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
		run, err := a.RunNow(ctx, "stuck", nil, "test")
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
							go func() { defer calls.Done(); _ = bp.Dependents().Release(ctx, up) }()
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
				if _, err := a.RunNow(ctx, up, nil, "test"); err != nil {
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
				acts, err := b.Actions(ctx, down, 100)
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
	e.Ownership().Drain(half)
	if got := e.gate.lim.Share(); got != 32.0/model.ShardCount {
		t.Errorf("share with 32 of 64 shards being handed over = %v, want 32/256", got)
	}
	e.Ownership().Drop(half)
	if got := e.gate.lim.Share(); got != 32.0/model.ShardCount {
		t.Errorf("share after dropping them = %v, want 32/256", got)
	}
}
