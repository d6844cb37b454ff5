package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
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
