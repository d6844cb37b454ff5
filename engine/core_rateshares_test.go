package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/ratelimit"
)

// TestDemandSharesAddUpToOne: for any cluster of 1–6 live nodes, any split of the shards
// between them, any subset of them with a row for a downstream and any demands, the shares
// in force (demandShares for the nodes with a row, the share by shards for the others) add
// up to one — never more, so the downstream's rate holds across the nodes, and never less
// than one by more than rounding, so none of it is wasted.
func TestDemandSharesAddUpToOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 46))
	for c := range 20000 {
		nodes := 1 + rng.IntN(6)
		names := make([]string, nodes)
		byShards := map[string]float64{}
		left := 256
		for i := range names {
			names[i] = fmt.Sprintf("n%d", i)
			n := left
			if i < nodes-1 {
				n = 1 + rng.IntN(max(1, left-(nodes-1-i)))
				n = min(n, left-(nodes-1-i))
			}
			left -= n
			byShards[names[i]] = float64(n) / 256
		}
		rows := map[string]map[string]float64{rateNodesKey: byShards, "host:1": {}}
		for _, n := range names {
			if rng.IntN(3) > 0 {
				d := 0.0
				if rng.IntN(3) > 0 {
					d = rng.Float64() * 100
				}
				rows["host:1"][n] = d
			}
		}
		total := 0.0
		for _, d := range rows["host:1"] {
			total += d
		}
		sum := 0.0
		for _, n := range names {
			shares, known := demandShares(rows, n)
			s, own := shares["host:1"]
			if _, in := rows["host:1"][n]; in && total > 0 {
				if !own || s <= 0 || s > 1 {
					t.Fatalf("case %d: node %s with a row got share %v (own %v); rows %v", c, n, s, own, rows)
				}
			} else {
				if own {
					t.Fatalf("case %d: node %s without a row (or nobody wanting it) got a share %v; rows %v", c, n, s, rows)
				}
				s = byShards[n]
			}
			if known["host:1"] != (total > 0) {
				t.Fatalf("case %d: known %v with a total demand of %v", c, known, total)
			}
			if known[rateNodesKey] {
				t.Fatalf("case %d: the nodes' row is taken for a downstream", c)
			}
			sum += s
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Fatalf("case %d: the shares in force add up to %v, want 1; rows %v", c, sum, rows)
		}
	}
}

// TestDemandSharesFirstDemand: a downstream's first demand, on one node of three whose
// exchange comes first: it gets its share by shards, not the whole rate, while the other
// two give out theirs; once all three have rows, the one with the demand gets nearly all of
// it. Before the nodes wrote their shares by shards, the first node took the whole rate
// beside the others' thirds.
func TestDemandSharesFirstDemand(t *testing.T) {
	third := 1.0 / 3
	byShards := map[string]float64{"a": third, "b": third, "c": third}
	first := map[string]map[string]float64{rateNodesKey: byShards, "host:1": {"a": 40}}
	if s, _ := demandShares(first, "a"); math.Abs(s["host:1"]-third) > 1e-9 {
		t.Errorf("a's share at the first demand = %v, want its share by shards %v", s["host:1"], third)
	}
	all := map[string]map[string]float64{rateNodesKey: byShards, "host:1": {"a": 40, "b": 0, "c": 0}}
	sa, _ := demandShares(all, "a")
	sb, _ := demandShares(all, "b")
	if sa["host:1"] < 0.95 || math.Abs(sa["host:1"]+2*sb["host:1"]-1) > 1e-9 {
		t.Errorf("with every row: a %v, b and c %v each; want a ≥ 0.95 and a sum of one", sa["host:1"], sb["host:1"])
	}
	// A node of an older version writes no share by shards: the others share as before.
	old := map[string]map[string]float64{"host:1": {"a": 40}}
	if s, _ := demandShares(old, "a"); s["host:1"] != 1 {
		t.Errorf("without the nodes' row, a's share = %v, want 1", s["host:1"])
	}
}

