package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"

	"github.com/axe-sched/axe/internal/test/testwait"
)

// Tests of `axe serve --ha` with two in-process nodes on one MariaDB database. Real time,
// real loopback HTTP, real lease; the kill -9, SIGSTOP and partition suite with separate
// processes lives elsewhere.

// epochHook records the callbacks it receives with their X-Axe-Epoch and X-Axe-Ticket.
type epochHook struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []epochCall
}

type epochCall struct {
	at     time.Time
	ticket string
	epoch  int64
	body   struct {
		Ticket string `json:"ticket"`
		Epoch  int64  `json:"epoch"`
	}
}

func newEpochHook(t *testing.T) *epochHook {
	h := &epochHook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := epochCall{at: time.Now(), ticket: r.Header.Get("X-Axe-Ticket")}
		c.epoch, _ = strconv.ParseInt(r.Header.Get("X-Axe-Epoch"), 10, 64)
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &c.body)
		h.mu.Lock()
		h.calls = append(h.calls, c)
		h.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *epochHook) snapshot() []epochCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]epochCall(nil), h.calls...)
}

// countEpoch counts the calls made under epoch.
func (h *epochHook) countEpoch(epoch int64) int {
	n := 0
	for _, c := range h.snapshot() {
		if c.epoch == epoch {
			n++
		}
	}
	return n
}

// checkCalls asserts that every call carries its epoch in the header and the body, that no
// ticket came twice, and that no call of an older epoch arrived after one of a newer.
func (h *epochHook) checkCalls(t *testing.T) {
	t.Helper()
	seen := map[string]bool{}
	newest := int64(0)
	for _, c := range h.snapshot() {
		if c.epoch <= 0 || c.body.Epoch != c.epoch || c.body.Ticket != c.ticket {
			t.Errorf("call %s: header epoch %d, body epoch %d, body ticket %q", c.ticket, c.epoch, c.body.Epoch, c.body.Ticket)
		}
		if seen[c.ticket] {
			t.Errorf("ticket %s dispatched twice", c.ticket)
		}
		seen[c.ticket] = true
		if c.epoch < newest {
			t.Errorf("call %s of epoch %d arrived after a call of epoch %d: a deposed primary dispatched", c.ticket, c.epoch, newest)
		}
		newest = max(newest, c.epoch)
	}
}

