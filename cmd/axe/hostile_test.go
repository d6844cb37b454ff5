package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/protocol"
)

// send makes one request to a running `axe serve` and returns the status and body. body is
// sent as it is (a Reader of unknown length goes chunked); hdr are header pairs, "Host"
// included. A JSON Content-Type is set unless hdr gives one.
func send(t *testing.T, method, url string, body any, hdr ...string) (int, string) {
	t.Helper()
	code, data, err := trySend(t, method, url, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	return code, data
}

// trySend is send that returns a transport error instead of failing the test.
func trySend(t *testing.T, method, url string, body any, hdr ...string) (int, string, error) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case io.Reader:
		rd = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = strings.NewReader(string(raw))
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if _, chunked := body.(io.Reader); chunked {
		req.ContentLength = -1
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: cmdTimeout}).Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), nil
}

// want requires the status and that the body names what it must.
func want(t *testing.T, what string, code int, body string, wantCode int, says string) {
	t.Helper()
	if code != wantCode || !strings.Contains(body, says) {
		t.Errorf("%s: %d %.300s, want %d naming %q", what, code, body, wantCode, says)
	}
}

// taskBody is a manual task's definition with params.
func taskBody(name, hook, params string) string {
	return `{"name":"` + name + `","trigger":"manual","callback":{"url":"` + hook + `"},"params":` + params + `}`
}

// TestPoisonWritesDoNotStallTheDaemon replays issue 33's first finding against the real
// daemon on SQLite and MariaDB: creates and edits the store would refuse (params not UTF-8,
// a callback over its column) are refused by name at once; and one that only the database
// refuses (its trigger, standing for any value a database cannot store) fails alone with a
// 400 instead of stalling the writer. Every later create lands, /readyz stays ready, the
// task serves what the store holds, and SIGTERM flushes and exits at once.
func TestPoisonWritesDoNotStallTheDaemon(t *testing.T) {
	t.Parallel()
	for _, st := range []struct {
		name string
		dsn  func(t *testing.T, dir string) string
	}{
		{persist.SchemeSQLite, func(t *testing.T, dir string) string { return "sqlite:" + filepath.Join(dir, "axe.db") }},
		{persist.SchemeMySQL, func(t *testing.T, _ string) string { return persisttest.MySQLSchemaDSN(t) }},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			dsn := st.dsn(t, dir)
			h := newHook(t)
			hook := h.srv.URL + "/ok"
			srv := startServe(t, dir, []string{"AXE_DB=" + dsn}, "--addr", "127.0.0.1:0")
			api := srv.url + "/api/v1"
			code, body := send(t, "POST", api+"/tasks", taskBody("seed", hook, `{"v":1}`))
			want(t, "the seed task", code, body, 201, `"seed"`)

			for _, c := range []struct{ what, method, path, body, says string }{
				{"a create of params not UTF-8", "POST", "/tasks", taskBody("bad", hook, "{\"k\":\"\xff\xfe\"}"), "params.k: invalid UTF-8"},
				{"a create of a surrogate's bytes", "POST", "/tasks", taskBody("bad", hook, "[\"\xed\xa0\x80\"]"), "params[0]: invalid UTF-8"},
				{"a create of a lone surrogate", "POST", "/tasks", taskBody("bad", hook, `["\ud800"]`), "params[0]: a lone UTF-16 surrogate"},
				{"a create of a callback over 64 KiB", "POST", "/tasks", taskBody("bad", "http://h/"+strings.Repeat("u", 70_000), "{}"), "callback.url"},
				{"an edit of params not UTF-8", "PUT", "/tasks/seed", taskBody("seed", hook, "{\"k\":\"\xc3\"}"), "params.k: invalid UTF-8"},
				{"an edit of a callback over 64 KiB", "PUT", "/tasks/seed", taskBody("seed", "http://h/"+strings.Repeat("u", 70_000), "{}"), "callback.url"},
			} {
				code, body := send(t, c.method, api+c.path, c.body)
				want(t, c.what, code, body, 400, c.says)
			}

			persisttest.RefuseParams(t, dsn, "poison")
			code, body = send(t, "POST", api+"/tasks", taskBody("refused", hook, `{"v":"poison"}`))
			want(t, "a create the database refuses", code, body, 400, "refused")
			code, body = send(t, "PUT", api+"/tasks/seed", taskBody("seed", hook, `{"v":"poison"}`))
			want(t, "an edit the database refuses", code, body, 400, "refused")
			code, body = send(t, "GET", api+"/tasks/seed", nil)
			if code != 200 || !strings.Contains(body, `"params":{"v":1}`) {
				t.Errorf("the seed task after the refused edit: %d %s, want its params as stored", code, body)
			}
			for i := range 5 {
				name := "after-" + string(rune('a'+i))
				code, body := send(t, "POST", api+"/tasks", taskBody(name, hook, `{}`))
				want(t, "a create after the refusals", code, body, 201, name)
			}
			code, body = send(t, "GET", srv.url+"/readyz", nil)
			want(t, "/readyz after the refusals", code, body, 200, "ready")
			code, body = send(t, "GET", srv.url+"/metrics", nil)
			if code != 200 || !strings.Contains(body, "axe_writer_rejected_groups_total 2") {
				t.Errorf("metrics: %d, want axe_writer_rejected_groups_total 2", code)
			}
			if code := srv.signal(t, syscall.SIGTERM); code != 0 {
				t.Errorf("axe serve exited %d after SIGTERM\nstderr:\n%s", code, srv.stderr.String())
			}
			if log := srv.stderr.String(); strings.Contains(log, "cannot flush") || !strings.Contains(log, "writer stopped") {
				t.Errorf("SIGTERM did not flush the writer:\n%s", log)
			}
		})
	}
}

