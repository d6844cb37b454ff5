package admin_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/axe-sched/axe/admin"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testproxy"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestCreateRefusedWhileWriterSaturated: with the writer's create share full (a one-lane
// writer of two slots, whose commit hangs on a blackholed database), a create is refused at
// once with 429, a Retry-After and an {"error": …} body, and nothing of it is stored; the
// create already queued lands once the database answers again, and the refused one then
// succeeds when sent again. Not parallel: it reads the writer's queue depth, which every
// daemon of the process adds to.
func TestCreateRefusedWhileWriterSaturated(t *testing.T) {
	dsn := persisttest.MySQLSchemaDSN(t)
	proxy, err := testproxy.New("127.0.0.1:3306")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	viaProxy := strings.Replace(dsn, "tcp(127.0.0.1:3306)", "tcp("+proxy.Addr()+")", 1)
	if viaProxy == dsn {
		t.Fatalf("DSN %q does not name 127.0.0.1:3306", dsn)
	}
	d := daemontest.Start(t, viaProxy, func(c *axedaemon.Config) {
		c.Engine.WriterLanes = 1
		c.Engine.Writer.QueueSize = 2 // Offer refuses once one group is pending
	})
	spec := func(name string) map[string]any {
		return map[string]any{"name": name, "trigger": "delay", "delay_ms": 3600000,
			"callback": map[string]any{"type": "http", "url": "http://127.0.0.1:9/hook"}}
	}
	d.Create(t, spec("before"))

	if err := proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	queued := make(chan int, 1)
	go func() {
		raw, _ := json.Marshal(spec("queued"))
		resp, err := http.Post(d.Base+"/api/v1/tasks", "application/json", bytes.NewReader(raw))
		if err != nil {
			queued <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		queued <- resp.StatusCode
	}()
	testwait.For(t, daemontest.WaitTimeout, "the queued create to be pending in the writer", func() bool {
		return metricValue(t, d, "axe_writer_queue_depth") >= 1
	})

	raw, _ := json.Marshal(spec("refused"))
	resp, err := http.Post(d.Base+"/api/v1/tasks", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("create while saturated: status %d, want 429; body %s", resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra != strconv.Itoa(admin.RetryAfterBusySec) {
		t.Errorf("Retry-After = %q, want %d", ra, admin.RetryAfterBusySec)
	}
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil || e["error"] == nil || len(e) != 1 {
		t.Errorf(`429 body %s, want exactly {"error": …}`, body)
	}

	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if code := <-queued; code != http.StatusCreated && code != http.StatusServiceUnavailable {
		// 503: the create was told of the stall before it landed; it stays queued.
		t.Fatalf("queued create: status %d, want 201 (or 503 while the store was away)", code)
	}
	testwait.For(t, daemontest.WaitTimeout, "the queued create to land", func() bool {
		code, _ := d.Call(t, http.MethodGet, "/api/v1/tasks/queued", nil)
		return code == http.StatusOK
	})
	if code, data := d.Call(t, http.MethodGet, "/api/v1/tasks/refused", nil); code != http.StatusNotFound {
		t.Fatalf("refused create: GET status %d, want 404 (nothing stored); body %s", code, data)
	}
	d.Create(t, spec("refused"))
}

// metricValue reads one unlabelled series from the daemon's /metrics; -1 when absent.
func metricValue(t *testing.T, d *daemontest.Daemon, name string) float64 {
	t.Helper()
	code, data := d.Call(t, http.MethodGet, "/metrics", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", code)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	return -1
}