// TestHABackupAnswers503 checks the backup's side (docs/ha.md, "The backup"): reads from the
// database, 503 naming the primary for writes and the executor protocol, and /readyz's role
// answers.
func TestHABackupAnswers503(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	a := daemontest.HANode(t, dsn, "a", 3*time.Second, time.Second)
	ra := a.WaitRole(t, "primary", daemontest.WaitTimeout)
	b := daemontest.HANode(t, dsn, "b", 3*time.Second, time.Second)
	rb := b.WaitRole(t, "backup", daemontest.WaitTimeout)
	testwait.For(t, daemontest.WaitTimeout, "the backup to name the primary", func() bool {
		_, rb = b.Readyz(t, "")
		return rb.Primary == a.Base
	})
	if ra.Node != "a" || ra.Epoch < 1 || ra.Primary != a.Base || rb.Node != "b" || rb.Epoch != ra.Epoch {
		t.Fatalf("readyz a = %+v, b = %+v", ra, rb)
	}
	if ra.Shards != "0-255" || rb.Shards != "" {
		t.Fatalf("readyz shards: primary %q, backup %q; want 0-255 and none", ra.Shards, rb.Shards)
	}
	if code, r := a.Readyz(t, "?role=primary"); code != 200 || r.Role != "primary" {
		t.Fatalf("primary's /readyz?role=primary = %d %+v, want 200", code, r)
	}
	if code, r := b.Readyz(t, "?role=primary"); code != 503 || r.Role != "backup" || r.Status != "ready" {
		t.Fatalf("backup's /readyz?role=primary = %d %+v, want 503", code, r)
	}
	if code, _ := b.Readyz(t, ""); code != 200 {
		t.Fatalf("backup's /readyz = %d, want 200: a healthy backup is ready", code)
	}

	hook := newEpochHook(t)
	a.Create(t, daemontest.Spec("on-primary", hook.srv.URL+"/ok", "trigger", "delay", "delay_ms", 3_600_000))
	backup503 := func(method, path string, body any) {
		t.Helper()
		code, raw := b.Call(t, method, path, body)
		var e struct {
			Error   string `json:"error"`
			Primary string `json:"primary"`
		}
		if err := json.Unmarshal(raw, &e); err != nil || code != 503 || e.Error != "this node is a backup" || e.Primary != a.Base {
			t.Errorf("%s %s on the backup = %d %s, want 503 naming %s", method, path, code, raw, a.Base)
		}
	}
	backup503(http.MethodPost, "/api/v1/tasks", daemontest.Spec("on-backup", hook.srv.URL+"/ok", "trigger", "delay", "delay_ms", 1000))
	backup503(http.MethodPut, "/api/v1/tasks/on-primary", daemontest.Spec("on-primary", hook.srv.URL+"/ok", "trigger", "delay", "delay_ms", 5))
	backup503(http.MethodDelete, "/api/v1/tasks/on-primary", nil)
	backup503(http.MethodPost, "/api/v1/tasks/on-primary/run", nil)
	backup503(http.MethodPost, "/api/v1/executors/register", map[string]any{"app": "x", "address": "127.0.0.1:1", "handlers": []string{"h"}})
	backup503(http.MethodPost, "/api/v1/executors/heartbeat", map[string]any{"app": "x", "address": "127.0.0.1:1"})
	backup503(http.MethodPost, "/api/v1/callback", map[string]any{"ticket": "1-2-1", "status": "success"})
	backup503(http.MethodPost, "/api/v1/callback/batch", map[string]any{"results": []any{}})

	// Reads come from the database: the task the primary created, no task the backup refused.
	if v := b.Get(t, "on-primary"); v.Runtime.State != "SCHEDULED" {
		t.Fatalf("the backup reads on-primary as %+v", v.Runtime)
	}
	if got := daemontest.Names(b.List(t, "")); len(got) != 1 || got[0] != "on-primary" {
		t.Fatalf("the backup lists %v, want [on-primary]", got)
	}
	if acts := b.Actions(t, "on-primary"); len(acts) == 0 {
		t.Fatalf("the backup shows no actions of on-primary")
	}
	if code, body := b.Call(t, http.MethodGet, "/api/v1/cron/next?expr=@hourly&n=2", nil); code != 200 {
		t.Fatalf("cron preview on the backup = %d %s", code, body)
	}
	var ex struct {
		Count int `json:"count"`
	}
	b.MustJSON(t, 200, http.MethodGet, "/api/v1/executors", nil, &ex)
	var nodes struct {
		Nodes []struct {
			ID        string `json:"id"`
			Advertise string `json:"advertise"`
			Role      string `json:"role"`
			AgeMS     int64  `json:"age_ms"`
		} `json:"nodes"`
	}
	b.MustJSON(t, 200, http.MethodGet, "/api/v1/nodes", nil, &nodes)
	if len(nodes.Nodes) != 2 || nodes.Nodes[0].ID != "a" || nodes.Nodes[0].Role != "primary" || nodes.Nodes[0].Advertise != a.Base ||
		nodes.Nodes[1].ID != "b" || nodes.Nodes[1].Role != "backup" || nodes.Nodes[1].AgeMS > 10_000 {
		t.Fatalf("GET /api/v1/nodes on the backup = %+v", nodes)
	}
	// The cluster view: the primary schedules every shard under its epoch; the backup none.
	var cl struct {
		Mode    string `json:"mode"`
		Unowned string `json:"unowned"`
		Nodes   []struct {
			ID         string `json:"id"`
			Shards     string `json:"shards"`
			ShardsHeld int    `json:"shards_held"`
			EpochMin   int64  `json:"epoch_min"`
			EpochMax   int64  `json:"epoch_max"`
		} `json:"nodes"`
	}
	b.MustJSON(t, 200, http.MethodGet, "/api/v1/cluster", nil, &cl)
	if cl.Mode != "primary-backup" || cl.Unowned != "" || len(cl.Nodes) != 2 ||
		cl.Nodes[0].ID != "a" || cl.Nodes[0].Shards != "0-255" || cl.Nodes[0].ShardsHeld != 256 || cl.Nodes[0].EpochMin != ra.Epoch || cl.Nodes[0].EpochMax != ra.Epoch ||
		cl.Nodes[1].ID != "b" || cl.Nodes[1].Shards != "" || cl.Nodes[1].ShardsHeld != 0 {
		t.Fatalf("GET /api/v1/cluster on the backup = %+v, want a holding 0-255 at epoch %d", cl, ra.Epoch)
	}
	if code, body := b.Call(t, http.MethodGet, "/api/v1/alerts", nil); code != 200 || !strings.Contains(string(body), ActPromotionName) {
		t.Fatalf("the backup's /api/v1/alerts = %d %s, want the primary's promotion steps", code, body)
	}
}

