package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// Short leases keep these tests quick: a node is live for 1.5 renew intervals after its last
// touch, a lease runs out TTL after its last renewal. Each store call of the loop is bounded
// by the renew interval, so it must be long enough for SQLite under -race on a loaded machine.
const shardTTL, shardRenew = 3 * time.Second, 600 * time.Millisecond

// shardNode is one node's shard loop under test, with the changes it reported.
type shardNode struct {
	*Shards
	id       string
	mu       sync.Mutex
	changes  []ShardChange
	inFlight atomic.Pointer[model.ShardSet]
	drained  chan struct{}
}

func startShardNode(t *testing.T, s persist.Store, id string) *shardNode {
	return startShardNodeDraining(t, s, id, 0)
}

// startShardNodeDraining is startShardNode with a hand-over bound (0: the default).
func startShardNodeDraining(t *testing.T, s persist.Store, id string, drain time.Duration) *shardNode {
	return startShardNodeWith(t, s, id, shardTTL, shardRenew, drain)
}

// startShardNodeWith is startShardNode with its own lease times and hand-over bound, and
// any other settings mods make.
func startShardNodeWith(t *testing.T, s persist.Store, id string, ttl, renew, drain time.Duration, mods ...func(*ShardsConfig)) *shardNode {
	t.Helper()
	n := &shardNode{id: id, drained: make(chan struct{})}
	cfg := ShardsConfig{Store: s, NodeID: id, Advertise: "http://" + id, TTL: ttl, Renew: renew,
		DrainTimeout: drain,
		Logger:       testShardLogger(),
		InFlight: func(set model.ShardSet) model.ShardSet {
			busy := n.inFlight.Load()
			if busy == nil {
				return model.ShardSet{}
			}
			var out model.ShardSet
			for _, s := range set.List() {
				if busy.Has(s) {
					out.Add(s)
				}
			}
			return out
		}}
	for _, m := range mods {
		m(&cfg)
	}
	sh, err := NewShards(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Shards = sh
	if err := sh.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(n.drained)
		for ch := range sh.Changes() {
			n.mu.Lock()
			n.changes = append(n.changes, ch)
			n.mu.Unlock()
		}
	}()
	t.Cleanup(func() { n.stop(false) })
	return n
}

// stop stops the loop (releasing its shards when release is set) and waits for its last
// change.
func (n *shardNode) stop(release bool) {
	_ = n.Stop(context.Background(), release)
	<-n.drained
}

// handedOver returns the shards n gained so far and the hand-over points they came with.
func (n *shardNode) handedOver() (gained model.ShardSet, points map[int]int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	points = map[int]int64{}
	for _, ch := range n.changes {
		for _, f := range ch.Gained {
			gained.Add(f.Shard)
		}
		for shard, at := range ch.HandedOver {
			points[shard] = at
		}
	}
	return gained, points
}

// crash ends the loop as kill -9 would: nothing is released, the node's row is left live
// until it ages. Its watchdog still closes the gates at the local deadline, as it does in a
// process that stops getting answers from the database.
func (n *shardNode) crash() {
	n.cancel()
	<-n.done
}

// open reports which shards' gates are open on n now.
func (n *shardNode) open() model.ShardSet {
	var out model.ShardSet
	for _, f := range n.Held() {
		if n.Gate(f.Shard, f.Epoch) == nil {
			out.Add(f.Shard)
		}
	}
	return out
}

// watchGates checks, every few milliseconds until the test ends, that no shard's gate is
// open on two nodes at once: the safety property of the shard loop.
func watchGates(t *testing.T, nodes func() []*shardNode) {
	stop := make(chan struct{})
	done := make(chan struct{})
	var samples atomic.Int64
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			var seen [model.ShardCount]string
			for _, n := range nodes() {
				for _, s := range n.open().List() {
					if seen[s] != "" {
						t.Errorf("shard %d is open on %s and %s at once", s, seen[s], n.id)
					}
					seen[s] = n.id
				}
			}
			samples.Add(1)
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		if samples.Load() < 10 {
			t.Errorf("the gate watcher sampled only %d times", samples.Load())
		}
	})
}

