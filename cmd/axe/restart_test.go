package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/internal/test/testwait"

	"github.com/axe-sched/axe/lib/freeport"
)

// The test binary doubles as the peers of TestDispatchSurvivesRestartedPeers: with
// envPeer=sdk it is an SDK executor, with envPeer=hook an HTTP-callback endpoint, listening
// on envPeerAddr until SIGTERM or SIGKILL. It prints "ready" once it serves.
const (
	envPeer      = "AXE_TEST_PEER"
	envPeerAddr  = "AXE_TEST_PEER_ADDR"
	envPeerSched = "AXE_TEST_PEER_SCHEDULER"
	envPeerToken = "AXE_TEST_PEER_TOKEN"
)

// peerMain runs the peer process; it returns the exit code.
func peerMain() int {
	addr := os.Getenv(envPeerAddr)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	switch os.Getenv(envPeer) {
	case "sdk":
		exe, err := executor.New(executor.Config{App: "sdk", Addr: addr, Schedulers: []string{os.Getenv(envPeerSched)},
			Token: os.Getenv(envPeerToken), HeartbeatInterval: 400 * time.Millisecond})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		exe.Handle("work", func(context.Context, executor.Run) (executor.Result, error) {
			return executor.Result{Output: "done by " + strconv.Itoa(os.Getpid())}, nil
		})
		if err := exe.Start(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("ready")
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = exe.Stop(ctx)
	case "hook":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = w.Write([]byte(`{"ok":true}`))
		})}
		go func() { _ = srv.Serve(ln) }()
		fmt.Println("ready")
		<-stop
		_ = srv.Close()
	default:
		fmt.Fprintln(os.Stderr, "unknown peer", os.Getenv(envPeer))
		return 2
	}
	return 0
}

// peerProc is one run of a peer process: the test binary as a peer, or `axe agent`.
type peerProc struct {
	cmd    *exec.Cmd
	out    syncBuffer
	exited chan struct{}
}

// startPeerProc starts cmd, waits until its output (stdout and stderr) holds ready, and
// registers its end with the test.
func startPeerProc(t *testing.T, cmd *exec.Cmd, ready string) *peerProc {
	t.Helper()
	p := &peerProc{cmd: cmd, exited: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = io.Copy(&p.out, out)
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.kill(syscall.SIGKILL) })
	deadline := time.Now().Add(startTimeout)
	for !strings.Contains(p.out.String(), ready) {
		select {
		case <-p.exited:
			t.Fatalf("%s exited before it was ready:\n%s", cmd.Path, p.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within %s:\n%s", cmd.Path, startTimeout, p.out.String())
		}
	}
	return p
}

// kill sends sig and waits for the process to end.
func (p *peerProc) kill(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	return freeport.MustAddr(t)
}

// apiCall makes an API call with the token and returns the status and body.
func apiCall(t *testing.T, method, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestDispatchSurvivesRestartedPeers: an `axe agent`, an SDK executor process and an
// HTTP-callback endpoint, each restarted on the same address between two fires of a task
// with retry_count 0, get both fires: the scheduler's idle keep-alive connection to the old
// process is seen closed before anything is written to it, and the second fire goes out on
// a new connection, with no run lost and no call re-sent in doubt.
func TestDispatchSurvivesRestartedPeers(t *testing.T) {
	dir := t.TempDir()
	const token = "restart-token-0123456789"
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+dir+"/axe.db", "--token", token,
		"--executor-lost-after", "10s", "--heartbeat-interval", "400ms")
	env := []string{"AXE_SERVER=" + srv.url, "AXE_TOKEN=" + token}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	agentAddr, sdkAddr, hookAddr := freePort(t), freePort(t), freePort(t)
	agentCfg := writeJSON(t, dir, "agent.json", map[string]any{
		"app": "ops", "listen": agentAddr, "schedulers": []string{srv.url}, "token": token,
		"handlers": map[string]any{"work": map[string]any{"command": []string{"/bin/sh", "-c", "echo ok"}}},
	})
	peers := []struct {
		name     string
		callback map[string]any
		start    func() *peerProc
		stop     syscall.Signal
	}{
		{"agent", map[string]any{"type": "executor", "app": "ops", "handler": "work"}, func() *peerProc {
			cmd := exec.Command(axeBin, "agent", "-c", agentCfg)
			cmd.Env = cleanEnv()
			return startPeerProc(t, cmd, "msg=registered")
		}, syscall.SIGTERM},
		{"sdk", map[string]any{"type": "executor", "app": "sdk", "handler": "work"}, func() *peerProc {
			cmd := exec.Command(self, "-test.run=^$")
			cmd.Env = cleanEnv(envPeer+"=sdk", envPeerAddr+"="+sdkAddr, envPeerSched+"="+srv.url, envPeerToken+"="+token)
			return startPeerProc(t, cmd, "ready")
		}, syscall.SIGKILL},
		{"hook", map[string]any{"type": "http", "url": "http://" + hookAddr + "/job"}, func() *peerProc {
			cmd := exec.Command(self, "-test.run=^$")
			cmd.Env = cleanEnv(envPeer+"=hook", envPeerAddr+"="+hookAddr)
			return startPeerProc(t, cmd, "ready")
		}, syscall.SIGKILL},
	}
	for _, p := range peers {
		proc := p.start()
		task := writeJSON(t, dir, "task-"+p.name+".json", map[string]any{
			"name": "after-" + p.name, "trigger": "manual", "retry_count": 0, "timeout_sec": 30, "callback": p.callback,
		})
		axeOK(t, env, "task", "create", "-f", task)
		fire := func(n int) {
			t.Helper()
			if code, b := apiCall(t, "POST", srv.url+"/api/v1/tasks/after-"+p.name+"/run", token); code != http.StatusOK && code != http.StatusAccepted {
				t.Fatalf("%s: run now: %d %s", p.name, code, b)
			}
			testwait.For(t, waitTimeout, fmt.Sprintf("%s: fire %d ended", p.name, n), func() bool {
				runs := tokenRuns(t, srv.url, token, "after-"+p.name)
				return len(runs) == n && runs[n-1].Result != "running"
			})
		}
		fire(1)
		proc.kill(p.stop)
		proc = p.start() // the same address
		fire(2)
		for i, r := range tokenRuns(t, srv.url, token, "after-"+p.name) {
			if r.Result != "success" {
				t.Errorf("%s: fire %d: %s %q, want success", p.name, i+1, r.Result, r.Error)
			}
		}
		proc.kill(syscall.SIGTERM)
	}
	_, metrics := apiCall(t, "GET", srv.url+"/metrics", token)
	for _, line := range strings.Split(string(metrics), "\n") {
		if strings.HasPrefix(line, "axe_dispatch_resends_in_doubt_total ") && line != "axe_dispatch_resends_in_doubt_total 0" {
			t.Errorf("%s: a call was re-sent in doubt; the stale connections should have been seen before any write", line)
		}
	}
}

// tokenRuns reads a task's runs through the API with the token, oldest first.
func tokenRuns(t *testing.T, base, token, task string) []runJSON {
	t.Helper()
	_, b := apiCall(t, "GET", base+"/api/v1/tasks/"+task+"/runs?limit=100", token)
	return runsOldestFirst(b)
}
