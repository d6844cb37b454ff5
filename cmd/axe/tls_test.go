package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/internal/test/testpki"
	"github.com/axe-sched/axe/internal/test/testwait"
)

const tlsToken = "tls-test-token-0123456789"

// tlsAPI calls an HTTPS `axe serve` trusting ca, with the token.
type tlsAPI struct {
	base string
	hc   *http.Client
}

func newTLSAPI(base string, ca *testpki.CA) *tlsAPI {
	return &tlsAPI{base: base, hc: &http.Client{Timeout: cmdTimeout,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}}
}

func (a *tlsAPI) do(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tlsToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func (a *tlsAPI) createTask(t *testing.T, task map[string]any) {
	t.Helper()
	if code, body := a.do(t, http.MethodPost, "/api/v1/tasks", task); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("create task: %d %s", code, body)
	}
}

// runs returns a task's runs, newest first.
func (a *tlsAPI) runs(t *testing.T, task string) []runJSON {
	t.Helper()
	_, body := a.do(t, http.MethodGet, "/api/v1/tasks/"+task+"/runs?limit=100", nil)
	var out struct {
		Runs []runJSON `json:"runs"`
	}
	_ = json.Unmarshal(body, &out)
	return out.Runs
}

// executors returns the registered executors as the API lists them.
func (a *tlsAPI) executors(t *testing.T) []map[string]any {
	t.Helper()
	_, body := a.do(t, http.MethodGet, "/api/v1/executors", nil)
	var out struct {
		Executors []map[string]any `json:"executors"`
	}
	_ = json.Unmarshal(body, &out)
	return out.Executors
}

// waitHTTPSExecutor waits until app is listed alive with protocol https.
func (a *tlsAPI) waitHTTPSExecutor(t *testing.T, app string) {
	t.Helper()
	testwait.For(t, waitTimeout, app+" registered over https", func() bool {
		for _, x := range a.executors(t) {
			if x["app"] == app && x["status"] == "alive" && x["protocol"] == "https" {
				return true
			}
		}
		return false
	})
}

// tlsPKI is the certificates of a deployment with TLS both ways: the scheduler's API
// certificate and its client certificate for executors, the executors' own, all from ca;
// other is a CA nobody trusts.
type tlsPKI struct {
	ca, other              *testpki.CA
	api, schedClient, exec testpki.Pair
}

func newTLSPKI(t *testing.T, dir string) tlsPKI {
	ca := testpki.NewCA(t, dir, "ca")
	return tlsPKI{ca: ca, other: testpki.NewCA(t, dir, "other"),
		api: ca.Server(t, "api"), schedClient: ca.Client(t, "scheduler"), exec: ca.Server(t, "executor")}
}

// serveTLS starts `axe serve` on HTTPS with the token and the given executor TLS flags.
func serveTLS(t *testing.T, dir, name string, p tlsPKI, executorFlags ...string) (*serveProc, *tlsAPI) {
	t.Helper()
	args := append([]string{"--addr", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(dir, name+".db"),
		"--token", tlsToken, "--tls-cert", p.api.CertFile, "--tls-key", p.api.KeyFile,
		"--heartbeat-interval", "400ms"}, executorFlags...)
	srv := startServe(t, dir, nil, args...)
	if !strings.HasPrefix(srv.url, "https://") {
		t.Fatalf("axe serve with --tls-cert listens on %s", srv.url)
	}
	return srv, newTLSAPI(srv.url, p.ca)
}

// startTLSExecutor starts an SDK executor of app serving HTTPS that requires a client
// certificate of p.ca, registered with the scheduler at base (trusted through p.ca).
func startTLSExecutor(t *testing.T, base, app string, p tlsPKI, handlers map[string]executor.HandlerFunc) *executor.Executor {
	t.Helper()
	exe, err := executor.New(executor.Config{
		App: app, Schedulers: []string{base}, Token: tlsToken,
		TLSCert: p.exec.CertFile, TLSKey: p.exec.KeyFile, TLSClientCA: p.ca.File, SchedulerCA: p.ca.File,
		HeartbeatInterval: 400 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range handlers {
		exe.Handle(name, h)
	}
	if err := exe.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = exe.Stop(ctx)
	})
	return exe
}

