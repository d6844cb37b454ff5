package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestHeldBackRunIsSentByTheNextOwner: engine a fires a task and its shard's gate then stays
// closed by an overdue renewal, so the send is held back; a records so in the run row. a
// drops the shard, b takes it at the next epoch: b finds the mark, sends the run under its
// fire record (same ticket), once, and it succeeds; a refire_held action says why. While a
// holds the run back, the run keeps its place in a's send pace (core_pace.go), given back
// when a drops the shard.
func TestHeldBackRunIsSentByTheNextOwner(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		var asked atomic.Int32
		a := startEngine(t, s, sharded, func(c *Config) {
			c.ShardGate = func(int, int64) error {
				if asked.Add(1) == 1 {
					return nil // the fire: its record commits
				}
				return fmt.Errorf("renewal overdue: %w", model.ErrLeaseDeadline) // every send
			}
		})
		b := startEngine(t, s, sharded)
		shard := model.ShardOf("held")
		takeFor(t, s, a, "a", []int{shard}, time.Second)
		spec := httpSpec("held", cs.URL+"/hook")
		spec.DelayMS = ptr(int64(200))
		mustCreate(t, a, spec)

		var run model.Run
		waitFor(t, 10*time.Second, "the run recorded held back", func() bool {
			runs, err := a.API().Runs(ctx, "held", 10)
			if err != nil || len(runs) != 1 {
				return false
			}
			run = runs[0]
			return heldBack(run)
		})
		if n := len(cs.got("held")); n != 0 {
			t.Fatalf("the held-back run reached its endpoint %d times before the hand-over", n)
		}
		// The held run keeps its place in the send pace: it is recorded and not on the wire.
		if n := a.pace.ahead(); n != 1 {
			t.Errorf("a's send pace holds %d with the run held back, want 1", n)
		}
		var set model.ShardSet
		set.Add(shard)
		a.API().Ownership().Drop(set)
		waitFor(t, 10*time.Second, "a to give the abandoned run's place in the pace back", func() bool { return a.pace.ahead() == 0 })
		time.Sleep(1100 * time.Millisecond) // a's lease runs out: it was not renewed
		takeFor(t, s, b, "b", []int{shard}, time.Minute)

		waitFor(t, 10*time.Second, "b to send the run", func() bool { return len(cs.got("held")) == 1 })
		var got *model.Run
		waitFor(t, 10*time.Second, "the run to end", func() bool {
			var err error
			got, err = s.GetRun(ctx, run.Ticket)
			return err == nil && got.Result != model.ResultRunning
		})
		waitSettled(t, b)
		if got.Result != model.ResultSuccess {
			t.Errorf("the held-back run ended %s (%s), want success", got.Result, got.Error)
		}
		if heldBack(*got) || got.Detail != "" {
			t.Errorf("the run's detail after the send = %q, want the mark off", got.Detail)
		}
		calls := cs.got("held")
		if len(calls) != 1 || calls[0].ticket != run.Ticket || calls[0].attempt != run.Attempt {
			t.Errorf("calls = %+v, want one of ticket %s attempt %d", calls, run.Ticket, run.Attempt)
		}
		if !slices.Contains(actionNames(t, b, "held"), ActRefireHeld) {
			t.Errorf("no %s action; actions: %v", ActRefireHeld, actionNames(t, b, "held"))
		}
		if n := b.refires.Load(); n != 1 {
			t.Errorf("b counted %d refires, want 1", n)
		}
	})
}

