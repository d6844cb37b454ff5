package admin_test

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
	"github.com/axe-sched/axe/internal/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

func TestMain(m *testing.M) {
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

// testLogger discards daemon logs unless AXE_TEST_LOG=1, so failures stay readable.
func testLogger() *slog.Logger {
	if os.Getenv("AXE_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Generous bounds for real-time waits: the suite runs with -race on two cores.
const (
	startTimeout = 60 * time.Second
	stopTimeout  = 60 * time.Second
	waitTimeout  = 15 * time.Second
)

// eachStore runs fn as parallel subtests "sqlite" and "mysql", each on a fresh database.
func eachStore(t *testing.T, fn func(t *testing.T, dsn string)) {
	t.Helper()
	stores := []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{persist.SchemeSQLite, func(t *testing.T) string {
			return persist.SchemeSQLite + ":" + filepath.Join(t.TempDir(), "axe.db")
		}},
		{persist.SchemeMySQL, func(t *testing.T) string { return persisttest.MySQLDSN(t) }},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			fn(t, s.dsn(t))
		})
	}
}

// daemon is one daemon.Serve running in-process for a test.
type daemon struct {
	dsn    string
	addr   string
	base   string
	token  string
	cancel context.CancelFunc
	done   chan error
	http   *http.Client

	stopOnce sync.Once
	stopErr  error
}

// startDaemon runs daemon.Serve on a free loopback port and stops it when the test ends.
// mod, when non-nil, adjusts the config before the start.
func startDaemon(t *testing.T, dsn string, mod func(*axedaemon.Config)) *daemon {
	t.Helper()
	cfg := axedaemon.Config{
		Addr:            "127.0.0.1:0",
		DB:              dsn,
		NodeID:          "test-node",
		Timezone:        "UTC",
		ShutdownTimeout: 30 * time.Second,
		Logger:          testLogger(),
	}
	if mod != nil {
		mod(&cfg)
	}
	listening := make(chan string, 1)
	cfg.OnListen = func(addr string) { listening <- addr }
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{dsn: dsn, token: cfg.Token, cancel: cancel, done: make(chan error, 1),
		// A bound for a hung daemon, not a speed check: a 10,000-task batch on SQLite under
		// -race took over 30 s on two cores shared with other packages' tests.
		http: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{}}}
	go func() { d.done <- axedaemon.Serve(ctx, cfg) }()
	select {
	case addr := <-listening:
		d.addr = addr
		d.base = "http://" + addr
	case err := <-d.done:
		cancel()
		t.Fatalf("Serve returned before listening: %v", err)
	case <-time.After(startTimeout):
		cancel()
		t.Fatalf("Serve did not listen within %s", startTimeout)
	}
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("Serve returned an error on shutdown: %v", err)
		}
	})
	// Registered after the stop, so it runs first: on failure, show what the daemon knew.
	t.Cleanup(func() {
		if t.Failed() {
			d.dump(t)
		}
	})
	return d
}

