package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/executor/agent"
	"github.com/axe-sched/axe/executor/internal/schedpeer"
	"github.com/axe-sched/axe/internal/test/leaktest"
	"github.com/axe-sched/axe/internal/test/testwait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Options()...)
}

var quiet = slog.New(slog.DiscardHandler)

func startPeer(t *testing.T) *schedpeer.Peer {
	t.Helper()
	p, err := schedpeer.Start(schedpeer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// startAgent starts an agent serving handlers for peer; it is stopped before the peer closes.
func startAgent(t *testing.T, peer *schedpeer.Peer, handlers map[string]agent.Command, graceMS int64) *agent.Agent {
	t.Helper()
	a, err := agent.New(agent.Config{
		App:         "ops",
		Listen:      "127.0.0.1:0",
		Schedulers:  []string{peer.URL()},
		KillGraceMS: graceMS,
		Handlers:    handlers,
		Logger:      quiet,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return a
}

func sh(script string) agent.Command {
	return agent.Command{Command: []string{"/bin/sh", "-c", script}}
}

func run(ticket, task, handler string, deadline time.Duration) schedpeer.Run {
	now := time.Now()
	return schedpeer.Run{
		Ticket: ticket, Task: task, Handler: handler, Attempt: 1,
		ScheduledAt: now.UnixMilli(), Deadline: now.Add(deadline).UnixMilli(),
	}
}

func dispatch(t *testing.T, peer *schedpeer.Peer, a *agent.Agent, r schedpeer.Run) {
	t.Helper()
	resp, err := peer.Dispatch(a.Addr(), r)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusAccepted {
		t.Fatalf("dispatch %s = %d %s", r.Ticket, resp.Status, resp.Body)
	}
}

func callback(t *testing.T, peer *schedpeer.Peer, n int) schedpeer.Callback {
	t.Helper()
	cbs, err := peer.WaitCallbacks(n)
	if err != nil {
		t.Fatal(err)
	}
	return cbs[n-1]
}

func TestCommandsRunEndToEnd(t *testing.T) {
	peer := startPeer(t)
	a := startAgent(t, peer, map[string]agent.Command{
		"ok":   sh("echo fine"),
		"fail": sh("echo out; echo err >&2; exit 3"),
		"nope": {Command: []string{"/nonexistent/axe-test-program"}},
	}, 0)

	dispatch(t, peer, a, run("t-ok", "a", "ok", time.Minute))
	cb := callback(t, peer, 1)
	if cb.Status != "success" || cb.Error != "" || cb.Output != "fine\n" || cb.ExitCode == nil || *cb.ExitCode != 0 {
		t.Errorf("ok = %+v", cb)
	}
	if cb.App != "ops" || cb.Address != a.Addr() || cb.EndedAt < cb.StartedAt || abs(cb.DurationMS-(cb.EndedAt-cb.StartedAt)) > 1 {
		t.Errorf("ok timing/identity = %+v", cb)
	}

	dispatch(t, peer, a, run("t-fail", "b", "fail", time.Minute))
	cb = callback(t, peer, 2)
	if cb.Status != "failed" || cb.Error != "exit status 3" || cb.ExitCode == nil || *cb.ExitCode != 3 {
		t.Errorf("fail = %+v", cb)
	}
	if cb.Output != "out\nerr\n" {
		t.Errorf("combined output = %q", cb.Output)
	}

	dispatch(t, peer, a, run("t-nope", "c", "nope", time.Minute))
	cb = callback(t, peer, 3)
	if cb.Status != "failed" || !strings.Contains(cb.Error, "cannot start /nonexistent/axe-test-program") || cb.ExitCode != nil {
		t.Errorf("nope = %+v", cb)
	}
}

func TestRunIsPassedAsEnvironmentNeverAsCommand(t *testing.T) {
	peer := startPeer(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "injected")
	a := startAgent(t, peer, map[string]agent.Command{
		"show": {
			Command: []string{"/bin/sh", "-c",
				`printf '%s|%s|%s|%s|%s|' "$AXE_TICKET" "$AXE_ATTEMPT" "$AXE_TASK" "$AXE_PARAMS" "$GREETING"; pwd -P`},
			Dir: dir,
			Env: map[string]string{"GREETING": "hello world"},
		},
	}, 0)

	params := `{"command":["/bin/sh","-c","touch ` + marker + `"],"x":"$(touch ` + marker + `)"}`
	r := run("t-env", "nightly", "show", time.Minute)
	r.Attempt = 4
	r.Params = []byte(params)
	dispatch(t, peer, a, r)
	cb := callback(t, peer, 1)

	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := "t-env|4|nightly|" + params + "|hello world|" + realDir + "\n"
	if cb.Status != "success" || cb.Output != want {
		t.Errorf("output = %q\nwant     %q (status %s %s)", cb.Output, want, cb.Status, cb.Error)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("params were executed: %s exists (%v)", marker, err)
	}

	// Without params the variable still parses as JSON.
	dispatch(t, peer, a, run("t-noparams", "nightly", "show", time.Minute))
	if cb := callback(t, peer, 2); !strings.HasPrefix(cb.Output, "t-noparams|1|nightly|null|") {
		t.Errorf("output without params = %q", cb.Output)
	}
}

func TestOutputTailIsBounded(t *testing.T) {
	peer := startPeer(t)
	a, err := agent.New(agent.Config{
		App: "ops", Listen: "127.0.0.1:0", Schedulers: []string{peer.URL()}, OutputTailBytes: 100, Logger: quiet,
		Handlers: map[string]agent.Command{
			// 500 × "0123456789" on stdout, interleaved with stderr lines, then END.
			"chatty": sh(`i=0; while [ $i -lt 500 ]; do printf 0123456789; i=$((i+1)); done; echo; echo warn >&2; printf END`),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()

	dispatch(t, peer, a, run("t-1", "a", "chatty", time.Minute))
	cb := callback(t, peer, 1)
	full := strings.Repeat("0123456789", 500) + "\nwarn\nEND"
	if want := full[len(full)-100:]; cb.Output != want {
		t.Errorf("output (%d bytes) = %q\nwant the last 100 bytes %q", len(cb.Output), cb.Output, want)
	}
}

// grandchildScript starts a grandchild that ignores SIGTERM (and would outlive its parent),
// records its pid, and waits.
const grandchildScript = `sh -c 'trap "" TERM; echo $$ > "$PIDFILE"; exec sleep 60' &
wait`

func TestKillTerminatesTheWholeProcessGroup(t *testing.T) {
	peer := startPeer(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	a := startAgent(t, peer, map[string]agent.Command{
		"sleepy": {Command: []string{"/bin/sh", "-c", grandchildScript}, Env: map[string]string{"PIDFILE": pidFile}},
	}, 300)

	dispatch(t, peer, a, run("t-kill", "a", "sleepy", time.Hour))
	pid := waitPID(t, pidFile)
	if processGone(pid) {
		t.Fatalf("grandchild %d is not running before the kill", pid)
	}
	resp, err := peer.Kill(a.Addr(), "t-kill")
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("kill = %v %v", resp, err)
	}
	cb := callback(t, peer, 1)
	if cb.Status != "failed" || cb.Error != "command terminated: executor: run killed" {
		t.Errorf("killed result = %+v", cb)
	}
	waitGone(t, pid)
}

func TestTimeoutTerminatesTheWholeProcessGroup(t *testing.T) {
	peer := startPeer(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	a := startAgent(t, peer, map[string]agent.Command{
		"sleepy": {Command: []string{"/bin/sh", "-c", grandchildScript}, Env: map[string]string{"PIDFILE": pidFile}},
	}, 300)

	dispatch(t, peer, a, run("t-timeout", "a", "sleepy", 2500*time.Millisecond))
	pid := waitPID(t, pidFile)
	cb := callback(t, peer, 1)
	if cb.Status != "failed" || cb.Error != "command terminated: context deadline exceeded" {
		t.Errorf("timed-out result = %+v", cb)
	}
	waitGone(t, pid)
}

// waitPID waits for the grandchild to write its pid: polling a file written by another
// process, with a generous bound.
func waitPID(t *testing.T, path string) int {
	t.Helper()
	pid := 0
	testwait.For(t, schedpeer.WaitTimeout, "a pid in "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			t.Fatalf("pid file %q: %v", b, err)
		}
		return true
	})
	return pid
}

// waitGone waits until pid has exited, with a generous bound.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	// Do not leave it behind when the wait fails.
	t.Cleanup(func() {
		if !processGone(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	testwait.For(t, schedpeer.WaitTimeout, fmt.Sprintf("grandchild %d to exit after the run ended", pid), func() bool {
		return processGone(pid)
	})
}

// processGone reports whether pid has exited. An exited process whose parent has not reaped it
// yet (a zombie, common in containers whose init does not reap) counts as gone.
func processGone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