// waitShares waits until the database shows every shard held by one of the nodes, at each
// node's quota, and each node's own view agrees; it returns how long that took.
func waitShares(t *testing.T, s persist.Store, nodes []*shardNode, within time.Duration) time.Duration {
	t.Helper()
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.id
	}
	q := quotas(sortedCopy(ids))
	start := time.Now()
	var last string
	for time.Since(start) < within {
		ls, err := s.ShardLeases(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]int{}
		for _, l := range ls {
			if l.Held {
				counts[l.Holder]++
			}
		}
		ok := true
		for _, n := range nodes {
			if counts[n.id] != q[n.id] || len(n.Held()) != q[n.id] {
				ok = false
			}
		}
		if ok {
			return time.Since(start)
		}
		last = fmt.Sprint(counts)
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("shares %v not reached within %s: last seen %s", q, within, last)
	return 0
}

func testShardLogger() *slog.Logger {
	if os.Getenv("AXE_TEST_SHARD_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

func sortedCopy(ids []string) []string {
	out := append([]string(nil), ids...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestShardsShareJoinLeave runs three shard loops on one store: they share the shards fairly;
// a fourth joining is handed its share; a node stopping gracefully releases its shards at
// once; a node crashing loses its shards to the others once its leases run out. No shard's
// gate is ever open on two nodes at once.
func TestShardsShareJoinLeave(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		var mu sync.Mutex
		var nodes []*shardNode
		watchGates(t, func() []*shardNode { mu.Lock(); defer mu.Unlock(); return append([]*shardNode(nil), nodes...) })
		add := func(id string) *shardNode {
			n := startShardNode(t, s, id)
			mu.Lock()
			nodes = append(nodes, n)
			mu.Unlock()
			return n
		}
		remove := func(n *shardNode) {
			mu.Lock()
			defer mu.Unlock()
			for i, o := range nodes {
				if o == n {
					nodes = append(nodes[:i], nodes[i+1:]...)
					return
				}
			}
		}
		current := func() []*shardNode { mu.Lock(); defer mu.Unlock(); return append([]*shardNode(nil), nodes...) }

		a, b, c := add("a"), add("b"), add("c")
		t.Logf("three nodes settled in %s", waitShares(t, s, current(), time.Minute))
		for _, n := range []*shardNode{a, b, c} {
			// A start together settles on contiguous ranges.
			if got := heldSet(n.Held()).String(); len(n.Held()) > 0 && !isOneRange(got) {
				t.Logf("%s holds %s (not one range: the nodes did not start together)", n.id, got)
			}
		}

		d := add("d")
		t.Logf("a fourth node was handed its share in %s", waitShares(t, s, current(), time.Minute))
		if len(d.Held()) != 64 {
			t.Fatalf("d holds %d shards, want 64", len(d.Held()))
		}

		// A graceful stop releases at once: the others take the shards within a few steps.
		remove(b)
		b.stop(true)
		took := waitShares(t, s, current(), time.Minute)
		t.Logf("b's shards were taken %s after its graceful stop", took)
		if took > 5*time.Second {
			t.Errorf("b's released shards took %s to be taken", took)
		}

		// A crash: the shards are taken once their leases run out.
		remove(c)
		c.crash()
		took = waitShares(t, s, current(), time.Minute)
		t.Logf("c's shards were taken %s after its crash (lease TTL %s)", took, shardTTL)
		// Its last renewal went out at most a renew interval (and a slow call) before the
		// crash; the bounds are loose for a loaded machine, the figure is logged above.
		if took < shardTTL/2 {
			t.Errorf("c's shards were taken %s after its crash, before its leases could have run out", took)
		}
		if took > shardTTL+2*time.Second {
			t.Errorf("c's shards were taken %s after its crash, more than TTL + 2s", took)
		}
		// Every epoch only grows: each takeover fenced the shard's previous holder.
		ls, err := s.ShardLeases(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Held && l.Epoch < 1 {
				t.Errorf("shard %d held at epoch %d", l.Shard, l.Epoch)
			}
		}
	})
}

func isOneRange(s string) bool {
	for _, r := range s {
		if r == ',' {
			return false
		}
	}
	return true
}

// TestShardsDrainBeforeRelease: a node handing a shard over keeps renewing it, with its gate
// closed, while runs of it are in flight, and releases it once they finish.
func TestShardsDrainBeforeRelease(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	a := startShardNodeDraining(t, s, "a", time.Minute)
	waitShares(t, s, []*shardNode{a}, time.Minute)
	busy := model.AllShards()
	a.inFlight.Store(&busy)
	b := startShardNode(t, s, "b")
	// a begins handing over b's share but releases nothing while every shard is busy.
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.mu.Lock()
		draining := 0
		for _, ch := range a.changes {
			draining += ch.Draining.Len()
		}
		a.mu.Unlock()
		if draining == model.ShardCount/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a reported %d shards draining, want %d", draining, model.ShardCount/2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * shardTTL) // longer than a lease: a keeps renewing the shards it drains
	if got := len(a.Held()); got != model.ShardCount {
		t.Fatalf("a holds %d shards while all are busy, want all %d", got, model.ShardCount)
	}
	if got := len(b.Held()); got != 0 {
		t.Fatalf("b took %d shards a is still draining", got)
	}
	// The half it keeps is open, the half it drains closed. A renewal late on a loaded box
	// closes every gate until the next one lands, so the gates are read until they show it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		open := a.open()
		if open.Len() == model.ShardCount/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's open gates while draining half: %d shards (%s)", open.Len(), open.String())
		}
	}
	// The runs finish: a releases, b takes its share.
	var none model.ShardSet
	a.inFlight.Store(&none)
	waitShares(t, s, []*shardNode{a, b}, time.Minute)
}