// ActPromotionName is the action the promotion's steps are recorded as.
const ActPromotionName = `"promotion"`

// TestHATakeoverWhenPrimaryStopsRenewing cuts the primary off from the database through a
// TCP proxy. It must stop dispatching by itself (its gate closes TTL − renew after its last
// renewal), and the backup takes over with epoch+1 once the lease expires by the
// database's clock. No ticket is dispatched twice, no call of the old epoch arrives after
// the new one's first, and the task keeps firing.
func TestHATakeoverWhenPrimaryStopsRenewing(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	proxy := newDBProxy(t, "127.0.0.1:3306")
	viaProxy := strings.Replace(dsn, "tcp(127.0.0.1:3306)", "tcp("+proxy.addr()+")", 1)
	if viaProxy == dsn {
		t.Skip("the test server is not at 127.0.0.1:3306; no proxy to cut")
	}
	const ttl, renew = 3 * time.Second, 500 * time.Millisecond
	a := daemontest.HANode(t, viaProxy, "a", ttl, renew)
	ra := a.WaitRole(t, "primary", daemontest.WaitTimeout)
	b := daemontest.HANode(t, dsn, "b", ttl, renew)
	b.WaitRole(t, "backup", daemontest.WaitTimeout)

	hook := newEpochHook(t)
	a.Create(t, daemontest.Spec("tick", hook.srv.URL+"/ok", "trigger", "cron", "cron", "* * * * * *"))
	testwait.For(t, daemontest.WaitTimeout, "fires under epoch "+strconv.FormatInt(ra.Epoch, 10), func() bool { return hook.countEpoch(ra.Epoch) >= 2 })

	cut := time.Now()
	proxy.cut()
	rb := b.WaitRole(t, "primary", ttl+renew+10*time.Second)
	if rb.Epoch != ra.Epoch+1 {
		t.Fatalf("the new primary's epoch = %d, want %d", rb.Epoch, ra.Epoch+1)
	}
	t.Logf("takeover %s after the cut (ttl %s, renew %s)", time.Since(cut).Round(time.Millisecond), ttl, renew)
	testwait.For(t, daemontest.WaitTimeout, "fires under epoch "+strconv.FormatInt(rb.Epoch, 10), func() bool { return hook.countEpoch(rb.Epoch) >= 2 })
	// A's last call came before its gate closed, TTL − renew after its last renewal,
	// which itself was before the cut.
	for _, c := range hook.snapshot() {
		if c.epoch == ra.Epoch && c.at.After(cut.Add(ttl-renew)) {
			t.Errorf("call %s of the cut-off primary at %s, after its local deadline", c.ticket, c.at.Sub(cut))
		}
	}
	proxy.heal()
	// The old primary stays a backup of the new one.
	testwait.For(t, daemontest.WaitTimeout, "the old primary to follow the new one", func() bool {
		code, r := a.Readyz(t, "")
		return code == 200 && r.Role == "backup" && r.Primary == b.Base
	})
	hook.checkCalls(t)
}

