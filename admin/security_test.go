package admin_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/dispatch"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/persist"
)

// serveOnce runs Serve with cfg and returns its error if it ends within a few seconds, or
// stops it and returns nil if it started listening.
func serveOnce(t *testing.T, cfg axedaemon.Config) error {
	t.Helper()
	if cfg.DB == "" {
		cfg.DB = persist.SchemeSQLite + ":" + filepath.Join(t.TempDir(), "axe.db")
	}
	if cfg.Logger == nil {
		cfg.Logger = daemontest.TestLogger(nil)
	}
	listening := make(chan struct{}, 1)
	cfg.OnListen = func(string) { listening <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- axedaemon.Serve(ctx, cfg) }()
	select {
	case err := <-done:
		return err
	case <-listening:
		cancel()
		if err := <-done; err != nil {
			t.Errorf("shutdown: %v", err)
		}
		return nil
	case <-time.After(daemontest.StartTimeout):
		t.Fatal("Serve neither failed nor listened")
		return nil
	}
}

func TestProtectedBind(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		err := serveOnce(t, axedaemon.Config{Addr: addr})
		if err == nil || !strings.Contains(err.Error(), "without a token") || !strings.Contains(err.Error(), "--token") {
			t.Errorf("Serve on %s without a token = %v, want a refusal saying how to fix it", addr, err)
		}
	}
	// Loopback without a token, and any address with one, serve.
	for _, cfg := range []axedaemon.Config{
		{Addr: "127.0.0.1:0"}, {Addr: "localhost:0"}, {Addr: "[::1]:0"}, {Addr: "0.0.0.0:0", Token: "t0ken-0123456789abcd"},
	} {
		if cfg.Addr == "[::1]:0" && !hasIPv6Loopback() {
			continue
		}
		if err := serveOnce(t, cfg); err != nil {
			t.Errorf("Serve(%s, token %v) = %v", cfg.Addr, cfg.Token != "", err)
		}
	}
	// --insecure-no-auth is the way around, and says so at every start.
	var logs bytes.Buffer
	cfg := axedaemon.Config{Addr: "0.0.0.0:0", Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	cfg.Security.InsecureNoAuth = true
	if err := serveOnce(t, cfg); err != nil {
		t.Fatalf("Serve with --insecure-no-auth = %v", err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "without authentication") {
		t.Errorf("no warning logged:\n%s", logs.String())
	}
}

func hasIPv6Loopback() bool {
	c, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func TestCallbackGuard(t *testing.T) {
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		h := daemontest.NewHook(t)
		d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Security.CallbackSecret = "hmac-key" })
		for _, u := range []string{
			"http://169.254.169.254/latest/meta-data/",
			"http://[::ffff:169.254.169.254]/",
			"http://100.100.100.200/latest/",
			"http://[fe80::1%25eth0]/",
		} {
			msg := d.APIError(t, http.StatusBadRequest, "POST", "/api/v1/tasks", daemontest.Spec("meta", u, "trigger", "manual"))
			if !strings.Contains(msg, "callback.url") {
				t.Errorf("create with %s: error %q does not name callback.url", u, msg)
			}
		}
		if got := d.List(t, ""); len(got) != 0 {
			t.Fatalf("refused creates left tasks: %v", daemontest.Names(got))
		}
		// An update to a refused URL is refused too and changes nothing.
		d.Create(t, daemontest.Spec("ok", h.URL("/ok"), "trigger", "manual"))
		d.APIError(t, http.StatusBadRequest, "PUT", "/api/v1/tasks/ok", daemontest.Spec("ok", "http://169.254.169.254/", "trigger", "manual"))
		if got := d.Get(t, "ok"); got.Callback.URL != h.URL("/ok") {
			t.Errorf("after a refused update the URL is %q", got.Callback.URL)
		}
		// A loopback target is allowed and its calls are signed.
		ticket := d.RunNow(t, "ok", nil)
		d.WaitRun(t, "ok", ticket)
		calls := h.CallsOf("ok")
		if len(calls) != 1 {
			t.Fatalf("calls = %d", len(calls))
		}
		if want := dispatch.Sign([]byte("hmac-key"), calls[0].Raw); !hmac.Equal([]byte(calls[0].Signature), []byte(want)) {
			t.Errorf("X-Axe-Signature %q, want %q", calls[0].Signature, want)
		}
	})
}

func TestCallbackAllowlist(t *testing.T) {
	h := daemontest.NewHook(t)
	dsn := persist.SchemeSQLite + ":" + filepath.Join(t.TempDir(), "axe.db")
	d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Security.CallbackAllow = []string{"10.0.0.0/8", "hooks.internal"} })
	msg := d.APIError(t, http.StatusBadRequest, "POST", "/api/v1/tasks", daemontest.Spec("lo", h.URL("/ok"), "trigger", "manual"))
	if !strings.Contains(msg, "callback-allow") {
		t.Errorf("error %q does not name the allowlist", msg)
	}
	d.Create(t, daemontest.Spec("named", "http://hooks.internal:9/x", "trigger", "manual"))

	if err := serveOnce(t, axedaemon.Config{Addr: "127.0.0.1:0", Security: axedaemon.SecurityConfig{CallbackAllow: []string{"not a host"}}}); err == nil ||
		!strings.Contains(err.Error(), "callback-allow") {
		t.Errorf("a bad --callback-allow entry: %v", err)
	}
	cfg := axedaemon.Config{Addr: "127.0.0.1:0"}
	cfg.Engine.AlertWebhooks = []string{"http://169.254.169.254/hook"}
	if err := serveOnce(t, cfg); err == nil || !strings.Contains(err.Error(), "alert-webhook") {
		t.Errorf("a metadata alert webhook: %v", err)
	}
}

// TestProbesAnswerAnyHost: without a token the health probes answer whatever name they are
// called by, while the API answers only this server's names.
func TestProbesAnswerAnyHost(t *testing.T) {
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), func(c *axedaemon.Config) {
		c.Security.AllowHosts = []string{"axe.internal"}
	})
	for _, c := range []struct {
		path, host string
		want       int
	}{
		{"/healthz", "lb.example", 200}, {"/readyz", "lb.example", 200},
		{"/api/v1/tasks", "lb.example", 403}, {"/api/v1/tasks", "axe.internal", 200}, {"/api/v1/tasks", "AXE.internal.", 200},
		{"/api/v1/tasks", "localhost:7070", 200}, {"/api/v1/tasks", "[::1]:7070", 200}, {"/api/v1/tasks", "10.1.2.3", 200},
	} {
		if code, body := d.Call(t, "GET", c.path, nil, "Host", c.host); code != c.want {
			t.Errorf("GET %s with Host %s: %d %s, want %d", c.path, c.host, code, body, c.want)
		}
	}
}
