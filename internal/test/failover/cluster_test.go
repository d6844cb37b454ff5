package failover

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/axe-sched/axe/internal/test/leaktest"
	"github.com/axe-sched/axe/internal/test/testproxy"
	"github.com/axe-sched/axe/persist/persisttest"

	"github.com/axe-sched/axe/lib/freeport"
)

// axeBin is the real daemon, built from this tree once by TestMain.
var axeBin string

// envBin, when set, names an axe binary the suite runs instead of building this tree's.
const envBin = "AXE_FAILOVER_BIN"

// envExecutor makes the test binary run as the suite's executor process (executor_test.go).
const envExecutor = "AXE_FAILOVER_EXECUTOR"

// envLeaseScale multiplies every scenario's lease TTL and renew interval (default 1).
// scripts/test.sh sets 2 on a box other work keeps busy: there a node starved of CPU for
// seconds at a time let the 3 s leases of most scenarios lapse again and again, and the
// shards never settled within the scenarios' bounds. The scenarios' checks read the scaled
// values, so what they assert is the same, over longer leases.
const envLeaseScale = "AXE_FAILOVER_LEASE_SCALE"

// leaseScale reads envLeaseScale.
func leaseScale(t *testing.T) int {
	v := os.Getenv(envLeaseScale)
	if v == "" {
		return 1
	}
	k, err := strconv.Atoi(v)
	if err != nil || k < 1 || k > 10 {
		t.Fatalf("%s=%q: want a whole number from 1 to 10", envLeaseScale, v)
	}
	return k
}

func TestMain(m *testing.M) {
	if os.Getenv(envExecutor) != "" {
		os.Exit(executorMain())
	}
	if err := setParallel(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "axe-failover-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot make a build directory:", err)
		os.Exit(1)
	}
	axeBin = filepath.Join(dir, "axe")
	if bin := os.Getenv(envBin); bin != "" {
		// Another build, to measure a scenario before and after a change in one sitting.
		axeBin = bin
	} else {
		build := exec.Command("go", "build", "-o", axeBin, "github.com/axe-sched/axe/cmd/axe")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "cannot build axe:", err)
			_ = os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	goleak.VerifyTestMain(m, append(leaktest.Options(),
		goleak.Cleanup(func(code int) {
			_ = os.RemoveAll(dir)
			os.Exit(code)
		}))...)
}

// Generous bounds: the suite shares two cores with other packages' tests.
const (
	startTimeout = 60 * time.Second
	pollEvery    = 50 * time.Millisecond
)

// syncBuffer is a bytes.Buffer safe for a process writer and a test reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// node is one `axe serve` process of the cluster, with a fixed port so that a restart keeps
// its address.
type node struct {
	id    string
	addr  string // host:port it listens on
	url   string // http://addr, also its --advertise
	proxy *testproxy.Proxy
	dsn   string // the DSN it opens when not the scenario's (a Galera scenario's node order)

	mu     sync.Mutex
	cmd    *exec.Cmd
	log    *syncBuffer // stderr (JSON logs) of the current process
	logs   []*syncBuffer
	exited chan struct{}
}

// readyz is the body of GET /readyz.
type readyz struct {
	Status  string `json:"status"`
	Role    string `json:"role"`
	Epoch   int64  `json:"epoch"`
	Node    string `json:"node"`
	Primary string `json:"primary"`
}

// cluster is the suite's world for one scenario: a fresh database, the nodes, the executor
// process and the callback target.
type cluster struct {
	t      *testing.T
	dsn    string // mysql:… DSN of the scenario's database, direct
	dbAddr string // host:port of MariaDB
	db     *sql.DB
	// ttl and renew are the nodes' lease TTL and renew interval, which a scenario may set
	// before its first node starts; the first start multiplies both by leaseScale.
	ttl    time.Duration
	renew  time.Duration
	scaled bool
	ha     bool
	// args are more flags every node is started with.
	args []string
	// sharded runs the nodes with every one scheduling its share of the shards (--ha-mode
	// shards, shards_test.go) instead of as a primary and its backups.
	sharded bool

	target *target
	exe    *execProc
	nodes  []*node
	http   *http.Client
}

