package admin_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/admin"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/persist"

	"github.com/axe-sched/axe/internal/test/testwait"
)

const (
	readTok  = "read-token-0123456789"
	writeTok = "write-token-0123456789"
	execTok  = "exec-token-0123456789"
	billTok  = "billing-exec-0123456789"
	hashTok  = "hashed-token-0123456789"
)

func writeTokenFile(t *testing.T, path string, entries []admin.TokenEntry) {
	t.Helper()
	b, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

func scopedEntries() []admin.TokenEntry {
	return []admin.TokenEntry{
		{Name: "viewer", Scope: "read", Token: readTok},
		{Name: "ops", Scope: "write", Token: writeTok},
		{Name: "exec", Scope: "executor", Token: execTok},
		{Name: "billing-exec", Scope: "executor", Token: billTok, Apps: []string{"billing"}},
		{Name: "hashed", Scope: "write", Token: sha(hashTok)},
	}
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

func TestScopedTokens(t *testing.T) {
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		h := daemontest.NewHook(t)
		file := filepath.Join(t.TempDir(), "tokens.json")
		writeTokenFile(t, file, scopedEntries())
		d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Security.TokenFile = file })

		// No token: 401 everywhere under /api and on /metrics; probes stay open.
		for _, p := range []string{"/api/v1/tasks", "/api/v1/executors", "/api/v1/whoami", "/metrics"} {
			if code, _ := d.Call(t, "GET", p, nil); code != http.StatusUnauthorized {
				t.Errorf("GET %s without a token: %d, want 401", p, code)
			}
		}
		if code, _ := d.Call(t, "GET", "/api/v1/tasks", nil, bearer("not-a-token-at-all")...); code != http.StatusUnauthorized {
			t.Errorf("unknown token: %d, want 401", code)
		}
		for _, p := range []string{"/healthz", "/readyz"} {
			if code, _ := d.Call(t, "GET", p, nil); code != http.StatusOK {
				t.Errorf("GET %s without a token: %d, want 200", p, code)
			}
		}

		// read: every GET, no change.
		if code, _ := d.Call(t, "GET", "/api/v1/tasks", nil, bearer(readTok)...); code != 200 {
			t.Errorf("read token GET: %d", code)
		}
		if code, _ := d.Call(t, "GET", "/metrics", nil, bearer(readTok)...); code != 200 {
			t.Errorf("read token /metrics: %d", code)
		}
		msg := d.APIError(t, http.StatusForbidden, "POST", "/api/v1/tasks", daemontest.Spec("r", h.URL("/ok"), "trigger", "manual"), bearer(readTok)...)
		if !strings.Contains(msg, "write") {
			t.Errorf("403 %q does not name the write scope", msg)
		}
		// executor: only the protocol.
		msg = d.APIError(t, http.StatusForbidden, "POST", "/api/v1/tasks", daemontest.Spec("e", h.URL("/ok"), "trigger", "manual"), bearer(execTok)...)
		if !strings.Contains(msg, "write") {
			t.Errorf("403 %q does not name the write scope", msg)
		}
		if code, _ := d.Call(t, "GET", "/api/v1/tasks", nil, bearer(execTok)...); code != http.StatusForbidden {
			t.Errorf("executor token GET /tasks: %d, want 403", code)
		}
		reg := map[string]any{"app": "billing", "address": "127.0.0.1:1", "handlers": []string{"charge"}, "auth": "signed"}
		if code, b := d.Call(t, "POST", "/api/v1/executors/register", reg, bearer(execTok)...); code != 200 {
			t.Errorf("executor token register: %d %s", code, b)
		}
		if code, _ := d.Call(t, "POST", "/api/v1/executors/register", reg, bearer(writeTok)...); code != http.StatusForbidden {
			t.Errorf("write token register: %d, want 403 (executor scope needed)", code)
		}
		// An app-bound executor token registers only as its apps.
		if code, b := d.Call(t, "POST", "/api/v1/executors/register", reg, bearer(billTok)...); code != 200 {
			t.Errorf("billing token as billing: %d %s", code, b)
		}
		other := map[string]any{"app": "payroll", "address": "127.0.0.1:2", "handlers": []string{"pay"}}
		msg = d.APIError(t, http.StatusForbidden, "POST", "/api/v1/executors/register", other, bearer(billTok)...)
		if !strings.Contains(msg, "payroll") {
			t.Errorf("403 %q does not name the app", msg)
		}
		hb := map[string]any{"app": "payroll", "address": "127.0.0.1:2"}
		d.APIError(t, http.StatusForbidden, "POST", "/api/v1/executors/heartbeat", hb, bearer(billTok)...)
		res := map[string]any{"ticket": "1-1-0", "app": "payroll", "status": "success"}
		d.APIError(t, http.StatusForbidden, "POST", "/api/v1/callback", res, bearer(billTok)...)

		// write, by plain and by hashed token; actions name the token.
		d.Create(t, daemontest.Spec("w", h.URL("/ok"), "trigger", "manual"), append(bearer(writeTok), "X-Axe-Actor", "alice")...)
		d.Create(t, daemontest.Spec("hw", h.URL("/ok"), "trigger", "manual"), bearer(hashTok)...)
		d.Token = writeTok
		if a, ok := daemontest.FindAction(d.Actions(t, "w"), "create"); !ok || a.Actor != "api:ops/alice" {
			t.Errorf("create of w by %q, want api:ops/alice", a.Actor)
		}
		if a, ok := daemontest.FindAction(d.Actions(t, "hw"), "create"); !ok || a.Actor != "api:hashed" {
			t.Errorf("create of hw by %q, want api:hashed", a.Actor)
		}

		// whoami reports the real scope for every kind of token.
		for tok, want := range map[string][2]string{readTok: {"viewer", "read"}, writeTok: {"ops", "write"}, execTok: {"exec", "executor"}} {
			var who map[string]string
			d.MustJSON(t, 200, "GET", "/api/v1/whoami", nil, &who, bearer(tok)...)
			if who["name"] != want[0] || who["scope"] != want[1] {
				t.Errorf("whoami = %v, want %v", who, want)
			}
		}
		// No response or stored record carries a token.
		for _, tok := range []string{readTok, writeTok, execTok, billTok, hashTok} {
			_, body := d.Call(t, "GET", "/api/v1/tasks/w/actions", nil, bearer(writeTok)...)
			if strings.Contains(string(body), tok) {
				t.Errorf("a token appears in the actions")
			}
		}
	})
}

