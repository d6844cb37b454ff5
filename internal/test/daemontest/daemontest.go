// Package daemontest is the harness of the tests that run a whole daemon in-process: a
// daemon.Serve on a loopback port with a client for its API, an HTTP callback endpoint that
// records what it receives, and runs on each store (SQLite, and MySQL when
// persisttest.EnvMySQLDSN names a server). Only tests import it.
package daemontest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/client"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// Main runs a test package's tests and fails it if goroutines are still running after them.
// Call it from TestMain.
func Main(m *testing.M) {
	goleak.VerifyTestMain(m,
		// ants starts the goroutines of its package-level default pool when it is imported.
		// They are ignored as "already running when the tests start" rather than by function
		// name, so that a dispatcher pool left unreleased by a daemon is still reported.
		goleak.IgnoreCurrent(),
		// fasthttp keeps process-wide helpers: the Date header updater of its servers and the
		// DNS cache cleaner of its default dialer run for the life of the process.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreTopFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		// A stopped fasthttp server's worker-pool cleaner sleeps out its idle period (10 s)
		// before it sees the stop; the client's idle-connection cleaners do the same. They
		// hold no test state.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
	)
}

// TestLogger writes daemon logs to stderr when AXE_TEST_LOG=1; otherwise it keeps only the
// last warnings and errors in tail (when not nil), which a failed test prints, so failures
// stay readable and still say what the daemon saw.
func TestLogger(tail *LogTail) *slog.Logger {
	if os.Getenv("AXE_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if tail == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(tail, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// logTailLines bounds a LogTail.
const logTailLines = 200

// LogTail is an io.Writer that keeps the last logTailLines lines written to it (each Write
// is one slog record).
type LogTail struct {
	mu    sync.Mutex
	lines []string
	lost  int
}

func (l *LogTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == logTailLines {
		copy(l.lines, l.lines[1:])
		l.lines = l.lines[:logTailLines-1]
		l.lost++
	}
	l.lines = append(l.lines, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Lines returns the lines kept and how many earlier ones were dropped.
func (l *LogTail) Lines() ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...), l.lost
}

// Generous bounds for real-time waits: the suites run with -race on two cores.
const (
	StartTimeout = 60 * time.Second
	StopTimeout  = 60 * time.Second
	WaitTimeout  = 45 * time.Second
)

// EachStore runs fn as parallel subtests "sqlite" and "mysql", each on a fresh database.
func EachStore(t *testing.T, fn func(t *testing.T, dsn string)) {
	t.Helper()
	stores := []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{persist.SchemeSQLite, func(t *testing.T) string {
			return persist.SchemeSQLite + ":" + filepath.Join(t.TempDir(), "axe.db")
		}},
		{persist.SchemeMySQL, func(t *testing.T) string { return persisttest.MySQLSchemaDSN(t) }},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			fn(t, s.dsn(t))
		})
	}
}

// Daemon is one daemon.Serve running in-process for a test.
type Daemon struct {
	DSN  string
	Addr string // host:port it listens on
	Base string // URL the requests go to: "http://" + Addr unless a test changes it
	// Token is sent as a bearer token with every request when not empty; it starts as the
	// config's token.
	Token string
	HTTP  *http.Client

	cancel context.CancelFunc
	done   chan error
	logs   *LogTail // the daemon's warnings and errors, shown when its test fails

	stopOnce sync.Once
	stopErr  error
}

