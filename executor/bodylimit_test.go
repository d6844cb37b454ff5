package executor_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/executor/internal/schedpeer"
	"github.com/axe-sched/axe/internal/test/rawhttp"
	"github.com/axe-sched/axe/protocol"
)

// announce sends a request whose headers announce a body of size bytes, sends none of it,
// and returns the answer: a body over the endpoint's limit must be refused from its
// Content-Length alone, before any of it is read. auth is the Authorization header ("" for
// none).
func announce(t *testing.T, addr, path, auth string, size int) (int, string) {
	t.Helper()
	header := []string{"Content-Type: application/json"}
	if auth != "" {
		header = append(header, "Authorization: "+auth)
	}
	code, body, err := rawhttp.Do(addr, rawhttp.Request{Method: "POST", Path: path, Header: header, Announce: size}, 30*time.Second)
	if err != nil {
		t.Fatalf("POST %s announcing %d bytes: no answer before the body: %v", path, size, err)
	}
	return code, string(body)
}

// TestBodyLimits holds each executor endpoint to its own body limit, and a caller without a
// plausible scheduler signature to a small one, refused before the body is read.
func TestBodyLimits(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{Token: "exec-token"})
	exe := newExecutor(t, executor.Config{Token: "exec-token"}, peer)
	exe.Handle("h", okHandler(""))
	start(t, exe)
	key := protocol.DispatchKey("exec-token")
	// A signature can only be checked once the body is read; before, its form and its time.
	signed := func(path string, at time.Time) string { return protocol.SignCall(key, at, exe.Addr(), path, "", nil) }
	now := time.Now()

	for _, c := range []struct {
		path, auth string
		size       int
		want       int
		limit      string // what the 413's error names
	}{
		{"/axe/kill", signed("/axe/kill", now), 8 << 10, http.StatusRequestEntityTooLarge, fmt.Sprintf("%d bytes for /axe/kill", protocol.MaxKillBodyBytes)},
		{"/axe/run", signed("/axe/run", now), 2 << 20, http.StatusRequestEntityTooLarge, "1048576 bytes for /axe/run"},
		{"/axe/runs", signed("/axe/runs", now), 5 << 20, http.StatusRequestEntityTooLarge, "4194304 bytes for /axe/runs"},
		{"/axe/nowhere", signed("/axe/nowhere", now), 8 << 10, http.StatusRequestEntityTooLarge, "4096 bytes for /axe/nowhere"},
		// Without a plausible signature a large body is the 401 a small one gets: none, the
		// executor's own token as a bearer, or a signature of a time long past.
		{"/axe/runs", "", 1 << 20, http.StatusUnauthorized, ""},
		{"/axe/run", "Bearer exec-token", 64 << 10, http.StatusUnauthorized, ""},
		{"/axe/run", signed("/axe/run", now.Add(-2*protocol.SignatureSkew)), 64 << 10, http.StatusUnauthorized, ""},
	} {
		code, body := announce(t, exe.Addr(), c.path, c.auth, c.size)
		var e protocol.Error
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
			t.Errorf("%s, %d bytes, auth %q: body %q is not a JSON error", c.path, c.size, c.auth, body)
		}
		if code != c.want || !strings.Contains(e.Error, c.limit) {
			t.Errorf("%s, %d bytes, auth %q: %d %q, want %d naming %q", c.path, c.size, c.auth, code, e.Error, c.want, c.limit)
		}
	}

	// Headers larger than the read buffer keep fasthttp's 431, in the protocol's JSON.
	code, b, err := rawhttp.Do(exe.Addr(), rawhttp.Request{Method: "POST", Path: "/axe/run",
		Header: []string{"X-Pad: " + strings.Repeat("p", 16<<10)}, Announce: 0}, 30*time.Second)
	var e protocol.Error
	if err != nil || code != http.StatusRequestHeaderFieldsTooLarge || json.Unmarshal(b, &e) != nil || e.Error == "" {
		t.Errorf("headers of 16 KiB: %v %d %s, want 431 with a JSON error", err, code, b)
	}

	// Under their limits the endpoints read their bodies: a 2 MiB batch is read and refused
	// as malformed (400), not as too large; a run with 512 KiB of params is accepted.
	resp, err := peer.Post(exe.Addr(), "/axe/runs", []byte("["+strings.Repeat(" ", 2<<20)+"{]"), "exec-token", nil)
	if err != nil || resp.Status != http.StatusBadRequest {
		t.Errorf("a 2 MiB malformed batch: %v %d %s, want 400", err, resp.Status, resp.Body)
	}
	params, _ := json.Marshal(map[string]string{"pad": strings.Repeat("x", 512<<10)})
	run := map[string]any{"deadline": 0, "ticket": "t-big", "task": "big", "handler": "h", "attempt": 1, "params": json.RawMessage(params)}
	body, _ := json.Marshal(run)
	resp, err = peer.Post(exe.Addr(), "/axe/run", body, "exec-token", nil)
	if err != nil || resp.Status != http.StatusAccepted {
		t.Errorf("a run of %d bytes: %v %d %s, want 202", len(body), err, resp.Status, resp.Body)
	}
	waitCallbacks(t, peer, 1)
}