// TestHeldBackRunNowIsSentByTheNextOwner: a run-now on engine a, with params of its own, is
// held back by its shard's closed gate and recorded so; a drops the shard and b takes it.
// b finds the mark on the run-now's row and sends it once, under its record (same ticket
// and attempt, the run-now's params), rather than recording it lost per on_lost.
func TestHeldBackRunNowIsSentByTheNextOwner(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		var allow atomic.Int64 // asks of a's gate still answered open
		allow.Store(1 << 40)
		a := startEngine(t, s, sharded, func(c *Config) {
			c.ShardGate = func(int, int64) error {
				if allow.Add(-1) >= 0 {
					return nil
				}
				return fmt.Errorf("renewal overdue: %w", model.ErrLeaseDeadline)
			}
		})
		b := startEngine(t, s, sharded)
		shard := model.ShardOf("held-now")
		takeFor(t, s, a, "a", []int{shard}, time.Second)
		spec := httpSpec("held-now", cs.URL+"/hook")
		spec.DelayMS = ptr(int64(time.Hour / time.Millisecond)) // only the run-now runs
		mustCreate(t, a, spec)

		allow.Store(1) // the run-now's own ask: its record commits; its send is held back
		run, err := a.API().RunNow(ctx, "held-now", json.RawMessage(`{"override":true}`), "test")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the run-now recorded held back", func() bool {
			got, err := s.GetRun(ctx, run.Ticket)
			return err == nil && heldBack(*got)
		})
		if n := len(cs.got("held-now")); n != 0 {
			t.Fatalf("the held-back run-now reached its endpoint %d times before the hand-over", n)
		}
		var set model.ShardSet
		set.Add(shard)
		a.API().Ownership().Drop(set)
		time.Sleep(1100 * time.Millisecond) // a's lease runs out: it was not renewed
		takeFor(t, s, b, "b", []int{shard}, time.Minute)

		waitFor(t, 10*time.Second, "b to send the run-now", func() bool { return len(cs.got("held-now")) == 1 })
		var got *model.Run
		waitFor(t, 10*time.Second, "the run-now to end", func() bool {
			var err error
			got, err = s.GetRun(ctx, run.Ticket)
			return err == nil && got.Result != model.ResultRunning
		})
		waitSettled(t, b)
		if got.Result != model.ResultSuccess || heldBack(*got) {
			t.Errorf("the held-back run-now ended %s (%s), detail %q: want success, the mark off", got.Result, got.Error, got.Detail)
		}
		calls := cs.got("held-now")
		if len(calls) != 1 || calls[0].ticket != run.Ticket || calls[0].attempt != run.Attempt ||
			string(calls[0].body.Params) != `{"override":true}` {
			t.Errorf("calls = %+v, want one of ticket %s attempt %d with the run-now's params", calls, run.Ticket, run.Attempt)
		}
		if !slices.Contains(actionNames(t, b, "held-now"), ActRefireHeld) {
			t.Errorf("no %s action; actions: %v", ActRefireHeld, actionNames(t, b, "held-now"))
		}
		if n := b.refires.Load(); n != 1 {
			t.Errorf("b counted %d refires, want 1", n)
		}
		if runs, err := b.API().Runs(ctx, "held-now", 10); err != nil || len(runs) != 1 {
			t.Errorf("runs of held-now: %d (%v), want the run-now's one", len(runs), err)
		}
	})
}

// TestHeldBackAllowAllRunIsSentByTheNextOwner: as TestHeldBackRunNowIsSentByTheNextOwner,
// for a run of an allow_all task, which the next owner recovers as an instance too.
func TestHeldBackAllowAllRunIsSentByTheNextOwner(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		var allow atomic.Int64 // asks of a's gate still answered open
		allow.Store(1 << 40)
		a := startEngine(t, s, sharded, func(c *Config) {
			c.ShardGate = func(int, int64) error {
				if allow.Add(-1) >= 0 {
					return nil
				}
				return fmt.Errorf("renewal overdue: %w", model.ErrLeaseDeadline)
			}
		})
		b := startEngine(t, s, sharded)
		shard := model.ShardOf("held-beside")
		takeFor(t, s, a, "a", []int{shard}, time.Second)
		allow.Store(1) // its first fire's ask: the record commits; every send is held back
		spec := httpSpec("held-beside", cs.URL+"/hook")
		spec.Cron = "*/2 * * * * *"
		spec.OverlapPolicy = model.OverlapAllowAll
		mustCreate(t, a, spec)

		var run model.Run
		waitFor(t, 10*time.Second, "a run recorded held back", func() bool {
			runs, err := a.API().Runs(ctx, "held-beside", 10)
			if err != nil || len(runs) == 0 {
				return false
			}
			run = runs[len(runs)-1]
			return heldBack(run)
		})
		if n := len(cs.got("held-beside")); n != 0 {
			t.Fatalf("the held-back run reached its endpoint %d times before the hand-over", n)
		}
		var set model.ShardSet
		set.Add(shard)
		a.API().Ownership().Drop(set)
		time.Sleep(1100 * time.Millisecond) // a's lease runs out: it was not renewed
		takeFor(t, s, b, "b", []int{shard}, time.Minute)

		sent := func() (k int) {
			for _, c := range cs.got("held-beside") {
				if c.ticket == run.Ticket {
					k++
				}
			}
			return k
		}
		waitFor(t, 10*time.Second, "b to send the held-back run", func() bool { return sent() == 1 })
		var got *model.Run
		waitFor(t, 10*time.Second, "the run to end", func() bool {
			var err error
			got, err = s.GetRun(ctx, run.Ticket)
			return err == nil && got.Result != model.ResultRunning
		})
		if got.Result != model.ResultSuccess || heldBack(*got) {
			t.Errorf("the held-back run ended %s (%s), detail %q: want success, the mark off", got.Result, got.Error, got.Detail)
		}
		time.Sleep(2 * time.Second) // more fires of b: none sends the held-back run again
		if n := sent(); n != 1 {
			t.Errorf("the held-back run was sent %d times, want once", n)
		}
		if !slices.Contains(actionNames(t, b, "held-beside"), ActRefireHeld) {
			t.Errorf("no %s action; actions: %v", ActRefireHeld, actionNames(t, b, "held-beside"))
		}
	})
}