// newCluster creates the scenario's database and the callback target. Nodes and the
// executor start separately.
func newCluster(t *testing.T, ha bool) *cluster {
	t.Helper()
	dsn := persisttest.MySQLSchemaDSN(t) // skips, or fails under AXE_REQUIRE_MYSQL=1, without MySQL
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, "mysql:"))
	if err != nil {
		t.Fatal(err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { _ = db.Close() })
	c := &cluster{
		t: t, dsn: dsn, dbAddr: cfg.Addr, db: db, ha: ha,
		ttl: 3 * time.Second, renew: time.Second,
		target: newTarget(t),
		http:   &http.Client{Timeout: 5 * time.Second},
	}
	t.Cleanup(c.http.CloseIdleConnections)
	c.nodeLogsOnFailure()
	return c
}

// addNode declares a node; viaProxy puts a testproxy between it and MariaDB.
func (c *cluster) addNode(id string, viaProxy bool) *node {
	c.t.Helper()
	addr := freeport.MustAddr(c.t)
	n := &node{id: id, addr: addr, url: "http://" + addr}
	if viaProxy {
		p, err := testproxy.New(c.dbAddr)
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() { _ = p.Close() })
		n.proxy = p
	}
	c.nodes = append(c.nodes, n)
	return n
}

// nodeDSN is the DSN node n opens: its own if it has one, else the scenario's database,
// through n's proxy if it has one.
func (c *cluster) nodeDSN(n *node) string {
	if n.dsn != "" {
		return n.dsn
	}
	if n.proxy == nil {
		return c.dsn
	}
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(c.dsn, "mysql:"))
	if err != nil {
		c.t.Fatal(err)
	}
	cfg.Addr = n.proxy.Addr()
	return "mysql:" + cfg.FormatDSN()
}

var listenLine = regexp.MustCompile(`listening on (http://\S+)`)

// start runs n's `axe serve` and waits until it listens. It is stopped (SIGCONT, SIGTERM, then
// SIGKILL) when the test ends if it still runs.
func (c *cluster) start(n *node) {
	c.t.Helper()
	if !c.scaled {
		c.scaled = true
		k := leaseScale(c.t)
		c.ttl, c.renew = c.ttl*time.Duration(k), c.renew*time.Duration(k)
	}
	args := []string{"serve", "--addr", n.addr, "--db", c.nodeDSN(n), "--node-id", n.id,
		"--log-format", "json", "--shutdown-timeout", "5s"}
	switch {
	case c.sharded:
		args = append(args, "--ha", "--ha-mode", "shards", "--advertise", n.url,
			"--lease-ttl", c.ttl.String(), "--lease-renew", c.renew.String())
	case c.ha:
		args = append(args, "--ha", "--ha-mode", "primary", "--advertise", n.url,
			"--lease-ttl", c.ttl.String(), "--lease-renew", c.renew.String())
	}
	args = append(args, c.args...)
	cmd := exec.Command(axeBin, args...)
	cmd.Env = cleanEnv()
	logBuf := &syncBuffer{}
	cmd.Stderr = logBuf
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start node %s: %v", n.id, err)
	}
	exited := make(chan struct{})
	listening := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if listenLine.MatchString(sc.Text()) {
				select {
				case listening <- struct{}{}:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.log, n.exited = cmd, logBuf, exited
	n.logs = append(n.logs, logBuf)
	n.mu.Unlock()
	c.t.Cleanup(func() {
		select {
		case <-exited:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			c.t.Errorf("node %s ignored SIGTERM for 20 s; killing it", n.id)
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	select {
	case <-listening:
	case <-exited:
		c.t.Fatalf("node %s exited before listening\nlog:\n%s", n.id, logBuf.String())
	case <-time.After(startTimeout):
		c.t.Fatalf("node %s did not listen within %s\nlog:\n%s", n.id, startTimeout, logBuf.String())
	}
}

// cleanEnv is the environment without AXE_ variables, so a developer's settings cannot leak
// into the processes under test.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AXE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// signal sends sig to n's process.
func (n *node) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to node %s: %v", sig, n.id, err)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (n *node) kill(t *testing.T) {
	t.Helper()
	n.signal(t, syscall.SIGKILL)
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("node %s survived SIGKILL for 10 s", n.id)
	}
}

// allLogs is the stderr of every process n ran, in order.
func (n *node) allLogs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var b strings.Builder
	for _, l := range n.logs {
		b.WriteString(l.String())
	}
	return b.String()
}

// currentLog is the stderr of n's current process.
func (n *node) currentLog() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.String()
}

