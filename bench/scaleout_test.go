package bench

// Scale-out (docs/scale-out.md): real `axe serve --ha` processes that all schedule, each its
// share of the 256 shards, on one MariaDB server. In one run, for 1, 2 and 3 nodes (a fresh
// database each), the suite measures:
//
//  1. a burst: N one-shot tasks created through POST /api/v1/tasks/batch (spread over the
//     nodes, which split each batch among the owners), all due at one instant a few seconds
//     ahead; the drain is from that instant until every task has a successful run row;
//  2. every-second cron: M tasks firing every second over a span; fires/s reached, lateness
//     (dispatched_at − scheduled_at) p50/p99, fires missed (expected minus recorded);
//  3. for both, each node's CPU (user+system from /proc/PID/stat over the phase) per fire,
//     the nodes' total per fire, and fires per CPU-second. On a machine of two shared cores
//     more nodes cannot add CPU, so what scale-out promises is read from CPU per fire: it
//     should not grow with the node count, and the figure to compare is its ratio to the
//     1-node run of the same run;
//  4. takeover with full daemons: 3 nodes under a smaller cron load, one killed (SIGKILL) at
//     a random moment, again and again; the time from the kill until the cluster view on a
//     survivor shows every shard held by the survivors, then the node is restarted under its
//     id and port and the shares even out again;
//  5. with AXE_BENCH_SCALE_GALERA=1, phases 1–2 with 3 nodes on a three-node Galera cluster
//     the benchmark starts (each axe node's DSN names a different database node first),
//     as ratios to the 3-node single-server figures of the same run.
//
// Every callback goes to an HTTP sink in this process that answers 200 at once and keeps
// every receipt: a fire received twice (same ticket, or same task and fire time) is a
// duplicate.
//
//	AXE_TEST_MYSQL_DSN='root:@tcp(127.0.0.1:3306)/' \
//	  go test -run '^$' -bench ScaleOut -benchtime 1x -timeout 60m ./bench/
//
// Knobs: AXE_BENCH_SCALE_BURST (default 2e4), AXE_BENCH_SCALE_CRON (2e3),
// AXE_BENCH_SCALE_SPAN (30s), AXE_BENCH_SCALE_NODES (1,2,3), AXE_BENCH_SCALE_KILLS (10; 0
// skips phase 4), AXE_BENCH_SCALE_KILL_CRON (300), AXE_BENCH_SCALE_GALERA (1 runs phase 5),
// AXE_BENCH_SCALE_BIN (an axe binary to run instead of building this tree's),
// AXE_BENCH_SCALE_KEEP_LOGS (1 keeps the nodes' logs, which a failed run always keeps),
// AXE_BENCH_SCALE_LIMIT (N > 0 puts every burst task under one concurrency key limited to N).

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/internal/test/galeratest"
	"github.com/axe-sched/axe/model"

	"github.com/axe-sched/axe/lib/freeport"
)

const (
	envScaleBurst    = "AXE_BENCH_SCALE_BURST"
	envScaleCron     = "AXE_BENCH_SCALE_CRON"
	envScaleSpan     = "AXE_BENCH_SCALE_SPAN"
	envScaleNodes    = "AXE_BENCH_SCALE_NODES"
	envScaleKills    = "AXE_BENCH_SCALE_KILLS"
	envScaleKillCron = "AXE_BENCH_SCALE_KILL_CRON"
	envScaleGalera   = "AXE_BENCH_SCALE_GALERA"
	envScaleBin      = "AXE_BENCH_SCALE_BIN"
	envScaleKeepLogs = "AXE_BENCH_SCALE_KEEP_LOGS"
	// envScaleLimit, when > 0, puts every task of the burst under one concurrency key with a
	// limit of that many runs in flight (issue 46: what a limit costs the drain).
	envScaleLimit = "AXE_BENCH_SCALE_LIMIT"
	// envScalePprof, when set to a directory, starts the nodes with --pprof and writes a CPU
	// profile of each node over every burst's first seconds there (envScalePprofSec, 5 s).
	envScalePprof    = "AXE_BENCH_SCALE_PPROF"
	envScalePprofSec = "AXE_BENCH_SCALE_PPROF_SEC"
)

// The daemons' lease settings, as the failover suite runs them.
const (
	scaleTTL   = 3 * time.Second
	scaleRenew = time.Second
	// scaleBatch is how many tasks one POST /api/v1/tasks/batch carries (the endpoint takes
	// up to 10,000): several batches, so that every node is asked to split some.
	scaleBatch = 5000
	// scalePoll is how often a drain or a takeover is polled.
	scalePoll = 20 * time.Millisecond
)

// scaleNode is one `axe serve --ha` process with a fixed address, so a restart keeps it.
type scaleNode struct {
	id, addr, url, dsn string
	bin, logPath       string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// start runs the node and waits until it listens.
func (n *scaleNode) start(tb testing.TB) {
	tb.Helper()
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(n.bin, "serve", "--addr", n.addr, "--db", n.dsn, "--ha", "--node-id", n.id,
		"--advertise", n.url, "--lease-ttl", scaleTTL.String(), "--lease-renew", scaleRenew.String(),
		"--log-format", "json")
	if os.Getenv(envScalePprof) != "" {
		cmd.Args = append(cmd.Args, "--pprof")
	}
	// Without the developer's AXE_ settings, which the daemon reads as flags.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AXE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stderr = logf
	// A node dies with the benchmark, so a crashed run leaves none behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		tb.Fatalf("cannot start node %s: %v", n.id, err)
	}
	exited := make(chan struct{})
	listening := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on ") {
				select {
				case listening <- struct{}{}:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		_ = logf.Close()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	select {
	case <-listening:
	case <-exited:
		tb.Fatalf("node %s exited before listening; log tail:\n%s", n.id, fileTail(n.logPath, 3000))
	case <-time.After(time.Minute):
		tb.Fatalf("node %s did not listen within a minute; log tail:\n%s", n.id, fileTail(n.logPath, 3000))
	}
}

func (n *scaleNode) running() (*exec.Cmd, chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd, n.exited
}

func (n *scaleNode) pid() int {
	cmd, _ := n.running()
	if cmd == nil {
		return 0
	}
	return cmd.Process.Pid
}

// kill sends SIGKILL and waits until the process is gone.
func (n *scaleNode) kill(tb testing.TB) {
	tb.Helper()
	cmd, exited := n.running()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		tb.Fatalf("node %s survived SIGKILL for 10 s", n.id)
	}
}

// stop asks the node to stop (SIGTERM: it drains and releases its shards) and kills it
// after 30 s.
func (n *scaleNode) stop() {
	cmd, exited := n.running()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func fileTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		return "…" + string(b[len(b)-n:])
	}
	return string(b)
}

// freeLoopbackAddr returns a loopback address nothing listens on now.
func freeLoopbackAddr(tb testing.TB) string {
	tb.Helper()
	return freeport.MustAddr(tb)
}

// scaleReceipt is one callback the sink received.
type scaleReceipt struct {
	task, ticket string
	scheduled    int64 // the run's scheduled_at, Unix ms
	epoch        int64 // X-Axe-Epoch: the epoch of the shard's lease that sent it
	at           int64 // arrival, Unix ns
}

// scaleSink is the callback target: it answers 200 at once and keeps every receipt; it never
// de-duplicates, so a fire sent twice shows as two receipts.
type scaleSink struct {
	srv    *fasthttp.Server
	ln     net.Listener
	served chan struct{}

	mu    sync.Mutex
	recs  []scaleReceipt
	holds []holdCall // the calls of /hold, which the sink works on before it answers
	// burstCount counts the receipts of the burst's tasks (b-…), for waitBurst.
	burstCount atomic.Int64
}

func startScaleSink(tb testing.TB) *scaleSink {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &scaleSink{ln: ln, served: make(chan struct{})}
	s.srv = &fasthttp.Server{Handler: s.handle, Concurrency: 1 << 16}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	tb.Cleanup(s.close)
	return s
}

var scheduledKey = []byte(`"scheduled_at":`)

func (s *scaleSink) handle(rc *fasthttp.RequestCtx) {
	r := scaleReceipt{
		task:   string(rc.Request.Header.Peek("X-Axe-Task")),
		ticket: string(rc.Request.Header.Peek("X-Axe-Ticket")),
		at:     time.Now().UnixNano(),
	}
	r.epoch, _ = strconv.ParseInt(string(rc.Request.Header.Peek("X-Axe-Epoch")), 10, 64)
	if body := rc.PostBody(); len(body) > 0 {
		if i := bytes.Index(body, scheduledKey); i >= 0 {
			rest := body[i+len(scheduledKey):]
			j := 0
			for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
				j++
			}
			r.scheduled, _ = strconv.ParseInt(string(rest[:j]), 10, 64)
		}
	}
	s.mu.Lock()
	s.recs = append(s.recs, r)
	s.mu.Unlock()
	if bytes.HasPrefix(rc.Path(), []byte("/hold")) {
		time.Sleep(time.Duration(rc.QueryArgs().GetUintOrZero("ms")) * time.Millisecond)
		end := time.Now().UnixNano()
		s.mu.Lock()
		s.holds = append(s.holds, holdCall{at: r.at, end: end})
		s.mu.Unlock()
	}
	if strings.HasPrefix(r.task, "b-") {
		s.burstCount.Add(1)
	}
	rc.SetStatusCode(fasthttp.StatusOK)
}

