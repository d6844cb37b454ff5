package failover

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wire"
	"github.com/axe-sched/axe/workflow"
)

// workflowDef is the diamond and fan-out the workflow scenarios run: a, c and f are HTTP
// steps that take 400 ms at the target (so runs are in flight at the fault), b runs on the
// executor process, f fans out over the run's params.items three at a time, d needs b, c
// and f. retries is every step's retry_count: the scenarios that audit for no lost step give
// each step one retry, so that an attempt recorded lost at the fault (an HTTP call in doubt,
// on_lost fail) runs again as the next attempt.
func (c *cluster) workflowDef(name string, retries int) map[string]any {
	httpStep := map[string]any{"type": "http", "url": c.target.srv.URL + "/step?ms=400"}
	exec := map[string]any{"type": "executor", "app": failoverApp, "handler": failoverHandler}
	step := func(name string, needs []string, cb map[string]any) map[string]any {
		return map[string]any{"name": name, "needs": needs, "callback": cb, "timeout_sec": 30,
			"retry_count": retries, "retry_interval_sec": 1}
	}
	f := step("f", []string{"a"}, httpStep)
	f["fan_out"], f["parallelism"] = "params.items", 3
	return map[string]any{"name": name, "steps": []map[string]any{
		step("a", nil, httpStep),
		step("b", []string{"a"}, exec),
		step("c", []string{"a"}, httpStep),
		f,
		step("d", []string{"b", "c", "f"}, httpStep),
	}}
}