// readyz asks n's /readyz; ok is false when n does not answer.
func (c *cluster) readyz(n *node) (readyz, int, bool) {
	resp, err := c.http.Get(n.url + "/readyz")
	if err != nil {
		return readyz{}, 0, false
	}
	defer resp.Body.Close()
	var r readyz
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return readyz{}, resp.StatusCode, false
	}
	return r, resp.StatusCode, true
}

// waitRole polls n's /readyz until it reports role (and, for the primary, status ready) and
// returns the moment it first did, and what it said.
func (c *cluster) waitRole(n *node, role string, timeout time.Duration) (time.Time, readyz) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last readyz
	var lastCode int
	for {
		r, code, ok := c.readyz(n)
		now := time.Now()
		if ok {
			last, lastCode = r, code
			if r.Role == role && (role != "primary" || (r.Status == "ready" && code == http.StatusOK)) {
				return now, r
			}
		}
		if now.After(deadline) {
			c.t.Fatalf("node %s did not become %s within %s: last /readyz %d %+v\nopen transactions on the database:\n%s\nlog tail:\n%s",
				n.id, role, timeout, lastCode, last, c.openTransactions(), tail(n.currentLog(), 3000))
		}
		time.Sleep(pollEvery)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// waitReady waits until a node without --ha answers /readyz 200.
func (c *cluster) waitReady(n *node, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if _, code, _ := c.readyz(n); code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %s not ready within %s\nlog tail:\n%s", n.id, timeout, tail(n.currentLog(), 3000))
		}
		time.Sleep(pollEvery)
	}
}

// post sends a JSON body to base+path and returns the status and body.
func (c *cluster) post(base, path string, body any) (int, []byte, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.http.Post(base+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// runs reads the whole run table.
func (c *cluster) runs() []RunRow {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := c.db.QueryContext(ctx, `SELECT ticket, task_name, kind, attempt, scheduled_at, dispatched_at, ended_at, result FROM task_run`)
	if err != nil {
		c.t.Fatalf("cannot read the run table: %v", err)
	}
	defer rows.Close()
	var out []RunRow
	for rows.Next() {
		var r RunRow
		if err := rows.Scan(&r.Ticket, &r.Task, &r.Kind, &r.Attempt, &r.ScheduledAt, &r.DispatchedAt, &r.EndedAt, &r.Result); err != nil {
			c.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// actions reads the whole action table.
func (c *cluster) actions() []ActionRow {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := c.db.QueryContext(ctx, `SELECT task_name, action, at, detail FROM task_action`)
	if err != nil {
		c.t.Fatalf("cannot read the action table: %v", err)
	}
	defer rows.Close()
	var out []ActionRow
	for rows.Next() {
		var a ActionRow
		if err := rows.Scan(&a.Task, &a.Action, &a.At, &a.Detail); err != nil {
			c.t.Fatal(err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// openTransactions describes the InnoDB transactions open on the scenario's database and the
// locks they wait for: what holds up a node that cannot take the lease.
func (c *cluster) openTransactions() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := c.db.QueryContext(ctx, `SELECT t.trx_mysql_thread_id, t.trx_state, TIMESTAMPDIFF(SECOND, t.trx_started, NOW()),
			IFNULL(p.command, ''), IFNULL(p.time, 0), t.trx_rows_locked, LEFT(IFNULL(t.trx_query, ''), 120)
		FROM information_schema.innodb_trx t LEFT JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
		WHERE p.db = DATABASE()`)
	if err != nil {
		return "cannot read information_schema.innodb_trx: " + err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var thread, age, idle, locked int64
		var state, command, query string
		if err := rows.Scan(&thread, &state, &age, &command, &idle, &locked, &query); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "  connection %d: %s for %d s, %s for %d s, %d rows locked, query %q\n", thread, state, age, command, idle, locked, query)
	}
	if b.Len() == 0 {
		return "  none"
	}
	return b.String()
}

// urls is every node's URL, comma-separated, as executors and clients are configured.
func (c *cluster) urls() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.url
	}
	return out
}
