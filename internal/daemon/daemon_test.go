package daemon_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// TestAuth checks the bearer token on /api/ and that /healthz stays open.
func TestAuth(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Token = "s3cret-0123456789ab" })
		h := daemontest.NewHook(t)
		d.Token = "" // headers are set by hand below

		for _, hdr := range [][]string{
			nil,
			{"Authorization", "Bearer wrong"},
			{"Authorization", "Bearer s3cret2"},
			{"Authorization", "Bearer "},
			{"Authorization", "s3cret"},
			{"Authorization", "Basic czNjcmV0"},
		} {
			for _, c := range []struct {
				method, path string
				body         any
			}{
				{http.MethodGet, "/api/v1/tasks", nil},
				{http.MethodPost, "/api/v1/tasks", daemontest.Spec("sneaky", h.URL("/ok/x"), "trigger", "manual")},
				{http.MethodGet, "/api/v1/cron/next?expr=@hourly", nil},
				{http.MethodGet, "/api/v1/executors", nil},
				{http.MethodPost, "/api/v1/groups/default/pause", nil},
			} {
				if msg := d.APIError(t, http.StatusUnauthorized, c.method, c.path, c.body, hdr...); !strings.Contains(msg, "token") {
					t.Errorf("%s %s with %v: error %q does not mention the token", c.method, c.path, hdr, msg)
				}
			}
		}
		if code, body := d.Call(t, http.MethodGet, "/healthz", nil); code != http.StatusOK {
			t.Errorf("/healthz without a token: %d %s", code, body)
		}

		d.Token = "s3cret-0123456789ab"
		if got := d.List(t, ""); len(got) != 0 {
			t.Errorf("unauthorized create left tasks behind: %v", daemontest.Names(got))
		}
		d.Create(t, daemontest.Spec("allowed", h.URL("/ok/x"), "trigger", "manual"))
		if got := daemontest.Names(d.List(t, "")); !slices.Equal(got, []string{"allowed"}) {
			t.Errorf("tasks = %v, want [allowed]", got)
		}

		ctx := context.Background()
		good, err := client.New(d.Base, "s3cret-0123456789ab", "tester")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := good.GetTask(ctx, "allowed"); err != nil {
			t.Errorf("client with the token: %v", err)
		}
		bad, err := client.New(d.Base, "", "tester")
		if err != nil {
			t.Fatal(err)
		}
		var ae *client.APIError
		if _, err := bad.GetTask(ctx, "allowed"); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			t.Errorf("client without the token: %v, want an APIError 401", err)
		}
	})
}

// TestMetrics checks /metrics for the engine, writer and build series.
func TestMetrics(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, func(c *axedaemon.Config) { c.Version = "v9.8.7-test" })
		h := daemontest.NewHook(t)
		d.Create(t, daemontest.Spec("measured", h.URL("/ok/m"), "delay_ms", 0))
		d.WaitRun(t, "measured", h.WaitCalls(t, "measured", 1, daemontest.WaitTimeout)[0].Ticket)

		resp, err := d.HTTP.Get(d.Base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body := daemontest.ReadAll(t, resp)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		series := map[string][]float64{}
		for _, line := range strings.Split(body, "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			if i < 0 {
				t.Fatalf("not a Prometheus sample line: %q", line)
			}
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				t.Fatalf("sample %q: %v", line, err)
			}
			name := line[:i]
			if j := strings.IndexByte(name, '{'); j >= 0 {
				name = name[:j]
			}
			series[name] = append(series[name], v)
		}
		if !slices.ContainsFunc(series["axe_triggers_total"], func(v float64) bool { return v >= 1 }) {
			t.Errorf("axe_triggers_total = %v, want a sample >= 1 after a fire", series["axe_triggers_total"])
		}
		if len(series["axe_fire_lateness_seconds_bucket"]) == 0 {
			t.Error("no axe_fire_lateness_seconds_bucket samples")
		}
		if !strings.Contains(body, `axe_build_info{version="v9.8.7-test"} 1`) {
			t.Error(`no axe_build_info{version="v9.8.7-test"} 1`)
		}
		writer := 0
		for name := range series {
			if strings.HasPrefix(name, "axe_writer_") {
				writer++
			}
		}
		if writer == 0 || len(series["axe_writer_commits_total"]) == 0 {
			t.Errorf("no writer metrics (axe_writer_*) in /metrics")
		}
	})
}

