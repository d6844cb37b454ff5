package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/executor"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/protocol"
)

// recordingExecutor accepts every run and records the Authorization header and body of each
// call, so a test sees exactly what an executor receives from axe.
type recordingExecutor struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []recordedCall
}

type recordedCall struct {
	path, auth, epoch string
	body              []byte
}

func newRecordingExecutor(t *testing.T) *recordingExecutor {
	t.Helper()
	x := &recordingExecutor{}
	x.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		x.mu.Lock()
		x.calls = append(x.calls, recordedCall{path: r.URL.Path, auth: r.Header.Get("Authorization"), epoch: r.Header.Get("X-Axe-Epoch"), body: body})
		x.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"accepted":true}`))
	}))
	t.Cleanup(x.srv.Close)
	return x
}

func (x *recordingExecutor) addr() string { return strings.TrimPrefix(x.srv.URL, "http://") }

func (x *recordingExecutor) runCalls() []recordedCall {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []recordedCall
	for _, c := range x.calls {
		if c.path == protocol.PathRun {
			out = append(out, c)
		}
	}
	return out
}

// TestExecutorsReceiveNoCredential: an executor registered with an app-bound executor token
// receives, on its runs, only a signature it can verify with the key of its own token:
// nothing that authenticates against the API, and neither the write token nor its own. The
// key survives a restart of the scheduler (it is in the store), and an SDK executor holding
// nothing but its app token runs what axe sends it.
func TestExecutorsReceiveNoCredential(t *testing.T) {
	const billingTok = "billing-exec-0123456789"
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		file := filepath.Join(t.TempDir(), "tokens.json")
		writeTokenFile(t, file, []admin.TokenEntry{
			{Name: "ops", Scope: "write", Token: writeTok},
			{Name: "billing-exec", Scope: "executor", Token: billingTok, Apps: []string{"billing"}},
		})
		mod := func(c *axedaemon.Config) { c.Security.TokenFile = file }
		d := daemontest.Start(t, dsn, mod)
		d.Token = writeTok
		x := newRecordingExecutor(t)
		reg := map[string]any{"app": "billing", "address": x.addr(), "handlers": []string{"charge"}, "auth": "signed"}
		d.MustJSON(t, 200, "POST", protocol.PathRegister, reg, nil, bearer(billingTok)...)
		// The recording executor never reports: the run times out soon, so the scheduler
		// stops without waiting for it.
		d.Create(t, map[string]any{"name": "charge", "trigger": "manual", "timeout_sec": 1,
			"callback": map[string]any{"type": "executor", "app": "billing", "handler": "charge"}})

		check := func(when string) {
			t.Helper()
			ticket := d.RunNow(t, "charge", nil)
			var got recordedCall
			testwait.For(t, 20*time.Second, "the run at the executor "+when, func() bool {
				for _, c := range x.runCalls() {
					if strings.Contains(string(c.body), ticket) {
						got = c
						return true
					}
				}
				return false
			})
			if err := protocol.VerifyCall(protocol.DispatchKey(billingTok), []byte(got.auth), x.addr(), protocol.PathRun,
				got.epoch, got.body, time.Now()); err != nil {
				t.Errorf("%s: the run's Authorization %q does not verify with the key of the executor's token: %v", when, got.auth, err)
			}
			if strings.Contains(got.auth, writeTok) || strings.Contains(got.auth, billingTok) || strings.HasPrefix(got.auth, "Bearer") {
				t.Errorf("%s: the executor received a token: %q", when, got.auth)
			}
			// What it received grants nothing on the API, as a header or as a bearer.
			sig := got.auth[strings.LastIndex(got.auth, "=")+1:]
			for _, hdr := range [][]string{{"Authorization", got.auth}, bearer(sig), bearer(got.auth)} {
				for _, call := range []struct {
					method, path string
					body         any
				}{{"GET", "/api/v1/tasks", nil}, {"POST", "/api/v1/tasks/charge/run", nil}, {"POST", protocol.PathHeartbeat, map[string]any{"app": "billing", "address": x.addr()}}} {
					if code, _, b := d.Send(t, call.method, call.path, call.body, false, hdr...); code != http.StatusUnauthorized {
						t.Errorf("%s: %s %s with %v: %d %s, want 401", when, call.method, call.path, hdr, code, b)
					}
				}
			}
		}
		check("after registration")
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		// The same store: the registry, and the executor's key, come back without a new
		// registration.
		d = daemontest.Start(t, dsn, mod)
		d.Token = writeTok
		check("after a restart of the scheduler")

		// The SDK holds its app token only, and runs what axe signed.
		exe, err := executor.New(executor.Config{App: "billing", Schedulers: []string{d.Base}, Token: billingTok,
			HeartbeatInterval: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan string, 4)
		exe.Handle("settle", func(_ context.Context, run executor.Run) (executor.Result, error) {
			ran <- run.Ticket
			return executor.Result{Output: "settled"}, nil
		})
		if err := exe.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = exe.Stop(context.Background()) })
		d.Create(t, map[string]any{"name": "settle", "trigger": "manual",
			"callback": map[string]any{"type": "executor", "app": "billing", "handler": "settle"}})
		ticket := d.RunNow(t, "settle", nil)
		if r := d.WaitRun(t, "settle", ticket); r.Result != model.ResultSuccess {
			t.Errorf("a run on the SDK executor: %+v, want success", r)
		}
	})
}

// TestExecutorThatPredatesSigningIsToldWhy: an executor that presents a token without asking
// for signed calls expects a bearer token from axe; axe refuses its registration naming auth
// unless --executor-token is given, and then sends that token to it (and to it alone).
func TestExecutorThatPredatesSigningIsToldWhy(t *testing.T) {
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "axe.db")
	d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Token = writeTok })
	x := newRecordingExecutor(t)
	reg := map[string]any{"app": "old", "address": x.addr(), "handlers": []string{"h"}}
	msg := d.APIError(t, http.StatusBadRequest, "POST", protocol.PathRegister, reg)
	if !strings.Contains(msg, "auth") || !strings.Contains(msg, "upgrade") || !strings.Contains(msg, "--executor-token") {
		t.Errorf("refusal %q does not name auth, the upgrade and --executor-token", msg)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}

	const legacy = "legacy-executor-token-0123"
	d = daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Token = writeTok; c.Engine.ExecutorToken = legacy })
	d.MustJSON(t, 200, "POST", protocol.PathRegister, reg, nil)
	signed := newRecordingExecutor(t)
	d.MustJSON(t, 200, "POST", protocol.PathRegister, map[string]any{"app": "new", "address": signed.addr(), "handlers": []string{"h"}, "auth": "signed"}, nil)
	for _, app := range []string{"old", "new"} {
		d.Create(t, map[string]any{"name": app, "trigger": "manual", "timeout_sec": 1, "callback": map[string]any{"type": "executor", "app": app, "handler": "h"}})
		d.RunNow(t, app, nil)
	}
	testwait.For(t, 20*time.Second, "a run at each executor", func() bool {
		return len(x.runCalls()) == 1 && len(signed.runCalls()) == 1
	})
	if got := x.runCalls()[0].auth; got != "Bearer "+legacy {
		t.Errorf("the executor that predates signing got %q, want the --executor-token", got)
	}
	if got := signed.runCalls()[0].auth; !strings.HasPrefix(got, protocol.SignatureScheme+" ") || strings.Contains(got, legacy) {
		t.Errorf("the signing executor got %q, want a signature and no token", got)
	}
}

// TestHASignsForExecutorsAfterHandover: after a handover the new primary signs its calls to
// an executor that registered with the old one, from the key in the store, at once: its
// first call to the executor, with no new registration, verifies with the key of the
// executor's token and carries the new epoch.
func TestHASignsForExecutorsAfterHandover(t *testing.T) {
	const billingTok = "billing-exec-0123456789"
	dsn := persisttest.MySQLSchemaDSN(t)
	file := filepath.Join(t.TempDir(), "tokens.json")
	writeTokenFile(t, file, []admin.TokenEntry{
		{Name: "ops", Scope: "write", Token: writeTok},
		{Name: "billing-exec", Scope: "executor", Token: billingTok, Apps: []string{"billing"}},
	})
	node := func(id string) *daemontest.Daemon {
		d := daemontest.Start(t, dsn, func(c *axedaemon.Config) {
			c.HA, c.HAMode, c.NodeID, c.LeaseTTL, c.LeaseRenew = true, axedaemon.HAModePrimary, id, 60*time.Second, 500*time.Millisecond
			c.Security.TokenFile = file
		})
		d.Token = writeTok
		return d
	}
	a := node("a")
	ra := a.WaitRole(t, "primary", daemontest.WaitTimeout)
	b := node("b")
	b.WaitRole(t, "backup", daemontest.WaitTimeout)
	x := newRecordingExecutor(t)
	reg := map[string]any{"app": "billing", "address": x.addr(), "handlers": []string{"charge"}, "auth": "signed"}
	a.MustJSON(t, 200, "POST", protocol.PathRegister, reg, nil, bearer(billingTok)...)
	a.Create(t, map[string]any{"name": "charge", "trigger": "manual", "timeout_sec": 1,
		"callback": map[string]any{"type": "executor", "app": "billing", "handler": "charge"}})
	if err := a.Stop(); err != nil {
		t.Fatalf("graceful stop of the primary: %v", err)
	}
	rb := b.WaitRole(t, "primary", daemontest.WaitTimeout)
	if rb.Epoch <= ra.Epoch {
		t.Fatalf("epoch after handover = %d, want above %d", rb.Epoch, ra.Epoch)
	}
	ticket := b.RunNow(t, "charge", nil)
	var got recordedCall
	testwait.For(t, daemontest.WaitTimeout, "the new primary's run at the executor", func() bool {
		for _, c := range x.runCalls() {
			if strings.Contains(string(c.body), ticket) {
				got = c
				return true
			}
		}
		return false
	})
	if err := protocol.VerifyCall(protocol.DispatchKey(billingTok), []byte(got.auth), x.addr(), protocol.PathRun,
		got.epoch, got.body, time.Now()); err != nil {
		t.Errorf("the new primary's call %q does not verify: %v", got.auth, err)
	}
	if got.epoch != strconv.FormatInt(rb.Epoch, 10) {
		t.Errorf("the call carries epoch %q, want %d", got.epoch, rb.Epoch)
	}
}
