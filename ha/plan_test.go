package ha

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/axe-sched/axe/model"
)

// cluster is an in-memory model of the shard leases: the owner of each shard, with takes
// that succeed only on unheld shards, as TakeShards does.
type cluster struct {
	owner    [model.ShardCount]string
	draining map[string]model.ShardSet
}

func (c *cluster) view(me string, live []string) shardView {
	v := shardView{me: me, live: live, owner: c.owner, draining: c.draining[me]}
	for n, o := range v.owner {
		if o != "" && !slices.Contains(live, o) && o != me {
			// A node not live long enough for its leases to run out: they are free.
			v.owner[n] = ""
		}
	}
	return v
}

// step runs one node's plan: takes apply to shards still unheld; a release first drains
// (one step), then frees the shards.
func (c *cluster) step(t *rapid.T, me string, live []string) (changed bool) {
	d := c.draining[me]
	for _, n := range d.List() {
		c.owner[n] = ""
		changed = true
	}
	c.draining[me] = model.ShardSet{}
	p := planShards(c.view(me, live))
	held := 0
	for _, o := range c.owner {
		if o == me {
			held++
		}
	}
	if len(p.take) > 0 && held+len(p.take) > p.quota {
		t.Fatalf("%s holds %d and plans to take %d, above its quota %d", me, held, len(p.take), p.quota)
	}
	for _, n := range p.take {
		if o := c.owner[n]; o != "" && slices.Contains(live, o) {
			continue // a live node holds it: the database refuses the take
		}
		c.owner[n] = me
		changed = true
	}
	var rel model.ShardSet
	for _, n := range p.release {
		if c.owner[n] != me {
			t.Fatalf("%s plans to release shard %d held by %q", me, n, c.owner[n])
		}
		rel.Add(n)
		changed = true
	}
	c.draining[me] = rel
	return changed
}

// TestPlanConverges: whatever the shards' owners at the start and whichever nodes join and
// leave, once the live set stays put the nodes settle, within a few steps each, on every
// shard held by a live node, each node at its quota, and no further change.
func TestPlanConverges(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		names := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
		live := rapid.SliceOfNDistinct(rapid.SampledFrom(names), 1, 6, rapid.ID[string]).Draw(t, "live")
		c := &cluster{draining: map[string]model.ShardSet{}}
		for n := range c.owner {
			c.owner[n] = rapid.SampledFrom(append([]string{"", "gone"}, names...)).Draw(t, fmt.Sprintf("owner%d", n))
		}
		// Some churn: steps in random order, with joins and leaves between them.
		for range rapid.IntRange(0, 20).Draw(t, "churn") {
			switch rapid.IntRange(0, 4).Draw(t, "event") {
			case 0:
				if j := rapid.SampledFrom(names).Draw(t, "join"); !slices.Contains(live, j) {
					live = append(live, j)
				}
			case 1:
				if len(live) > 1 {
					i := rapid.IntRange(0, len(live)-1).Draw(t, "leave")
					c.draining[live[i]] = model.ShardSet{}
					live = slices.Delete(slices.Clone(live), i, i+1)
				}
			default:
				c.step(t, rapid.SampledFrom(live).Draw(t, "stepper"), live)
			}
		}
		// The live set stays put now: round-robin steps must settle.
		settled := -1
		for round := range 2*len(names) + 4 {
			changed := false
			for _, me := range rapid.Permutation(live).Draw(t, "order") {
				changed = c.step(t, me, live) || changed
			}
			if !changed {
				settled = round
				break
			}
		}
		if settled < 0 {
			t.Fatalf("live %v: still changing after %d rounds: %v", live, 2*len(names)+4, c.owner)
		}
		sorted := slices.Sorted(slices.Values(live))
		q := quotas(sorted)
		counts := map[string]int{}
		for n, o := range c.owner {
			if !slices.Contains(live, o) {
				t.Fatalf("live %v: shard %d settled on %q", live, n, o)
			}
			counts[o]++
		}
		for _, id := range live {
			if counts[id] != q[id] {
				t.Fatalf("live %v: %s settled on %d shards, quota %d (%v)", live, id, counts[id], q[id], counts)
			}
		}
	})
}

// TestPlanFreshStartIsContiguous: nodes that start on a store with no shard held settle on
// their home ranges, whatever order they step in.
func TestPlanFreshStartIsContiguous(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 7; n++ {
		live := make([]string, n)
		for i := range live {
			live[i] = fmt.Sprintf("node-%d", i)
		}
		c := &cluster{draining: map[string]model.ShardSet{}}
		for _, me := range slices.Backward(live) {
			c.step(nil, me, live)
		}
		for s, o := range c.owner {
			if o != home(live, s) {
				t.Fatalf("%d nodes: shard %d went to %s, its home is %s", n, s, o, home(live, s))
			}
		}
		q := quotas(live)
		lo, hi := model.ShardCount, 0
		for _, v := range q {
			lo, hi = min(lo, v), max(hi, v)
		}
		if hi-lo > 1 {
			t.Fatalf("%d nodes: quotas %v differ by more than one", n, q)
		}
	}
}

// TestPlanJoinHandsOver: two nodes holding 128 shards each and a third joining: the two hand
// over exactly what the third's quota needs, no more, and none of it twice.
func TestPlanJoinHandsOver(t *testing.T) {
	t.Parallel()
	live := []string{"a", "b", "c"}
	var v shardView
	for n := range v.owner {
		v.owner[n] = "a"
		if n >= 128 {
			v.owner[n] = "b"
		}
	}
	v.live = live
	q := quotas(live)
	v.me = "a"
	pa := planShards(v)
	v.me = "b"
	pb := planShards(v)
	if len(pa.take)+len(pb.take) != 0 || len(pa.release) != 128-q["a"] || len(pb.release) != 128-q["b"] {
		t.Fatalf("quotas %v: a plans %+v, b plans %+v", q, pa, pb)
	}
	// While a drains, it hands over nothing more.
	v.me = "a"
	for _, n := range pa.release {
		v.draining.Add(n)
	}
	if again := planShards(v); len(again.release) != 0 {
		t.Fatalf("a, draining %v, plans to release %v as well", v.draining.String(), again.release)
	}
}