// TestClientFailover points the client at a dead address first.
func TestClientFailover(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		ctx := context.Background()
		c, err := client.New("http://127.0.0.1:1, "+d.Base, "", "tester")
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.CreateTask(ctx, []byte(`{"name":"via-failover","trigger":"manual","callback":{"url":"`+h.URL("/ok/f")+`"}}`))
		if err != nil || v.Name != "via-failover" || v.Runtime.State != model.StateWaiting {
			t.Fatalf("create through the second address: %+v, %v", v, err)
		}
		list, err := c.ListTasks(ctx, "", "", 0)
		if err != nil || len(list) != 1 || list[0].Name != "via-failover" {
			t.Errorf("list through the second address: %+v, %v", list, err)
		}
		ticket, err := c.RunNow(ctx, "via-failover", nil)
		if err != nil || ticket == "" {
			t.Fatalf("run-now through the client: %q, %v", ticket, err)
		}
		if got := h.WaitCalls(t, "via-failover", 1, daemontest.WaitTimeout)[0].Ticket; got != ticket {
			t.Errorf("callback got ticket %s, want %s", got, ticket)
		}
		// API errors are answers, not reasons to fail over.
		_, err = c.GetTask(ctx, "missing")
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || !strings.Contains(ae.Message, "not found") {
			t.Errorf("get of a missing task: %v, want APIError 404", err)
		}

		// A server answering 503 (a backup, or one shutting down) is skipped as well.
		unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"not ready: shutting down"}`))
		}))
		defer unavailable.Close()
		c503, err := client.New(unavailable.URL+","+d.Base, "", "tester")
		if err != nil {
			t.Fatal(err)
		}
		if v, err := c503.GetTask(ctx, "via-failover"); err != nil || v.Name != "via-failover" {
			t.Errorf("get past a 503 server: %+v, %v", v, err)
		}

		// One client is shared by goroutines, as a program would share it, while it
		// fails over.
		shared, err := client.New("http://127.0.0.1:1,"+d.Base, "", "tester")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8*5)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					if _, err := shared.ListTasks(ctx, "", "", 10); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent list through a shared client: %v", err)
		}

		dead, err := client.New("127.0.0.1:1", "", "tester")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dead.ListTasks(ctx, "", "", 0); err == nil || errors.As(err, &ae) {
			t.Errorf("client with only a dead address: %v, want a connection error", err)
		}
		if _, err := client.New(" , ", "", ""); err == nil {
			t.Error("NewClient accepted an empty server list")
		}
	})
}

// TestGracefulShutdown cancels Serve while a slow run is in flight: the run finishes and is
// recorded, then Serve returns nil and the listener is gone.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		v := d.Create(t, daemontest.Spec("slow", h.URL("/slow/s?ms=1500"), "delay_ms", 0, "timeout_sec", 30))
		call := h.WaitCalls(t, "slow", 1, daemontest.WaitTimeout)[0]
		var ready map[string]string
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/readyz", nil, &ready)
		if ready["status"] != "ready" {
			t.Errorf("/readyz = %v while serving", ready)
		}

		d.Cancel()
		// While draining, the daemon reports not ready but still serves.
		testwait.For(t, time.Second, "/readyz to answer 503 while draining", func() bool {
			code, _ := d.Call(t, http.MethodGet, "/readyz", nil)
			return code == http.StatusServiceUnavailable
		})
		err := d.Stop()
		returned := time.Now()
		if err != nil {
			t.Fatalf("Serve returned %v, want nil", err)
		}
		done := h.CallsOf("slow")[0].Done
		if done.IsZero() || returned.Before(done) {
			t.Errorf("Serve returned at %s, before the in-flight run answered at %s", returned, done)
		}
		if _, err := d.HTTP.Get(d.Base + "/healthz"); err == nil {
			t.Error("/healthz still answers after Serve returned")
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := persist.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("reopen store: %v", err)
		}
		defer st.Close()
		pt, err := st.GetTask(ctx, "slow")
		if err != nil {
			t.Fatal(err)
		}
		if pt.Runtime.State != model.StateSuccess || pt.Runtime.SuccessCount != 1 || pt.Runtime.CurrentTicket != "" {
			t.Errorf("stored runtime after shutdown: %+v, want SUCCESS", pt.Runtime)
		}
		run, err := st.GetRun(ctx, call.Ticket)
		if err != nil || run.Result != model.ResultSuccess || run.EndedAt == 0 {
			t.Errorf("stored run after shutdown: %+v, %v", run, err)
		}
		acts, err := st.ListActions(ctx, v.ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		runs, err := st.ListRuns(ctx, v.ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		// The success is carried by the run row; the timeline shows it as the result event.
		if a, ok := daemontest.FindAction(persist.Timeline(acts, runs, 0), "result"); !ok || a.To != model.StateSuccess {
			t.Errorf("no result action recorded before shutdown: %+v", acts)
		}
	})
}

// TestServeConfigErrors checks that Serve fails fast, without listening, on a bad store or
// address.
func TestServeConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, addr, db, want string }{
		{"bad scheme", "127.0.0.1:0", "postgres:x", "scheme"},
		{"bad address", "127.0.0.1:notaport", "sqlite:" + t.TempDir() + "/axe.db", "listen"},
		{"bad zone", "127.0.0.1:0", "sqlite:" + t.TempDir() + "/axe.db", "timezone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := axedaemon.Config{Addr: c.addr, DB: c.db, Logger: daemontest.TestLogger(nil),
				OnListen: func(string) { t.Error("Serve listened despite a bad config") }}
			if c.name == "bad zone" {
				cfg.Timezone = "Nowhere/Land"
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := axedaemon.Serve(ctx, cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Serve = %v, want an error mentioning %q", err, c.want)
			}
		})
	}
}