func TestSingleTokenKeepsWriteAndExecutor(t *testing.T) {
	h := daemontest.NewHook(t)
	dsn := persist.SchemeSQLite + ":" + filepath.Join(t.TempDir(), "axe.db")
	d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Token = "the-one-token-0123" })
	d.Create(t, daemontest.Spec("x", h.URL("/ok"), "trigger", "manual"))
	reg := map[string]any{"app": "a", "address": "127.0.0.1:1", "handlers": []string{"h"}, "auth": "signed"}
	if code, b := d.Call(t, "POST", "/api/v1/executors/register", reg); code != 200 {
		t.Errorf("register with the single token: %d %s", code, b)
	}
	var who map[string]string
	d.MustJSON(t, 200, "GET", "/api/v1/whoami", nil, &who)
	if who["name"] != "default" || who["scope"] != "write" {
		t.Errorf("whoami = %v", who)
	}
	if a, ok := daemontest.FindAction(d.Actions(t, "x"), "create"); !ok || a.Actor != "api:default" {
		t.Errorf("actor %q, want api:default", a.Actor)
	}
}

func TestTokenFileErrors(t *testing.T) {
	cases := []struct {
		file, want string
	}{
		{`{"name":"x"}`, "JSON array"},
		{`[{"name":"x","scope":"admin","token":"0123456789abcdefgh"}]`, "tokens[0] (x).scope"},
		{`[{"name":"x","scope":"read","token":"short"}]`, "tokens[0] (x).token"},
		{`[{"name":"x","scope":"read","token":"sha256:zz"}]`, "tokens[0] (x).token"},
		{`[{"name":"","scope":"read","token":"0123456789abcdefgh"}]`, "tokens[0].name"},
		{`[{"name":"x","scope":"read","token":"0123456789abcdefgh"},{"name":"x","scope":"read","token":"0123456789abcdefgi"}]`, "tokens[1] (x).name"},
		{`[{"name":"x","scope":"write","token":"0123456789abcdefgh","apps":["a"]}]`, "tokens[0] (x).apps"},
		{`[{"name":"x","scope":"read","token":"0123456789abcdefgh","admin":true}]`, "tokens[0].admin: unknown field"},
		{`[{"name":"x","scope":"read","token":"0123456789abcdefgh"}] []`, "trailing"},
		{`[`, "JSON"},
	}
	for _, c := range cases {
		entries, err := admin.ParseTokenFile([]byte(c.file))
		if err == nil {
			_, err = admin.NewTokens("", entries)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to name %q", c.file, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("%s: the error repeats the token: %v", c.file, err)
		}
	}
	// A daemon refuses to start on a bad file, before it opens anything.
	bad := filepath.Join(t.TempDir(), "tokens.json")
	_ = os.WriteFile(bad, []byte(`[{"name":"x","scope":"root","token":"0123456789abcdefgh"}]`), 0o600)
	if err := serveOnce(t, axedaemon.Config{Addr: "127.0.0.1:0", Security: axedaemon.SecurityConfig{TokenFile: bad}}); err == nil ||
		!strings.Contains(err.Error(), "scope") {
		t.Errorf("Serve with a bad token file: %v", err)
	}
	// A token file protects a public bind.
	good := filepath.Join(t.TempDir(), "good.json")
	writeTokenFile(t, good, scopedEntries())
	if err := serveOnce(t, axedaemon.Config{Addr: "0.0.0.0:0", Security: axedaemon.SecurityConfig{TokenFile: good}}); err != nil {
		t.Errorf("public bind with a token file: %v", err)
	}
}

