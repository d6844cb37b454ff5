package failover

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wire"
	"github.com/axe-sched/axe/workflow"
)

// workflowDef is the diamond the workflow scenarios run: a and c are HTTP steps that take
// 400 ms at the target (so runs are in flight at the fault), b runs on the executor
// process, d needs b and c.
func (c *cluster) workflowDef(name string) map[string]any {
	httpStep := map[string]any{"type": "http", "url": c.target.srv.URL + "/step?ms=400"}
	exec := map[string]any{"type": "executor", "app": failoverApp, "handler": failoverHandler}
	return map[string]any{"name": name, "steps": []map[string]any{
		{"name": "a", "callback": httpStep, "timeout_sec": 30},
		{"name": "b", "needs": []string{"a"}, "callback": exec, "timeout_sec": 30},
		{"name": "c", "needs": []string{"a"}, "callback": httpStep, "timeout_sec": 30},
		{"name": "d", "needs": []string{"b", "c"}, "callback": httpStep, "timeout_sec": 30},
	}}
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

// TestShardsWorkflowKill runs workflow runs on three nodes and kills (SIGKILL) the node that
// schedules the most of them while their steps are in flight: the survivors take its runs
// up from their rows; no step attempt reaches a receiver twice, none is lost silently (an
// HTTP step in flight at the kill is recorded failed: lost), every run ends; a rerun from
// the failed steps then makes every run succeed, still with no attempt received twice.
func TestShardsWorkflowKill(t *testing.T) {
	t.Parallel()
	c := newShardCluster(t)
	nodes := c.bootShards(3, false)
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
	owner := map[int]int{} // node index → runs
	var ids []string
	for w := range workflows {
		name := fmt.Sprintf("wf-%d", w)
		if code, body, err := c.post(nodes[0].url, "/api/v1/workflows", c.workflowDef(name)); err != nil || code != 201 {
			t.Fatalf("create %s: %d %s %v", name, code, body, err)
		}
	}
	for r := range runsEach {
		for w := range workflows {
			name := fmt.Sprintf("wf-%d", w)
			code, body, err := c.post(nodes[r%3].url, "/api/v1/workflows/"+name+"/run", map[string]any{"params": map[string]any{"n": r}})
			if err != nil || code != 202 {
				t.Fatalf("run %s: %d %s %v", name, code, body, err)
			}
			var run model.WorkflowRun
			if err := json.Unmarshal(body, &run); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, run.ID)
		}
	}
	// The victim: the node whose shards hold the most workflows.
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
	for w := range workflows {
		id := byShard[model.ShardOf(fmt.Sprintf("wf-%d", w))]
		owner[slices.IndexFunc(nodes, func(n *node) bool { return n.id == id })] += runsEach
	}
	vi := 0
	for i, n := range owner {
		if n > owner[vi] {
			vi = i
		}
	}
	victim := nodes[vi]
	live := others(nodes, victim)
	time.Sleep(600 * time.Millisecond) // the first steps are in flight
	victim.kill(t)
	c.waitShards(live, false, c.ttl+shardSlack+10*time.Second)
	c.start(victim)
	views := c.waitRunsEnded(nodes, ids, 3*time.Minute)
	failed := c.auditSteps(views)
	t.Logf("kill -9 of %s, which scheduled %d of %d runs: %d runs to rerun", victim.id, owner[vi], len(ids), len(failed))
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

// parseShards reads a shard set as the cluster view writes it ("0-84,170").
func parseShards(t *testing.T, text string) []int {
	t.Helper()
	set, err := model.ParseShardSet(text)
	if err != nil {
		t.Fatalf("shard set %q: %v", text, err)
	}
	return set.List()
}