// TestServeDispatchesOverMTLS drives real `axe serve` processes with TLS both ways (the API
// on --tls-cert; executors on HTTPS requiring a client certificate) and an SDK executor
// serving TLS with client-certificate verification:
//   - with --executor-ca and --executor-cert, a run succeeds and a kill reaches the handler;
//   - without the client certificate, the executor refuses the connection: the run is
//     recorded failed, saying so, and the handler never runs;
//   - without --executor-ca, the scheduler does not trust the executor and refuses to
//     dispatch: failed, naming the unknown authority.
func TestServeDispatchesOverMTLS(t *testing.T) {
	dir := t.TempDir()
	p := newTLSPKI(t, dir)
	var ran atomic.Int64
	started := make(chan string, 1)
	cause := make(chan error, 1)
	handlers := map[string]executor.HandlerFunc{
		"ok": func(context.Context, executor.Run) (executor.Result, error) {
			ran.Add(1)
			return executor.Result{Output: "paid over mTLS"}, nil
		},
		"hang": func(ctx context.Context, run executor.Run) (executor.Result, error) {
			ran.Add(1)
			started <- run.Ticket
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return executor.Result{}, context.Cause(ctx)
		},
	}
	okTask := func(name string) map[string]any {
		return map[string]any{"name": name, "trigger": "delay", "delay_ms": 0, "timeout_sec": 60,
			"callback": map[string]any{"type": "executor", "app": "billing", "handler": "ok"}}
	}

	t.Run("mTLS", func(t *testing.T) {
		_, api := serveTLS(t, dir, "good", p, "--executor-ca", p.ca.File,
			"--executor-cert", p.schedClient.CertFile, "--executor-key", p.schedClient.KeyFile)
		startTLSExecutor(t, api.base, "billing", p, handlers)
		api.waitHTTPSExecutor(t, "billing")

		api.createTask(t, okTask("pay"))
		testwait.For(t, waitTimeout, "the run over mTLS succeeded", func() bool {
			rs := api.runs(t, "pay")
			return len(rs) == 1 && rs[0].Result == "success"
		})
		if r := api.runs(t, "pay")[0]; r.Output != "paid over mTLS" {
			t.Errorf("run = %+v, want the handler's output", r)
		}

		api.createTask(t, map[string]any{"name": "stuck", "trigger": "delay", "delay_ms": 0, "timeout_sec": 300,
			"callback": map[string]any{"type": "executor", "app": "billing", "handler": "hang"}})
		select {
		case <-started:
		case <-time.After(waitTimeout):
			t.Fatal("the hanging run never reached the executor")
		}
		if code, body := api.do(t, http.MethodPost, "/api/v1/tasks/stuck/kill", nil); code != http.StatusOK {
			t.Fatalf("kill: %d %s", code, body)
		}
		select {
		case err := <-cause:
			if !errors.Is(err, executor.ErrKilled) {
				t.Fatalf("the handler ended with %v, want executor.ErrKilled", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("the kill never reached the executor over mTLS")
		}
		testwait.For(t, waitTimeout, "the run recorded killed", func() bool {
			rs := api.runs(t, "stuck")
			return len(rs) == 1 && rs[0].Result == "killed"
		})
	})

	for _, c := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"no client certificate", []string{"--executor-ca", p.ca.File}, "certificate required"},
		{"executor CA not trusted", []string{"--executor-cert", p.schedClient.CertFile, "--executor-key", p.schedClient.KeyFile},
			"certificate signed by unknown authority"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, api := serveTLS(t, dir, strings.ReplaceAll(c.name, " ", "-"), p, c.flags...)
			startTLSExecutor(t, api.base, "billing", p, handlers)
			api.waitHTTPSExecutor(t, "billing")
			before := ran.Load()
			api.createTask(t, okTask("refused"))
			var r runJSON
			testwait.For(t, waitTimeout, "the run recorded failed", func() bool {
				rs := api.runs(t, "refused")
				if len(rs) == 1 {
					r = rs[0]
				}
				return r.Result == "failed"
			})
			t.Logf("recorded error: %s", r.Error)
			if !strings.Contains(r.Error, c.want) {
				t.Errorf("run error = %q, want it to say %q", r.Error, c.want)
			}
			if n := ran.Load() - before; n != 0 {
				t.Errorf("the handler ran %d times", n)
			}
		})
	}
}

