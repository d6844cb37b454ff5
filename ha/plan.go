package ha

import (
	"slices"

	"github.com/axe-sched/axe/model"
)

// shardView is what one node knows at one step of the shard loop: the live nodes (by the
// nodes table) and who holds each shard (by the lease table, as the database judged it).
type shardView struct {
	me string
	// live are the ids of the live nodes, this one included.
	live []string
	// owner[n] holds shard n's lease; "" when it is unheld or expired.
	owner [model.ShardCount]string
	// draining are this node's shards already being handed over.
	draining model.ShardSet
}

// shardPlan is what the node does at this step.
type shardPlan struct {
	// take are unheld shards to try to take (another node may win some).
	take []int
	// release are shards of this node to hand over to nodes below their share.
	release []int
	// quota is this node's fair share under the view.
	quota int
}

// home is the node whose share shard n is when each of the live nodes (sorted) holds one of
// len(live) contiguous ranges.
func home(live []string, n int) string {
	return live[n*len(live)/model.ShardCount]
}

// quotas gives each live node its fair share: the size of its home range, ShardCount/n or
// one more. Every node computes the same quotas from the same live set, and preferring home
// shards when taking and foreign ones when releasing makes a cluster that starts together
// settle on contiguous ranges, which read well and keep a node's tasks together.
func quotas(live []string) map[string]int {
	out := make(map[string]int, len(live))
	for n := range model.ShardCount {
		out[home(live, n)]++
	}
	return out
}

// planShards decides what this node takes and releases. It never plans to take a held shard
// (only its lease's expiry frees one), takes no more than its quota, and releases only what
// other live nodes below their quota need and cannot find unheld, so that nodes with one view
// never hand shards back and forth.
func planShards(v shardView) shardPlan {
	live := slices.Clone(v.live)
	if !slices.Contains(live, v.me) {
		live = append(live, v.me)
	}
	slices.Sort(live)
	q := quotas(live)
	counts := make(map[string]int, len(live))
	var free []int
	var mine []int
	for n, o := range v.owner {
		switch {
		case o == "":
			free = append(free, n)
		case o == v.me:
			mine = append(mine, n)
		}
		if o != "" {
			counts[o]++
		}
	}
	p := shardPlan{quota: q[v.me]}
	active := len(mine) - v.draining.Len()
	if len(mine) < p.quota {
		// Home shards first, ascending, then the others from the top down: a foreign shard
		// is another node's home, which that node takes from the bottom up, so nodes under
		// their quota at once (a start, a node lost) mostly want different shards and few
		// takes collide.
		slices.SortFunc(free, func(a, b int) int {
			ha, hb := home(live, a) == v.me, home(live, b) == v.me
			switch {
			case ha && !hb:
				return -1
			case hb && !ha:
				return 1
			case ha:
				return a - b
			}
			return b - a
		})
		p.take = free[:min(len(free), p.quota-len(mine))]
		return p
	}
	if active <= p.quota {
		return p
	}
	need := 0
	for _, id := range live {
		if id != v.me {
			need += max(0, q[id]-counts[id])
		}
	}
	need -= len(free) + v.draining.Len()
	if need <= 0 {
		return p
	}
	// Release foreign shards before home ones, the highest first.
	var candidates []int
	for _, n := range slices.Backward(mine) {
		if !v.draining.Has(n) && home(live, n) != v.me {
			candidates = append(candidates, n)
		}
	}
	for _, n := range slices.Backward(mine) {
		if !v.draining.Has(n) && home(live, n) == v.me {
			candidates = append(candidates, n)
		}
	}
	p.release = candidates[:min(len(candidates), active-p.quota, need)]
	slices.Sort(p.release)
	return p
}
