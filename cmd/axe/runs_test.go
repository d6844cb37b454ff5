package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/axe-sched/axe/model"
)

// TestCLIRunKill: `axe run kill TICKET --reason` kills a run-now run in flight (its task is
// WAITING, which the task's kill used to refuse), `axe run get` shows it killed with the
// reason, the task's last result is killed, and a second kill exits non-zero with the API's
// 409.
func TestCLIRunKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--timezone", "UTC")
	h := newHook(t)
	env := []string{"AXE_SERVER=" + srv.url}
	// The downstream answers after a minute; the scheduler closes the call at the run's
	// deadline (10 s), which bounds how long the test's end waits for it.
	spec := writeJSON(t, dir, "slow.json", map[string]any{"name": "slow", "trigger": "manual", "timeout_sec": 10,
		"callback": map[string]string{"url": h.srv.URL + "/slow?ms=60000"}})
	axeOK(t, env, "task", "create", "-f", spec)
	out := axeOK(t, env, "task", "run", "slow")
	m := regexp.MustCompile(`ticket (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("axe task run printed %q", out)
	}
	ticket := m[1]
	out = axeOK(t, env, "run", "kill", ticket, "--reason", "wrong month")
	if !strings.Contains(out, ticket) || !strings.Contains(out, "killed") || !strings.Contains(out, "wrong month") {
		t.Errorf("axe run kill printed %q", out)
	}
	var r model.Run
	if err := json.Unmarshal([]byte(axeOK(t, env, "run", "get", ticket)), &r); err != nil {
		t.Fatal(err)
	}
	if r.Result != model.ResultKilled || r.Kind != model.RunManual || !strings.Contains(r.Error, "wrong month") {
		t.Errorf("axe run get = %+v", r)
	}
	var v struct {
		Runtime struct {
			LastResult string `json:"last_result"`
		} `json:"runtime"`
	}
	if err := json.Unmarshal([]byte(axeOK(t, env, "task", "get", "slow")), &v); err != nil || v.Runtime.LastResult != model.ResultKilled {
		t.Errorf("slow after the kill: %+v, %v", v, err)
	}
	res := axe(t, env, "run", "kill", ticket)
	if res.code == 0 || !strings.Contains(res.stderr, "already ended as killed") || !strings.Contains(res.stderr, "409") {
		t.Errorf("a second axe run kill: exit %d, stderr %q", res.code, res.stderr)
	}
}
