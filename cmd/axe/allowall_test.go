package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/testwait"
)

// TestAllowAllOnOneAgent: `axe serve` and one `axe agent` as processes. A task fires every
// second under overlap_policy allow_all and runs a 3 s command, so its runs overlap: the
// agent runs them beside one another (they are marked parallel) instead of refusing
// re-entry, three commands are running at once, every run succeeds, and each run has its own
// second as scheduled_at.
func TestAllowAllOnOneAgent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const token = "allowall-token-0123456789"
	srv := startServe(t, dir, nil, "--addr", freePort(t), "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--token", token)
	env := []string{"AXE_SERVER=" + srv.url, "AXE_TOKEN=" + token}
	marks := filepath.Join(dir, "running")
	if err := os.Mkdir(marks, 0o755); err != nil {
		t.Fatal(err)
	}
	agentCfg := writeJSON(t, dir, "agent.json", map[string]any{
		"app": "ops", "listen": freePort(t), "schedulers": []string{srv.url}, "token": token,
		"handlers": map[string]any{"work": map[string]any{"command": []string{"/bin/sh", "-c",
			`f=` + marks + `/$$; touch $f; sleep 3; rm $f`}}},
	})
	agent := exec.Command(axeBin, "agent", "-c", agentCfg)
	agent.Env = cleanEnv()
	startPeerProc(t, agent, "msg=registered")
	spec := writeJSON(t, dir, "every.json", map[string]any{
		"name": "every", "cron": "* * * * * *", "overlap_policy": "allow_all", "timeout_sec": 30,
		"callback": map[string]any{"type": "executor", "app": "ops", "handler": "work"},
	})
	axeOK(t, env, "task", "create", "-f", spec)
	most := 0
	testwait.For(t, 30*time.Second, "three commands running at once on the agent", func() bool {
		ents, _ := os.ReadDir(marks)
		most = max(most, len(ents))
		return most >= 3
	})
	axeOK(t, env, "task", "pause", "every")
	type run struct {
		Ticket      string `json:"ticket"`
		Result      string `json:"result"`
		ScheduledAt int64  `json:"scheduled_at"`
		Error       string `json:"error"`
	}
	var runs []run
	testwait.For(t, 30*time.Second, "every run ended", func() bool {
		_, b := apiCall(t, "GET", srv.url+"/api/v1/tasks/every/runs?limit=100", token)
		var v struct {
			Runs []run `json:"runs"`
		}
		_ = json.Unmarshal(b, &v)
		runs = v.Runs
		for _, r := range runs {
			if r.Result == "running" {
				return false
			}
		}
		return len(runs) >= 3
	})
	seen := map[int64]bool{}
	for _, r := range runs {
		if r.Result != "success" {
			t.Errorf("run %s ended %s (%s), want success: the agent must not refuse a parallel run", r.Ticket, r.Result, r.Error)
		}
		if seen[r.ScheduledAt] || r.ScheduledAt%1000 != 0 {
			t.Errorf("run %s scheduled at %d: want its own whole second", r.Ticket, r.ScheduledAt)
		}
		seen[r.ScheduledAt] = true
	}
	if out := axeOK(t, env, "task", "get", "every"); !strings.Contains(out, `"overlap_policy": "allow_all"`) && !strings.Contains(out, `"overlap_policy":"allow_all"`) {
		t.Errorf("axe task get printed %s, want overlap_policy allow_all", out)
	}
}
