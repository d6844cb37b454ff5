package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/internal/test/leaktest"
)

// axeBin is the real binary, built once by TestMain.
var axeBin string

// binVersion is stamped into the test binary to check the -X main.version wiring.
const binVersion = "v0.0.0-clitest"

func TestMain(m *testing.M) {
	if os.Getenv(envPeer) != "" {
		os.Exit(peerMain())
	}
	dir, err := os.MkdirTemp("", "axe-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot make a build directory:", err)
		os.Exit(1)
	}
	axeBin = filepath.Join(dir, "axe")
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+binVersion, "-o", axeBin, ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "cannot build axe:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	// leaktest's ignores hold the goroutines that were running before any test (ants starts
	// its default pool when admin imports it) and those fasthttp leaves sleeping after the
	// in-process executors of the TLS tests stop.
	goleak.VerifyTestMain(m, append(leaktest.Options(),
		goleak.Cleanup(func(code int) {
			_ = os.RemoveAll(dir)
			os.Exit(code)
		}),
	)...)
}

// Generous bounds: the suite runs with -race on two cores, next to other packages' tests.
const (
	startTimeout = 60 * time.Second
	cmdTimeout   = 60 * time.Second
	waitTimeout  = 20 * time.Second
)

// cleanEnv is the environment without AXE_ variables, so a developer's settings cannot leak
// into the commands under test; extra is appended.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AXE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// syncBuffer is a bytes.Buffer safe for a process writer and a test reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveProc is one `axe serve` process.
type serveProc struct {
	cmd    *exec.Cmd
	url    string // http(s)://host:port from the "listening on" line
	banner string // that line
	stdout syncBuffer
	stderr syncBuffer
	exited chan struct{}
	err    error // from Wait, valid after exited is closed
}

var listenLine = regexp.MustCompile(`listening on (https?://\S+)`)

// startServe runs `axe serve args...` in dir and waits for its "listening on" line. The
// process is stopped (SIGTERM, then SIGKILL) when the test ends if it still runs.
func startServe(t *testing.T, dir string, env []string, args ...string) *serveProc {
	t.Helper()
	p := &serveProc{exited: make(chan struct{})}
	p.cmd = exec.Command(axeBin, append([]string{"serve"}, args...)...)
	p.cmd.Dir = dir
	p.cmd.Env = cleanEnv(env...)
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start axe serve: %v", err)
	}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			p.stdout.Write([]byte(line + "\n"))
			if listenLine.MatchString(line) {
				select {
				case listening <- line:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("axe serve ignored SIGTERM for 30 s; killing it")
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case line := <-listening:
		p.banner = line
		p.url = listenLine.FindStringSubmatch(line)[1]
	case <-p.exited:
		t.Fatalf("axe serve exited before listening: %v\nstderr:\n%s", p.err, p.stderr.String())
	case <-time.After(startTimeout):
		t.Fatalf("axe serve did not print its address within %s\nstderr:\n%s", startTimeout, p.stderr.String())
	}
	return p
}

// signal sends sig and waits for the process to exit, returning its exit code.
func (p *serveProc) signal(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("axe serve did not exit within 60 s of %v\nstderr:\n%s", sig, p.stderr.String())
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	default:
		t.Fatalf("wait: %v", p.err)
		return -1
	}
}

// cliResult is what one CLI invocation produced.
type cliResult struct {
	stdout, stderr string
	code           int
}

// axe runs the CLI with args in a clean environment plus env.
func axe(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	return axeStdin(t, "", env, args...)
}

// axeStdin is axe with stdin as the command's standard input.
func axeStdin(t *testing.T, stdin string, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, axeBin, args...)
	cmd.Env = cleanEnv(env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("axe %v: %v", args, err)
	}
	return r
}

// axeOK runs the CLI and requires exit status 0.
func axeOK(t *testing.T, env []string, args ...string) string {
	t.Helper()
	r := axe(t, env, args...)
	if r.code != 0 {
		t.Fatalf("axe %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// call is one callback request received by a hook.
type call struct {
	At          time.Time
	Done        time.Time // when the answer was written; zero while pending
	Task        string
	Ticket      string
	ScheduledAt int64
	Params      json.RawMessage
}

// hook is an HTTP callback endpoint that records calls. It answers 200, after the number
// of milliseconds in the query parameter ms when there is one.
type hook struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []call
}

func newHook(t *testing.T) *hook {
	t.Helper()
	h := &hook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ScheduledAt int64           `json:"scheduled_at"`
			Params      json.RawMessage `json:"params"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		h.mu.Lock()
		i := len(h.calls)
		h.calls = append(h.calls, call{At: time.Now(), Task: r.Header.Get("X-Axe-Task"),
			Ticket: r.Header.Get("X-Axe-Ticket"), ScheduledAt: body.ScheduledAt, Params: body.Params})
		h.mu.Unlock()
		if ms, err := strconv.Atoi(r.URL.Query().Get("ms")); err == nil {
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusOK)
		h.mu.Lock()
		h.calls[i].Done = time.Now()
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) callsOf(task string) []call {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []call
	for _, c := range h.calls {
		if c.Task == task {
			out = append(out, c)
		}
	}
	return out
}

// writeJSON writes v as a JSON file in dir and returns its path.
func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
