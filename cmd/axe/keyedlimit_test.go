package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestKeyedLimitCLI: `axe serve` as a process; `axe limit set key 'tenant:*' 1` sets a
// pattern, a manual task keyed tenant:{params.tenant} run with --params for tenants a and b
// (each call hangs) shows both keys under the pattern in `axe limit ls`, a second run of
// tenant a is refused naming its key, and a run whose params lack the tenant is refused
// naming params.
func TestKeyedLimitCLI(t *testing.T) {
	dir := t.TempDir()
	const token = "keyed-token-0123456789"
	hang := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hang) }) }
	var mu sync.Mutex
	calls := 0
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		<-hang
	}))
	t.Cleanup(hook.Close)
	addr := freePort(t)
	srv := startServe(t, dir, nil, "--addr", addr, "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--token", token)
	t.Cleanup(release) // before the server stops (cleanups run last first): its runs end
	env := []string{"AXE_SERVER=" + srv.url, "AXE_TOKEN=" + token}

	if out := axeOK(t, env, "limit", "set", "key", "tenant:*", "1"); !strings.Contains(out, "tenant:*") {
		t.Fatalf("axe limit set printed %q", out)
	}
	spec := writeJSON(t, dir, "task.json", map[string]any{"name": "bill", "trigger": "manual",
		"concurrency_key": "tenant:{params.tenant}", "callback": map[string]any{"type": "http", "url": hook.URL}})
	axeOK(t, env, "task", "create", "-f", spec)
	axeOK(t, env, "task", "run", "bill", "--params", `{"tenant":"a"}`)
	axeOK(t, env, "task", "run", "bill", "--params", `{"tenant":"b"}`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := calls
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls reached the endpoint, want 2", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	out := axeOK(t, env, "limit", "ls")
	for _, want := range []string{"tenant:*", "tenant:a", "tenant:b"} {
		if !strings.Contains(out, want) {
			t.Errorf("axe limit ls does not list %s:\n%s", want, out)
		}
	}
	if r := axe(t, env, "task", "run", "bill", "--params", `{"tenant":"a"}`); r.code == 0 || !strings.Contains(r.stderr, "tenant:a") {
		t.Errorf("a second run of tenant a: %+v, want refused naming key tenant:a", r)
	}
	if r := axe(t, env, "task", "run", "bill", "--params", `{"other":1}`); r.code == 0 || !strings.Contains(r.stderr, "params") {
		t.Errorf("a run without the tenant: %+v, want refused naming params", r)
	}
	release()
}
