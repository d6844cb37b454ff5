package daemon_test

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/ratelimit"
)

// skewedRate runs nodes sharded nodes on one MariaDB database, each given a limit of rate
// dispatches a second to one downstream, creates tasks one-shot tasks due at once whose
// names all fall in the first node's shards, and returns the rate the nodes dispatched them
// at over the drain (dispatchRate) and the most arrivals at the downstream in any window of
// window.
//
// keyed, the tasks' rate_key is tenant:{params.tenant}, all of tenant acme, and the limit is
// the pattern tenant:*'s.
func skewedRate(t *testing.T, nodes int, byShards, keyed bool, rate, tasks int, window time.Duration) (got float64, most int) {
	t.Helper()
	dsn := persisttest.MySQLSchemaDSN(t)
	hook := daemontest.NewHook(t)
	u, err := url.Parse(hook.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	ds := shardNodes(t, dsn, nodes, func(c *axedaemon.Config) {
		c.Engine.RateLimit.PerKey = map[string]ratelimit.Limit{u.Host: {Rate: float64(rate), Burst: 4}}
		if keyed {
			c.Engine.RateLimit.PerKey = map[string]ratelimit.Limit{"tenant:*": {Rate: float64(rate), Burst: 4}}
		}
		c.Engine.RateShareByShards = byShards
	})
	_, r := ds[0].Readyz(t, "")
	set, err := model.ParseShardSet(r.Shards)
	if err != nil {
		t.Fatal(err)
	}
	var specs []map[string]any
	for i := 0; len(specs) < tasks; i++ {
		name := fmt.Sprintf("skew-%05d", i)
		if set.Has(model.ShardOf(name)) {
			spec := daemontest.Spec(name, hook.URL("/ok"), "trigger", "delay", "delay_ms", 1500)
			if keyed {
				spec["rate_key"], spec["params"] = "tenant:{params.tenant}", map[string]any{"tenant": "acme"}
			}
			specs = append(specs, spec)
		}
	}
	ds[0].MustJSON(t, http.StatusOK, "POST", "/api/v1/tasks/batch", specs, nil)
	var at []time.Time
	testwait.For(t, 120*time.Second, "every task to reach the downstream", func() bool {
		at = at[:0]
		for _, s := range specs {
			for _, c := range hook.CallsOf(s["name"].(string)) {
				at = append(at, c.At)
			}
		}
		return len(at) >= tasks
	})
	if len(at) != tasks {
		t.Fatalf("%d calls for %d tasks: some fired twice", len(at), tasks)
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	j := 0
	for i := range at {
		for at[i].Sub(at[j]) >= window {
			j++
		}
		most = max(most, i-j+1)
	}
	return dispatchRate(t, ds[0], tasks), most
}

// dispatchRate is the rate at which the nodes sent the runs of tasks tasks, all of them
// recorded: the span of their dispatch instants, as the nodes recorded them after the rate
// gate. Arrival times at the hook would do on a quiet box; on a loaded one a late first
// arrival (a connection opened while the test process was starved) shortens the span, and
// one node alone measured so "got" 26 a second of a limit of 20.
func dispatchRate(t *testing.T, d *daemontest.Daemon, tasks int) float64 {
	t.Helper()
	var page struct {
		Runs []model.Run `json:"runs"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs?limit=1000", nil, &page)
	if len(page.Runs) != tasks {
		t.Fatalf("%d runs recorded for %d tasks", len(page.Runs), tasks)
	}
	first, last := page.Runs[0].DispatchedAt, page.Runs[0].DispatchedAt
	for _, r := range page.Runs {
		first, last = min(first, r.DispatchedAt), max(last, r.DispatchedAt)
	}
	return float64(tasks-1) / (float64(last-first) / 1000)
}

// TestShardsRateShareByDemand: a downstream limited to 20 dispatches a second whose 200
// fires all fall in one node's shards. Shared by shard count, the node with the fires gives
// out a third of the rate, and two thirds of it are wasted (shown, not asserted beyond it
// being under half). Shared by demand (the default: the nodes exchange their demand through
// the store), the downstream gets within 10% of what one node alone gets of the same load
// in the same run (a loaded box's late timers cost both alike), and never more than its
// rate: no window of 5 s holds more than its 6 seconds' worth plus a burst per node (as
// TestShardsShareTheRateLimit judges arrivals). The burst is 4: with a burst of 1 every
// late wake of the rate gate's timer on a busy machine loses the time it was late, which
// costs the rate more than the sharing does (87% of the rate measured so, against 96%).
func TestShardsRateShareByDemand(t *testing.T) {
	t.Parallel()
	const rate, tasks = 20, 200
	const window = 5 * time.Second
	t.Run("by shards", func(t *testing.T) {
		got, _ := skewedRate(t, 3, true, false, rate, 60, window)
		t.Logf("shared by shards: %.1f dispatches/s of a limit of %d/s (%.0f%%)", got, rate, 100*got/rate)
		if got > rate/2 {
			t.Errorf("shared by shards, one node's fires got %.1f/s of %d/s: the waste this test shows is gone", got, rate)
		}
	})
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("by demand keyed=%v", keyed), func(t *testing.T) {
			alone, _ := skewedRate(t, 1, false, keyed, rate, tasks, window)
			got, most := skewedRate(t, 3, false, keyed, rate, tasks, window)
			t.Logf("shared by demand (keyed %v): %.1f dispatches/s of a limit of %d/s (%.0f%%), at most %d in %s; one node alone: %.1f/s (%.0f%%)",
				keyed, got, rate, 100*got/rate, most, window, alone, 100*alone/rate)
			if got < alone*0.9 {
				t.Errorf("shared by demand, one node's fires got %.1f/s of %d/s, one node alone %.1f/s: more than 10%% of the rate wasted", got, rate, alone)
			}
			if got > rate*1.1 {
				t.Errorf("shared by demand, the downstream got %.1f/s, over its limit of %d/s", got, rate)
			}
			if limit := int(window/time.Second+1)*rate + 3*4; most > limit {
				t.Errorf("%d dispatches within %s, over %d", most, window, limit)
			}
		})
	}
}

// TestShardsKeyedLimitFromAnyNode: a pattern limit tenant:* of 1 set through one node of a
// sharded cluster is in force on every node (the API fans it out, '*' and all); a run-now of
// tenant a through another node takes tenant:a's slot, the third node lists tenant:a in use
// across the cluster, and a second run-now of tenant a is refused (429) wherever it is asked,
// one of tenant b goes.
func TestShardsKeyedLimitFromAnyNode(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	hook := daemontest.NewHook(t)
	ds := shardNodes(t, dsn, 3, nil)
	var v client.ConcurrencyLimit
	ds[0].MustJSON(t, http.StatusOK, "PUT", "/api/v1/concurrency-limits/key/tenant:%2A", map[string]any{"max": 1}, &v)
	if v.Name != "tenant:*" || v.Max != 1 {
		t.Fatalf("PUT answered %+v", v)
	}
	ds[1].Create(t, daemontest.Spec("tn-any", hook.URL("/hang"), "trigger", "manual", "concurrency_key", "tenant:{params.tenant}"))
	ds[1].RunNow(t, "tn-any", map[string]any{"params": map[string]any{"tenant": "a"}})
	hook.WaitCalls(t, "tn-any", 1, daemontest.WaitTimeout)
	for _, d := range ds {
		var got client.ConcurrencyLimit
		d.MustJSON(t, http.StatusOK, "GET", "/api/v1/concurrency-limits/key/tenant:*", nil, &got)
		if got.Max != 1 || got.InUse != 1 || len(got.Keys) != 1 || got.Keys[0].Key != "tenant:a" || got.Keys[0].InUse != 1 {
			t.Errorf("the pattern on %s: %+v", d.Addr, got)
		}
		d.APIError(t, http.StatusTooManyRequests, "POST", "/api/v1/tasks/tn-any/run", map[string]any{"params": map[string]any{"tenant": "a"}})
	}
	ds[2].RunNow(t, "tn-any", map[string]any{"params": map[string]any{"tenant": "b"}})
	hook.WaitCalls(t, "tn-any", 2, daemontest.WaitTimeout)
	hook.ReleaseHung()
}