// postAgain posts body to base+path until it answers want, asking again while a shard is
// still moving (503), the owner's connection broke (502) or no answer came, within
// roleTimeout; a create (want 201) answered 409 when sent again had landed before.
func (c *cluster) postAgain(base, path string, body any, want int) []byte {
	c.t.Helper()
	deadline := time.Now().Add(roleTimeout)
	for again := false; ; again = true {
		code, out, err := c.post(base, path, body)
		if err == nil && code == want {
			return out
		}
		if again && want == 201 && err == nil && code == 409 {
			// A create sent again after an answer that never came or a 503: the earlier
			// attempt landed (on a loaded box its answer can outlast the client's timeout).
			return out
		}
		if again && want == 202 && err == nil && code == 200 {
			return out // a keyed start sent again: the run its first attempt started
		}
		if (err == nil && code != 503 && code != 502) || time.Now().After(deadline) {
			c.t.Fatalf("POST %s: %d %s %v", path, code, out, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// getJSON reads base+path into out; ok is false on any failure.
func (c *cluster) getJSON(base, path string, out any) bool {
	resp, err := c.http.Get(base + path)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == 200 && json.Unmarshal(raw, out) == nil
}

// waitRunsEnded waits until no run of ids is running, reading through the nodes of live,
// and returns each run's view.
func (c *cluster) waitRunsEnded(live []*node, ids []string, timeout time.Duration) map[string]wire.WorkflowRunView {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	views := map[string]wire.WorkflowRunView{}
	for {
		open := 0
		for _, id := range ids {
			var v wire.WorkflowRunView
			ok := false
			for _, n := range live {
				if ok = c.getJSON(n.url, "/api/v1/workflow-runs/"+id, &v); ok {
					break
				}
			}
			if !ok || v.State == model.WorkflowRunning {
				open++
				continue
			}
			views[id] = v
		}
		if open == 0 {
			return views
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d of %d workflow runs still running after %s", open, len(ids), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// auditSteps checks the receivers against the runs: no step attempt received twice, every
// attempt received recorded with an end in its run (none lost silently), every run ended
// with every step ended. It returns the runs that failed.
func (c *cluster) auditSteps(views map[string]wire.WorkflowRunView) (failed []string) {
	c.t.Helper()
	seen := map[string]int{}
	for _, r := range append(c.target.all(), c.exe.all()...) {
		if _, _, _, _, ok := workflow.ParseTicket(r.Ticket); ok {
			seen[r.Ticket]++
		}
	}
	recorded := map[string]string{}
	for id, v := range views {
		for _, s := range v.Steps {
			if s.State != model.StepSucceeded && s.State != model.StepFailed && s.State != model.StepSkipped {
				c.t.Errorf("run %s (%s) ended with step %s %s", id, v.State, s.Name, s.State)
			}
			for _, a := range s.Attempts {
				if a.Ticket != "" {
					recorded[a.Ticket] = a.State
				}
			}
		}
		if v.State != model.WorkflowSucceeded {
			failed = append(failed, id)
		}
	}
	dups := 0
	for t, n := range seen {
		if n > 1 {
			dups++
			c.t.Errorf("step attempt %s received %d times", t, n)
		}
		st, ok := recorded[t]
		if !ok || st == model.StepRunning {
			c.t.Errorf("step attempt %s was received but its run records it %q", t, st)
		}
	}
	lost := 0
	for t, st := range recorded {
		if seen[t] == 0 && st == model.StepSucceeded {
			c.t.Errorf("step attempt %s recorded succeeded but never received", t)
		}
		if st == model.StepFailed {
			lost++
		}
	}
	for id, v := range views {
		for _, s := range v.Steps {
			for _, a := range s.Attempts {
				if a.State == model.StepFailed {
					c.t.Logf("run %s step %s attempt %d failed: %s", id, s.Name, a.Attempt, a.Error)
				}
			}
		}
	}
	c.t.Logf("workflow audit: %d step attempts received, %d duplicates, %d recorded failed (in doubt at the fault), %d runs not succeeded",
		len(seen), dups, lost, len(failed))
	return failed
}

// workflowRuns boots three nodes (proxied: each reaches MariaDB through its own fault
// proxy), waits until every node knows the executor, creates the scenario's workflows
// (workflowDef with retries) and starts their runs through every node. It returns the
// nodes, the runs' ids, and the victim: the node whose shards hold the most workflows.
func (c *cluster) workflowRuns(proxied bool, retries int) (nodes []*node, ids []string, victim *node, runsOwned int) {
	t := c.t
	t.Helper()
	nodes = c.bootShards(3, proxied)
	// Every node knows the executor process before a step is offered to it: a node learns
	// of an executor registered with another through its registry's refresh.
	deadline := time.Now().Add(roleTimeout)
	for _, n := range nodes {
		for {
			var ex struct {
				Executors []struct {
					App    string `json:"app"`
					Status string `json:"status"`
				} `json:"executors"`
			}
			if c.getJSON(n.url, "/api/v1/executors", &ex) && slices.ContainsFunc(ex.Executors, func(e struct {
				App    string `json:"app"`
				Status string `json:"status"`
			}) bool {
				return e.App == failoverApp && e.Status == "alive"
			}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s does not list the executor as alive", n.id)
			}
			time.Sleep(pollEvery)
		}
	}
	const workflows, runsEach = 9, 4
	for w := range workflows {
		name := fmt.Sprintf("wf-%d", w)
		c.postAgain(nodes[0].url, "/api/v1/workflows", c.workflowDef(name, retries), 201)
	}
	for r := range runsEach {
		for w := range workflows {
			name := fmt.Sprintf("wf-%d", w)
			params := map[string]any{"n": r, "items": []int{1, 2, 3, 4, 5}}
			// Keyed: a start sent again after an answer that never came starts no second run.
			body := c.postAgain(nodes[r%3].url, "/api/v1/workflows/"+name+"/run",
				map[string]any{"params": params, "key": fmt.Sprintf("%s-%d", name, r)}, 202)
			var run model.WorkflowRun
			if err := json.Unmarshal(body, &run); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, run.ID)
		}
	}
	// Every run the workflows list is one of those (the starts are keyed), and the audit takes
	// every one of them.
	for w := range workflows {
		var list wire.WorkflowRunList
		for i := 0; !c.getJSON(nodes[i%3].url, fmt.Sprintf("/api/v1/workflows/wf-%d/runs?limit=1000", w), &list); i++ {
			if time.Now().After(deadline.Add(roleTimeout)) {
				t.Fatalf("cannot list the runs of wf-%d", w)
			}
			time.Sleep(pollEvery)
		}
		for _, r := range list.Runs {
			if !slices.Contains(ids, r.ID) {
				t.Errorf("run %s of wf-%d was started beside the keyed ones", r.ID, w)
				ids = append(ids, r.ID)
			}
		}
	}
	// The node scheduling the most runs, by the cluster's view of its shards: read again
	// until every workflow's shard has an owner among the nodes (on a loaded box a node may
	// be between dropping its shards and taking them again).
	owner := map[int]int{} // node index → runs
	for owned := false; !owned; {
		var v clusterView
		for !c.getJSON(nodes[0].url, "/api/v1/cluster", &v) {
			time.Sleep(pollEvery)
		}
		byShard := map[int]string{}
		for _, n := range v.Nodes {
			for _, s := range parseShards(t, n.Shards) {
				byShard[s] = n.ID
			}
		}
		clear(owner)
		owned = true
		for w := range workflows {
			id := byShard[model.ShardOf(fmt.Sprintf("wf-%d", w))]
			i := slices.IndexFunc(nodes, func(n *node) bool { return n.id == id })
			if i < 0 {
				owned = false
				break
			}
			owner[i] += runsEach
		}
		if !owned {
			if time.Now().After(deadline.Add(roleTimeout)) {
				t.Fatalf("the cluster's view leaves some workflow's shard without an owner: %+v", v.Nodes)
			}
			time.Sleep(pollEvery)
		}
	}
	vi := 0
	for i, n := range owner {
		if n > owner[vi] {
			vi = i
		}
	}
	return nodes, ids, nodes[vi], owner[vi]
}

// TestShardsWorkflowKill runs workflow runs on three nodes and kills (SIGKILL) the node that
// schedules the most of them while their steps are in flight: the survivors take its runs
// up from their rows; no step attempt reaches a receiver twice, none is lost silently (an
// HTTP step in flight at the kill is recorded failed: lost, and its steps have no retry),
// every run ends; a rerun from the failed steps then makes every run succeed, still with no
// attempt received twice.
func TestShardsWorkflowKill(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	c := newShardCluster(t)
	nodes, ids, victim, owned := c.workflowRuns(false, 0)
	live := others(nodes, victim)
	time.Sleep(600 * time.Millisecond) // the first steps are in flight
	victim.kill(t)
	c.waitShards(live, false, c.ttl+c.slack()+10*time.Second)
	c.start(victim)
	views := c.waitRunsEnded(nodes, ids, 3*time.Minute)
	failed := c.auditSteps(views)
	t.Logf("kill -9 of %s, which scheduled %d of %d runs: %d runs to rerun", victim.id, owned, len(ids), len(failed))
	c.waitShards(nodes, true, roleTimeout)
	for _, id := range failed {
		// A shard still moving answers 503 with Retry-After, as a client is told to retry.
		deadline := time.Now().Add(roleTimeout)
		for {
			code, body, err := c.post(nodes[0].url, "/api/v1/workflow-runs/"+id+"/rerun", map[string]any{"from": "failed"})
			if err == nil && code == 202 {
				break
			}
			// A 502 (the owner's connection broke: it cannot tell whether the owner served
			// the call) is asked again; a 409 "still running" then says the first one did.
			if err == nil && code == 409 && strings.Contains(string(body), "still running") {
				break
			}
			if (err == nil && code != 503 && code != 502) || time.Now().After(deadline) {
				t.Fatalf("rerun %s: %d %s %v", id, code, body, err)
			}
			time.Sleep(time.Second)
		}
	}
	views = c.waitRunsEnded(nodes, ids, 3*time.Minute)
	if still := c.auditSteps(views); len(still) > 0 {
		t.Errorf("runs not succeeded after a rerun from the failed steps: %v", still)
	}
}

// TestShardsWorkflowSIGSTOP freezes the node that schedules the most workflow runs while
// their steps are in flight, past its leases: the others take its runs up from their rows
// (an HTTP step in doubt is recorded lost and, with a retry left, runs again as its next
// attempt; an executor step is adopted); woken, the frozen node gives its shards up by its
// own clock and neither starts nor ends a step of theirs. Audited at the receivers: no
// attempt received twice, and every run succeeds without an operator.
func TestShardsWorkflowSIGSTOP(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	c := newShardCluster(t)
	// Two retries, as in TestShardsWorkflowPartition: the shards move at the stop and again
	// when the woken node takes its share back.
	nodes, ids, victim, owned := c.workflowRuns(false, 2)
	live := others(nodes, victim)
	time.Sleep(600 * time.Millisecond) // the first steps are in flight
	fault := time.Now()
	victim.signal(t, syscall.SIGSTOP)
	took := c.waitShards(live, false, c.ttl+c.slack()+10*time.Second).Sub(fault)
	time.Sleep(time.Until(fault.Add(2 * c.ttl)))
	woke := time.Now()
	victim.signal(t, syscall.SIGCONT)
	c.waitShards(nodes, true, roleTimeout)
	t.Logf("SIGSTOP of %s, which scheduled %d of %d runs: its shards taken over in %s, woken after %s",
		victim.id, owned, len(ids), took.Round(time.Millisecond), woke.Sub(fault).Round(time.Millisecond))
	views := c.waitRunsEnded(nodes, ids, 3*time.Minute)
	if failed := c.auditSteps(views); len(failed) > 0 {
		t.Errorf("runs not succeeded after a SIGSTOP of their owner: %v", failed)
	}
	refused := 0
	for _, rat := range c.exe.staleRefusals() {
		if !rat.Before(woke) {
			refused++
		}
	}
	if refused > 0 {
		t.Errorf("the woken node sent the executor %d calls at a stale shard epoch after SIGCONT", refused)
	}
	if bad := epochRegressions(c.receipts()); len(bad) > 0 {
		t.Errorf("%d receipts at an epoch below one their shard had dispatched at, first: %v", len(bad), bad[:min(len(bad), 5)])
	}
}

// TestShardsWorkflowPartition cuts the node that schedules the most workflow runs off from
// MariaDB (a blackhole: its queries hang) while their steps are in flight: the others take
// its runs up after the TTL, the cut node stops driving them by itself; healed, it takes its
// share again. Audited as TestShardsWorkflowSIGSTOP: no attempt received twice, every run
// succeeds.
func TestShardsWorkflowPartition(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	c := newShardCluster(t)
	// Two retries: the shards move twice (the cut, then the hand-back to the healed node),
	// and each move can leave a step's attempt in doubt, recorded lost: the hand-back's drain
	// is bounded by the TTL, which a retry in flight can outlive on a loaded box (seen in a
	// whole-suite run: 7 of 36 runs failed, a step's first attempt lost at the cut and its
	// retry at the hand-back).
	nodes, ids, victim, owned := c.workflowRuns(true, 2)
	live := others(nodes, victim)
	time.Sleep(600 * time.Millisecond) // the first steps are in flight
	fault := time.Now()
	if err := victim.proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	took := c.waitShards(live, false, c.ttl+c.slack()+10*time.Second).Sub(fault)
	time.Sleep(time.Until(fault.Add(2 * c.ttl)))
	if err := victim.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	c.waitShards(nodes, true, roleTimeout)
	t.Logf("partition of %s from the database, which scheduled %d of %d runs: its shards taken over in %s",
		victim.id, owned, len(ids), took.Round(time.Millisecond))
	views := c.waitRunsEnded(nodes, ids, 3*time.Minute)
	if failed := c.auditSteps(views); len(failed) > 0 {
		t.Errorf("runs not succeeded after a partition of their owner: %v", failed)
	}
	if bad := epochRegressions(c.receipts()); len(bad) > 0 {
		t.Errorf("%d receipts at an epoch below one their shard had dispatched at, first: %v", len(bad), bad[:min(len(bad), 5)])
	}
}

// parseShards reads a shard set as the cluster view writes it ("0-84,170").
func parseShards(t *testing.T, text string) []int {
	t.Helper()
	set, err := model.ParseShardSet(text)
	if err != nil {
		t.Fatalf("shard set %q: %v", text, err)
	}
	return set.List()
}

// TestShardsWorkflowBackfillKill starts a backfill of a cron workflow (one run per minute
// of the last hour, four at once) and kills (SIGKILL) the node that pumps it, the one that
// schedules the workflow's shard, in the middle: the node that takes the shard over goes on
// from the stored cursor. Every minute of the range ends with exactly one run, succeeded
// (a step in doubt at the kill is retried), the backfill reads done with every time started
// once, and no step attempt reaches the receiver twice.
func TestShardsWorkflowBackfillKill(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	c := newShardCluster(t)
	nodes := c.bootShards(3, false)
	const name = "wf-backfill"
	def := map[string]any{"name": name, "trigger": "cron", "cron": "* * * * *", "steps": []map[string]any{{
		"name": "a", "callback": map[string]any{"type": "http", "url": c.target.srv.URL + "/step?ms=300"},
		"timeout_sec": 30, "retry_count": 1, "retry_interval_sec": 1,
	}}}
	c.postAgain(nodes[0].url, "/api/v1/workflows", def, 201)
	// Its schedule paused: a backfill runs all the same, and no cron run joins the audit
	// after the runs were listed.
	c.postAgain(nodes[0].url, "/api/v1/workflows/"+name+"/pause", map[string]any{}, 200)
	to := time.Now().Truncate(time.Minute)
	from := to.Add(-time.Hour)
	c.postAgain(nodes[0].url, "/api/v1/workflows/"+name+"/backfill", map[string]any{
		"from": from.UTC().Format(time.RFC3339), "to": to.UTC().Format(time.RFC3339), "parallel": 4}, 202)
	var v clusterView
	for !c.getJSON(nodes[0].url, "/api/v1/cluster", &v) {
		time.Sleep(pollEvery)
	}
	var victim *node
	for _, n := range v.Nodes {
		if slices.Contains(parseShards(t, n.Shards), model.ShardOf(name)) {
			victim = nodes[slices.IndexFunc(nodes, func(x *node) bool { return x.id == n.ID })]
		}
	}
	if victim == nil {
		t.Fatal("no node holds the workflow's shard")
	}
	live := others(nodes, victim)
	var st wire.WorkflowBackfillStatus
	deadline := time.Now().Add(time.Minute)
	for !c.getJSON(live[0].url, "/api/v1/workflows/"+name+"/backfill", &st) || st.Started < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("the backfill did not start 8 runs within a minute: %+v", st)
		}
		time.Sleep(pollEvery)
	}
	victim.kill(t)
	t.Logf("kill -9 of %s, which pumped the backfill, at %d of %d times started", victim.id, st.Started, st.Times)
	c.waitShards(live, false, c.ttl+c.slack()+10*time.Second)
	deadline = time.Now().Add(3 * time.Minute)
	for !c.getJSON(live[0].url, "/api/v1/workflows/"+name+"/backfill", &st) || !st.Done {
		if time.Now().After(deadline) {
			t.Fatalf("the backfill did not end within 3 minutes after the kill: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st.Times != 60 || st.Started+st.Skipped != st.Times || st.Skipped != 0 {
		t.Errorf("backfill status %+v: want 60 times, each started once", st)
	}
	var list wire.WorkflowRunList
	if !c.getJSON(live[0].url, "/api/v1/workflows/"+name+"/runs?limit=1000", &list) {
		t.Fatal("cannot list the workflow's runs")
	}
	// Every run of the workflow is audited: a cron run started before the pause calls the
	// receiver too.
	at := map[int64]int{}
	var ids []string
	for _, r := range list.Runs {
		ids = append(ids, r.ID)
		if r.Trigger == "backfill" {
			at[r.ScheduledAt]++
		}
	}
	for m := from; m.Before(to); m = m.Add(time.Minute) {
		if n := at[m.UnixMilli()]; n != 1 {
			t.Errorf("logical time %s has %d backfill runs, want 1", m.UTC().Format(time.RFC3339), n)
		}
	}
	views := c.waitRunsEnded(live, ids, 3*time.Minute)
	if failed := c.auditSteps(views); len(failed) > 0 {
		t.Errorf("backfill runs not succeeded after a kill -9 of the node pumping it: %v", failed)
	}
}