// TestHAGracefulHandover stops the primary as SIGTERM does: after draining it releases the
// lease, so the backup takes over at its next attempt, long before the TTL would expire.
func TestHAGracefulHandover(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	const ttl, renew = 60 * time.Second, 500 * time.Millisecond
	a := daemontest.HANode(t, dsn, "a", ttl, renew)
	ra := a.WaitRole(t, "primary", daemontest.WaitTimeout)
	b := daemontest.HANode(t, dsn, "b", ttl, renew)
	b.WaitRole(t, "backup", daemontest.WaitTimeout)
	hook := newEpochHook(t)
	a.Create(t, daemontest.Spec("tick", hook.srv.URL+"/ok", "trigger", "cron", "cron", "* * * * * *"))
	testwait.For(t, daemontest.WaitTimeout, "a fire", func() bool { return hook.countEpoch(ra.Epoch) >= 1 })

	stopped := time.Now()
	if err := a.Stop(); err != nil {
		t.Fatalf("graceful stop of the primary: %v", err)
	}
	stoppedDone := time.Now()
	// With a 60 s TTL only the release can make this quick.
	rb := b.WaitRole(t, "primary", ttl/4)
	t.Logf("handover %s after the stop began (renew %s, ttl %s)", time.Since(stopped).Round(time.Millisecond), renew, ttl)
	// Usually ra.Epoch+1; more when a take of b's committed but its answer came after the
	// take's bound (a loaded box): b's next take, as the same holder, counts another epoch.
	if rb.Epoch <= ra.Epoch {
		t.Fatalf("epoch after handover = %d, want more than the old primary's %d", rb.Epoch, ra.Epoch)
	}
	testwait.For(t, daemontest.WaitTimeout, "fires under the new epoch", func() bool { return hook.countEpoch(rb.Epoch) >= 1 })
	// The stopped primary drained its runs; none of its calls came after its stop returned,
	// and no call was made under an epoch between the two primaries'.
	for _, c := range hook.snapshot() {
		if c.epoch == ra.Epoch && c.at.After(stoppedDone) {
			t.Errorf("call %s of the stopped primary after its stop", c.ticket)
		}
		if c.epoch > ra.Epoch && c.epoch < rb.Epoch {
			t.Errorf("call %s at epoch %d, between the old primary's %d and the new one's %d", c.ticket, c.epoch, ra.Epoch, rb.Epoch)
		}
	}
	hook.checkCalls(t)
}