// TestRunNeverSentAtDropIsSentByTheNextOwner: engine a holds two shards. A run of one
// ("unsent") is recorded and its send waits before its shard's gate, never held back by an
// overdue renewal; a run of the other ("onwire") passed its gate and its request hangs at
// the endpoint. a drops both shards: it marks "unsent" held back (it provably never left)
// and not "onwire" (it may have arrived). When the gate then answers, the send finds the
// shard off and does not leave. b takes both shards at the next epochs: it sends "unsent"
// once under its fire record, and leaves "onwire" in doubt, so each run reaches its endpoint
// once.
func TestRunNeverSentAtDropIsSentByTheNextOwner(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		hung := newCallbackServer(t) // onwire's endpoint: its requests hang until the test ends
		hung.hang = make(chan struct{})
		unsentName, onWireName := "drop-unsent", "drop-onwire"
		for i := 0; model.ShardOf(onWireName) == model.ShardOf(unsentName); i++ {
			onWireName = fmt.Sprintf("drop-onwire-%d", i)
		}
		unsentShard, onWireShard := model.ShardOf(unsentName), model.ShardOf(onWireName)
		var asks atomic.Int32          // asks of the gate of unsent's shard
		waiting := make(chan struct{}) // closed when unsent's send waits at the gate
		open := make(chan struct{})    // closed to let it go on
		a := startEngine(t, s, sharded, func(c *Config) {
			c.ShardGate = func(shard int, _ int64) error {
				if shard == unsentShard && asks.Add(1) == 2 { // its send (the first ask is its fire)
					close(waiting)
					<-open
				}
				return nil
			}
		})
		b := startEngine(t, s, sharded)
		t.Cleanup(hung.release) // before the engines stop: a's request to it then answers
		takeFor(t, s, a, "a", []int{unsentShard, onWireShard}, time.Second)
		for name, url := range map[string]string{onWireName: hung.URL, unsentName: cs.URL} {
			spec := httpSpec(name, url+"/hook")
			spec.DelayMS = ptr(int64(200))
			mustCreate(t, a, spec)
		}
		waitFor(t, 10*time.Second, "onwire's request to reach its endpoint", func() bool { return len(hung.got(onWireName)) == 1 })
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("unsent's send never asked its gate")
		}
		runOf := func(name string) model.Run {
			t.Helper()
			runs, err := a.API().Runs(ctx, name, 10)
			if err != nil || len(runs) != 1 {
				t.Fatalf("runs of %s: %d (%v), want 1", name, len(runs), err)
			}
			return runs[0]
		}
		unsent, onWire := runOf(unsentName), runOf(onWireName)

		var set model.ShardSet
		set.Add(unsentShard)
		set.Add(onWireShard)
		a.API().Ownership().Drop(set)
		waitFor(t, 10*time.Second, "unsent's run recorded held back", func() bool {
			got, err := s.GetRun(ctx, unsent.Ticket)
			return err == nil && heldBack(*got)
		})
		close(open)
		waitFor(t, 10*time.Second, "a's send of unsent to be refused at the gate", func() bool { return a.pace.ahead() == 0 })
		if n := a.m.heldAtDrop.Get(); n != 1 {
			t.Errorf("a marked %d runs held back at the drop, want 1", n)
		}
		if got, err := s.GetRun(ctx, onWire.Ticket); err != nil || heldBack(*got) {
			t.Fatalf("onwire's run after the drop: %+v, %v; want it running without the mark (it left)", got, err)
		}
		if n := len(cs.got(unsentName)); n != 0 {
			t.Fatalf("unsent's run reached its endpoint %d times from a", n)
		}

		time.Sleep(1100 * time.Millisecond) // a's leases run out: they were not renewed
		takeFor(t, s, b, "b", []int{unsentShard, onWireShard}, time.Minute)
		var got *model.Run
		waitFor(t, 10*time.Second, "b to send unsent's run and it to end", func() bool {
			var err error
			got, err = s.GetRun(ctx, unsent.Ticket)
			return err == nil && got.Result != model.ResultRunning
		})
		if got.Result != model.ResultSuccess || heldBack(*got) {
			t.Errorf("unsent's run ended %s (%s), detail %q: want success, the mark off", got.Result, got.Error, got.Detail)
		}
		if calls := cs.got(unsentName); len(calls) != 1 || calls[0].ticket != unsent.Ticket || calls[0].attempt != unsent.Attempt {
			t.Errorf("unsent's calls = %+v, want one of ticket %s attempt %d", calls, unsent.Ticket, unsent.Attempt)
		}
		if !slices.Contains(actionNames(t, b, unsentName), ActRefireHeld) {
			t.Errorf("no %s action for unsent; actions: %v", ActRefireHeld, actionNames(t, b, unsentName))
		}
		waitSettled(t, b)
		if n := b.refires.Load(); n != 1 {
			t.Errorf("b refired %d runs, want 1 (onwire's left: it is in doubt, not held back)", n)
		}
		if slices.Contains(actionNames(t, b, onWireName), ActRefireHeld) {
			t.Errorf("onwire's run was refired: it had left a")
		}
		if n := len(hung.got(onWireName)); n != 1 {
			t.Errorf("onwire's run reached its endpoint %d times, want once", n)
		}
	})
}

