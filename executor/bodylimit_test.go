package executor_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/executor/internal/schedpeer"
	"github.com/axe-sched/axe/protocol"
)

// announce sends a request whose headers announce a body of size bytes, sends none of it,
// and returns the answer: a body over the endpoint's limit must be refused from its
// Content-Length alone, before any of it is read.
func announce(t *testing.T, addr, path, token string, size int) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n",
		path, addr, auth, size); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("POST %s announcing %d bytes: no answer before the body: %v", path, size, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestBodyLimits holds each executor endpoint to its own body limit, and a caller without
// the scheduler token to a small one, refused before the body is read.
func TestBodyLimits(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{Token: "exec-token"})
	exe := newExecutor(t, executor.Config{Token: "exec-token", SchedulerToken: "sched-token"}, peer)
	exe.Handle("h", okHandler(""))
	start(t, exe)

	for _, c := range []struct {
		path, token string
		size        int
		want        int
		limit       string // what the 413's error names
	}{
		{"/axe/kill", "sched-token", 8 << 10, http.StatusRequestEntityTooLarge, fmt.Sprintf("%d bytes for /axe/kill", protocol.MaxKillBodyBytes)},
		{"/axe/run", "sched-token", 2 << 20, http.StatusRequestEntityTooLarge, "1048576 bytes for /axe/run"},
		{"/axe/runs", "sched-token", 5 << 20, http.StatusRequestEntityTooLarge, "4194304 bytes for /axe/runs"},
		{"/axe/nowhere", "sched-token", 8 << 10, http.StatusRequestEntityTooLarge, "4096 bytes for /axe/nowhere"},
		// Without the scheduler token a large body is the 401 a small one gets.
		{"/axe/runs", "", 1 << 20, http.StatusUnauthorized, ""},
		{"/axe/run", "exec-token", 64 << 10, http.StatusUnauthorized, ""},
	} {
		code, body := announce(t, exe.Addr(), c.path, c.token, c.size)
		var e protocol.Error
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
			t.Errorf("%s, %d bytes, token %q: body %q is not a JSON error", c.path, c.size, c.token, body)
		}
		if code != c.want || !strings.Contains(e.Error, c.limit) {
			t.Errorf("%s, %d bytes, token %q: %d %q, want %d naming %q", c.path, c.size, c.token, code, e.Error, c.want, c.limit)
		}
	}

	// Headers larger than the read buffer keep fasthttp's 431, in the protocol's JSON.
	conn, err := net.DialTimeout("tcp", exe.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "POST /axe/run HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\nContent-Length: 0\r\n\r\n", strings.Repeat("p", 16<<10))
	if hr, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
		t.Errorf("headers of 16 KiB: %v", err)
	} else {
		b, _ := io.ReadAll(hr.Body)
		var e protocol.Error
		if hr.StatusCode != http.StatusRequestHeaderFieldsTooLarge || json.Unmarshal(b, &e) != nil || e.Error == "" {
			t.Errorf("headers of 16 KiB: %d %s, want 431 with a JSON error", hr.StatusCode, b)
		}
	}

	// Under their limits the endpoints read their bodies: a 2 MiB batch is read and refused
	// as malformed (400), not as too large; a run with 512 KiB of params is accepted.
	resp, err := peer.Post(exe.Addr(), "/axe/runs", []byte("["+strings.Repeat(" ", 2<<20)+"{]"), "sched-token", nil)
	if err != nil || resp.Status != http.StatusBadRequest {
		t.Errorf("a 2 MiB malformed batch: %v %d %s, want 400", err, resp.Status, resp.Body)
	}
	params, _ := json.Marshal(map[string]string{"pad": strings.Repeat("x", 512<<10)})
	run := map[string]any{"ticket": "t-big", "task": "big", "handler": "h", "attempt": 1, "params": json.RawMessage(params)}
	body, _ := json.Marshal(run)
	resp, err = peer.Post(exe.Addr(), "/axe/run", body, "sched-token", nil)
	if err != nil || resp.Status != http.StatusAccepted {
		t.Errorf("a run of %d bytes: %v %d %s, want 202", len(body), err, resp.Status, resp.Body)
	}
	waitCallbacks(t, peer, 1)
}