// TestServeRefusesBadExecutorTLSFlags: a mistake in --executor-ca, --executor-cert or
// --executor-key stops `axe serve` before it listens, naming the flag.
func TestServeRefusesBadExecutorTLSFlags(t *testing.T) {
	dir := t.TempDir()
	p := newTLSPKI(t, dir)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--executor-ca", filepath.Join(dir, "absent.pem")}, "executor-ca:"},
		{[]string{"--executor-cert", p.schedClient.CertFile}, "executor-cert and executor-key:"},
	} {
		r := axe(t, nil, append([]string{"serve", "--addr", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(dir, "x.db")}, c.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("axe serve %v: exit %d, stderr %q; want a failure naming %s", c.args, r.code, r.stderr, c.want)
		}
	}
	// The flags also come from the environment, as every flag does.
	r := axe(t, []string{"AXE_EXECUTOR_CA=" + filepath.Join(dir, "absent.pem")},
		"serve", "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "y.db"))
	if r.code == 0 || !strings.Contains(r.stderr, "executor-ca:") {
		t.Errorf("AXE_EXECUTOR_CA: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestAgentServesTLS drives `axe agent` as a process with tls_cert, tls_key, tls_client_ca
// and scheduler_ca against an `axe serve` with TLS both ways: it registers over https, runs
// its command for the scheduler's client certificate, and the run is recorded.
func TestAgentServesTLS(t *testing.T) {
	dir := t.TempDir()
	p := newTLSPKI(t, dir)
	_, api := serveTLS(t, dir, "agent", p, "--executor-ca", p.ca.File,
		"--executor-cert", p.schedClient.CertFile, "--executor-key", p.schedClient.KeyFile)
	cfgPath := writeJSON(t, dir, "agent.json", map[string]any{
		"app": "ops", "listen": "127.0.0.1:0", "schedulers": []string{api.base}, "token": tlsToken,
		"tls_cert": p.exec.CertFile, "tls_key": p.exec.KeyFile, "tls_client_ca": p.ca.File, "scheduler_ca": p.ca.File,
		"handlers": map[string]any{"hello": map[string]any{"command": []string{"/bin/sh", "-c", "echo hello over tls"}}},
	})
	agent := exec.Command(axeBin, "agent", "-c", cfgPath)
	agent.Env = cleanEnv()
	var out syncBuffer
	agent.Stdout, agent.Stderr = &out, &out
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Process.Kill(); _, _ = agent.Process.Wait() })
	api.waitHTTPSExecutor(t, "ops")
	api.createTask(t, map[string]any{"name": "greet", "trigger": "delay", "delay_ms": 0,
		"callback": map[string]any{"type": "executor", "app": "ops", "handler": "hello"}})
	testwait.For(t, waitTimeout, "the agent's run succeeded", func() bool {
		rs := api.runs(t, "greet")
		return len(rs) == 1 && rs[0].Result == "success"
	})
	if r := api.runs(t, "greet")[0]; !strings.Contains(r.Output, "hello over tls") {
		t.Errorf("run = %+v\nagent output:\n%s", r, out.String())
	}
}
