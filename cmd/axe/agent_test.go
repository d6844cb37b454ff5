package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/axe-sched/axe/internal/test/testwait"
)

type runJSON struct {
	Ticket string `json:"ticket"`
	Result string `json:"result"`
	Error  string `json:"error"`
	Output string `json:"output"`
}

// TestAgentRunsShellCommands drives `axe agent` as a separate process: it runs only the
// commands of its config, records exit code and output tail, and when it is killed its run
// in flight is resolved as lost once it is declared lost.
func TestAgentRunsShellCommands(t *testing.T) {
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"),
		"--executor-lost-after", "2s", "--heartbeat-interval", "400ms")
	env := []string{"AXE_SERVER=" + srv.url}
	cfg := map[string]any{
		"app": "ops", "listen": "127.0.0.1:0", "schedulers": []string{srv.url}, "output_tail_bytes": 64,
		"handlers": map[string]any{
			"hello": map[string]any{"command": []string{"/bin/sh", "-c", "echo hello from $AXE_TASK; echo oops >&2; exit 3"}},
			"slow":  map[string]any{"command": []string{"/bin/sh", "-c", "sleep 30"}},
		},
	}
	cfgPath := writeJSON(t, dir, "agent.json", cfg)
	agent := exec.Command(axeBin, "agent", "-c", cfgPath)
	agent.Env = cleanEnv()
	var agentOut syncBuffer
	agent.Stdout, agent.Stderr = &agentOut, &agentOut
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Process.Kill(); _, _ = agent.Process.Wait() })
	testwait.For(t, waitTimeout, "the agent registered", func() bool {
		return strings.Contains(axeOK(t, env, "executors"), "alive")
	})

	task := writeJSON(t, dir, "sh.json", map[string]any{
		"name": "sh", "cron": "*/1 * * * * *",
		"callback": map[string]any{"type": "executor", "app": "ops", "handler": "hello"},
	})
	axeOK(t, env, "task", "create", "-f", task)
	var runs []runJSON
	testwait.For(t, waitTimeout, "a recorded run of the shell command", func() bool {
		runs = apiRuns(t, srv.url, "sh")
		return len(runs) > 0 && runs[len(runs)-1].Result == "failed"
	})
	r := runs[len(runs)-1]
	if !strings.Contains(r.Error, "exit status 3") || !strings.Contains(r.Output, "hello from sh") || !strings.Contains(r.Output, "oops") {
		t.Errorf("run = %+v, want exit status 3 and the output tail", r)
	}
	axeOK(t, env, "task", "pause", "sh")

	slow := writeJSON(t, dir, "slow.json", map[string]any{
		"name": "slow", "trigger": "delay", "delay_ms": 0, "timeout_sec": 120,
		"callback": map[string]any{"type": "executor", "app": "ops", "handler": "slow"},
	})
	axeOK(t, env, "task", "create", "-f", slow)
	// The run row says running from the dispatch on, before the agent has the run: wait until
	// the agent has started the command, so that the kill below takes a run in flight on it.
	testwait.For(t, waitTimeout, "the slow command running on the agent", func() bool {
		rs := apiRuns(t, srv.url, "slow")
		return len(rs) == 1 && rs[0].Result == "running" && childRuns(agent.Process.Pid, "sleep 30")
	})
	// The agent dies without a word: no result, no more heartbeats.
	if err := agent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, waitTimeout, "the run resolved as lost", func() bool {
		rs := apiRuns(t, srv.url, "slow")
		return len(rs) == 1 && rs[0].Result == "lost"
	})
	if out := axeOK(t, env, "executors"); !strings.Contains(out, "lost") {
		t.Errorf("executors after the agent died:\n%s", out)
	}
}

// childRuns reports whether a child process of pid has a command line containing cmd.
func childRuns(pid int, cmd string) bool {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so read after its closing paren.
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		line, err := os.ReadFile(filepath.Join(filepath.Dir(stat), "cmdline"))
		if err == nil && strings.Contains(string(bytes.ReplaceAll(line, []byte{0}, []byte{' '})), cmd) {
			return true
		}
	}
	return false
}

// apiRuns reads a task's runs through the API, oldest first.
func apiRuns(t *testing.T, base, task string) []runJSON {
	t.Helper()
	resp, err := httpGet(base + "/api/v1/tasks/" + task + "/runs?limit=100")
	if err != nil {
		return nil
	}
	return runsOldestFirst(resp)
}

// runsOldestFirst decodes a runs listing (newest first), oldest first; nil if it is none.
func runsOldestFirst(listing []byte) []runJSON {
	var body struct {
		Runs []runJSON `json:"runs"`
	}
	if json.Unmarshal(listing, &body) != nil {
		return nil
	}
	out := body.Runs
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func httpGet(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}
