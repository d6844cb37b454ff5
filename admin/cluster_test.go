package admin_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/persist"
)

// clusterView is GET /api/v1/cluster as a client reads it.
type clusterView struct {
	Mode       string `json:"mode"`
	ShardCount int    `json:"shard_count"`
	Unowned    string `json:"unowned"`
	Nodes      []struct {
		ID         string `json:"id"`
		Role       string `json:"role"`
		Shards     string `json:"shards"`
		ShardsHeld int    `json:"shards_held"`
		EpochMin   int64  `json:"epoch_min"`
		EpochMax   int64  `json:"epoch_max"`
	} `json:"nodes"`
	Shards []struct {
		Shard  int    `json:"shard"`
		Holder string `json:"holder"`
		Epoch  int64  `json:"epoch"`
		Held   bool   `json:"held"`
	} `json:"shards"`
}

// TestClusterView reads GET /api/v1/cluster of a single node, then of the same database
// once two nodes hold shard leases: each node with its ranges and epochs, the shards no one
// holds, and a shard whose lease ran out counted as unowned.
func TestClusterView(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		var v clusterView
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/cluster", nil, &v)
		if v.Mode != "single" || v.ShardCount != 256 || v.Unowned != "" || len(v.Nodes) != 0 || len(v.Shards) != 0 {
			t.Fatalf("a single node's cluster = %+v", v)
		}
		if code, r := d.Readyz(t, ""); code != http.StatusOK || r.Status != "ready" || r.Shards != "0-255" {
			t.Fatalf("a single node's /readyz = %d %+v, want ready with shards 0-255", code, r)
		}

		st, err := persist.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		ctx := t.Context()
		for _, id := range []string{"n1", "n2"} {
			if _, err := st.ClaimNode(ctx, persist.Node{ID: id, Advertise: "http://" + id, Role: "owner", Instance: id}, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		span := func(lo, hi int) []int {
			var out []int
			for n := lo; n <= hi; n++ {
				out = append(out, n)
			}
			return out
		}
		if _, err := st.TakeShards(ctx, "n1", span(0, 99), time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := st.TakeShards(ctx, "n2", span(100, 199), time.Minute); err != nil {
			t.Fatal(err)
		}
		// Shard 150 moves to n1 at epoch 2; shard 210 is taken with no time left.
		if err := st.ReleaseShards(ctx, "n2", []persist.ShardFence{{Shard: 150, Epoch: 1}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.TakeShards(ctx, "n1", []int{150}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := st.TakeShards(ctx, "n2", []int{210}, 0); err != nil {
			t.Fatal(err)
		}
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/cluster", nil, &v)
		if v.Mode != "sharded" || v.Unowned != "200-255" || len(v.Nodes) != 2 {
			t.Fatalf("the cluster of two shard holders = mode %q, unowned %q, %d nodes", v.Mode, v.Unowned, len(v.Nodes))
		}
		n1, n2 := v.Nodes[0], v.Nodes[1]
		if n1.ID != "n1" || n1.Shards != "0-99,150" || n1.ShardsHeld != 101 || n1.EpochMin != 1 || n1.EpochMax != 2 || n1.Role != "owner" {
			t.Errorf("n1 = %+v", n1)
		}
		if n2.ID != "n2" || n2.Shards != "100-149,151-199" || n2.ShardsHeld != 99 || n2.EpochMin != 1 || n2.EpochMax != 1 {
			t.Errorf("n2 = %+v", n2)
		}
		if len(v.Shards) != 201 {
			t.Fatalf("%d shard rows, want 201 (0-199 and 210)", len(v.Shards))
		}
		i := slices.IndexFunc(v.Shards, func(s struct {
			Shard  int    `json:"shard"`
			Holder string `json:"holder"`
			Epoch  int64  `json:"epoch"`
			Held   bool   `json:"held"`
		}) bool {
			return s.Shard == 210
		})
		if i < 0 || v.Shards[i].Held || v.Shards[i].Holder != "n2" {
			t.Errorf("shard 210, taken with no time left, = %+v; want its row, not held", v.Shards[i])
		}
	})
}