// Start runs daemon.Serve on a free loopback port and stops it when the test ends.
// mod, when non-nil, adjusts the config before the start.
func Start(t *testing.T, dsn string, mod func(*axedaemon.Config)) *Daemon {
	t.Helper()
	cfg := axedaemon.Config{
		Addr:            "127.0.0.1:0",
		DB:              dsn,
		NodeID:          "test-node",
		Timezone:        "UTC",
		ShutdownTimeout: 30 * time.Second,
	}
	tail := &LogTail{}
	cfg.Logger = TestLogger(tail)
	if mod != nil {
		mod(&cfg)
	}
	listening := make(chan string, 1)
	cfg.OnListen = func(addr string) { listening <- addr }
	ctx, cancel := context.WithCancel(context.Background())
	d := &Daemon{DSN: dsn, Token: cfg.Token, cancel: cancel, done: make(chan error, 1), logs: tail,
		// A bound for a hung daemon, not a speed check: a 10,000-task batch on SQLite under
		// -race took over 30 s on two cores shared with other packages' tests.
		HTTP: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{}}}
	go func() { d.done <- axedaemon.Serve(ctx, cfg) }()
	select {
	case addr := <-listening:
		d.Addr = addr
		d.Base = "http://" + addr
	case err := <-d.done:
		cancel()
		t.Fatalf("Serve returned before listening: %v", err)
	case <-time.After(StartTimeout):
		cancel()
		t.Fatalf("Serve did not listen within %s", StartTimeout)
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Errorf("Serve returned an error on shutdown: %v", err)
		}
	})
	// Registered after the stop, so it runs first: on failure, show what the daemon knew.
	t.Cleanup(func() {
		if t.Failed() {
			d.Dump(t)
		}
	})
	return d
}

// HANode starts a primary/backup HA daemon (--ha-mode primary) named id on dsn with a short
// lease.
func HANode(t *testing.T, dsn, id string, ttl, renew time.Duration) *Daemon {
	t.Helper()
	return Start(t, dsn, func(c *axedaemon.Config) {
		c.HA = true
		c.HAMode = axedaemon.HAModePrimary
		c.NodeID = id
		c.LeaseTTL = ttl
		c.LeaseRenew = renew
	})
}