// TestClaimsNeverExceedTheRate: nodes exchange one at a time (as the store runs them) while
// their demands change at random; each lowers its share before its exchange commits and
// raises it only after. At every moment the shares given out add up to at most one, however
// stale the demand each decided from. Once demands stop changing, a few rounds of exchanges
// bring every node to its share by demand, so none of the rate is left idle.
func TestClaimsNeverExceedTheRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(46, 3))
	const key = "host:1"
	for c := range 2000 {
		nodes := 2 + rng.IntN(4)
		names := make([]string, nodes)
		byShards, applied, demand := map[string]float64{}, map[string]float64{}, map[string]float64{}
		for i := range names {
			names[i] = fmt.Sprintf("n%d", i)
			byShards[names[i]] = 1 / float64(nodes)
			applied[names[i]] = byShards[names[i]] // no row yet: the share by shards
		}
		table := map[string]map[string]float64{}
		check := func(step int, when string) {
			sum := 0.0
			for _, s := range applied {
				sum += s
			}
			if sum > 1+1e-9 {
				t.Fatalf("case %d step %d (%s): the shares given out add up to %v: %v; table %v", c, step, when, sum, applied, table)
			}
		}
		exchange := func(step int, me string) {
			rows := map[string]map[string]float64{}
			for k, byNode := range table {
				rows[k] = map[string]float64{}
				for n, v := range byNode {
					rows[k][n] = v
				}
			}
			mine := map[string]float64{key: demand[me], rateNodesKey: byShards[me]}
			claims, _, out := nextClaims(rows, me, mine)
			next, ok := claims[key]
			if !ok {
				next = byShards[me]
			}
			applied[me] = min(applied[me], next) // lower, before the commit
			check(step, "lowered")
			for _, byNode := range table {
				delete(byNode, me)
			}
			for k, v := range out {
				if table[k] == nil {
					table[k] = map[string]float64{}
				}
				table[k][me] = v
			}
			check(step, "committed")
			applied[me] = next // after the commit
			check(step, "raised")
		}
		for step := range 60 {
			me := names[rng.IntN(nodes)]
			if rng.IntN(2) == 0 {
				demand[me] = float64(rng.IntN(4)) * rng.Float64() * 50
			}
			exchange(step, me)
		}
		for round := range 4 {
			for _, me := range names {
				exchange(1000+round, me)
			}
		}
		// Settled: each node's share is its share by demand from the same rows.
		sum := 0.0
		for _, me := range names {
			rows := map[string]map[string]float64{rateNodesKey: byShards, key: {}}
			for _, n := range names {
				rows[key][n] = demand[n]
			}
			want, _ := demandShares(rows, me)
			w, ok := want[key]
			if !ok {
				w = byShards[me]
			}
			if math.Abs(applied[me]-w) > 1e-9 {
				t.Fatalf("case %d: settled, %s gives out %v, want its share by demand %v (demands %v)", c, me, applied[me], w, demand)
			}
			sum += applied[me]
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Fatalf("case %d: settled, the shares add up to %v, want 1", c, sum)
		}
	}
}

// TestClaimsLapseWithoutAnExchange: a node gives out what its last committed exchange
// claimed until shortly before the others stop heeding that claim; with no later exchange
// committed by then it gives out a trickle (rateShareMin) of each downstream it claimed. An
// exchange committed in time keeps the claim in force.
func TestClaimsLapseWithoutAnExchange(t *testing.T) {
	t.Parallel()
	const key = "host:1"
	e := startEngine(t, persisttest.SQLite(t), func(c *Config) {
		c.RateLimit.PerKey = map[string]ratelimit.Limit{key: {Rate: 100, Burst: 10}}
	})
	r := &rateShares{e: e, claimed: map[string]float64{}}
	t.Cleanup(r.stop)
	taken := func() int {
		n := 0
		for range 5 {
			if ok, _ := e.gate.lim.Take(key); ok {
				n++
			}
		}
		return n
	}
	claims := map[string]float64{key: 0.5} // a burst of 5, 50 a second
	ttl := rateDemandTTL.Milliseconds()
	// Claimed at an exchange 100 ms short of its lapse; another commits before it.
	if err := r.commit(claims, e.now().UnixMilli()-ttl+rateClaimMargin.Milliseconds()+100); err != nil {
		t.Fatal(err)
	}
	if err := r.commit(claims, e.now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the first lapse's time is past; the bucket refills
	if n := taken(); n < 3 {
		t.Fatalf("with a claim in force %d of 5 tokens taken, want at least 3", n)
	}
	// No exchange after one whose claim lapses now: a trickle.
	if err := r.commit(claims, e.now().UnixMilli()-ttl); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the claim to lapse", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.claimed[key] == rateShareMin
	})
	time.Sleep(300 * time.Millisecond) // at the claim's rate the bucket would hold 5 again
	if n := taken(); n > 1 {
		t.Fatalf("after the claim lapsed %d of 5 tokens taken, want at most the one token kept", n)
	}
}