// SIGHUP rereads the token file: a new token works at once and a removed one stops working;
// a broken file keeps the tokens in force.
func TestTokenFileReloadOnSIGHUP(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.json")
	writeTokenFile(t, file, scopedEntries())
	dsn := persist.SchemeSQLite + ":" + filepath.Join(t.TempDir(), "axe.db")
	d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Security.TokenFile = file })
	const newTok = "brand-new-token-0123456789"
	if code, _ := d.Call(t, "GET", "/api/v1/tasks", nil, bearer(newTok)...); code != 401 {
		t.Fatalf("new token before reload: %d", code)
	}
	writeTokenFile(t, file, []admin.TokenEntry{{Name: "fresh", Scope: "read", Token: newTok}})
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, daemontest.WaitTimeout, "the new token to work", func() bool {
		code, _ := d.Call(t, "GET", "/api/v1/tasks", nil, bearer(newTok)...)
		return code == 200
	})
	if code, _ := d.Call(t, "GET", "/api/v1/tasks", nil, bearer(readTok)...); code != 401 {
		t.Errorf("removed token after reload: %d, want 401", code)
	}
	_ = os.WriteFile(file, []byte(`not json`), 0o600)
	_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
	time.Sleep(200 * time.Millisecond) // nothing to wait for: the reload must change nothing
	if code, _ := d.Call(t, "GET", "/api/v1/tasks", nil, bearer(newTok)...); code != 200 {
		t.Errorf("after a broken file the token in force answers %d", code)
	}
}

// TestScopeFollowsTheRoute: a request is authorised for the handler the router gives it, so
// percent-encoded dot-dots that a decoded path would read as the executor protocol, or as
// whoami, still need the scope of the task endpoint they reach; and a task's name reaches
// its endpoints percent-encoded or not.
func TestScopeFollowsTheRoute(t *testing.T) {
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		h := daemontest.NewHook(t)
		file := filepath.Join(t.TempDir(), "tokens.json")
		writeTokenFile(t, file, scopedEntries())
		d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Security.TokenFile = file })
		d.Create(t, daemontest.Spec("ns:job", h.URL("/ok"), "trigger", "manual"), bearer(writeTok)...)
		for _, c := range []struct{ method, path, scope string }{
			{"PUT", "/api/v1/tasks/x%2F..%2F..%2Fcallback", "write"},
			{"DELETE", "/api/v1/tasks/a%2F..%2F..%2Fexecutors%2Fregister", "write"},
			{"POST", "/api/v1/tasks/ns:job%2F..%2F..%2F..%2Fapi%2Fv1%2Fcallback/kill", "write"},
			{"GET", "/api/v1/tasks/..%2Fwhoami", "read"},
			{"GET", "/api/v1/tasks/ns%3Ajob", "read"},
		} {
			var body any
			if c.method == "PUT" {
				body = daemontest.Spec("x/../../callback", h.URL("/ok"), "trigger", "manual")
			}
			msg := d.APIError(t, http.StatusForbidden, c.method, c.path, body, bearer(execTok)...)
			if !strings.Contains(msg, c.scope) {
				t.Errorf("%s %s with an executor token: %q, want 403 naming the %s scope", c.method, c.path, msg, c.scope)
			}
		}
		d.Token = writeTok
		for _, p := range []string{"/api/v1/tasks/ns%3Ajob", "/api/v1/tasks/ns:job", "/api/v1/tasks/ns%3ajob/runs", "/api/v1/tasks/ns%3Ajob/actions"} {
			if code, body := d.Call(t, "GET", p, nil); code != http.StatusOK {
				t.Errorf("GET %s: %d %s, want 200", p, code, body)
			}
		}
		d.MustJSON(t, http.StatusOK, "POST", "/api/v1/tasks/ns%3Ajob/pause", nil, nil)
		d.MustJSON(t, http.StatusOK, "DELETE", "/api/v1/tasks/ns%3Ajob", nil, nil)
		if code, _ := d.Call(t, "GET", "/api/v1/tasks/ns:job", nil); code != http.StatusNotFound {
			t.Errorf("ns:job after its delete by the encoded name: %d, want 404", code)
		}
	})
}