// TestRunRecordedAfterDropIsSentByTheNextOwner: engine a fires a task while the database
// holds its writes, and drops the shard before the run's record is durable. The record then
// lands (no other node has taken the shard): a does not send the run, which provably never
// left, but marks it held back, and b, taking the shard next, sends it once under its record.
// Before, such a run was left unmarked, and b recorded it lost.
func TestRunRecordedAfterDropIsSentByTheNextOwner(t *testing.T) {
	t.Parallel()
	persisttest.EachDSN(t, func(t *testing.T, s persist.Store, dsn string) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		a := startEngine(t, s, sharded)
		b := startEngine(t, s, sharded)
		const name = "late-record"
		shard := model.ShardOf(name)
		takeFor(t, s, a, "a", []int{shard}, time.Second)
		spec := httpSpec(name, cs.URL+"/hook")
		spec.DelayMS = ptr(int64(1500))
		mustCreate(t, a, spec)
		release := persisttest.HoldWrites(t, dsn)
		waitFor(t, 10*time.Second, "the fire, its record held by the database", func() bool { return a.runs.byShard()[shard] == 1 })
		var set model.ShardSet
		set.Add(shard)
		a.API().Ownership().Drop(set)
		release()
		var run *model.Run
		waitFor(t, 10*time.Second, "the run recorded and marked held back", func() bool {
			runs, err := s.(persist.Browser).ListRunsPage(ctx, persist.RunFilter{Limit: 10})
			if err != nil || len(runs.Runs) != 1 {
				return false
			}
			run = &runs.Runs[0]
			return heldBack(*run)
		})
		if n := a.m.heldAtDrop.Get(); n != 1 {
			t.Errorf("a marked %d runs held back after the drop, want 1", n)
		}
		if n := len(cs.got(name)); n != 0 {
			t.Fatalf("the run reached its endpoint %d times from a", n)
		}
		time.Sleep(1100 * time.Millisecond) // a's lease runs out: it was not renewed
		takeFor(t, s, b, "b", []int{shard}, time.Minute)
		var got *model.Run
		waitFor(t, 10*time.Second, "b to send the run and it to end", func() bool {
			var err error
			got, err = s.GetRun(ctx, run.Ticket)
			return err == nil && got.Result != model.ResultRunning
		})
		if got.Result != model.ResultSuccess || heldBack(*got) {
			t.Errorf("the run ended %s (%s), detail %q: want success, the mark off", got.Result, got.Error, got.Detail)
		}
		if calls := cs.got(name); len(calls) != 1 || calls[0].ticket != run.Ticket {
			t.Errorf("calls = %+v, want one of ticket %s", calls, run.Ticket)
		}
		if n := b.refires.Load(); n != 1 {
			t.Errorf("b refired %d runs, want 1", n)
		}
	})
}
