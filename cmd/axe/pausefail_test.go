package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIPauseAfterFailures: --pause-after-failures of task create and update sets the
// field over the file's, a bound out of range is the server's 400 naming the field, and the
// importers' flag sets it on every task they create.
func TestCLIPauseAfterFailures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--timezone", "UTC")
	h := newHook(t)
	env := []string{"AXE_SERVER=" + srv.url}
	bound := func(name string) int {
		t.Helper()
		var v struct {
			PauseAfterFailures int `json:"pause_after_failures"`
		}
		out := axeOK(t, env, "task", "get", name)
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("axe task get %s printed %q: %v", name, out, err)
		}
		return v.PauseAfterFailures
	}
	file := writeJSON(t, dir, "paf.json", map[string]any{
		"name": "paf", "trigger": "manual", "pause_after_failures": 9, "callback": map[string]string{"url": h.srv.URL + "/paf"},
	})

	axeOK(t, env, "task", "create", "-f", file, "--pause-after-failures", "3")
	if n := bound("paf"); n != 3 {
		t.Errorf("created with --pause-after-failures 3 over the file's 9: %d", n)
	}
	axeOK(t, env, "task", "update", "paf", "-f", file)
	if n := bound("paf"); n != 9 {
		t.Errorf("updated from the file alone: %d, want its 9", n)
	}
	axeOK(t, env, "task", "update", "paf", "-f", file, "--pause-after-failures", "0")
	if n := bound("paf"); n != 0 {
		t.Errorf("updated with --pause-after-failures 0: %d", n)
	}
	r := axe(t, env, "task", "update", "paf", "-f", file, "--pause-after-failures", "-1")
	if r.code == 0 || !strings.Contains(r.stderr, "pause_after_failures") || !strings.Contains(r.stderr, "400") {
		t.Errorf("update with -1: exit %d, stderr %q; want the 400 naming pause_after_failures", r.code, r.stderr)
	}
	r = axe(t, env, "task", "create", "-f", file, "--pause-after-failures", "three")
	if r.code == 0 || !strings.Contains(r.stderr, "pause-after-failures") {
		t.Errorf("create with a word: exit %d, stderr %q; want the flag named", r.code, r.stderr)
	}
	if n := bound("paf"); n != 0 {
		t.Errorf("after the refused update: %d, want 0 still", n)
	}

	tab := filepath.Join(dir, "crontab")
	if err := os.WriteFile(tab, []byte("*/5 * * * * echo hi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agentPath := filepath.Join(dir, "agent.json")
	r = axe(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", agentPath, "--pause-after-failures", "1001", "--yes")
	if r.code == 0 || !strings.Contains(r.stderr, "pause-after-failures") {
		t.Errorf("import with 1001: exit %d, stderr %q; want the flag named", r.code, r.stderr)
	}
	out := axeOK(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", agentPath, "--pause-after-failures", "2", "--yes")
	var names []string
	for _, l := range strings.Split(out, "\n") {
		if _, name, ok := strings.Cut(l, "] created "); ok {
			names = append(names, strings.TrimSpace(name))
		}
	}
	if len(names) != 1 {
		t.Fatalf("import printed:\n%s", out)
	}
	if n := bound(names[0]); n != 2 {
		t.Errorf("imported task %s: pause_after_failures %d, want 2", names[0], n)
	}
}