// TestHARefusals checks what --ha refuses to start on.
func TestHARefusals(t *testing.T) {
	t.Parallel()
	// The embedded store cannot be shared.
	err := axedaemon.Serve(t.Context(), axedaemon.Config{Addr: "127.0.0.1:0", DB: "sqlite:" + t.TempDir() + "/axe.db", HA: true, Logger: daemontest.TestLogger(nil)})
	if !errors.Is(err, axedaemon.ErrHANeedsMySQL) || !strings.Contains(err.Error(), "mysql:") {
		t.Fatalf("--ha on SQLite = %v, want ErrHANeedsMySQL naming what to use", err)
	}
	// A second live node with the same id. A node counts as live when seen within 1.5 renew
	// intervals: with a renew of 500 ms, a loaded box (a cold build beside the tests) let the
	// first node's heartbeat fall 750 ms behind, the second node took the id and served
	// until the test's end. A 4 s renew keeps the first live through such stalls; the second
	// waits 7 s for it to fall silent, then refuses.
	dsn := persisttest.MySQLSchemaDSN(t)
	const ttl, renew = 12 * time.Second, 4 * time.Second
	daemontest.HANode(t, dsn, "same", ttl, renew).WaitRole(t, "primary", daemontest.WaitTimeout)
	ctx, cancel := context.WithTimeout(t.Context(), daemontest.WaitTimeout)
	defer cancel()
	var served string
	err = axedaemon.Serve(ctx, axedaemon.Config{Addr: "127.0.0.1:0", DB: dsn, HA: true, NodeID: "same",
		LeaseTTL: ttl, LeaseRenew: renew, Logger: daemontest.TestLogger(nil),
		// A node that started anyway is stopped at once and reported below.
		OnListen: func(addr string) { served = addr; cancel() }})
	if served != "" {
		t.Fatalf("a second node with a live id started and served at %s (stop: %v), want a refusal naming the id", served, err)
	}
	if err == nil || !strings.Contains(err.Error(), `node id "same"`) {
		t.Fatalf("a second node with a live id = %v, want a refusal naming the id", err)
	}
}

// dbProxy forwards TCP to the database until cut: then every connection is closed and new
// ones are refused until heal.
type dbProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cutOff bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newDBProxy(t *testing.T, target string) *dbProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dbProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *dbProxy) addr() string { return p.ln.Addr().String() }