// dump logs every task with its runtime, runs and actions, to diagnose a failed test.
func (d *daemon) dump(t *testing.T) {
	get := func(path string) string {
		req, err := http.NewRequest(http.MethodGet, d.base+path, nil)
		if err != nil {
			return err.Error()
		}
		if d.token != "" {
			req.Header.Set("Authorization", "Bearer "+d.token)
		}
		resp, err := d.http.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return string(data)
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

// stop cancels Serve's context and waits for it to return. Idempotent.
func (d *daemon) stop() error {
	d.stopOnce.Do(func() {
		d.cancel()
		select {
		case d.stopErr = <-d.done:
		case <-time.After(stopTimeout):
			d.stopErr = errors.New("Serve did not return within the stop timeout")
		}
		d.http.CloseIdleConnections()
	})
	return d.stopErr
}

// call sends a request to the daemon with the daemon's token (if any) and returns the status
// and body. body may be nil, a string (sent verbatim) or a value to encode as JSON. hdr adds
// header pairs.
func (d *daemon) call(t *testing.T, method, path string, body any, hdr ...string) (int, []byte) {
	t.Helper()
	code, _, data := d.send(t, method, path, body, true, hdr...)
	return code, data
}

// send is call returning the answer's headers too; withToken false sends no token but what
// hdr holds.
func (d *daemon) send(t *testing.T, method, path string, body any, withToken bool, hdr ...string) (int, http.Header, []byte) {
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
	req, err := http.NewRequest(method, d.base+path, rd)
	if err != nil {
		t.Fatalf("build request: %v", err)
	}
	if withToken && d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
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
	resp, err := d.http.Do(req)
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

// mustJSON calls and requires the status, then decodes the body into out (when non-nil).
func (d *daemon) mustJSON(t *testing.T, want int, method, path string, body, out any, hdr ...string) {
	t.Helper()
	code, data := d.call(t, method, path, body, hdr...)
	if code != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, code, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
}

// apiError requires status want with an {"error": …} body and returns the message.
func (d *daemon) apiError(t *testing.T, want int, method, path string, body any, hdr ...string) string {
	t.Helper()
	code, data := d.call(t, method, path, body, hdr...)
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

func (d *daemon) create(t *testing.T, spec map[string]any, hdr ...string) client.TaskView {
	t.Helper()
	var v client.TaskView
	d.mustJSON(t, http.StatusCreated, http.MethodPost, "/api/v1/tasks", spec, &v, hdr...)
	return v
}

func (d *daemon) get(t *testing.T, name string) client.TaskView {
	t.Helper()
	var v client.TaskView
	d.mustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/"+name, nil, &v)
	return v
}

func (d *daemon) list(t *testing.T, query string) []client.TaskView {
	t.Helper()
	var v struct {
		Tasks []client.TaskView `json:"tasks"`
		Count int               `json:"count"`
	}
	d.mustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks"+query, nil, &v)
	if v.Count != len(v.Tasks) {
		t.Fatalf("list%s: count %d but %d tasks", query, v.Count, len(v.Tasks))
	}
	return v.Tasks
}

func (d *daemon) runs(t *testing.T, name string) []model.Run {
	t.Helper()
	var v struct {
		Runs []model.Run `json:"runs"`
	}
	d.mustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/"+name+"/runs", nil, &v)
	return v.Runs
}

func (d *daemon) actions(t *testing.T, name string) []model.Action {
	t.Helper()
	var v struct {
		Actions []model.Action `json:"actions"`
	}
	d.mustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/"+name+"/actions", nil, &v)
	return v.Actions
}

// runNow starts a run-now instance and returns its ticket.
func (d *daemon) runNow(t *testing.T, name string, body any, hdr ...string) string {
	t.Helper()
	var v struct {
		Ticket string `json:"ticket"`
		Task   string `json:"task"`
	}
	d.mustJSON(t, http.StatusAccepted, http.MethodPost, "/api/v1/tasks/"+name+"/run", body, &v, hdr...)
	if v.Ticket == "" || v.Task != name {
		t.Fatalf("run-now %s: answer %+v, want a ticket and the task name", name, v)
	}
	return v.Ticket
}

// waitRun polls a task's runs until the run with ticket has a result other than running.
func (d *daemon) waitRun(t *testing.T, name, ticket string) model.Run {
	t.Helper()
	var found model.Run
	testwait.For(t, waitTimeout, "run "+ticket+" of "+name+" to end", func() bool {
		for _, r := range d.runs(t, name) {
			if r.Ticket == ticket && r.Result != model.ResultRunning {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// waitState polls a task until its runtime state is want.
func (d *daemon) waitState(t *testing.T, name string, want model.State) client.TaskView {
	t.Helper()
	var v client.TaskView
	testwait.For(t, waitTimeout, name+" to be "+string(want), func() bool {
		v = d.get(t, name)
		return v.Runtime.State == want
	})
	return v
}

// hookCall is one callback request received by a hook.
type hookCall struct {
	At      time.Time // when the request arrived
	Done    time.Time // when the answer was written; zero while it is pending
	Path    string
	Task    string // X-Axe-Task
	Ticket  string // X-Axe-Ticket
	Attempt string // X-Axe-Attempt
	Body    hookBody
	Raw     []byte
	// Signature is X-Axe-Signature, when the daemon signs callbacks.
	Signature string
}

// hookBody is the run JSON a callback receives.
type hookBody struct {
	Task        string          `json:"task"`
	Group       string          `json:"group"`
	Ticket      string          `json:"ticket"`
	Attempt     int             `json:"attempt"`
	Kind        string          `json:"kind"`
	ScheduledAt int64           `json:"scheduled_at"`
	Deadline    int64           `json:"deadline"`
	Params      json.RawMessage `json:"params"`
}

// hook is an HTTP callback endpoint on loopback that records every call. Its behaviour is
// chosen by the first path segment: /ok answers 200, /fail answers 500, /slow?ms=N answers
// 200 after N ms, /hang blocks until release (or the client goes away).
type hook struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   []hookCall
	hang    chan struct{}
	release sync.Once
}

func newHook(t *testing.T) *hook {
	t.Helper()
	h := &hook{hang: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(func() {
		h.releaseHung()
		h.srv.Close()
	})
	return h
}

func (h *hook) serve(w http.ResponseWriter, r *http.Request) {
	c := hookCall{
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

func (h *hook) url(path string) string { return h.srv.URL + path }

// releaseHung lets every /hang request answer. Idempotent.
func (h *hook) releaseHung() { h.release.Do(func() { close(h.hang) }) }

// callsOf returns the calls whose X-Axe-Task is task, in arrival order (answered or not).
func (h *hook) callsOf(task string) []hookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hookCall
	for _, c := range h.calls {
		if c.Task == task {
			out = append(out, c)
		}
	}
	return out
}

// waitCalls waits until at least n calls of task have arrived and returns them.
func (h *hook) waitCalls(t *testing.T, task string, n int, timeout time.Duration) []hookCall {
	t.Helper()
	var got []hookCall
	testwait.For(t, timeout, strconv.Itoa(n)+" calls of "+task, func() bool {
		got = h.callsOf(task)
		return len(got) >= n
	})
	return got
}

// callsAfter returns task's calls whose scheduled_at is later than ms.
func (h *hook) callsAfter(task string, ms int64) []hookCall {
	var out []hookCall
	for _, c := range h.callsOf(task) {
		if c.Body.ScheduledAt > ms {
			out = append(out, c)
		}
	}
	return out
}

// spec builds a task definition for an HTTP callback at url with extra fields.
func spec(name, url string, kv ...any) map[string]any {
	m := map[string]any{"name": name, "callback": map[string]any{"type": "http", "url": url}}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func names(list []client.TaskView) []string {
	out := make([]string, 0, len(list))
	for _, v := range list {
		out = append(out, v.Name)
	}
	return out
}

func findAction(acts []model.Action, name string) (model.Action, bool) {
	for _, a := range acts {
		if a.Action == name {
			return a, true
		}
	}
	return model.Action{}, false
}

// haNode starts an HA daemon named id on dsn with a short lease.
func haNode(t *testing.T, dsn, id string, ttl, renew time.Duration) *daemon {
	t.Helper()
	return startDaemon(t, dsn, func(c *axedaemon.Config) {
		c.HA = true
		c.NodeID = id
		c.LeaseTTL = ttl
		c.LeaseRenew = renew
	})
}

// readyz is the JSON of /readyz on an HA node.
type readyz struct {
	Status  string `json:"status"`
	Role    string `json:"role"`
	Epoch   int64  `json:"epoch"`
	Node    string `json:"node"`
	Primary string `json:"primary"`
}

func (d *daemon) readyz(t *testing.T, query string) (int, readyz) {
	t.Helper()
	code, body := d.call(t, http.MethodGet, "/readyz"+query, nil)
	var r readyz
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/readyz%s answered %d %s: %v", query, code, body, err)
	}
	return code, r
}

// waitRole waits until d serves in role and returns its /readyz.
func (d *daemon) waitRole(t *testing.T, role string, timeout time.Duration) readyz {
	t.Helper()
	var r readyz
	testwait.For(t, timeout, d.base+" to be "+role, func() bool {
		_, r = d.readyz(t, "")
		return r.Role == role && r.Status == "ready"
	})
	return r
}

func readAll(t *testing.T, resp *http.Response) string {
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