// TestShardsDrainTimeout: a hand-over whose runs do not finish ends after DrainTimeout: the
// shards are released and taken by the node that needs them.
func TestShardsDrainTimeout(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	a := startShardNodeDraining(t, s, "a", 2*shardRenew)
	waitShares(t, s, []*shardNode{a}, time.Minute)
	busy := model.AllShards()
	a.inFlight.Store(&busy)
	b := startShardNode(t, s, "b")
	took := waitShares(t, s, []*shardNode{a, b}, time.Minute)
	if took < 2*shardRenew {
		t.Errorf("b got its share %s after joining, before a's hand-over bound of %s", took, 2*shardRenew)
	}
}

// TestShardsLostDropsAtOnce: a write refused on a shard's fence drops that shard at once
// (its gate closes); the loop then takes it again at a new epoch, fencing off what it did
// before. After Stop a late report changes nothing and does not panic.
func TestShardsLostDropsAtOnce(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	a := startShardNode(t, s, "a")
	waitShares(t, s, []*shardNode{a}, time.Minute)
	const shard = 5
	var epoch int64
	for _, f := range a.Held() {
		if f.Shard == shard {
			epoch = f.Epoch
		}
	}
	if epoch == 0 || a.Gate(shard, epoch) != nil {
		t.Fatalf("shard %d at epoch %d, gate %v", shard, epoch, a.Gate(shard, epoch))
	}
	a.Lost(shard, epoch, errors.New("fence"))
	if err := a.Gate(shard, epoch); !errors.Is(err, model.ErrShardNotHeld) {
		t.Fatalf("the gate after Lost = %v, want model.ErrShardNotHeld", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var now int64
		for _, f := range a.Held() {
			if f.Shard == shard {
				now = f.Epoch
			}
		}
		if now > epoch {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shard %d not taken again at a new epoch (still %d)", shard, now)
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.stop(true)
	a.Lost(shard, epoch+1, errors.New("late"))
	if h := a.Held(); len(h) != 0 {
		t.Fatalf("a stopped loop holds %d shards", len(h))
	}
}

// TestShardsLeavingNodeIsTakenOverAtOnce: a node that says it is leaving (a graceful stop)
// keeps its shards until it releases them, and the other node, which saw it leaving, takes
// them within a fraction of its renew interval of the release rather than at its next
// renewal. The release comes just after the other node's renewal, so without the leaving
// role the other node would next look a whole renew interval (10 s) later.
func TestShardsLeavingNodeIsTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		const ttl, renew = 30 * time.Second, 10 * time.Second
		a := startShardNodeWith(t, s, "a", ttl, renew, 0)
		b := startShardNodeWith(t, s, "b", ttl, renew, 0)
		waitShares(t, s, []*shardNode{a, b}, time.Minute)
		watchGates(t, func() []*shardNode { return []*shardNode{a, b} })

		if err := a.Leaving(t.Context()); err != nil {
			t.Fatal(err)
		}
		// a still holds its shards, and b has seen it leaving once b has stepped again (its
		// step renews, then reads the nodes).
		renewed := b.m.renewOK.Get()
		deadline := time.Now().Add(2 * renew)
		for b.m.renewOK.Get() < renewed+1 {
			if time.Now().After(deadline) {
				t.Fatalf("b did not renew within %s", 2*renew)
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(renew / 20) // the rest of b's step: reading the nodes
		if len(a.Held()) != model.ShardCount/2 {
			t.Fatalf("a leaving holds %d shards before it releases them, want %d", len(a.Held()), model.ShardCount/2)
		}
		stopping := time.Now()
		a.stop(true) // releases every shard, then marks the node stopped
		released := time.Now()
		waitShares(t, s, []*shardNode{b}, time.Minute)
		took := time.Since(released)
		t.Logf("a leaving node's stop took %s; its shards were all b's %s later (renew %s)",
			released.Sub(stopping).Round(time.Millisecond), took.Round(time.Millisecond), renew)
		if took >= renew/2 {
			t.Errorf("a leaving node's shards were taken %s after its release, not within half a renew interval (%s)", took, renew/2)
		}
	})
}

// TestShardsDrainedShardIsReleasedAtOnce: a shard being handed over is released soon after its
// last run ends (a tenth of a renew interval and a step), not at the giver's next renewal: its
// fires wait from the start of the drain until the taker has recovered it, and with the
// default renew interval (5 s) a wait for the next renewal alone reaches the misfire
// threshold. A long renew interval keeps the two apart on a loaded box.
func TestShardsDrainedShardIsReleasedAtOnce(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	const ttl, renew = time.Minute, 20 * time.Second
	a := startShardNodeWith(t, s, "a", ttl, renew, time.Minute)
	waitShares(t, s, []*shardNode{a}, time.Minute)
	busy := model.AllShards()
	a.inFlight.Store(&busy)
	b := startShardNodeWith(t, s, "b", ttl, renew, time.Minute)
	deadline := time.Now().Add(3 * renew)
	for {
		a.mu.Lock()
		draining := 0
		for _, ch := range a.changes {
			draining += ch.Draining.Len()
		}
		a.mu.Unlock()
		if draining == model.ShardCount/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a reported %d shards draining, want %d", draining, model.ShardCount/2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The runs end just after a's renewal, so that without the quicker look a would
	// release them only at its next renewal, a whole renew interval later.
	renewed := a.m.renewOK.Get()
	for a.m.renewOK.Get() < renewed+1 {
		if time.Now().After(deadline) {
			t.Fatalf("a did not renew within %s", 3*renew)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var none model.ShardSet
	a.inFlight.Store(&none) // the runs end: a releases at its next look, b takes
	drained := time.Now()
	waitShares(t, s, []*shardNode{a, b}, 3*renew)
	took := time.Since(drained)
	t.Logf("the drained shards were b's %s after their last run ended (renew %s)", took.Round(time.Millisecond), renew)
	// Without the quicker look, a's next step, and so the release, comes a whole renew
	// interval after the renewal just before the runs ended: never under 9/10 of it.
	if limit := renew * 9 / 10; took >= limit {
		t.Errorf("the drained shards were taken %s after their runs ended, not within 9/10 of a renew interval (%s)", took, limit)
	}
}

// TestShardsHandOverPoint: the hand-over points the engine gives (HandOverPoint) go with the
// release, and the taker's change carries each shard's (ShardChange.HandedOver); a shard
// released by a node that gives none reaches its taker without one, as after a crash.
func TestShardsHandOverPoint(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	pointOf := func(shard int) int64 { return 1_000_000 + int64(shard) }
	// Leases of the defaults' proportions: each store call of the loop is bounded by the
	// renew interval, and SQLite under -race on a loaded box needs more than shardRenew.
	const ttl, renew, within = 10 * time.Second, 2 * time.Second, time.Minute
	a := startShardNodeWith(t, s, "a", ttl, renew, 0, func(c *ShardsConfig) { c.HandOverPoint = pointOf })
	waitShares(t, s, []*shardNode{a}, within)
	b := startShardNodeWith(t, s, "b", ttl, renew, 0)
	waitShares(t, s, []*shardNode{a, b}, within)
	gained, points := b.handedOver()
	if gained.Len() != 128 || len(points) != 128 {
		t.Fatalf("b gained %d shards, %d of them with a hand-over point; want 128 and 128", gained.Len(), len(points))
	}
	for shard, at := range points {
		if !gained.Has(shard) || at != pointOf(shard) {
			t.Errorf("shard %d reached b with hand-over point %d, want %d", shard, at, pointOf(shard))
		}
	}
	// b gives no points: the shards it releases reach a without one.
	b.stop(true)
	waitShares(t, s, []*shardNode{a}, within)
	a.mu.Lock()
	for _, ch := range a.changes {
		for _, f := range ch.Gained {
			if at, ok := ch.HandedOver[f.Shard]; ok && gained.Has(f.Shard) {
				t.Errorf("shard %d, released by b without a point, reached a with hand-over point %d", f.Shard, at)
			}
		}
	}
	a.mu.Unlock()
}

// TestShardsReleasedPastTheStopBound: a graceful stop whose bound ran out before the loop's
// turn (a drain of runs in flight took all of it) still releases the shards with their
// hand-over points: the release gets a renew interval of its own. Left to their leases they
// would be taken a TTL later as a dead node's, without points, misfire policies and all.
func TestShardsReleasedPastTheStopBound(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	pointOf := func(shard int) int64 { return 2_000_000 + int64(shard) }
	const ttl, renew, within = 10 * time.Minute, 2 * time.Second, time.Minute
	a := startShardNodeWith(t, s, "a", ttl, renew, 0, func(c *ShardsConfig) { c.HandOverPoint = pointOf })
	b := startShardNodeWith(t, s, "b", ttl, renew, 0)
	waitShares(t, s, []*shardNode{a, b}, within)
	held := a.Held()
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if err := a.Stop(ctx, true); err == nil {
		t.Log("a's stop past its bound reported no error") // its node row's touch may still fail
	}
	<-a.drained
	// With a TTL of ten minutes, b holds every shard within the minute only if a released them.
	waitShares(t, s, []*shardNode{b}, within)
	_, points := b.handedOver()
	for _, f := range held {
		if at := points[f.Shard]; at != pointOf(f.Shard) {
			t.Errorf("shard %d reached b with hand-over point %d, want %d", f.Shard, at, pointOf(f.Shard))
		}
	}
}