// TestHostileRequestsToTheDaemon replays the rest of issue 33 and issue 31's repeated keys
// against the real tokenless daemon: each refused, and none changes anything.
func TestHostileRequestsToTheDaemon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := newHook(t)
	hook := h.srv.URL + "/ok"
	srv := startServe(t, dir, []string{"AXE_DB=sqlite:" + filepath.Join(dir, "axe.db")}, "--addr", "127.0.0.1:0")
	api := srv.url + "/api/v1"
	code, body := send(t, "POST", api+"/tasks", taskBody("ns:job", hook, `{}`))
	want(t, "a task named ns:job", code, body, 201, "ns:job")

	cron := `{"name":"csrf","trigger":"cron","cron":"* * * * *","callback":{"url":"` + hook + `"}}`
	for _, c := range []struct {
		what, method, path string
		body               any
		hdr                []string
		code               int
		says               string
	}{
		// Cross-site requests and DNS rebinding (item 3).
		{"a text/plain create from another site", "POST", "/tasks", cron, []string{"Content-Type", "text/plain", "Origin", "http://evil.example"}, 403, "Origin"},
		{"a text/plain create", "POST", "/tasks", cron, []string{"Content-Type", "text/plain"}, 415, "Content-Type"},
		{"a cross-site fetch", "POST", "/tasks", cron, []string{"Sec-Fetch-Site", "cross-site"}, 403, "Sec-Fetch-Site"},
		{"a read through a rebound name", "GET", "/tasks", nil, []string{"Host", "rebind.attacker.example"}, 403, "host"},
		// Paths decoded as the router matches them (item 5).
		{"encoded dot-dots", "PUT", "/tasks/x%2F..%2F..%2Fcallback", taskBody("x/../../callback", hook, "{}"), nil, 400, "name"},
		// Sizes and names (item 6).
		{"run-now params over 64 KiB", "POST", "/tasks/ns%3Ajob/run", `{"params":{"x":"` + strings.Repeat("p", 70<<10) + `"}}`, nil, 400, "params"},
		{"a downstream of 3,900 characters", "PUT", "/ratelimits", `{"downstream":"` + strings.Repeat("d", 3900) + `","rate":5}`, nil, 400, "downstream"},
		{"a downstream of markup", "PUT", "/ratelimits", `{"downstream":"<script>","rate":5}`, nil, 400, "downstream"},
		{"a rate of 1e300", "PUT", "/ratelimits", `{"downstream":"billing","rate":1e300}`, nil, 400, "rate"},
		// Repeated keys (issue 31).
		{"a create repeating its name", "POST", "/tasks", `{"name":"a","name":"b","trigger":"manual","callback":{"url":"` + hook + `"}}`, nil, 400, "name: repeated key"},
		{"a rate limit repeating its rate", "PUT", "/ratelimits", `{"downstream":"x","rate":1,"rate":2}`, nil, 400, "rate: repeated key"},
		// Request targets a request line cannot carry, and alert filters (issue 41).
		{"a callback URL with a space in its query", "POST", "/tasks", taskBody("split", hook+"?a=b HTTP/1.1 X-Injected: yes", "{}"), nil, 400, "callback.url"},
		{"a callback URL with CRLF", "POST", "/tasks", taskBody("split", hook+`?a=b\r\nX-Injected: yes`, "{}"), nil, 400, "callback.url"},
		{"a callback URL not ASCII", "PUT", "/tasks/ns%3Ajob", taskBody("ns:job", hook+"/café", "{}"), nil, 400, "callback.url"},
		{"an alerts kind that is not a kind", "GET", "/alerts?kind=lost%20OR%201=1", nil, nil, 400, "kind"},
		{"alerts of an unknown task", "GET", "/alerts?task=ghost", nil, nil, 404, "ghost"},
	} {
		code, body := send(t, c.method, api+c.path, c.body, c.hdr...)
		want(t, c.what, code, body, c.code, c.says)
	}
	// A batch of one endless item is cut off at the item limit. The daemon answers 413 and
	// closes the connection with the rest of the body unread, so TCP resets it, and the
	// client, still writing, may see the reset before the answer: either outcome is the
	// body refused; what matters is that the daemon goes on serving (checked below).
	endlessBatch := io.MultiReader(strings.NewReader(`[{"name":"`), endless{})
	if code, body, err := trySend(t, "POST", api+"/tasks/batch", endlessBatch); err == nil {
		want(t, "a batch of one endless item", code, body, 413, "item 0")
	} else if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Errorf("a batch of one endless item: %v, want 413 or a reset connection", err)
	}
	code, body = send(t, "GET", api+"/tasks", nil)
	if code != 200 || strings.Contains(body, "csrf") || !strings.Contains(body, `"count":1`) {
		t.Errorf("tasks after the hostile requests: %d %s, want ns:job alone", code, body)
	}
	code, body = send(t, "GET", api+"/ratelimits", nil)
	if code != 200 || strings.Contains(body, "script") || strings.Contains(body, "ddd") {
		t.Errorf("rate limits after the refused ones: %d %s", code, body)
	}
	code, body = send(t, "GET", api+"/tasks/ns%3Ajob", nil)
	want(t, "ns:job opened as ns%3Ajob", code, body, 200, `"ns:job"`)
}