// Dump logs the daemon's last warnings and errors and every task with its runtime, runs
// and actions, to diagnose a failed test.
func (d *Daemon) Dump(t *testing.T) {
	if d.logs != nil {
		lines, lost := d.logs.Lines()
		if lost > 0 {
			t.Logf("dump: daemon %s log: %d earlier warnings not kept", d.Addr, lost)
		}
		for _, l := range lines {
			t.Logf("dump: daemon %s log: %s", d.Addr, l)
		}
	}
	get := func(path string) string {
		req, err := http.NewRequest(http.MethodGet, d.Base+path, nil)
		if err != nil {
			return err.Error()
		}
		if d.Token != "" {
			req.Header.Set("Authorization", "Bearer "+d.Token)
		}
		resp, err := d.HTTP.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return string(data)
	}
	var wfs wire.WorkflowList
	if err := json.Unmarshal([]byte(get("/api/v1/workflows")), &wfs); err == nil {
		for _, w := range wfs.Workflows {
			var runs wire.WorkflowRunList
			if err := json.Unmarshal([]byte(get("/api/v1/workflows/"+w.Name+"/runs?limit=50")), &runs); err != nil {
				continue
			}
			for _, r := range runs.Runs {
				if r.State == model.WorkflowRunning {
					t.Logf("dump: open run %s of workflow %s: %s", r.ID, w.Name, get("/api/v1/workflow-runs/"+r.ID))
				}
			}
			t.Logf("dump: workflow %s: %d runs listed; backfill: %s", w.Name, len(runs.Runs), get("/api/v1/workflows/"+w.Name+"/backfill"))
		}
	}
	var list struct {
		Tasks []client.TaskView `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(get("/api/v1/tasks?limit=10000")), &list); err != nil {
		t.Logf("dump: cannot list tasks: %v", err)
		return
	}
	for _, v := range list.Tasks {
		t.Logf("dump: task %s: %+v", v.Name, v.Runtime)
		t.Logf("dump: runs of %s: %s", v.Name, get("/api/v1/tasks/"+v.Name+"/runs"))
		t.Logf("dump: actions of %s: %s", v.Name, get("/api/v1/tasks/"+v.Name+"/actions"))
	}
}

// Cancel cancels Serve's context and returns at once, so a test can watch the daemon drain;
// Stop waits for Serve to return.
func (d *Daemon) Cancel() { d.cancel() }

// Stop cancels Serve's context and waits for it to return. Idempotent.
func (d *Daemon) Stop() error {
	d.stopOnce.Do(func() {
		d.cancel()
		select {
		case d.stopErr = <-d.done:
		case <-time.After(StopTimeout):
			d.stopErr = errors.New("Serve did not return within the stop timeout")
		}
		d.HTTP.CloseIdleConnections()
	})
	return d.stopErr
}

// Call sends a request to the daemon with the daemon's token (if any) and returns the status
// and body. body may be nil, a string (sent verbatim) or a value to encode as JSON. hdr adds
// header pairs.
func (d *Daemon) Call(t *testing.T, method, path string, body any, hdr ...string) (int, []byte) {
	t.Helper()
	code, _, data := d.Send(t, method, path, body, true, hdr...)
	return code, data
}

// Send is Call returning the answer's headers too; withToken false sends no token but what
// hdr holds.
func (d *Daemon) Send(t *testing.T, method, path string, body any, withToken bool, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("encode body: %v", err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, d.Base+path, rd)
	if err != nil {
		t.Fatalf("build request: %v", err)
	}
	if withToken && d.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.Token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json") // hdr may override it
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1] // net/http sends req.Host, not a Host header of req.Header
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := d.HTTP.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, data
}

// MustJSON calls and requires the status, then decodes the body into out (when non-nil).
func (d *Daemon) MustJSON(t *testing.T, want int, method, path string, body, out any, hdr ...string) {
	t.Helper()
	code, data := d.Call(t, method, path, body, hdr...)
	if code != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, code, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
}

// APIError requires status want with an {"error": …} body and returns the message.
func (d *Daemon) APIError(t *testing.T, want int, method, path string, body any, hdr ...string) string {
	t.Helper()
	code, data := d.Call(t, method, path, body, hdr...)
	if code != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, code, want, data)
	}
	var e map[string]any
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("%s %s: error body is not JSON: %s", method, path, data)
	}
	msg, ok := e["error"].(string)
	if !ok || msg == "" || len(e) != 1 {
		t.Fatalf(`%s %s: body %s, want exactly {"error": "..."}`, method, path, data)
	}
	return msg
}

// Create creates a task and requires 201.
//
// A 503 that says to try again (the task's shard is moving between nodes: a node that
// missed its renewals on a loaded box gives its shards up and takes them again; nothing was
// created) is tried again, as a client would, for up to WaitTimeout.
func (d *Daemon) Create(t *testing.T, spec map[string]any, hdr ...string) client.TaskView {
	t.Helper()
	var v client.TaskView
	var code int
	var data []byte
	testwait.For(t, WaitTimeout, "a create not refused as a shard moves", func() bool {
		code, data = d.Call(t, http.MethodPost, "/api/v1/tasks", spec, hdr...)
		return code != http.StatusServiceUnavailable || !strings.Contains(string(data), "try again")
	})
	if code != http.StatusCreated {
		t.Fatalf("POST /api/v1/tasks: status %d, want %d; body %s", code, http.StatusCreated, data)
	}
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("POST /api/v1/tasks: decode %s: %v", data, err)
	}
	return v
}

// Get reads a task and requires 200.
func (d *Daemon) Get(t *testing.T, name string) client.TaskView {
	t.Helper()
	var v client.TaskView
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/"+name, nil, &v)
	return v
}

// List lists tasks with query (empty or starting with "?") and requires the count to match.
func (d *Daemon) List(t *testing.T, query string) []client.TaskView {
	t.Helper()
	var v struct {
		Tasks []client.TaskView `json:"tasks"`
		Count int               `json:"count"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks"+query, nil, &v)
	if v.Count != len(v.Tasks) {
		t.Fatalf("list%s: count %d but %d tasks", query, v.Count, len(v.Tasks))
	}
	return v.Tasks
}

// Runs returns a task's runs.
func (d *Daemon) Runs(t *testing.T, name string) []model.Run {
	t.Helper()
	var v struct {
		Runs []model.Run `json:"runs"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/"+name+"/runs", nil, &v)
	return v.Runs
}

// Actions returns a task's actions.
func (d *Daemon) Actions(t *testing.T, name string) []model.Action {
	t.Helper()
	var v struct {
		Actions []model.Action `json:"actions"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/"+name+"/actions", nil, &v)
	return v.Actions
}

// RunNow starts a run-now instance and returns its ticket.
func (d *Daemon) RunNow(t *testing.T, name string, body any, hdr ...string) string {
	t.Helper()
	var v struct {
		Ticket string `json:"ticket"`
		Task   string `json:"task"`
	}
	d.MustJSON(t, http.StatusAccepted, http.MethodPost, "/api/v1/tasks/"+name+"/run", body, &v, hdr...)
	if v.Ticket == "" || v.Task != name {
		t.Fatalf("run-now %s: answer %+v, want a ticket and the task name", name, v)
	}
	return v.Ticket
}

// WaitRun polls a task's runs until the run with ticket has a result other than running.
func (d *Daemon) WaitRun(t *testing.T, name, ticket string) model.Run {
	t.Helper()
	var found model.Run
	testwait.For(t, WaitTimeout, "run "+ticket+" of "+name+" to end", func() bool {
		for _, r := range d.Runs(t, name) {
			if r.Ticket == ticket && r.Result != model.ResultRunning {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// WaitState polls a task until its runtime state is want.
func (d *Daemon) WaitState(t *testing.T, name string, want model.State) client.TaskView {
	t.Helper()
	var v client.TaskView
	testwait.For(t, WaitTimeout, name+" to be "+string(want), func() bool {
		v = d.Get(t, name)
		return v.Runtime.State == want
	})
	return v
}

// Readyz is the JSON of /readyz on an HA node.
type Readyz struct {
	Status  string `json:"status"`
	Role    string `json:"role"`
	Epoch   int64  `json:"epoch"`
	Node    string `json:"node"`
	Primary string `json:"primary"`
	Shards  string `json:"shards"`
	// NotServing: shards held whose API calls the node does not serve yet (or no longer).
	NotServing string `json:"not_serving"`
}

// Readyz gets /readyz with query and returns the status and the decoded answer.
func (d *Daemon) Readyz(t *testing.T, query string) (int, Readyz) {
	t.Helper()
	code, body := d.Call(t, http.MethodGet, "/readyz"+query, nil)
	var r Readyz
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/readyz%s answered %d %s: %v", query, code, body, err)
	}
	return code, r
}

// WaitRole waits until d serves in role and returns its /readyz.
func (d *Daemon) WaitRole(t *testing.T, role string, timeout time.Duration) Readyz {
	t.Helper()
	var r Readyz
	testwait.For(t, timeout, d.Base+" to be "+role, func() bool {
		_, r = d.Readyz(t, "")
		return r.Role == role && r.Status == "ready"
	})
	return r
}

// HookCall is one callback request received by a Hook.
type HookCall struct {
	At      time.Time // when the request arrived
	Done    time.Time // when the answer was written; zero while it is pending
	Path    string
	Task    string // X-Axe-Task
	Ticket  string // X-Axe-Ticket
	Attempt string // X-Axe-Attempt
	Body    HookBody
	Raw     []byte
	// Signature is X-Axe-Signature, when the daemon signs callbacks.
	Signature string
}

// HookBody is the run JSON a callback receives.
type HookBody struct {
	Task        string          `json:"task"`
	Group       string          `json:"group"`
	Ticket      string          `json:"ticket"`
	Attempt     int             `json:"attempt"`
	Kind        string          `json:"kind"`
	ScheduledAt int64           `json:"scheduled_at"`
	Deadline    int64           `json:"deadline"`
	Params      json.RawMessage `json:"params"`
}

// Hook is an HTTP callback endpoint on loopback that records every call. Its behaviour is
// chosen by the first path segment: /ok answers 200, /fail answers 500, /slow?ms=N answers
// 200 after N ms, /hang blocks until ReleaseHung (or the client goes away).
type Hook struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   []HookCall
	hang    chan struct{}
	release sync.Once
}

// NewHook starts a Hook that is closed when the test ends.
func NewHook(t *testing.T) *Hook {
	t.Helper()
	h := &Hook{hang: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(func() {
		h.ReleaseHung()
		h.srv.Close()
	})
	return h
}

func (h *Hook) serve(w http.ResponseWriter, r *http.Request) {
	c := HookCall{
		At: time.Now(), Path: r.URL.Path, Task: r.Header.Get("X-Axe-Task"),
		Ticket: r.Header.Get("X-Axe-Ticket"), Attempt: r.Header.Get("X-Axe-Attempt"),
		Signature: r.Header.Get("X-Axe-Signature"),
	}
	c.Raw, _ = io.ReadAll(r.Body)
	_ = json.Unmarshal(c.Raw, &c.Body)
	h.mu.Lock()
	i := len(h.calls)
	h.calls = append(h.calls, c)
	h.mu.Unlock()

	status := http.StatusOK
	switch first, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/"); first {
	case "fail":
		status = http.StatusInternalServerError
	case "slow":
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		time.Sleep(time.Duration(ms) * time.Millisecond)
	case "hang":
		select {
		case <-h.hang:
		case <-r.Context().Done():
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"ok":true}`))
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	h.mu.Lock()
	h.calls[i].Done = time.Now()
	h.mu.Unlock()
}

// URL is the hook's address followed by path; URL("") is the bare "http://host:port".
func (h *Hook) URL(path string) string { return h.srv.URL + path }

// ReleaseHung lets every /hang request answer. Idempotent.
func (h *Hook) ReleaseHung() { h.release.Do(func() { close(h.hang) }) }

// CallsOf returns the calls whose X-Axe-Task is task, in arrival order (answered or not).
func (h *Hook) CallsOf(task string) []HookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []HookCall
	for _, c := range h.calls {
		if c.Task == task {
			out = append(out, c)
		}
	}
	return out
}

// WaitCalls waits until at least n calls of task have arrived and returns them.
func (h *Hook) WaitCalls(t *testing.T, task string, n int, timeout time.Duration) []HookCall {
	t.Helper()
	var got []HookCall
	testwait.For(t, timeout, strconv.Itoa(n)+" calls of "+task, func() bool {
		got = h.CallsOf(task)
		return len(got) >= n
	})
	return got
}

// CallsAfter returns task's calls whose scheduled_at is later than ms.
func (h *Hook) CallsAfter(task string, ms int64) []HookCall {
	var out []HookCall
	for _, c := range h.CallsOf(task) {
		if c.Body.ScheduledAt > ms {
			out = append(out, c)
		}
	}
	return out
}

// Spec builds a task definition for an HTTP callback at url with extra fields.
func Spec(name, url string, kv ...any) map[string]any {
	m := map[string]any{"name": name, "callback": map[string]any{"type": "http", "url": url}}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// Names returns the names of list's tasks, in order.
func Names(list []client.TaskView) []string {
	out := make([]string, 0, len(list))
	for _, v := range list {
		out = append(out, v.Name)
	}
	return out
}

// FindAction returns the first action of acts named name.
func FindAction(acts []model.Action, name string) (model.Action, bool) {
	for _, a := range acts {
		if a.Action == name {
			return a, true
		}
	}
	return model.Action{}, false
}

// ReadAll reads and closes resp's body, returning what was read before the first error.
func ReadAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}