// holdCall is one call of /hold: when it arrived and when the sink had worked on it, Unix ns.
type holdCall struct{ at, end int64 }

// held returns the calls of /hold so far.
func (s *scaleSink) held() []holdCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.holds)
}

func (s *scaleSink) url() string { return "http://" + s.ln.Addr().String() + "/hook" }

func (s *scaleSink) close() {
	_ = s.srv.Shutdown()
	_ = s.ln.Close()
	<-s.served
}

// receipts returns the receipts of tasks named prefix… whose fire time is in [from, to)
// (to 0: no bound).
func (s *scaleSink) receipts(prefix string, from, to int64) []scaleReceipt {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []scaleReceipt
	for _, r := range s.recs {
		if strings.HasPrefix(r.task, prefix) && r.scheduled >= from && (to == 0 || r.scheduled < to) {
			out = append(out, r)
		}
	}
	return out
}

// receiptAudit is what the receipts of a phase say.
type receiptAudit struct {
	receipts    int
	fires       int // distinct (task, fire time)
	tasks       int // distinct tasks
	dupTickets  int // receipts beyond the first of a ticket
	dupFires    int // receipts beyond the first of a (task, fire time)
	epochsAback int // receipts at a lower epoch than one of the same shard received before
}

func auditReceipts(recs []scaleReceipt) receiptAudit {
	a := receiptAudit{receipts: len(recs)}
	type fire struct {
		task string
		at   int64
	}
	tickets := make(map[string]int, len(recs))
	fires := make(map[fire]int, len(recs))
	tasks := map[string]bool{}
	for _, r := range recs {
		tickets[r.ticket]++
		fires[fire{r.task, r.scheduled}]++
		tasks[r.task] = true
	}
	for _, n := range tickets {
		a.dupTickets += n - 1
	}
	for _, n := range fires {
		a.dupFires += n - 1
	}
	a.fires, a.tasks = len(fires), len(tasks)
	sorted := slices.Clone(recs)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].at < sorted[j].at })
	var highest [model.ShardCount]int64
	for _, r := range sorted {
		sh := model.ShardOf(r.task)
		if r.epoch < highest[sh] {
			a.epochsAback++
		}
		highest[sh] = max(highest[sh], r.epoch)
	}
	return a
}

// scaleView is GET /api/v1/cluster, as much as the suite reads of it.
type scaleView struct {
	Mode    string `json:"mode"`
	Unowned string `json:"unowned"`
	Nodes   []struct {
		ID   string `json:"id"`
		Held int    `json:"shards_held"`
	} `json:"nodes"`
	Shards []struct {
		Shard       int    `json:"shard"`
		Holder      string `json:"holder"`
		Held        bool   `json:"held"`
		RemainingMS int64  `json:"remaining_ms"`
	} `json:"shards"`
}

// heldBy reports whether every shard is held by a node of ids and no other (each at its fair
// share, 256/n or one more, when balanced).
func (v scaleView) heldBy(ids []string, balanced bool) bool {
	if v.Mode != "sharded" || v.Unowned != "" {
		return false
	}
	total, holders := 0, 0
	for _, n := range v.Nodes {
		if n.Held == 0 {
			continue
		}
		if !slices.Contains(ids, n.ID) {
			return false
		}
		holders++
		total += n.Held
		if q := model.ShardCount / len(ids); balanced && n.Held != q && n.Held != q+1 {
			return false
		}
	}
	return total == model.ShardCount && (!balanced || holders == len(ids))
}

// scaleCluster is one configuration's world: its database, nodes, sink and clients.
type scaleCluster struct {
	tb     testing.TB
	closed sync.Once
	where  string
	db     *sql.DB // the audit's reads
	dbPIDs []int   // the database server processes, for their CPU
	nodes  []*scaleNode
	sink   *scaleSink
	api    *http.Client // creates
	poll   *http.Client // cluster views and metrics
	// lead is added to the lead time of a burst's creates (a loaded machine creates slower).
	lead time.Duration
}

func newScaleCluster(tb testing.TB, bin, dir, where string, dsns []string, auditDSN string, dbPIDs []int) *scaleCluster {
	tb.Helper()
	db, err := benchkit.OpenSQL(auditDSN, 4)
	if err != nil {
		tb.Fatal(err)
	}
	c := &scaleCluster{tb: tb, where: where, db: db, dbPIDs: dbPIDs, sink: startScaleSink(tb),
		api:  &http.Client{Timeout: 3 * time.Minute},
		poll: &http.Client{Timeout: 5 * time.Second},
	}
	// Stopped before the database is dropped: cleanups run last registered first.
	tb.Cleanup(c.close)
	for i, dsn := range dsns {
		addr := freeLoopbackAddr(tb)
		c.nodes = append(c.nodes, &scaleNode{id: fmt.Sprintf("node-%d", i+1), addr: addr, url: "http://" + addr,
			dsn: dsn, bin: bin, logPath: filepath.Join(dir, fmt.Sprintf("%s-%d-node-%d.log", strings.ReplaceAll(where, " ", "-"), len(dsns), i+1))})
	}
	return c
}

// boot starts the nodes one after the other (the first migrates the schema) and waits until
// they share the shards evenly.
func (c *scaleCluster) boot() {
	c.tb.Helper()
	for _, n := range c.nodes {
		n.start(c.tb)
	}
	c.waitHeld(c.nodes, c.nodes[0], true, time.Minute)
}

// close stops every node gracefully and closes the clients; the database is dropped by the
// caller's cleanup.
func (c *scaleCluster) close() {
	c.closed.Do(c.stopAll)
}

func (c *scaleCluster) stopAll() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.stop() }()
	}
	wg.Wait()
	c.api.CloseIdleConnections()
	c.poll.CloseIdleConnections()
	_ = c.db.Close()
}

func (c *scaleCluster) ids(nodes []*scaleNode) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.id
	}
	return out
}

// view asks n for the cluster view; ok is false when n does not answer.
func (c *scaleCluster) view(n *scaleNode) (scaleView, bool) {
	resp, err := c.poll.Get(n.url + "/api/v1/cluster")
	if err != nil {
		return scaleView{}, false
	}
	defer resp.Body.Close()
	var v scaleView
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil {
		return scaleView{}, false
	}
	return v, true
}

// waitHeld polls the view through via until every shard is held by live (evenly when
// balanced) and returns how long that took.
func (c *scaleCluster) waitHeld(live []*scaleNode, via *scaleNode, balanced bool, timeout time.Duration) time.Duration {
	c.tb.Helper()
	start := time.Now()
	ids := c.ids(live)
	var last scaleView
	for {
		if v, ok := c.view(via); ok {
			last = v
			if v.heldBy(ids, balanced) {
				return time.Since(start)
			}
		}
		if time.Since(start) > timeout {
			c.tb.Fatalf("%s: the shards were not held by %v (balanced %v) within %s; last view: mode %q, unowned %q, nodes %+v",
				c.where, ids, balanced, timeout, last.Mode, last.Unowned, last.Nodes)
		}
		time.Sleep(scalePoll)
	}
}

// scaleSeries are the series of /metrics the suite reads: the fires, the writer's batches
// and rows, and the shard loop's renewals that failed.
var scaleSeries = []string{
	"axe_triggers_total",
	"axe_writer_batch_rows_count",
	"axe_writer_batch_rows_sum",
	`axe_shard_renewals_total{result="error"}`,
	`axe_shard_renewals_total{result="lost"}`,
	"axe_shard_takes_total",
}

