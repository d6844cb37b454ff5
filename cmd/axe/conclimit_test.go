package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/testwait"
)

// execRun is a run as GET /api/v1/tasks/{name}/runs answers it, with its times.
type execRun struct {
	Ticket       string `json:"ticket"`
	Result       string `json:"result"`
	DispatchedAt int64  `json:"dispatched_at"`
	EndedAt      int64  `json:"ended_at"`
}

// TestConcurrencyLimitSurvivesKill9: `axe serve` and an `axe agent` as processes. Six tasks of
// group g, limit 2 (set with `axe limit set`), all due at one second, each run a 2 s shell
// command that logs its start and end. With two runs in flight the daemon is killed with
// SIGKILL and started again on the same database: it adopts the two runs, counts them, and
// starts no third until one ends. The agent's own log never shows more than 2 commands at
// once, every task ran exactly once and succeeded, and the runs read back from the store
// never overlap more than 2.
func TestConcurrencyLimitSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	const token = "conclimit-token-0123456789"
	addr := freePort(t)
	args := []string{"--addr", addr, "--db", "sqlite:" + filepath.Join(dir, "axe.db"), "--token", token,
		"--executor-lost-after", "20s", "--heartbeat-interval", "400ms"}
	srv := startServe(t, dir, nil, args...)
	env := []string{"AXE_SERVER=" + srv.url, "AXE_TOKEN=" + token}
	log := filepath.Join(dir, "runs.log")
	agentCfg := writeJSON(t, dir, "agent.json", map[string]any{
		"app": "ops", "listen": freePort(t), "schedulers": []string{srv.url}, "token": token,
		"handlers": map[string]any{"work": map[string]any{"command": []string{"/bin/sh", "-c",
			`echo "s $(date +%s%N)" >> ` + log + `; sleep 2; echo "e $(date +%s%N)" >> ` + log}}},
	})
	agent := exec.Command(axeBin, "agent", "-c", agentCfg)
	agent.Env = cleanEnv()
	startPeerProc(t, agent, "msg=registered")

	if out := axeOK(t, env, "limit", "set", "group", "g", "2"); !strings.Contains(out, "group  g     2") {
		t.Fatalf("axe limit set printed %q", out)
	}
	if r := axe(t, env, "limit", "set", "team", "g", "2"); r.code == 0 || !strings.Contains(r.stderr, "kind") {
		t.Fatalf("axe limit set with a bad kind: %+v", r)
	}
	at := time.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second)
	const n = 6
	for i := range n {
		spec := writeJSON(t, dir, fmt.Sprintf("t%d.json", i), map[string]any{
			"name": fmt.Sprintf("cl-%d", i), "group": "g", "trigger": "delay", "run_at": at.Format(time.RFC3339),
			"timeout_sec": 60, "callback": map[string]any{"type": "executor", "app": "ops", "handler": "work"},
		})
		axeOK(t, env, "task", "create", "-f", spec)
	}
	events := func() (starts, ends, most int) {
		raw, _ := os.ReadFile(log)
		type ev struct {
			at int64
			d  int
		}
		var es []ev
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			kind, ns, ok := strings.Cut(line, " ")
			v, err := strconv.ParseInt(ns, 10, 64)
			if !ok || err != nil {
				continue
			}
			if kind == "s" {
				starts++
				es = append(es, ev{v, 1})
			} else {
				ends++
				es = append(es, ev{v, -1})
			}
		}
		sort.Slice(es, func(i, j int) bool { return es[i].at < es[j].at || es[i].at == es[j].at && es[i].d < es[j].d })
		cur := 0
		for _, e := range es {
			cur += e.d
			most = max(most, cur)
		}
		return starts, ends, most
	}
	testwait.For(t, 30*time.Second, "two commands running", func() bool { s, _, _ := events(); return s == 2 })
	srv.signal(t, syscall.SIGKILL)
	srv = startServe(t, dir, nil, args...)
	out := axeOK(t, env, "limit", "ls")
	if !strings.Contains(out, "group  g     2    2") {
		t.Errorf("after the restart axe limit ls printed\n%s\nwant group g at 2 in use", out)
	}
	testwait.For(t, 60*time.Second, "every command ended", func() bool { _, e, _ := events(); return e == n })
	if s, e, most := events(); s != n || most > 2 {
		t.Errorf("the agent ran %d commands (%d ended), at most %d at once; want %d, at most 2", s, e, most, n)
	}
	var all []execRun
	testwait.For(t, 30*time.Second, "every run recorded", func() bool {
		all = all[:0]
		for i := range n {
			_, b := apiCall(t, "GET", srv.url+fmt.Sprintf("/api/v1/tasks/cl-%d/runs?limit=10", i), token)
			var v struct {
				Runs []execRun `json:"runs"`
			}
			_ = json.Unmarshal(b, &v)
			if len(v.Runs) != 1 || v.Runs[0].EndedAt == 0 {
				return false
			}
			all = append(all, v.Runs...)
		}
		return true
	})
	type edge struct {
		at int64
		d  int
	}
	var es []edge
	for _, r := range all {
		if r.Result != "success" {
			t.Errorf("run %s ended %s, want success", r.Ticket, r.Result)
		}
		es = append(es, edge{r.DispatchedAt, 1}, edge{r.EndedAt, -1})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].at < es[j].at || es[i].at == es[j].at && es[i].d < es[j].d })
	cur, most := 0, 0
	for _, e := range es {
		cur += e.d
		most = max(most, cur)
	}
	if most > 2 {
		t.Errorf("the stored runs overlap %d at once, limit 2", most)
	}
}