func (p *dbProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cutOff {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

func (p *dbProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOff = true
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *dbProxy) heal() {
	p.mu.Lock()
	p.cutOff = false
	p.mu.Unlock()
}

// TestHARunsInDoubtAcrossFailover: the primary dispatches two HTTP runs whose endpoint does
// not answer, then is cut off from the database. The new primary resolves both at its
// promotion: on_lost fail records the run lost and its one-shot task FAILED; on_lost resend
// records it lost and sends the same ticket again as attempt 2 of the same fire, which the
// endpoint answers.
func TestHARunsInDoubtAcrossFailover(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	proxy := newDBProxy(t, "127.0.0.1:3306")
	viaProxy := strings.Replace(dsn, "tcp(127.0.0.1:3306)", "tcp("+proxy.addr()+")", 1)
	if viaProxy == dsn {
		t.Skip("the test server is not at 127.0.0.1:3306; no proxy to cut")
	}
	type got struct {
		ticket, attempt string
		epoch           string
	}
	var (
		mu    sync.Mutex
		calls = map[string][]got{}
	)
	release := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		task := r.Header.Get("X-Axe-Task")
		calls[task] = append(calls[task], got{r.Header.Get("X-Axe-Ticket"), r.Header.Get("X-Axe-Attempt"), r.Header.Get("X-Axe-Epoch")})
		mu.Unlock()
		if r.Header.Get("X-Axe-Attempt") == "1" {
			select { // the first primary never gets an answer
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(func() { close(release); hook.Close() })
	callsOf := func(task string) []got {
		mu.Lock()
		defer mu.Unlock()
		return append([]got(nil), calls[task]...)
	}

	const ttl, renew = 3 * time.Second, 500 * time.Millisecond
	a := daemontest.HANode(t, viaProxy, "a", ttl, renew)
	a.WaitRole(t, "primary", daemontest.WaitTimeout)
	b := daemontest.HANode(t, dsn, "b", ttl, renew)
	b.WaitRole(t, "backup", daemontest.WaitTimeout)
	for _, name := range []string{"doubt-fail", "doubt-resend"} {
		onLost := strings.TrimPrefix(name, "doubt-")
		a.Create(t, daemontest.Spec(name, hook.URL+"/run", "trigger", "delay", "delay_ms", 200, "timeout_sec", 60, "on_lost", onLost))
	}
	testwait.For(t, daemontest.WaitTimeout, "both runs dispatched", func() bool {
		return len(callsOf("doubt-fail")) == 1 && len(callsOf("doubt-resend")) == 1
	})
	proxy.cut()
	b.WaitRole(t, "primary", ttl+renew+10*time.Second)

	v := b.WaitState(t, "doubt-fail", "FAILED")
	if v.Runtime.FailureCount != 1 {
		t.Fatalf("doubt-fail = %+v", v.Runtime)
	}
	// The task's state is read from the engine, the runs from the store: the run row's end
	// commits with the verdict's group, which may land just after the state is visible.
	var failRuns []model.Run
	testwait.For(t, daemontest.WaitTimeout, "the run of doubt-fail ended", func() bool {
		failRuns = b.Runs(t, "doubt-fail")
		return len(failRuns) == 1 && failRuns[0].Result != "running"
	})
	if len(failRuns) != 1 || failRuns[0].Result != "lost" {
		t.Fatalf("runs of doubt-fail = %+v, want one lost", failRuns)
	}
	if n := len(callsOf("doubt-fail")); n != 1 {
		t.Fatalf("doubt-fail sent %d times, want once (on_lost: fail)", n)
	}

	b.WaitState(t, "doubt-resend", "SUCCESS")
	sent := callsOf("doubt-resend")
	if len(sent) != 2 || sent[0].ticket != sent[1].ticket || sent[0].attempt != "1" || sent[1].attempt != "2" || sent[0].epoch == sent[1].epoch {
		t.Fatalf("doubt-resend calls = %+v, want the same ticket as attempts 1 and 2 under two epochs", sent)
	}
	// The task's state is read from the engine, the runs from the store: the run row's end
	// commits with the result's group, which may land just after the state is visible.
	runs := b.Runs(t, "doubt-resend")
	results := map[int]string{}
	testwait.For(t, daemontest.WaitTimeout, "attempt 2 of doubt-resend ended", func() bool {
		runs = b.Runs(t, "doubt-resend")
		clear(results)
		for _, r := range runs {
			results[r.Attempt] = r.Result
		}
		return results[2] != "" && results[2] != "running"
	})
	if len(runs) != 2 || results[1] != "lost" || results[2] != "success" {
		t.Fatalf("runs of doubt-resend = %+v, want attempt 1 lost and attempt 2 success", runs)
	}
	if _, ok := daemontest.FindAction(b.Actions(t, "doubt-resend"), "resend"); !ok {
		t.Fatalf("no resend action on doubt-resend")
	}
	proxy.heal()
}

// TestHAPrimaryRecordsMinuteStats: a primary's recorder writes its term's fires to the
// store's minute statistics, which the day chart of the next primary shows.
func TestHAPrimaryRecordsMinuteStats(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	const ttl, renew = 60 * time.Second, 500 * time.Millisecond
	a := daemontest.HANode(t, dsn, "a", ttl, renew)
	ra := a.WaitRole(t, "primary", daemontest.WaitTimeout)
	hook := newEpochHook(t)
	a.Create(t, daemontest.Spec("tick", hook.srv.URL+"/ok", "trigger", "cron", "cron", "* * * * * *"))
	testwait.For(t, daemontest.WaitTimeout, "three fires", func() bool { return hook.countEpoch(ra.Epoch) >= 3 })
	if err := a.Stop(); err != nil {
		t.Fatalf("graceful stop of the primary: %v", err)
	}
	b := daemontest.HANode(t, dsn, "b", ttl, renew)
	b.WaitRole(t, "primary", daemontest.WaitTimeout)
	var got struct {
		Minutes []struct {
			Fires int64 `json:"fires"`
		} `json:"minutes"`
	}
	b.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/stats/minutes", nil, &got)
	var fires int64
	for _, m := range got.Minutes {
		fires += m.Fires
	}
	if fires < 3 {
		t.Errorf("the day chart counts %d fires, want the first primary's >= 3", fires)
	}
}
