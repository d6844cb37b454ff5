package daemon_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/admin"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/ratelimit"
)

// Tests of `axe serve --ha` with every node scheduling (shards.go), three nodes in this
// process on one MariaDB database.

// shardNodes starts n nodes that schedule by shard on dsn and waits until they share the 256
// shards evenly.
func shardNodes(t *testing.T, dsn string, n int, mod func(*axedaemon.Config)) []*daemontest.Daemon {
	t.Helper()
	var ds []*daemontest.Daemon
	for i := range n {
		ds = append(ds, shardNode(t, dsn, i+1, mod))
	}
	testwait.For(t, daemontest.WaitTimeout, "the shards shared evenly", func() bool {
		total := 0
		for _, d := range ds {
			code, r := d.Readyz(t, "")
			set, err := model.ParseShardSet(r.Shards)
			// Held and served: a shard still being recovered refuses writes (503) until it is.
			if code != http.StatusOK || err != nil || r.NotServing != "" || set.Len() < model.ShardCount/n || set.Len() > model.ShardCount/n+1 {
				return false
			}
			total += set.Len()
		}
		return total == model.ShardCount
	})
	return ds
}

// shardNode starts node nID of a cluster scheduling by shard on dsn (TTL 10 s, renew 2 s),
// without waiting for its share. The lease rides out 8 s without a renewal: with TTL 3 s a
// loaded box (the suite runs four tests a package at a time) dropped shards mid-test, and
// the runs in flight on them were recorded lost, never to reach the downstream.
func shardNode(t *testing.T, dsn string, id int, mod func(*axedaemon.Config)) *daemontest.Daemon {
	t.Helper()
	return daemontest.Start(t, dsn, func(c *axedaemon.Config) {
		c.HA = true
		c.HAMode = axedaemon.HAModeShards
		c.NodeID = fmt.Sprintf("n%d", id)
		c.LeaseTTL, c.LeaseRenew = 10*time.Second, 2*time.Second
		if mod != nil {
			mod(c)
		}
	})
}

// owner returns the node whose /readyz names the shard of task, waiting for one: on a
// loaded box a node can miss its renewals and the shard be between owners for a while.
func owner(t *testing.T, ds []*daemontest.Daemon, task string) *daemontest.Daemon {
	t.Helper()
	var found *daemontest.Daemon
	testwait.For(t, daemontest.WaitTimeout, "a node holding the shard of "+task, func() bool {
		for _, d := range ds {
			_, r := d.Readyz(t, "")
			if set, err := model.ParseShardSet(r.Shards); err == nil && set.Has(model.ShardOf(task)) {
				found = d
				return true
			}
		}
		return false
	})
	if found != nil {
		return found
	}
	t.Fatalf("no node holds the shard of %s", task)
	return nil
}