// endless is a body that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// TestDaemonTakesResultsOnlyFromTheRunsExecutor: against the real daemon, a run in flight on
// one executor is not settled by a result naming another task, nor by one from another
// address of the same app, registered or not; its own executor's result is recorded with
// that executor.
func TestDaemonTakesResultsOnlyFromTheRunsExecutor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, []string{"AXE_DB=sqlite:" + filepath.Join(dir, "axe.db")}, "--addr", "127.0.0.1:0")
	api := srv.url + "/api/v1"
	var mu sync.Mutex
	got := map[string]string{} // ticket → the executor that got it
	var xs []*httptest.Server
	for range 2 {
		var x *httptest.Server
		x = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var run protocol.Run
			_ = json.NewDecoder(r.Body).Decode(&run)
			mu.Lock()
			got[run.Ticket] = strings.TrimPrefix(x.URL, "http://")
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted) // and never reports: the run stays in flight
			_, _ = w.Write([]byte(`{"accepted":true}`))
		}))
		t.Cleanup(x.Close)
		xs = append(xs, x)
		code, body := send(t, "POST", srv.url+protocol.PathRegister, map[string]any{"app": "billing",
			"address": strings.TrimPrefix(x.URL, "http://"), "handlers": []string{"charge"}})
		want(t, "a registration", code, body, 200, "heartbeat")
	}
	code, body := send(t, "POST", api+"/tasks", `{"name":"charge","trigger":"manual","callback":{"type":"executor","app":"billing","handler":"charge"}}`)
	want(t, "the executor task", code, body, 201, "charge")
	code, body = send(t, "POST", api+"/tasks/charge/run", nil)
	var run struct{ Ticket string }
	if code != 202 || json.Unmarshal([]byte(body), &run) != nil {
		t.Fatalf("run-now: %d %s", code, body)
	}
	var holder string
	testwait.For(t, waitTimeout, "the run at an executor", func() bool {
		mu.Lock()
		defer mu.Unlock()
		holder = got[run.Ticket]
		return holder != ""
	})
	other := strings.TrimPrefix(xs[0].URL, "http://")
	if other == holder {
		other = strings.TrimPrefix(xs[1].URL, "http://")
	}
	result := func(task, addr string) string {
		return `{"ticket":"` + run.Ticket + `","task":"` + task + `","app":"billing","address":"` + addr + `","status":"success","output":"forged"}`
	}
	code, body = send(t, "POST", srv.url+protocol.PathCallback, result("refund", holder))
	want(t, "a result naming another task", code, body, 400, "task")
	code, body = send(t, "POST", srv.url+protocol.PathCallback, result("charge", other))
	want(t, "a result from the app's other executor", code, body, 403, holder)
	code, body = send(t, "POST", srv.url+protocol.PathCallback, result("charge", "127.0.0.1:1"))
	want(t, "a result from an unregistered address", code, body, 403, holder)
	code, body = send(t, "POST", srv.url+protocol.PathCallback, `{"ticket":"`+run.Ticket+`","task":"charge","app":"billing","address":"`+holder+`","status":"success","output":"charged"}`)
	want(t, "the result from the run's executor", code, body, 200, "ok")
	deadline := time.Now().Add(waitTimeout)
	for {
		code, body = send(t, "GET", api+"/runs/"+run.Ticket, nil)
		var r struct{ Result, Executor, Output string }
		_ = json.Unmarshal([]byte(body), &r)
		if r.Result == "success" {
			if r.Executor != holder || r.Output != "charged" {
				t.Errorf("the run: %s, want it from %s with its output", body, holder)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never recorded its result: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestShortTokenRefused: a --token shorter than a token file's minimum is refused at start,
// on any address.
func TestShortTokenRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := axe(t, []string{"AXE_DB=sqlite:" + filepath.Join(dir, "axe.db")}, "serve", "--addr", "0.0.0.0:0", "--token", "x")
	if r.code == 0 || !strings.Contains(r.stderr, "token: must be at least 16 characters") {
		t.Errorf("serve --token x on 0.0.0.0: exit %d\nstderr:\n%s", r.code, r.stderr)
	}
}