// scrape reads scaleSeries from n's /metrics.
func (c *scaleCluster) scrape(n *scaleNode) map[string]float64 {
	resp, err := c.poll.Get(n.url + "/metrics")
	if err != nil {
		c.tb.Fatalf("cannot read %s's metrics: %v", n.id, err)
	}
	defer resp.Body.Close()
	out := make(map[string]float64, len(scaleSeries))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if ok && slices.Contains(scaleSeries, name) {
			out[name], _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if _, ok := out["axe_triggers_total"]; !ok {
		c.tb.Fatalf("%s's /metrics has no axe_triggers_total", n.id)
	}
	return out
}

// create posts the items (task JSON objects) in batches of scaleBatch, the batches spread
// round robin over the nodes and posted from one goroutine per node. A batch refused while
// a shard moves (503), or created in part (409), is posted again with on_conflict=skip.
func (c *scaleCluster) create(items [][]byte) time.Duration {
	c.tb.Helper()
	start := time.Now()
	perNode := make([][][][]byte, len(c.nodes))
	for i := 0; i*scaleBatch < len(items); i++ {
		batch := items[i*scaleBatch : min((i+1)*scaleBatch, len(items))]
		perNode[i%len(c.nodes)] = append(perNode[i%len(c.nodes)], batch)
	}
	errs := make(chan error, len(c.nodes))
	for i, batches := range perNode {
		go func() {
			for _, batch := range batches {
				if err := c.postBatch(c.nodes[i], batch); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range c.nodes {
		if err := <-errs; err != nil {
			c.tb.Fatal(err)
		}
	}
	return time.Since(start)
}

func (c *scaleCluster) postBatch(n *scaleNode, batch [][]byte) error {
	body := append(append([]byte("["), bytes.Join(batch, []byte(","))...), ']')
	for try := 0; ; try++ {
		resp, err := c.api.Post(n.url+"/api/v1/tasks/batch?on_conflict=skip", "application/json", bytes.NewReader(body))
		var status int
		var text []byte
		if err == nil {
			status = resp.StatusCode
			text, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if status == http.StatusOK {
				return nil
			}
		}
		retry := err == nil && (status == http.StatusServiceUnavailable || status == http.StatusConflict || status == http.StatusTooManyRequests)
		if !retry || try >= 30 {
			return fmt.Errorf("%s: a batch of %d through %s: %d %.300s %v", c.where, len(batch), n.id, status, text, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// scaleCost is what a phase cost: each node's CPU and fires, the database server's CPU and
// this process's (the sink and the polls).
type scaleCost struct {
	wall       time.Duration
	cpu        []time.Duration
	fires      []float64 // axe_triggers_total deltas
	db, bench  time.Duration
	totalFires float64
	// series are the deltas of scaleSeries, summed over the nodes.
	series map[string]float64
}

type scaleProbe struct {
	c      *scaleCluster
	at     time.Time
	cpu    []time.Duration
	series []map[string]float64
	db, me time.Duration
}

func (c *scaleCluster) dbCPU() time.Duration {
	var d time.Duration
	for _, pid := range c.dbPIDs {
		v, _ := benchkit.ProcessCPU(pid)
		d += v
	}
	return d
}

// probe reads the nodes' fire counters, then every process's CPU: the scrapes of /metrics
// stay out of the window that starts here.
func (c *scaleCluster) probe() *scaleProbe {
	c.tb.Helper()
	p := &scaleProbe{c: c}
	for _, n := range c.nodes {
		p.series = append(p.series, c.scrape(n))
	}
	p.readCPU()
	return p
}

func (p *scaleProbe) readCPU() {
	p.c.tb.Helper()
	p.at, p.db, p.me = time.Now(), p.c.dbCPU(), benchkit.CPUTime()
	p.cpu = p.cpu[:0]
	for _, n := range p.c.nodes {
		v, err := benchkit.ProcessCPU(n.pid())
		if err != nil {
			p.c.tb.Fatal(err)
		}
		p.cpu = append(p.cpu, v)
	}
}

// end reads every process's CPU, then the fire counters, and returns what the window cost.
func (p *scaleProbe) end() scaleCost {
	p.c.tb.Helper()
	q := &scaleProbe{c: p.c}
	q.readCPU()
	for _, n := range p.c.nodes {
		q.series = append(q.series, p.c.scrape(n))
	}
	r := scaleCost{wall: q.at.Sub(p.at), db: q.db - p.db, bench: q.me - p.me, series: map[string]float64{}}
	for i := range p.cpu {
		r.cpu = append(r.cpu, q.cpu[i]-p.cpu[i])
		for _, name := range scaleSeries {
			r.series[name] += q.series[i][name] - p.series[i][name]
		}
		fires := q.series[i]["axe_triggers_total"] - p.series[i]["axe_triggers_total"]
		r.fires = append(r.fires, fires)
		r.totalFires += fires
	}
	return r
}

func (r scaleCost) totalCPU() time.Duration {
	var d time.Duration
	for _, v := range r.cpu {
		d += v
	}
	return d
}

func usPer(d time.Duration, n float64) float64 {
	if n <= 0 {
		return 0
	}
	return float64(d.Microseconds()) / n
}

// usPerFire is the nodes' CPU per fire in µs; firesPerCPUSecond its inverse, the fires one
// core would carry.
func (r scaleCost) usPerFire() float64 { return usPer(r.totalCPU(), r.totalFires) }

// netUSPerFire is usPerFire less what the nodes spend with nothing due (idle ms of CPU a node
// spends a second): the fixed cost of a node, paid whatever the load, is what a small load
// on more nodes adds.
func (r scaleCost) netUSPerFire(idle float64) float64 {
	fixed := time.Duration(idle * float64(len(r.cpu)) * r.wall.Seconds() * float64(time.Millisecond))
	return usPer(r.totalCPU()-fixed, r.totalFires)
}
func (r scaleCost) firesPerCPUSecond() float64 {
	if r.totalCPU() <= 0 {
		return 0
	}
	return r.totalFires / r.totalCPU().Seconds()
}

// writer renders the nodes' writer batches per 1,000 fires and their rows: "41 (73 rows)".
func (r scaleCost) writer() string {
	batches := r.series["axe_writer_batch_rows_count"]
	if batches == 0 || r.totalFires == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f (%.0f rows)", 1000*batches/r.totalFires, r.series["axe_writer_batch_rows_sum"]/batches)
}

// renewals renders the shard renewals that failed or found shards lost, "0/0".
func (r scaleCost) renewals() string {
	return fmt.Sprintf("%.0f/%.0f", r.series[`axe_shard_renewals_total{result="error"}`], r.series[`axe_shard_renewals_total{result="lost"}`])
}

// perNode renders each node's CPU per fire and its share of the fires: "31 (34%) / 33 (33%)".
func (r scaleCost) perNode() string {
	var parts []string
	for i := range r.cpu {
		share := 0.0
		if r.totalFires > 0 {
			share = 100 * r.fires[i] / r.totalFires
		}
		parts = append(parts, fmt.Sprintf("%.0f (%.0f%%)", usPer(r.cpu[i], r.fires[i]), share))
	}
	return strings.Join(parts, " / ")
}

// scaleResult is one configuration's figures.
type scaleResult struct {
	nodes int
	where string
	idle  float64 // ms of CPU a node spends a second with nothing due

	burst      int
	createTook time.Duration
	drain      time.Duration
	burstLate  [3]int64 // p50, p99, max ms
	burstAudit receiptAudit
	burstRows  int    // successful run rows of the burst
	burstOther string // the burst's run rows by result, when not all succeeded
	burstCost  scaleCost

	cron         int
	span         time.Duration
	cronExpected int
	cronFires    int // distinct (task, fire time) run rows in the window
	cronOther    string
	cronLate     [3]int64
	cronAudit    receiptAudit
	cronCost     scaleCost
}

func (r scaleResult) burstRate() float64 { return float64(r.burst) / r.drain.Seconds() }
func (r scaleResult) cronRate() float64  { return float64(r.cronFires) / r.span.Seconds() }
func (r scaleResult) missed() int        { return r.cronExpected - r.cronFires }

func (c *scaleCluster) lateness(where string, args ...any) [3]int64 {
	c.tb.Helper()
	rows, err := c.db.Query(`SELECT dispatched_at - scheduled_at FROM task_run WHERE dispatched_at > 0 AND `+where, args...)
	if err != nil {
		c.tb.Fatal(err)
	}
	defer rows.Close()
	var late []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			c.tb.Fatal(err)
		}
		late = append(late, v)
	}
	if err := rows.Err(); err != nil {
		c.tb.Fatal(err)
	}
	slices.Sort(late)
	if len(late) == 0 {
		return [3]int64{}
	}
	return [3]int64{benchkit.Percentile(late, 0.5), benchkit.Percentile(late, 0.99), late[len(late)-1]}
}

// results counts the run rows matching where by result: "success 600, lost 2".
func (c *scaleCluster) results(where string, args ...any) (map[string]int, string) {
	c.tb.Helper()
	rows, err := c.db.Query(`SELECT result, COUNT(*) FROM task_run WHERE `+where+` GROUP BY result ORDER BY 2 DESC`, args...)
	if err != nil {
		c.tb.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	var parts []string
	for rows.Next() {
		var res string
		var n int
		if err := rows.Scan(&res, &n); err != nil {
			c.tb.Fatal(err)
		}
		out[res] = n
		parts = append(parts, fmt.Sprintf("%s %d", res, n))
	}
	if err := rows.Err(); err != nil {
		c.tb.Fatal(err)
	}
	return out, strings.Join(parts, ", ")
}

func (c *scaleCluster) count(q string, args ...any) int {
	c.tb.Helper()
	var n int
	if err := c.db.QueryRow(q, args...).Scan(&n); err != nil {
		c.tb.Fatal(err)
	}
	return n
}

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// idleCost measures a node's CPU per second while nothing is due: the lease renewals, the
// node table and the cluster reads every node pays whatever its load.
func (c *scaleCluster) idleCost(d time.Duration) float64 {
	p := c.probe()
	time.Sleep(d)
	r := p.end()
	return float64(r.totalCPU().Milliseconds()) / float64(len(c.nodes)) / r.wall.Seconds()
}

// waitBurst waits until the n burst tasks due at due have each a successful run row and
// returns how long after due that was first seen. The sink is watched first, at no cost to
// the database; the run table is polled once it has every task. When some task ends
// otherwise (lost, failed) and no row has changed for 5 s, it returns when every task first
// had an ended row, with the rows by result.
func (c *scaleCluster) waitBurst(n int, due time.Time) (time.Duration, string) {
	c.tb.Helper()
	deadline := due.Add(3*time.Minute + time.Duration(n)*time.Millisecond)
	last, lastGrew := int64(-1), time.Now()
	for {
		got := c.sink.burstCount.Load()
		if got >= int64(n) || time.Since(lastGrew) > 5*time.Second || time.Now().After(deadline) {
			break
		}
		if got != last {
			last, lastGrew = got, time.Now()
		}
		time.Sleep(2 * time.Millisecond)
	}
	var allEnded time.Time
	lastRows := ""
	for {
		var ok, ended int
		if err := c.db.QueryRow(`SELECT COALESCE(SUM(result = 'success'), 0), COUNT(DISTINCT IF(result <> 'running', task_name, NULL))
			FROM task_run WHERE task_name LIKE 'b-%'`).Scan(&ok, &ended); err != nil {
			c.tb.Fatal(err)
		}
		now := time.Now()
		if ok >= n {
			return now.Sub(due), ""
		}
		if rows := fmt.Sprint(ok, ended); ended >= n {
			if allEnded.IsZero() {
				allEnded = now
			}
			if rows != lastRows {
				lastRows, lastGrew = rows, now
			}
			if now.Sub(lastGrew) > 5*time.Second {
				_, by := c.results(`task_name LIKE 'b-%'`)
				return allEnded.Sub(due), by
			}
		}
		if now.After(deadline) {
			_, by := c.results(`task_name LIKE 'b-%'`)
			c.tb.Errorf("%s, %d node(s): %d of %d burst tasks succeeded, %d ended, by %s (run rows: %s)",
				c.where, len(c.nodes), ok, n, ended, deadline.Format(time.TimeOnly), by)
			return now.Sub(due), by
		}
		time.Sleep(scalePoll)
	}
}

// runBurst is phase 1: n one-shot tasks due at one instant.
func (c *scaleCluster) runBurst(res *scaleResult, n, limit int) {
	c.tb.Helper()
	// Lead time for the creates: about 8K tasks/s through the batch split on this machine,
	// with room to spare.
	lead := 3*time.Second + time.Duration(n)*250*time.Microsecond + c.lead
	due := time.Now().Add(lead).Truncate(time.Millisecond)
	runAt := due.UTC().Format(time.RFC3339Nano)
	key := ""
	if limit > 0 {
		key = `,"concurrency_key":"bench"`
		c.setLimit("bench", limit)
		c.tb.Logf("%s, %d node(s): every burst task under concurrency key bench, limit %d", c.where, len(c.nodes), limit)
	}
	items := make([][]byte, n)
	for i := range items {
		items[i] = []byte(fmt.Sprintf(`{"name":"b-%06d","trigger":"delay","run_at":%q,"callback":{"type":"http","url":%q},"timeout_sec":30%s}`,
			i, runAt, c.sink.url(), key))
	}
	res.burst = n
	res.createTook = c.create(items)
	if left := time.Until(due); left < 300*time.Millisecond {
		c.tb.Fatalf("%s: creating %d tasks took %s, leaving %s before they were due: the burst would start during the creates",
			c.where, n, res.createTook.Round(time.Millisecond), left.Round(time.Millisecond))
	}
	sleepUntil(due.Add(-100 * time.Millisecond))
	c.profileBurst(limit)
	p := c.probe()
	res.drain, res.burstOther = c.waitBurst(n, due)
	res.burstCost = p.end()
	res.burstRows = c.count(`SELECT COUNT(*) FROM task_run WHERE task_name LIKE 'b-%' AND result = 'success'`)
	if res.burstOther != "" {
		c.tb.Errorf("%s, %d node(s): not every burst task succeeded: run rows %s", c.where, len(c.nodes), res.burstOther)
	}
	res.burstLate = c.lateness(`task_name LIKE 'b-%'`)
	c.tb.Logf("%s, %d node(s): burst of %d created in %s (%.0f tasks/s), drained %s after its due time: %.0f recorded/s; lateness p50 %d ms, p99 %d ms, max %d ms",
		c.where, len(c.nodes), n, res.createTook.Round(time.Millisecond), float64(n)/res.createTook.Seconds(),
		res.drain.Round(time.Millisecond), res.burstRate(), res.burstLate[0], res.burstLate[1], res.burstLate[2])
}

// profileBurst takes a CPU profile of every node over the burst's first seconds, in the
// background, when AXE_BENCH_SCALE_PPROF names a directory (one file a node and burst).
func (c *scaleCluster) profileBurst(limit int) {
	dir := os.Getenv(envScalePprof)
	if dir == "" {
		return
	}
	secs, _ := strconv.Atoi(os.Getenv(envScalePprofSec))
	if secs <= 0 {
		secs = 5
	}
	stamp := time.Now().Format("150405")
	for i, n := range c.nodes {
		file := fmt.Sprintf("%s/%s-lim%d-n%d-%d.pprof", dir, stamp, limit, len(c.nodes), i)
		go profileCPU(c.tb, strings.TrimPrefix(n.url, "http://"), file, 0, time.Duration(secs)*time.Second)
	}
}

// setLimit sets the concurrency limit of key to max through the first node (which fans it out
// to the others).
func (c *scaleCluster) setLimit(key string, max int) {
	c.tb.Helper()
	body := fmt.Sprintf(`{"max":%d}`, max)
	req, err := http.NewRequest(http.MethodPut, c.nodes[0].url+"/api/v1/concurrency-limits/key/"+key, strings.NewReader(body))
	if err != nil {
		c.tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.api.Do(req)
	if err != nil {
		c.tb.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.tb.Fatalf("%s: PUT the limit of key %s: %d %s", c.where, key, resp.StatusCode, text)
	}
}

// cronItems are m tasks that fire every second.
func cronItems(prefix string, m int, url string) [][]byte {
	items := make([][]byte, m)
	for i := range items {
		items[i] = []byte(fmt.Sprintf(`{"name":"%s%05d","trigger":"cron","cron":"* * * * * ?","cron_dialect":"quartz","callback":{"type":"http","url":%q},"timeout_sec":30}`,
			prefix, i, url))
	}
	return items
}

// runCron is phase 2: m tasks every second over span.
func (c *scaleCluster) runCron(res *scaleResult, m int, span time.Duration) {
	c.tb.Helper()
	took := c.create(cronItems("c-", m, c.sink.url()))
	// The window starts on a whole second, two seconds after the creates, so that every task
	// fires in all of it.
	t0 := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	t1 := t0.Add(span)
	res.cron, res.span = m, span
	res.cronExpected = m * int(span/time.Second)
	sleepUntil(t0.Add(-20 * time.Millisecond))
	p := c.probe()
	sleepUntil(t1.Add(-20 * time.Millisecond))
	res.cronCost = p.end()
	from, to := t0.UnixMilli(), t1.UnixMilli()
	// Wait until the window's runs have ended and their rows stopped coming.
	deadline := time.Now().Add(time.Minute)
	last := -1
	for {
		time.Sleep(time.Second)
		n := c.count(`SELECT COUNT(*) FROM task_run WHERE task_name LIKE 'c-%' AND scheduled_at >= ? AND scheduled_at < ? AND result <> 'running'`, from, to)
		if n == last || time.Now().After(deadline) {
			break
		}
		last = n
	}
	res.cronFires = c.count(`SELECT COUNT(DISTINCT task_name, scheduled_at) FROM task_run WHERE task_name LIKE 'c-%' AND scheduled_at >= ? AND scheduled_at < ?`, from, to)
	by, text := c.results(`task_name LIKE 'c-%' AND scheduled_at >= ? AND scheduled_at < ?`, from, to)
	if len(by) != 1 || by["success"] == 0 {
		res.cronOther = text
	}
	res.cronLate = c.lateness(`task_name LIKE 'c-%' AND scheduled_at >= ? AND scheduled_at < ?`, from, to)
	res.cronAudit = auditReceipts(c.sink.receipts("c-", from, to))
	c.tb.Logf("%s, %d node(s): %d every-second tasks created in %s; over %s: %d of %d fires recorded (%.0f/s, %d missed), run rows %s; lateness p50 %d ms, p99 %d ms, max %d ms; sink: %d receipts, %d duplicate tickets, %d duplicate fires",
		c.where, len(c.nodes), m, took.Round(time.Millisecond), span, res.cronFires, res.cronExpected, res.cronRate(), res.missed(), text,
		res.cronLate[0], res.cronLate[1], res.cronLate[2], res.cronAudit.receipts, res.cronAudit.dupTickets, res.cronAudit.dupFires)
}

// runScaleConfig runs phases 1 and 2 on one configuration.
func runScaleConfig(b *testing.B, c *scaleCluster, burst, cron int, span time.Duration) scaleResult {
	b.Helper()
	res := scaleResult{nodes: len(c.nodes), where: c.where}
	c.boot()
	res.idle = c.idleCost(3 * time.Second)
	lim, _ := strconv.Atoi(os.Getenv(envScaleLimit))
	c.runBurst(&res, burst, lim)
	c.runCron(&res, cron, span)
	// The burst's receipts are audited last, so a late duplicate has had the cron phase to
	// arrive.
	res.burstAudit = auditReceipts(c.sink.receipts("b-", 0, 0))
	b.Logf("%s, %d node(s): burst sink: %d receipts of %d tasks (%d never received), %d duplicate tickets, %d duplicate fires; %d successful run rows",
		c.where, len(c.nodes), res.burstAudit.receipts, res.burst, res.burst-res.burstAudit.tasks, res.burstAudit.dupTickets,
		res.burstAudit.dupFires, res.burstRows)
	return res
}

// buildScaleAxe returns the axe binary to run: AXE_BENCH_SCALE_BIN, or this tree's, built.
func buildScaleAxe(b *testing.B, dir string) string {
	b.Helper()
	if bin := os.Getenv(envScaleBin); bin != "" {
		return bin
	}
	bin := filepath.Join(dir, "axe")
	build := exec.Command("go", "build", "-o", bin, "github.com/axe-sched/axe/cmd/axe")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("cannot build axe: %v\n%s", err, out)
	}
	return bin
}

// treeCommit names the commit of the tree the benchmark was built from, with "+changes"
// when files differ from it.
func treeCommit() string {
	head, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown commit"
	}
	out := strings.TrimSpace(string(head))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		out += "+changes"
	}
	return out
}

// scaleNodeCounts reads AXE_BENCH_SCALE_NODES (default 1,2,3).
func scaleNodeCounts(b *testing.B) []int {
	b.Helper()
	s := os.Getenv(envScaleNodes)
	if s == "" {
		return []int{1, 2, 3}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 16 {
			b.Fatalf("%s=%q: want node counts such as 1,2,3", envScaleNodes, s)
		}
		out = append(out, n)
	}
	return out
}

// logSummary counts the WARN and ERROR lines of the nodes' logs by configuration and
// message.
func logSummary(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(files)
	var sb strings.Builder
	for len(files) > 0 {
		config, _, _ := strings.Cut(filepath.Base(files[0]), "-node-")
		var group []string
		for len(files) > 0 && strings.HasPrefix(filepath.Base(files[0]), config+"-node-") {
			group, files = append(group, files[0]), files[1:]
		}
		counts := map[string]int{}
		for _, f := range group {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(data), "\n") {
				var l struct {
					Level  string `json:"level"`
					Msg    string `json:"msg"`
					Reason string `json:"reason"`
					Err    string `json:"error"`
				}
				if json.Unmarshal([]byte(line), &l) != nil {
					if strings.Contains(line, "panic") || strings.Contains(line, "fatal error") {
						counts["(not JSON) "+line]++
					}
					continue
				}
				if l.Level == "WARN" || l.Level == "ERROR" {
					key := l.Level + " " + l.Msg
					if l.Reason != "" {
						key += " (" + l.Reason + ")"
					}
					if l.Err != "" {
						key += ": " + l.Err
					}
					if len(key) > 240 {
						key = key[:240] + "…"
					}
					counts[key]++
				}
			}
		}
		keys := make([]string, 0, len(counts))
		for k := range counts {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			return counts[keys[i]] > counts[keys[j]] || (counts[keys[i]] == counts[keys[j]] && keys[i] < keys[j])
		})
		fmt.Fprintf(&sb, "%s:\n", config)
		if len(keys) == 0 {
			sb.WriteString("  none\n")
		}
		for _, k := range keys {
			fmt.Fprintf(&sb, "  %6d× %s\n", counts[k], k)
		}
	}
	return sb.String()
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func ratio(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func BenchmarkScaleOut(b *testing.B) {
	server := serverDSN(b)
	burst := sizeParam(b, noFlag, envScaleBurst, 20000)
	cron := sizeParam(b, noFlag, envScaleCron, 2000)
	span := durationParam(b, noFlag, envScaleSpan, 30*time.Second)
	if span < time.Second || span%time.Second != 0 {
		b.Fatalf("%s=%s: want whole seconds", envScaleSpan, span)
	}
	kills := 0 // AXE_BENCH_SCALE_KILLS=0 skips the takeover phase
	if os.Getenv(envScaleKills) != "0" {
		kills = sizeParam(b, noFlag, envScaleKills, 10)
	}
	killCron := sizeParam(b, noFlag, envScaleKillCron, 300)
	counts := scaleNodeCounts(b)
	// The nodes' logs stay when the run fails, or when AXE_BENCH_SCALE_KEEP_LOGS=1.
	dir, err := os.MkdirTemp("", "axe-scaleout-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if b.Failed() || os.Getenv(envScaleKeepLogs) == "1" {
			b.Logf("the nodes' logs are in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	bin := buildScaleAxe(b, dir)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info := "unknown server"
	if db, err := benchkit.OpenSQL(server, 1); err == nil {
		if si, err := benchkit.ReadServerInfo(ctx, db); err == nil {
			info = si.String()
		}
		_ = db.Close()
	}
	b.Logf("scale-out: axe %s (tree at %s); %s; burst %d, cron %d every second for %s, %d kills under %d cron tasks; load average %s",
		bin, treeCommit(), info, burst, cron, span, kills, killCron, benchkit.LoadAverage())

	b.ResetTimer()
	var results []scaleResult
	singleServer := func(n int, where string) (*scaleCluster, func()) {
		return singleServerCluster(b, server, bin, dir, n, where)
	}
	for _, n := range counts {
		c, done := singleServer(n, "MariaDB")
		results = append(results, runScaleConfig(b, c, burst, cron, span))
		done()
	}

	var galera *scaleResult
	if os.Getenv(envScaleGalera) == "1" {
		r := runScaleGalera(b, bin, dir, burst, cron, span)
		galera = &r
	}

	var to scaleTakeover
	if kills > 0 {
		c, done := singleServer(3, "MariaDB takeover")
		to = runScaleTakeover(b, c, kills, killCron)
		done()
	}
	b.StopTimer()

	reportScale(b, results, galera, to, kills)
	b.Logf("WARN and ERROR lines of the nodes' logs, by message:\n%s", logSummary(dir))
	b.Logf("load average at the end %s", benchkit.LoadAverage())
}

// singleServerCluster is n nodes on a fresh database of the MariaDB server at server; done
// stops them and drops the database.
func singleServerCluster(b *testing.B, server, bin, dir string, n int, where string) (c *scaleCluster, done func()) {
	b.Helper()
	dsn, drop := scratchDB(b, server)
	dbPID := 0
	if db, err := benchkit.OpenSQL(dsn, 1); err == nil {
		pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
		dbPID = benchkit.ServerPID(pctx, db)
		pcancel()
		_ = db.Close()
	}
	if dbPID == 0 {
		b.Logf("cannot find the MariaDB server's process: no DB CPU figures")
	}
	var pids []int
	if dbPID > 0 {
		pids = []int{dbPID}
	}
	dsns := make([]string, n)
	for i := range dsns {
		dsns[i] = dsn
	}
	c = newScaleCluster(b, bin, dir, where, dsns, dsn, pids)
	return c, func() { c.close(); drop() }
}

// runScaleGalera is phase 5: phases 1 and 2 with 3 nodes on a three-node Galera cluster.
func runScaleGalera(b *testing.B, bin, dir string, burst, cron int, span time.Duration) scaleResult {
	b.Helper()
	gc := galeratest.Start(b)
	name := fmt.Sprintf("axe_b_%016x", rand.Uint64())
	if err := gc.Exec("CREATE DATABASE " + name + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := gc.Exec("DROP DATABASE IF EXISTS " + name); err != nil {
			b.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := gc.WaitSynced(ctx); err != nil {
		b.Fatal(err)
	}
	dsns := []string{
		"mysql:" + gc.ServerDSN(0, 1, 2) + name,
		"mysql:" + gc.ServerDSN(1, 2, 0) + name,
		"mysql:" + gc.ServerDSN(2, 0, 1) + name,
	}
	// The audit reads through the first database node with causal reads, so it sees what the
	// others committed.
	audit := "mysql:" + gc.ServerDSN(0) + name + "?wsrep_sync_wait=1"
	var pids []int
	for i := range galeratest.Size {
		pids = append(pids, gc.Node(i).Pid())
	}
	c := newScaleCluster(b, bin, dir, "Galera", dsns, audit, pids)
	defer c.close()
	return runScaleConfig(b, c, burst, cron, span)
}

// scaleTakeover is phase 4's figures.
type scaleTakeover struct {
	takeovers, afterExpiry, rebalances []float64
	audit                              receiptAudit
	results                            string
	expected, fires                    int
	late                               [3]int64
	// missing counts the fires with no run row: in the dead node's shards between its kill
	// and the takeover (plus a second), during a rebalance after a restart, or elsewhere.
	missingTakeover, missingRebalance, missingElsewhere int
	elsewhere                                           []string // a few of the last kind
}

// scaleKill is one kill of phase 4 and what followed.
type scaleKill struct {
	shards                    map[int]bool // the victim's shards at the kill
	kill, held, restart, even time.Time
}

// classifyMissing finds the fires of the m every-second tasks named prefix… in [from, to)
// that have no run row, and says when each fell.
func (c *scaleCluster) classifyMissing(out *scaleTakeover, prefix string, m int, from, to time.Time, kills []scaleKill) {
	c.tb.Helper()
	rows, err := c.db.Query(`SELECT task_name, scheduled_at FROM task_run WHERE task_name LIKE ? AND scheduled_at >= ? AND scheduled_at < ?`,
		prefix+"%", from.UnixMilli(), to.UnixMilli())
	if err != nil {
		c.tb.Fatal(err)
	}
	type fire struct {
		task string
		at   int64
	}
	have := map[fire]bool{}
	for rows.Next() {
		var f fire
		if err := rows.Scan(&f.task, &f.at); err != nil {
			c.tb.Fatal(err)
		}
		have[f] = true
	}
	if err := rows.Err(); err != nil {
		c.tb.Fatal(err)
	}
	_ = rows.Close()
	for i := range m {
		task := fmt.Sprintf("%s%05d", prefix, i)
		sh := model.ShardOf(task)
		for at := from; at.Before(to); at = at.Add(time.Second) {
			if have[fire{task, at.UnixMilli()}] {
				continue
			}
			kind := "elsewhere"
			for _, k := range kills {
				switch {
				case k.shards[sh] && !at.Before(k.kill.Add(-time.Second)) && at.Before(k.held.Add(time.Second)):
					kind = "takeover"
				case kind == "elsewhere" && !at.Before(k.restart) && at.Before(k.even.Add(time.Second)):
					kind = "rebalance"
				}
			}
			switch kind {
			case "takeover":
				out.missingTakeover++
			case "rebalance":
				out.missingRebalance++
			default:
				out.missingElsewhere++
				if len(out.elsewhere) < 5 {
					out.elsewhere = append(out.elsewhere, fmt.Sprintf("%s at %s (shard %d)", task, at.Format("15:04:05"), sh))
				}
			}
		}
	}
}

// runScaleTakeover is phase 4: kill -9 a random node at a random moment, kills times, under
// m every-second cron tasks.
func runScaleTakeover(b *testing.B, c *scaleCluster, kills, m int) scaleTakeover {
	b.Helper()
	var out scaleTakeover
	c.boot()
	c.create(cronItems("k-", m, c.sink.url()))
	time.Sleep(3 * time.Second)
	from := time.Now().Truncate(time.Second).Add(time.Second)
	sleepUntil(from)
	var events []scaleKill
	for k := range kills {
		// A random moment of the victim's renewal cycle (renew 1 s).
		time.Sleep(500*time.Millisecond + rand.N(2*time.Second))
		i := rand.N(len(c.nodes))
		victim := c.nodes[i]
		survivors := slices.Delete(slices.Clone(c.nodes), i, i+1)
		via := survivors[rand.N(len(survivors))]
		// How long the victim's leases have left, by the database's clock.
		left := scaleTTL
		held := 0
		ev := scaleKill{shards: map[int]bool{}}
		if v, ok := c.view(via); ok {
			for _, s := range v.Shards {
				if s.Held && s.Holder == victim.id {
					held++
					ev.shards[s.Shard] = true
					left = min(left, time.Duration(s.RemainingMS)*time.Millisecond)
				}
			}
		}
		killed := time.Now()
		victim.kill(b)
		c.waitHeld(survivors, via, false, 30*time.Second)
		took := time.Since(killed)
		out.takeovers = append(out.takeovers, took.Seconds())
		out.afterExpiry = append(out.afterExpiry, (took - left).Seconds())
		back := time.Now()
		victim.start(b)
		rb := c.waitHeld(c.nodes, via, true, time.Minute)
		out.rebalances = append(out.rebalances, time.Since(back).Seconds())
		ev.kill, ev.held, ev.restart, ev.even = killed, killed.Add(took), back, time.Now()
		events = append(events, ev)
		b.Logf("kill %d of %s (%d shards, leases %s from running out): held by the survivors %s after the kill (%s after the leases ran out); shares even %s after the restart (%s after it listened)",
			k+1, victim.id, held, left.Round(time.Millisecond), took.Round(time.Millisecond), (took - left).Round(time.Millisecond),
			time.Since(back).Round(time.Millisecond), rb.Round(time.Millisecond))
	}
	to := time.Now().Truncate(time.Second)
	// Let the last fires end and the receipts come in before the audit.
	time.Sleep(3 * time.Second)
	out.audit = auditReceipts(c.sink.receipts("k-", from.UnixMilli(), to.UnixMilli()))
	_, out.results = c.results(`task_name LIKE 'k-%' AND scheduled_at >= ? AND scheduled_at < ?`, from.UnixMilli(), to.UnixMilli())
	out.fires = c.count(`SELECT COUNT(DISTINCT task_name, scheduled_at) FROM task_run WHERE task_name LIKE 'k-%' AND scheduled_at >= ? AND scheduled_at < ?`,
		from.UnixMilli(), to.UnixMilli())
	out.expected = m * int(to.Sub(from)/time.Second)
	out.late = c.lateness(`task_name LIKE 'k-%' AND scheduled_at >= ? AND scheduled_at < ?`, from.UnixMilli(), to.UnixMilli())
	c.classifyMissing(&out, "k-", m, from, to, events)
	return out
}

func reportScale(b *testing.B, results []scaleResult, galera *scaleResult, to scaleTakeover, kills int) {
	b.Helper()
	if len(results) == 0 {
		return
	}
	base := results[0]
	var three *scaleResult
	for i := range results {
		if results[i].nodes == 3 {
			three = &results[i]
		}
	}
	rows := results
	if galera != nil {
		rows = append(slices.Clone(results), *galera)
	}
	bt := benchkit.NewTable("store", "nodes", "drain", "recorded/s", "× 1 node", "lateness p50/p99/max ms", "dup tickets/fires", "never received",
		"CPU µs/fire per node (share)", "total µs/fire", "× 1 node", "net of idle", "× 1 node", "fires/CPU-s", "DB µs/fire", "idle ms/s a node", "writer batches/1K fires", "renewals failed/lost", "other results")
	ct := benchkit.NewTable("store", "nodes", "fires/s", "expected/s", "missed", "lateness p50/p99/max ms", "dup tickets/fires",
		"CPU µs/fire per node (share)", "total µs/fire", "× 1 node", "net of idle", "× 1 node", "fires/CPU-s", "DB µs/fire", "writer batches/1K fires", "renewals failed/lost", "other results")
	for _, r := range rows {
		ref := base
		if r.where == "Galera" && three != nil {
			ref = *three
		}
		bt.Row(r.where, strconv.Itoa(r.nodes), r.drain.Round(time.Millisecond).String(), fmt.Sprintf("%.0f", r.burstRate()),
			ratio(r.burstRate(), ref.burstRate()),
			fmt.Sprintf("%d/%d/%d", r.burstLate[0], r.burstLate[1], r.burstLate[2]),
			fmt.Sprintf("%d/%d", r.burstAudit.dupTickets, r.burstAudit.dupFires), strconv.Itoa(r.burst-r.burstAudit.tasks),
			r.burstCost.perNode(), fmt.Sprintf("%.1f", r.burstCost.usPerFire()), ratio(r.burstCost.usPerFire(), ref.burstCost.usPerFire()),
			fmt.Sprintf("%.1f", r.burstCost.netUSPerFire(r.idle)), ratio(r.burstCost.netUSPerFire(r.idle), ref.burstCost.netUSPerFire(ref.idle)),
			fmt.Sprintf("%.0f", r.burstCost.firesPerCPUSecond()), fmt.Sprintf("%.1f", usPer(r.burstCost.db, r.burstCost.totalFires)),
			fmt.Sprintf("%.1f", r.idle), r.burstCost.writer(), r.burstCost.renewals(), orDash(r.burstOther))
		other := r.cronOther
		if other == "" {
			other = "—"
		}
		ct.Row(r.where, strconv.Itoa(r.nodes), fmt.Sprintf("%.0f", r.cronRate()), strconv.Itoa(r.cron), strconv.Itoa(r.missed()),
			fmt.Sprintf("%d/%d/%d", r.cronLate[0], r.cronLate[1], r.cronLate[2]),
			fmt.Sprintf("%d/%d", r.cronAudit.dupTickets, r.cronAudit.dupFires),
			r.cronCost.perNode(), fmt.Sprintf("%.1f", r.cronCost.usPerFire()), ratio(r.cronCost.usPerFire(), ref.cronCost.usPerFire()),
			fmt.Sprintf("%.1f", r.cronCost.netUSPerFire(r.idle)), ratio(r.cronCost.netUSPerFire(r.idle), ref.cronCost.netUSPerFire(ref.idle)),
			fmt.Sprintf("%.0f", r.cronCost.firesPerCPUSecond()), fmt.Sprintf("%.1f", usPer(r.cronCost.db, r.cronCost.totalFires)),
			r.cronCost.writer(), r.cronCost.renewals(), other)

		sfx := fmt.Sprintf("_%dnode", r.nodes)
		if r.where == "Galera" {
			sfx = "_galera_3node"
		}
		b.ReportMetric(r.burstRate(), "burst_rec/s"+sfx)
		b.ReportMetric(r.drain.Seconds(), "burst_drain_s"+sfx)
		b.ReportMetric(float64(r.burstLate[1]), "burst_p99_ms"+sfx)
		b.ReportMetric(float64(r.burstAudit.dupTickets+r.burstAudit.dupFires), "burst_dups"+sfx)
		b.ReportMetric(r.burstCost.usPerFire(), "burst_cpu_us/fire"+sfx)
		b.ReportMetric(r.burstCost.firesPerCPUSecond(), "burst_fires/cpu_s"+sfx)
		b.ReportMetric(r.cronRate(), "cron_fires/s"+sfx)
		b.ReportMetric(float64(r.cronLate[0]), "cron_p50_ms"+sfx)
		b.ReportMetric(float64(r.cronLate[1]), "cron_p99_ms"+sfx)
		b.ReportMetric(float64(r.missed()), "cron_missed"+sfx)
		b.ReportMetric(float64(r.cronAudit.dupTickets+r.cronAudit.dupFires), "cron_dups"+sfx)
		b.ReportMetric(r.cronCost.usPerFire(), "cron_cpu_us/fire"+sfx)
		b.ReportMetric(r.cronCost.firesPerCPUSecond(), "cron_fires/cpu_s"+sfx)
		if r.where == "Galera" && three != nil {
			b.ReportMetric(r.burstRate()/three.burstRate(), "galera_burst_rec/s_ratio")
			b.ReportMetric(r.burstCost.usPerFire()/three.burstCost.usPerFire(), "galera_burst_cpu_ratio")
			b.ReportMetric(r.cronCost.usPerFire()/three.cronCost.usPerFire(), "galera_cron_cpu_ratio")
		} else if r.nodes != base.nodes {
			b.ReportMetric(r.burstCost.usPerFire()/base.burstCost.usPerFire(), "burst_cpu_ratio"+sfx)
			b.ReportMetric(r.cronCost.usPerFire()/base.cronCost.usPerFire(), "cron_cpu_ratio"+sfx)
		}
	}
	text := fmt.Sprintf("scale-out: burst of %d one-shot tasks due at one instant (ratios to the %d-node run; Galera's to the 3-node MariaDB run)\n%s\n"+
		"every-second cron, %d tasks over %s\n%s",
		base.burst, base.nodes, bt.String(), base.cron, base.span, ct.String())
	if kills > 0 {
		tk, ae, rb := benchkit.Summarize(to.takeovers), benchkit.Summarize(to.afterExpiry), benchkit.Summarize(to.rebalances)
		text += fmt.Sprintf("\ntakeover, 3 nodes on MariaDB, TTL %s, renew %s, %d kills under every-second cron load:\n"+
			"  from the kill until the survivors hold every shard: median %.2f s, max %.2f s (max − TTL %+.2f s; target ≤ TTL + 1 s)\n"+
			"  of which after the victim's leases ran out: median %.3f s, max %.3f s\n"+
			"  rebalance from the restart until the shares are even: median %.2f s, max %.2f s\n"+
			"  sink over the series: %d receipts, %d duplicate tickets, %d duplicate fires, %d at an epoch below one the shard had sent\n"+
			"  run rows: %d distinct fires of %d expected; results %s; lateness p50/p99/max %d/%d/%d ms\n"+
			"  fires with no run row: %d in the dead node's shards from a second before its kill to a second after the takeover, %d during a rebalance, %d elsewhere %v\n",
			scaleTTL, scaleRenew, kills, tk.Median, tk.Max, tk.Max-scaleTTL.Seconds(), ae.Median, ae.Max, rb.Median, rb.Max,
			to.audit.receipts, to.audit.dupTickets, to.audit.dupFires, to.audit.epochsAback,
			to.fires, to.expected, to.results, to.late[0], to.late[1], to.late[2],
			to.missingTakeover, to.missingRebalance, to.missingElsewhere, to.elsewhere)
		b.ReportMetric(tk.Median, "takeover_median_s")
		b.ReportMetric(tk.Max, "takeover_max_s")
		b.ReportMetric(ae.Max, "takeover_after_expiry_max_s")
		b.ReportMetric(rb.Median, "rebalance_median_s")
		b.ReportMetric(rb.Max, "rebalance_max_s")
		b.ReportMetric(float64(to.audit.dupTickets), "takeover_dup_tickets")
		b.ReportMetric(float64(to.audit.dupFires), "takeover_dup_fires")
		b.ReportMetric(float64(to.audit.epochsAback), "takeover_epochs_aback")
		b.ReportMetric(float64(to.expected-to.fires), "takeover_missed_fires")
	}
	summarize(b, "%s", text)
}

// Knobs of BenchmarkScaleOutLimit.
const (
	envScaleLimitMax     = "AXE_BENCH_SCALE_LIMIT_MAX"     // the burst's limit (default the burst's size)
	envScaleLimitRounds  = "AXE_BENCH_SCALE_LIMIT_ROUNDS"  // bursts with and without, each (default 2)
	envScaleHandoff      = "AXE_BENCH_SCALE_HANDOFF"       // tasks of the hand-off phase (default 2000)
	envScaleHandoffLimit = "AXE_BENCH_SCALE_HANDOFF_LIMIT" // its limit (default 20)
	envScaleLimitLead    = "AXE_BENCH_SCALE_LIMIT_LEAD"    // added to the creates' lead time (default 10s)
)

// handoffWork is how long the sink works on a call of the hand-off phase.
const handoffWork = 20 * time.Millisecond

// handoff is what runHandoff measured.
type handoff struct {
	calls int
	drain time.Duration
	gaps  []int64 // µs from a slot freeing at the sink to the next waiting fire's arrival
	over  int     // calls that arrived while the limit's every slot was still worked on
}

// runHandoff measures how soon a fire waiting for a concurrency slot starts once a slot frees:
// n one-shot tasks under key handoff limited to lim, all due at one instant, each worked on
// for handoffWork by the sink. The sink's ends and arrivals are paired in order: with every
// slot full and fires waiting, the k-th call to end frees the slot the (lim+k)-th call to
// arrive takes, so arrival[lim+k] − end[k] is the hand-off (end, its record, the slot given
// back, another fire's claim, its fire record, the call), and a negative one a call that
// came while lim were still worked on.
func (c *scaleCluster) runHandoff(n, lim int) handoff {
	c.tb.Helper()
	c.setLimit("handoff", lim)
	before := len(c.sink.held())
	due := time.Now().Add(3*time.Second + time.Duration(n)*250*time.Microsecond + c.lead).Truncate(time.Millisecond)
	runAt := due.UTC().Format(time.RFC3339Nano)
	url := strings.TrimSuffix(c.sink.url(), "/hook") + fmt.Sprintf("/hold?ms=%d", handoffWork.Milliseconds())
	items := make([][]byte, n)
	for i := range items {
		items[i] = []byte(fmt.Sprintf(`{"name":"h-%06d","trigger":"delay","run_at":%q,"callback":{"type":"http","url":%q},"timeout_sec":30,"concurrency_key":"handoff"}`,
			i, runAt, url))
	}
	c.create(items)
	deadline := due.Add(3*time.Minute + time.Duration(n)*time.Millisecond)
	for len(c.sink.held())-before < n {
		if time.Now().After(deadline) {
			c.tb.Fatalf("%s, %d node(s): %d of %d hand-off calls by %s", c.where, len(c.nodes), len(c.sink.held())-before, n, deadline.Format(time.TimeOnly))
		}
		time.Sleep(scalePoll)
	}
	calls := c.sink.held()[before:]
	ats := make([]int64, len(calls))
	ends := make([]int64, len(calls))
	last := int64(0)
	for i, h := range calls {
		ats[i], ends[i] = h.at, h.end
		last = max(last, h.end)
	}
	slices.Sort(ats)
	slices.Sort(ends)
	out := handoff{calls: len(calls), drain: time.Duration(last - due.UnixNano())}
	for k := 0; lim+k < len(ats); k++ {
		g := ats[lim+k] - ends[k]
		if g < 0 {
			out.over++
		}
		out.gaps = append(out.gaps, g/1000)
	}
	slices.Sort(out.gaps)
	c.tb.Logf("%s, %d node(s): hand-off of %d calls under a limit of %d (%s each): drained %s after due; from a slot freeing to the next call p50 %.1f ms, p99 %.1f ms; %d calls over the limit",
		c.where, len(c.nodes), n, lim, handoffWork, out.drain.Round(time.Millisecond),
		float64(benchkit.Percentile(out.gaps, 0.5))/1000, float64(benchkit.Percentile(out.gaps, 0.99))/1000, out.over)
	return out
}

// limitRound is one burst of BenchmarkScaleOutLimit.
type limitRound struct {
	nodes   int
	limited bool
	res     scaleResult
	load    string
}

// BenchmarkScaleOutLimit is what a concurrency limit costs a sharded cluster (issue 46): the
// burst of phase 1 (20,000 one-shot tasks due at one instant) with every task under one
// concurrency key of a generous limit (the burst's size: never full), against the same
// burst without, on 1 and 3 nodes; the bursts alternate without, with, with, without … (a fresh database each), so
// that a machine whose load drifts weighs on both alike, and the figure is the ratio of their
// median drain rates. After each limited burst, on the same nodes, the hand-off phase
// (runHandoff): how soon a waiting fire starts after a slot frees.
//
//	AXE_TEST_MYSQL_DSN='root:@tcp(127.0.0.1:3306)/' \
//	  go test -run '^$' -bench ScaleOutLimit -benchtime 1x -timeout 60m -v ./bench/
//
// Knobs: AXE_BENCH_SCALE_BURST (2e4), AXE_BENCH_SCALE_NODES (1,3), AXE_BENCH_SCALE_LIMIT_MAX
// (the burst's size), AXE_BENCH_SCALE_LIMIT_ROUNDS (2 bursts each way), AXE_BENCH_SCALE_HANDOFF (2000
// tasks), AXE_BENCH_SCALE_HANDOFF_LIMIT (20), AXE_BENCH_SCALE_LIMIT_LEAD (10s more for the
// creates before the burst is due, on a loaded machine), AXE_BENCH_SCALE_BIN,
// AXE_BENCH_SCALE_KEEP_LOGS.
func BenchmarkScaleOutLimit(b *testing.B) {
	server := serverDSN(b)
	burst := sizeParam(b, noFlag, envScaleBurst, 20000)
	limit := sizeParam(b, noFlag, envScaleLimitMax, burst) // never full: the mechanism's cost
	rounds := sizeParam(b, noFlag, envScaleLimitRounds, 2)
	hn := sizeParam(b, noFlag, envScaleHandoff, 2000)
	hlim := sizeParam(b, noFlag, envScaleHandoffLimit, 20)
	lead := durationParam(b, noFlag, envScaleLimitLead, 10*time.Second)
	counts := []int{1, 3}
	if os.Getenv(envScaleNodes) != "" {
		counts = scaleNodeCounts(b)
	}
	dir, err := os.MkdirTemp("", "axe-scaleout-limit-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if b.Failed() || os.Getenv(envScaleKeepLogs) == "1" {
			b.Logf("the nodes' logs are in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	bin := buildScaleAxe(b, dir)
	b.Logf("scale-out limit: axe %s (tree at %s); burst %d, limit %d, %d bursts each way; hand-off %d tasks under a limit of %d; load average %s",
		bin, treeCommit(), burst, limit, rounds, hn, hlim, benchkit.LoadAverage())

	b.ResetTimer()
	var out []limitRound
	handoffs := map[int][]handoff{}
	for _, n := range counts {
		for r := range 2 * rounds {
			limited := r%4 == 1 || r%4 == 2 // without, with, with, without, …
			where := "MariaDB"
			if limited {
				where = "MariaDB limited"
			}
			c, done := singleServerCluster(b, server, bin, dir, n, where)
			c.lead = lead
			c.boot()
			load := benchkit.LoadAverage()
			res := scaleResult{nodes: n, where: where}
			lim := 0
			if limited {
				lim = limit
			}
			c.runBurst(&res, burst, lim)
			res.burstAudit = auditReceipts(c.sink.receipts("b-", 0, 0))
			if a := res.burstAudit; a.tasks != burst || a.dupTickets > 0 || a.dupFires > 0 {
				b.Errorf("%s, %d node(s): burst sink: %d of %d tasks, %d duplicate tickets, %d duplicate fires", where, n, a.tasks, burst, a.dupTickets, a.dupFires)
			}
			out = append(out, limitRound{nodes: n, limited: limited, res: res, load: load})
			if limited {
				h := c.runHandoff(hn, hlim)
				if h.over > 0 {
					b.Errorf("%s, %d node(s): %d hand-off calls arrived while the limit's %d slots were all worked on", where, n, h.over, hlim)
				}
				handoffs[n] = append(handoffs[n], h)
			}
			done()
		}
	}
	b.StopTimer()

	var rows strings.Builder
	rows.WriteString("| nodes | drains without (recorded/s) | drains with a limit of " + strconv.Itoa(limit) + " (recorded/s) | median with ÷ without | hand-off p50 / p99 | load average at each burst | CPU a fire without / with: axe, MariaDB (µs, medians) |\n|---|---|---|---|---|---|---|\n")
	for _, n := range counts {
		var with, without []float64
		var cpuWith, cpuWithout, dbWith, dbWithout []float64 // µs a fire
		var dw, dwo, loads []string
		for _, r := range out {
			if r.nodes != n {
				continue
			}
			d := fmt.Sprintf("%.2f s (%.0f)", r.res.drain.Seconds(), r.res.burstRate())
			loads = append(loads, strings.Fields(r.load + " -")[0])
			cost := r.res.burstCost
			if r.limited {
				with = append(with, r.res.burstRate())
				dw = append(dw, d)
				cpuWith = append(cpuWith, cost.usPerFire())
				dbWith = append(dbWith, usPer(cost.db, cost.totalFires))
			} else {
				without = append(without, r.res.burstRate())
				dwo = append(dwo, d)
				cpuWithout = append(cpuWithout, cost.usPerFire())
				dbWithout = append(dbWithout, usPer(cost.db, cost.totalFires))
			}
		}
		var gaps []int64
		for _, h := range handoffs[n] {
			gaps = append(gaps, h.gaps...)
		}
		slices.Sort(gaps)
		ratioWith := medianF(with) / medianF(without)
		fmt.Fprintf(&rows, "| %d | %s | %s | %.2f× (cost %.0f%%) | %.1f / %.1f ms | %s | %.0f, %.0f / %.0f, %.0f |\n", n, strings.Join(dwo, ", "), strings.Join(dw, ", "),
			ratioWith, 100*(1-ratioWith), float64(benchkit.Percentile(gaps, 0.5))/1000, float64(benchkit.Percentile(gaps, 0.99))/1000, strings.Join(loads, ", "),
			medianF(cpuWithout), medianF(dbWithout), medianF(cpuWith), medianF(dbWith))
	}
	b.Logf("concurrency limit on a burst of %d, alternating runs:\n%s", burst, rows.String())
	b.Logf("WARN and ERROR lines of the nodes' logs, by message:\n%s", logSummary(dir))
	b.Logf("load average at the end %s", benchkit.LoadAverage())
}

// medianF is the median of xs (0 for none).
func medianF(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