// TestShardsShareTheRateLimit: three nodes each given the same limit of 20 dispatches a
// second to one downstream dispatch, together, at most 20 a second: a node gives out the
// share of the limit its shards are of the 256. 200 one-shot tasks due at once, spread over
// the three nodes' shards, each reach the downstream once; the nodes' recorded dispatches
// span at least (200 − 3) / 20 s, and no five seconds of them hold more than 6 × 20 (a
// second's worth for a token taken before the window) plus one burst token per node.
func TestShardsShareTheRateLimit(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	hook := daemontest.NewHook(t)
	u, err := url.Parse(hook.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	const rate, tasks = 20, 200
	ds := shardNodes(t, dsn, 3, func(c *axedaemon.Config) {
		c.Engine.RateLimit.PerKey = map[string]ratelimit.Limit{u.Host: {Rate: rate, Burst: 1}}
	})
	specs := make([]map[string]any, tasks)
	for i := range specs {
		specs[i] = daemontest.Spec(fmt.Sprintf("rl-%03d", i), hook.URL("/ok"), "trigger", "delay", "delay_ms", 1500)
	}
	ds[0].MustJSON(t, http.StatusOK, "POST", "/api/v1/tasks/batch", specs, nil)
	owners := map[string]int{}
	for _, s := range specs {
		owners[owner(t, ds, s["name"].(string)).Addr]++
	}
	if len(owners) != 3 {
		t.Fatalf("the tasks are scheduled by %d nodes, want the three: %v", len(owners), owners)
	}
	var at []time.Time
	testwait.For(t, 60*time.Second, "every task to reach the downstream", func() bool {
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
	span := at[len(at)-1].Sub(at[0])
	// The dispatches are judged by when each node took its token and recorded the send
	// (the run's dispatched_at), over windows of several seconds, allowed one second's worth
	// more for a token taken just before a window and recorded in it. Arrivals at the hook
	// are not: beside a CPU hog the hook's own process stalls for seconds and takes the
	// sends of several seconds at once (125 arrivals within 5 s, against 123).
	const window = 5 * time.Second
	var sent []time.Time
	for _, s := range specs {
		var out struct {
			Runs []model.Run `json:"runs"`
		}
		ds[0].MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs?task="+s["name"].(string), nil, &out)
		for _, r := range out.Runs {
			sent = append(sent, time.UnixMilli(r.DispatchedAt))
		}
	}
	if len(sent) != tasks {
		t.Fatalf("%d runs recorded for %d tasks", len(sent), tasks)
	}
	sort.Slice(sent, func(i, j int) bool { return sent[i].Before(sent[j]) })
	// Over the whole drain: rate per second and one token per node at the start.
	if least, got := time.Duration(float64(tasks-3)/rate*float64(time.Second)), sent[len(sent)-1].Sub(sent[0]); got < least*95/100 {
		t.Errorf("%d dispatches in %s: %.1f/s, over the limit of %d/s (the least span is %s)", tasks, got, float64(tasks-1)/got.Seconds(), rate, least)
	}
	most, j := 0, 0
	for i := range sent {
		for sent[i].Sub(sent[j]) >= window {
			j++
		}
		most = max(most, i-j+1)
	}
	if limit := int(window/time.Second+1)*rate + 3; most > limit {
		t.Errorf("%d dispatches within %s, over %d (the limit for %s and a second) + 3 (a burst token per node)", most, window, limit-3, window)
	}
	t.Logf("%d dispatches from 3 nodes (%v tasks each) in %s at the hook, %s as recorded: at most %d recorded in any %s (limit %d/s, burst 1)",
		tasks, owners, span.Round(time.Millisecond), sent[len(sent)-1].Sub(sent[0]), most, window, rate)
}

// TestShardsAPIFromAnyNode: every node answers every call: a create, a pause and a run-now
// through a node that does not schedule the task reach the one that does; reads are the
// same everywhere; a bulk pause through one node pauses every node's tasks and counts them
// once; a call passed on to a node that does not schedule its shard (it moved) is answered
// 503 with Retry-After instead of being passed on again; /readyz names each node's shards.
func TestShardsAPIFromAnyNode(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	hook := daemontest.NewHook(t)
	ds := shardNodes(t, dsn, 3, nil)
	var names []string
	for i := range 30 {
		name := fmt.Sprintf("any-%02d", i)
		names = append(names, name)
		ds[i%3].Create(t, daemontest.Spec(name, hook.URL("/ok"), "trigger", "manual", "group", "any"))
	}
	for _, name := range names {
		own := owner(t, ds, name)
		var via *daemontest.Daemon
		for _, d := range ds {
			if d != own {
				via = d
				break
			}
		}
		for _, d := range ds {
			if got := d.Get(t, name); got.Name != name {
				t.Fatalf("GET %s on %s = %+v", name, d.Addr, got)
			}
		}
		if name == names[0] {
			ticket := via.RunNow(t, name, nil)
			if run := own.WaitRun(t, name, ticket); run.Result != model.ResultSuccess {
				t.Errorf("a run-now through a node that does not schedule %s ended %s", name, run.Result)
			}
			// Passed on once already (signed by a node of the cluster), a call to a node that
			// does not schedule the shard is refused, not passed on again.
			path := "/api/v1/tasks/" + name + "/pause"
			sig := admin.PeerSignature(peerSecretOf(t, dsn), time.Now(), "POST", path, "elsewhere", "", nil)
			code, hdr, body := via.Send(t, "POST", path, nil, true, "X-Axe-Routed", "elsewhere", "X-Axe-Peer-Signature", sig)
			if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(string(body), "shard") {
				t.Errorf("a routed pause on a node without the shard = %d %v %s, want 503 with Retry-After", code, hdr, body)
			}
		}
	}
	var out struct {
		Affected int `json:"affected"`
	}
	ds[1].MustJSON(t, http.StatusOK, "POST", "/api/v1/tasks/bulk/pause", map[string]any{"group": "any"}, &out)
	if out.Affected != len(names) {
		t.Errorf("a bulk pause through one node affected %d tasks, want the %d of every node", out.Affected, len(names))
	}
	for _, name := range names {
		if got := ds[2].Get(t, name); got.Runtime.State != model.StatePaused {
			t.Errorf("%s is %s after the bulk pause, want PAUSED", name, got.Runtime.State)
		}
	}
	var shards []string
	for _, d := range ds {
		_, r := d.Readyz(t, "")
		if r.Role != "owner" || r.Status != "ready" {
			t.Errorf("/readyz of %s = %+v, want a ready owner", d.Addr, r)
		}
		shards = append(shards, r.Shards)
	}
	slices.Sort(shards)
	t.Logf("the nodes schedule shards %v", shards)
}

// TestShardsAlertAnExecutorLossOnce: an executor registered through one node and then silent
// is judged lost by every node (each stops dispatching to it and resolves its own runs on
// it), but recorded lost and alerted once, by the holder of shard 0; every node reads the
// registry from the database, so each lists the executor.
func TestShardsAlertAnExecutorLossOnce(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	ds := shardNodes(t, dsn, 3, func(c *axedaemon.Config) {
		c.Engine.HeartbeatInterval = 200 * time.Millisecond
		c.Engine.LostAfter = time.Second
	})
	ds[1].MustJSON(t, http.StatusOK, "POST", "/api/v1/executors/register",
		map[string]any{"app": "quiet", "address": "127.0.0.1:1", "handlers": []string{"h"}}, nil)
	type executors struct {
		Executors []model.Executor `json:"executors"`
	}
	for _, d := range ds {
		testwait.For(t, daemontest.WaitTimeout, "every node to list the executor lost", func() bool {
			var got executors
			d.MustJSON(t, http.StatusOK, "GET", "/api/v1/executors", nil, &got)
			return len(got.Executors) == 1 && got.Executors[0].Status == "lost"
		})
	}
	time.Sleep(2 * time.Second) // every node's reaper has had many turns
	var alerts struct {
		Actions []model.Action `json:"actions"`
	}
	ds[2].MustJSON(t, http.StatusOK, "GET", "/api/v1/alerts", nil, &alerts)
	n := 0
	for _, a := range alerts.Actions {
		if a.Action == "executor_lost" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the loss of one executor was alerted %d times by three nodes, want once: %+v", n, alerts.Actions)
	}
}

// TestShardsBatchCreateWhileShardsMove: batches of creates sent to the first node while two
// more join and take their shares: a part whose shard moved under it (its node answers 503,
// nothing of it written) is routed again to the new owner, so every batch answers 200 with
// every item created, and each task exists once.
func TestShardsBatchCreateWhileShardsMove(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	hook := daemontest.NewHook(t)
	first := shardNodes(t, dsn, 1, nil)[0]
	joined := make(chan []*daemontest.Daemon, 1)
	go func() {
		// Started off the test's goroutine: the batches go on while they boot and take shards.
		var ds []*daemontest.Daemon
		defer func() { joined <- ds }() // also if a start fails: the test then ends failed, not hung
		for i := 2; i <= 3; i++ {
			ds = append(ds, shardNode(t, dsn, i, nil))
		}
	}()
	const batches, size = 12, 100
	total := 0
	for b := range batches {
		var specs []map[string]any
		for i := range size {
			specs = append(specs, daemontest.Spec(fmt.Sprintf("mv-%02d-%03d", b, i), hook.URL("/ok"), "trigger", "manual"))
		}
		var res struct {
			Created int `json:"created"`
		}
		code, body := first.Call(t, "POST", "/api/v1/tasks/batch", specs)
		if code != http.StatusOK {
			t.Fatalf("batch %d answered %d: %s", b, code, body)
		}
		if err := json.Unmarshal(body, &res); err != nil || res.Created != size {
			t.Fatalf("batch %d: %s, want %d created", b, body, size)
		}
		total += res.Created
		time.Sleep(300 * time.Millisecond)
	}
	<-joined
	db, err := sql.Open("mysql", strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM task_def WHERE name LIKE 'mv-%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != batches*size || total != n {
		t.Errorf("%d tasks stored, %d counted created, want %d", n, total, batches*size)
	}
}
