package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/protocol"
)

// capturedCall is a request as it crossed the wire to the agent.
type capturedCall struct {
	path   string
	header http.Header
	body   []byte
}

// TestAgentRefusesARunReplayedAfterARestart (issue: a captured signed /axe/run replayed to an
// `axe agent` restarted at the same address ran the command again). A real `axe serve`
// dispatches a signed run to a real `axe agent` through a recording proxy (the address the
// agent advertises, so the run is signed for it); the command appends a line to a file. The
// agent is restarted at the same address, and the captured run is replayed to it within the
// signature's 5 minutes: it is refused with 401, naming another incarnation, and the file
// still holds one line. The restarted agent still takes the scheduler's own runs.
func TestAgentRefusesARunReplayedAfterARestart(t *testing.T) {
	dir := t.TempDir()
	tokens := writeJSON(t, dir, "tokens.json", []map[string]any{
		{"name": "ops", "scope": "write", "token": "ops-token-0123456789"},
		{"name": "agent", "scope": "executor", "token": "agent-token-0123456789", "apps": []string{"ops"}},
	})
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"),
		"--token-file", tokens, "--executor-lost-after", "3s", "--heartbeat-interval", "300ms")
	env := []string{"AXE_SERVER=" + srv.url, "AXE_TOKEN=ops-token-0123456789"}

	// The agent listens on a fixed port and advertises the proxy's address.
	listen := freePort(t)
	var (
		mu       sync.Mutex
		captured []capturedCall
	)
	target, _ := url.Parse("http://" + listen)
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		captured = append(captured, capturedCall{path: r.URL.Path, header: r.Header.Clone(), body: body})
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	advertise := strings.TrimPrefix(proxy.URL, "http://")

	marks := filepath.Join(dir, "ran.txt")
	cfgPath := writeJSON(t, dir, "agent.json", map[string]any{
		"app": "ops", "listen": listen, "advertise": advertise, "schedulers": []string{srv.url}, "token": "agent-token-0123456789",
		"handlers": map[string]any{
			"mark": map[string]any{"command": []string{"/bin/sh", "-c", `echo "$AXE_TICKET" >> ` + marks}},
		},
	})
	startAgent := func() *exec.Cmd {
		t.Helper()
		agent := exec.Command(axeBin, "agent", "-c", cfgPath)
		agent.Env = cleanEnv()
		var out syncBuffer
		agent.Stdout, agent.Stderr = &out, &out
		if err := agent.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = agent.Process.Kill(); _, _ = agent.Process.Wait() })
		return agent
	}
	lines := func() []string {
		b, err := os.ReadFile(marks)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(string(b))
	}

	first := startAgent()
	testwait.For(t, waitTimeout, "the agent registered", func() bool {
		return strings.Contains(axeOK(t, env, "executors"), "alive")
	})
	task := writeJSON(t, dir, "mark.json", map[string]any{
		"name": "mark", "trigger": "manual",
		"callback": map[string]any{"type": "executor", "app": "ops", "handler": "mark"},
	})
	axeOK(t, env, "task", "create", "-f", task)
	axeOK(t, env, "task", "run", "mark")
	testwait.For(t, waitTimeout, "the command ran once", func() bool { return len(lines()) == 1 })
	testwait.For(t, waitTimeout, "the run recorded", func() bool {
		runs := apiRunsAuth(t, srv.url, "mark")
		return len(runs) == 1 && runs[0].Result == "success"
	})
	var run capturedCall
	mu.Lock()
	for _, c := range captured {
		if c.path == protocol.PathRun {
			run = c
		}
	}
	mu.Unlock()
	if run.body == nil || run.header.Get(protocol.HeaderIncarnation) == "" ||
		!strings.HasPrefix(run.header.Get("Authorization"), protocol.SignatureScheme+" ") {
		t.Fatalf("no signed /axe/run with an incarnation was captured: %+v", run)
	}

	// Restart the agent at the same address (a graceful stop: it deregisters), then replay.
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Process.Wait(); err != nil {
		t.Fatalf("the agent did not exit cleanly on SIGTERM: %v", err)
	}
	startAgent()
	testwait.For(t, waitTimeout, "the restarted agent registered", func() bool {
		return strings.Contains(axeOK(t, env, "executors"), "alive")
	})
	req, err := http.NewRequest(http.MethodPost, "http://"+listen+protocol.PathRun, bytes.NewReader(run.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = run.header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(answer), "another incarnation") {
		t.Errorf("the replayed run was answered %d %s, want 401 signed for another incarnation", resp.StatusCode, answer)
	}
	// Give a wrongly accepted run every chance to show: the scheduler's next run on the
	// restarted agent is recorded only after it ran, so a replayed one would have run first.
	axeOK(t, env, "task", "run", "mark")
	testwait.For(t, waitTimeout, "the scheduler's second run recorded", func() bool {
		runs := apiRunsAuth(t, srv.url, "mark")
		return len(runs) == 2 && runs[0].Result == "success" && runs[1].Result == "success"
	})
	if got := lines(); len(got) != 2 || got[0] == got[1] {
		t.Errorf("the command ran for tickets %v: want the two runs of the scheduler, once each, and not the replay", got)
	}
}

// apiRunsAuth lists a task's runs, oldest first, with the write token of the test.
func apiRunsAuth(t *testing.T, base, task string) []runJSON {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/tasks/"+task+"/runs", nil)
	req.Header.Set("Authorization", "Bearer ops-token-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return runsOldestFirst(b)
}
