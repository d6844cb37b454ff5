package admin

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestAWriteCutShortByAStopIs503: a create whose commit is still waiting when the engine is
// stopped without draining (a primary demoted mid-request stops its term's engine so) was
// never committed, and is answered 503, which clients retry on the node that holds the lease
// now, not 500 (TestFailoverSIGSTOP failed creating its load so on a loaded box; issue 42).
func TestAWriteCutShortByAStopIs503(t *testing.T) {
	path := filepath.Join(t.TempDir(), "axe.db")
	store, err := persist.Open(t.Context(), "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	eng, err := engine.New(engine.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerConfig{Engine: eng, Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	release := persisttest.HoldWrites(t, "sqlite:"+path) // the create's commit waits
	c := &fasthttp.RequestCtx{}
	c.Request.Header.SetMethod(fasthttp.MethodPost)
	c.Request.SetRequestURI("/api/v1/tasks")
	c.Request.Header.SetContentType("application/json")
	c.Request.SetBodyString(`{"name": "cut", "cron": "0 0 1 1 *", "callback": {"type": "http", "url": "http://127.0.0.1:9/hook"}}`)
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		srv.Handler()(c)
	}()
	time.Sleep(500 * time.Millisecond) // the create is queued behind the held lock
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	_ = eng.Stop(stop) // as a demoted primary's term is stopped: nothing drained
	select {
	case <-answered:
	case <-time.After(60 * time.Second):
		release()
		t.Fatal("the create was not answered within a minute of the stop")
	}
	release()
	if code := c.Response.StatusCode(); code != fasthttp.StatusServiceUnavailable || len(c.Response.Header.Peek("Retry-After")) == 0 {
		t.Fatalf("a create cut short by the engine's stop = %d %s (Retry-After %q), want 503 with a Retry-After",
			code, c.Response.Body(), c.Response.Header.Peek("Retry-After"))
	}
}
