package bench

// B6: the write path (docs/bulk.md). Single creates through POST /api/v1/tasks from 64
// concurrent clients, on two axe binaries in the same run (the build before group-committed
// creates, and this one), beside one autocommitting connection inserting the same rows; and
// batch creates through POST /api/v1/tasks/batch beside their ceiling, a plain multi-row
// INSERT of the same rows.
//
//	go build -o /tmp/axe-old ./cmd/axe   # at the commit before
//	go build -o /tmp/axe-new ./cmd/axe
//	AXE_TEST_MYSQL_DSN='root:@tcp(127.0.0.1:3306)/' \
//	AXE_BENCH_CREATE_BINS=old=/tmp/axe-old,new=/tmp/axe-new \
//	  go test ./bench/ -run '^$' -bench BenchmarkCreates -benchtime 1x -v
//
// AXE_BENCH_CREATE_CLIENT=fasthttp runs the 64 clients on fasthttp instead of net/http.

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/bench/internal/benchkit"
)

const (
	envCreateBins  = "AXE_BENCH_CREATE_BINS"   // name=path,… of axe binaries to compare
	envCreateSize  = "AXE_BENCH_CREATE_SIZE"   // single creates per run (default 2e4)
	envBatchSize   = "AXE_BENCH_BATCH_SIZE"    // tasks per batch run (default 1e5)
	envCreateRound = "AXE_BENCH_CREATE_ROUNDS" // A/B rounds (default 2)
	// envCreateProfile names a directory: each 64-client run writes a CPU profile of the
	// daemon there (<bin>-r<round>-cpu.pprof), taken over the middle of the load.
	envCreateProfile = "AXE_BENCH_CREATE_PROFILE"
	// envCreateSingleOnly set to 1 runs the single creates and the autocommit baseline
	// only, without the batch and ceiling runs.
	envCreateSingleOnly = "AXE_BENCH_CREATE_SINGLE_ONLY"
	// envCreateClient picks the 64 clients' HTTP stack: net/http (the default) or fasthttp,
	// whose requests cost the load generator about a third of the CPU. The clients share
	// the two cores with the daemon and the database, so a lighter client leaves more of
	// them to what is measured.
	envCreateClient = "AXE_BENCH_CREATE_CLIENT"
)

var noFlag = new(string)

// serveProc is an axe serve process on a scratch database.
type serveProc struct {
	cmd  *exec.Cmd
	base string
}

func startAxe(tb testing.TB, bin, dsn string) *serveProc {
	tb.Helper()
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--db", dsn, "--timezone", "UTC")
	cmd.Env = append(os.Environ(), "AXE_LOG_LEVEL=error", "AXE_PPROF=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		tb.Fatalf("cannot start %s: %v", bin, err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
				addr <- strings.TrimPrefix(strings.Fields(rest)[0], "http://")
			}
		}
	}()
	p := &serveProc{cmd: cmd}
	select {
	case a := <-addr:
		p.base = a
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		tb.Fatalf("%s did not listen", bin)
	}
	tb.Cleanup(p.stop)
	return p
}

func (p *serveProc) stop() {
	if p.cmd.Process == nil || p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func oneShot(prefix string, i int) []byte {
	return []byte(`{"name":"` + prefix + strconv.Itoa(i) + `","group":"orders","delay_ms":3600000,` +
		`"callback":{"type":"http","url":"http://127.0.0.1:9/hook"},"params":{"order":` + strconv.Itoa(i) + `}}`)
}

// createLoad creates n one-shot tasks with clients concurrent clients, as fast as they go
// (rate 0) or at rate creates/s in all, and returns the rate reached and the latencies.
// A 429 is retried after a short pause and counted.
func createLoad(tb testing.TB, base, prefix string, n, clients int, rate float64) (perSec float64, lat []time.Duration, busy int64) {
	tb.Helper()
	post := newPoster(tb, base, clients)
	defer post.close()
	var next atomic.Int64
	var busyN atomic.Int64
	lats := make([][]time.Duration, clients)
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Value
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if rate > 0 {
					if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
						time.Sleep(d)
					}
				}
				body := oneShot(prefix, i)
				for {
					t0 := time.Now()
					code, err := post.create(body)
					if err != nil {
						failed.Store(err)
						return
					}
					if code == http.StatusTooManyRequests {
						busyN.Add(1)
						time.Sleep(10 * time.Millisecond)
						continue
					}
					if code != http.StatusCreated {
						failed.Store(fmt.Errorf("create %d: status %d", i, code))
						return
					}
					lats[c] = append(lats[c], time.Since(t0))
					break
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		tb.Fatal(err)
	}
	el := time.Since(start)
	for _, l := range lats {
		lat = append(lat, l...)
	}
	slices.Sort(lat)
	return float64(n) / el.Seconds(), lat, busyN.Load()
}

// poster sends single creates to one daemon and returns each response's status.
type poster struct {
	create func(body []byte) (int, error)
	close  func()
}

// newPoster builds the poster envCreateClient names, keeping up to clients connections.
func newPoster(tb testing.TB, base string, clients int) poster {
	url := "http://" + base + "/api/v1/tasks"
	switch c := os.Getenv(envCreateClient); c {
	case "", "net/http":
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: time.Minute}
		return poster{
			create: func(body []byte) (int, error) {
				resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
				if err != nil {
					return 0, err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode, nil
			},
			close: hc.CloseIdleConnections,
		}
	case "fasthttp":
		hc := &fasthttp.HostClient{Addr: base, MaxConns: clients, ReadTimeout: time.Minute, WriteTimeout: time.Minute}
		return poster{
			create: func(body []byte) (int, error) {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				req.SetRequestURI(url)
				req.Header.SetMethod(http.MethodPost)
				req.Header.SetContentType("application/json")
				req.SetBodyRaw(body)
				if err := hc.Do(req, resp); err != nil {
					return 0, err
				}
				return resp.StatusCode(), nil
			},
			close: hc.CloseIdleConnections,
		}
	default:
		tb.Fatalf("%s=%q: want net/http or fasthttp", envCreateClient, c)
		return poster{}
	}
}

// autocommitBaseline inserts n tasks' rows (definition, runtime, one action) over one
// autocommitting connection, a statement a row, and returns tasks/s.
func autocommitBaseline(tb testing.TB, db *sql.DB, n int) float64 {
	tb.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	for i := range n {
		res, err := conn.ExecContext(ctx, `INSERT INTO task_def (name, grp, trigger_type, cron, delay_ms, depends_on,
			depends_mode, timezone, timeout_sec, retry_count, retry_interval_sec, priority, callback, params,
			misfire_policy, paused, created_at, updated_at) VALUES (?, 'orders', 'delay', '', 3600000, '', '', 'UTC',
			300, 0, 30, 2, '{"type":"http","url":"http://127.0.0.1:9/hook"}', ?, 'fire_once', 0, ?, ?)`,
			"ac-"+strconv.Itoa(i), `{"order":`+strconv.Itoa(i)+`}`, start.UnixMilli(), start.UnixMilli())
		if err != nil {
			tb.Fatal(err)
		}
		id, _ := res.LastInsertId()
		if _, err := conn.ExecContext(ctx, `INSERT INTO task_runtime (task_id, state, current_ticket, attempt,
			next_trigger_time, last_trigger_time, last_end_time, last_executor, success_count, failure_count, note,
			version) VALUES (?, 'SCHEDULED', '', 0, ?, 0, 0, '', 0, 0, '', 1)`, id, start.UnixMilli()+3600000); err != nil {
			tb.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO task_action (task_id, task_name, ticket, action, from_state,
			to_state, actor, at, detail) VALUES (?, ?, '', 'create', '', 'SCHEDULED', 'bench', ?, 'delay')`,
			id, "ac-"+strconv.Itoa(i), start.UnixMilli()); err != nil {
			tb.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// batchLoad sends n tasks to POST /api/v1/tasks/batch, per tasks a request, from one client,
// and returns tasks/s.
func batchLoad(tb testing.TB, base, prefix string, n, per int) float64 {
	tb.Helper()
	start := time.Now()
	for i := 0; i < n; i += per {
		var body bytes.Buffer
		for j := i; j < min(i+per, n); j++ {
			body.Write(oneShot(prefix, j))
			body.WriteByte('\n')
		}
		resp, err := http.Post("http://"+base+"/api/v1/tasks/batch", "application/x-ndjson", &body)
		if err != nil {
			tb.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			tb.Fatalf("batch at %d: status %d: %.300s", i, resp.StatusCode, data)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// ceiling writes the rows a batch of n tasks writes (definition, runtime, one action each)
// as plain multi-row INSERTs, 500 rows a statement, one transaction per per tasks, and
// returns tasks/s.
func ceiling(tb testing.TB, db *sql.DB, prefix string, n, per int) float64 {
	tb.Helper()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	start := time.Now()
	const rows = 500
	for i := 0; i < n; i += per {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			tb.Fatal(err)
		}
		end := min(i+per, n)
		for s := i; s < end; s += rows {
			e := min(s+rows, end)
			var q strings.Builder
			var args []any
			q.WriteString(`INSERT INTO task_def (name, grp, trigger_type, cron, delay_ms, depends_on, depends_mode,
				timezone, timeout_sec, retry_count, retry_interval_sec, priority, callback, params, misfire_policy,
				paused, created_at, updated_at) VALUES `)
			for j := s; j < e; j++ {
				if j > s {
					q.WriteString(",")
				}
				q.WriteString(`(?, 'orders', 'delay', '', 3600000, '', '', 'UTC', 300, 0, 30, 2, '{"type":"http","url":"http://127.0.0.1:9/hook"}', ?, 'fire_once', 0, ?, ?)`)
				args = append(args, prefix+strconv.Itoa(j), `{"order":`+strconv.Itoa(j)+`}`, now, now)
			}
			res, err := tx.ExecContext(ctx, q.String(), args...)
			if err != nil {
				tb.Fatal(err)
			}
			first, _ := res.LastInsertId() // consecutive under innodb_autoinc_lock_mode 0/1
			q.Reset()
			args = args[:0]
			q.WriteString(`INSERT INTO task_runtime (task_id, state, current_ticket, attempt, next_trigger_time,
				last_trigger_time, last_end_time, last_executor, success_count, failure_count, note, version) VALUES `)
			for j := s; j < e; j++ {
				if j > s {
					q.WriteString(",")
				}
				q.WriteString(`(?, 'SCHEDULED', '', 0, ?, 0, 0, '', 0, 0, '', 1)`)
				args = append(args, first+int64(j-s), now+3600000)
			}
			if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
				tb.Fatal(err)
			}
			q.Reset()
			args = args[:0]
			q.WriteString(`INSERT INTO task_action (task_id, task_name, ticket, action, from_state, to_state, actor, at, detail) VALUES `)
			for j := s; j < e; j++ {
				if j > s {
					q.WriteString(",")
				}
				q.WriteString(`(?, ?, '', 'create', '', 'SCHEDULED', 'bench', ?, 'delay')`)
				args = append(args, first+int64(j-s), prefix+strconv.Itoa(j), now)
			}
			if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
				tb.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			tb.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// runCost is what a run of creates cost: the CPU of the daemon and of the database server and of this process (the clients),
// the server's commits and data fsyncs (global counters: other clients of a shared server
// add to them), and the daemon's writer commits and rows per commit (from /metrics; zero
// for a binary that does not export them).
type runCost struct {
	axeCPU, dbCPU, selfCPU time.Duration
	dbCommits, dbFsyncs    float64
	writerCommits, wRows   float64
	commitSec              float64 // seconds the writer spent inside commits
	writerRowsPerCommitOK  bool
}

type costProbe struct {
	tb               testing.TB
	db               *sql.DB
	axePID, dbPID    int
	base             string
	axe0, db0, self0 time.Duration
	st0              map[string]float64
	m0               map[string]float64
}

func startCost(tb testing.TB, db *sql.DB, p *serveProc) *costProbe {
	c := &costProbe{tb: tb, db: db, axePID: p.cmd.Process.Pid, dbPID: benchkit.ServerPID(context.Background(), db), base: p.base}
	c.axe0, _ = benchkit.ProcessCPU(c.axePID)
	c.self0 = benchkit.CPUTime()
	if c.dbPID > 0 {
		c.db0, _ = benchkit.ProcessCPU(c.dbPID)
	}
	c.st0 = globalStatus(tb, db)
	c.m0 = scrapeMetrics(p.base)
	return c
}

func (c *costProbe) end() runCost {
	var r runCost
	a1, _ := benchkit.ProcessCPU(c.axePID)
	r.axeCPU = a1 - c.axe0
	r.selfCPU = benchkit.CPUTime() - c.self0
	if c.dbPID > 0 {
		d1, _ := benchkit.ProcessCPU(c.dbPID)
		r.dbCPU = d1 - c.db0
	}
	st1 := globalStatus(c.tb, c.db)
	r.dbCommits = st1["Com_commit"] - c.st0["Com_commit"]
	r.dbFsyncs = st1["Innodb_data_fsyncs"] - c.st0["Innodb_data_fsyncs"]
	m1 := scrapeMetrics(c.base)
	if _, ok := m1["axe_writer_commits_total"]; ok {
		r.writerRowsPerCommitOK = true
		r.writerCommits = m1["axe_writer_commits_total"] - c.m0["axe_writer_commits_total"]
		n := m1["axe_writer_batch_rows_count"] - c.m0["axe_writer_batch_rows_count"]
		if n > 0 {
			r.wRows = (m1["axe_writer_batch_rows_sum"] - c.m0["axe_writer_batch_rows_sum"]) / n
		}
		r.commitSec = m1["axe_writer_commit_duration_seconds_sum"] - c.m0["axe_writer_commit_duration_seconds_sum"]
	}
	return r
}

// cells renders the cost per create of n creates.
func (r runCost) cells(n int) []string {
	per := func(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d.Microseconds())/float64(n)) }
	w := ""
	if r.writerRowsPerCommitOK {
		w = fmt.Sprintf("%.0f (%.1f rows)", r.writerCommits, r.wRows)
		if r.writerCommits > 0 {
			w += fmt.Sprintf(", %.2f ms each", 1000*r.commitSec/r.writerCommits)
		}
	}
	return []string{per(r.axeCPU), per(r.dbCPU), per(r.selfCPU), fmt.Sprintf("%.0f", r.dbCommits), fmt.Sprintf("%.0f", r.dbFsyncs), w}
}

func globalStatus(tb testing.TB, db *sql.DB) map[string]float64 {
	out := map[string]float64{}
	rows, err := db.Query(`SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_commit', 'Innodb_data_fsyncs')`)
	if err != nil {
		tb.Logf("cannot read server status: %v", err)
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if rows.Scan(&k, &v) == nil {
			out[k], _ = strconv.ParseFloat(v, 64)
		}
	}
	return out
}

// scrapeMetrics reads the writer's series from the daemon's /metrics.
func scrapeMetrics(base string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get("http://" + base + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "axe_writer_commits_total", "axe_writer_batch_rows_sum", "axe_writer_batch_rows_count",
			"axe_writer_commit_duration_seconds_sum":
			out[f[0]], _ = strconv.ParseFloat(f[1], 64)
		}
	}
	return out
}

// profileCPU takes a CPU profile of the daemon over d, after a pause of wait, into file;
// it logs and gives up on a binary without /debug/pprof.
func profileCPU(tb testing.TB, base, file string, wait, d time.Duration) {
	time.Sleep(wait)
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", base, int(d.Seconds())))
	if err != nil {
		tb.Logf("no CPU profile: %v", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Logf("no CPU profile: status %d", resp.StatusCode)
		return
	}
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(file, data, 0o644)
	}
	if err != nil {
		tb.Logf("no CPU profile: %v", err)
	}
}

func fmtLat(lat []time.Duration, p float64) string {
	ns := make([]int64, len(lat))
	for i, d := range lat {
		ns[i] = int64(d)
	}
	return time.Duration(benchkit.Percentile(ns, p)).Round(100 * time.Microsecond).String()
}

// BenchmarkCreates is B6: see the file comment.
func BenchmarkCreates(b *testing.B) {
	server := serverDSN(b)
	bins := parseBins(b, os.Getenv(envCreateBins))
	n := sizeParam(b, noFlag, envCreateSize, 20000)
	nb := sizeParam(b, noFlag, envBatchSize, 100000)
	rounds := sizeParam(b, noFlag, envCreateRound, 2)
	const clients = 64
	profDir := os.Getenv(envCreateProfile)
	singleOnly := os.Getenv(envCreateSingleOnly) == "1"
	{
		db, err := benchkit.OpenSQL(server, 1)
		if err != nil {
			b.Fatal(err)
		}
		if si, err := benchkit.ReadServerInfo(context.Background(), db); err == nil {
			b.Logf("server: %s; load average %s", si, benchkit.LoadAverage())
		}
		_ = db.Close()
	}
	tab := benchkit.NewTable("round", "path", "tasks", "creates/s", "p50", "p99", "429s",
		"axe CPU/create", "DB CPU/create", "client CPU/create", "DB commits", "data fsyncs", "writer commits (rows each, commit time)")
	for b.Loop() {
		for r := range rounds {
			// Alternate the order so neither binary always runs on a warmer server.
			order := slices.Clone(bins)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, bin := range order {
				dsn, drop := scratchDB(b, server)
				p := startAxe(b, bin.path, dsn)
				db, err := benchkit.OpenSQL(dsn, 2)
				if err != nil {
					b.Fatal(err)
				}
				if profDir != "" {
					// The load takes about n/2000 s at old rates: profile its middle.
					go profileCPU(b, p.base, fmt.Sprintf("%s/%s-r%d-cpu.pprof", profDir, bin.name, r), time.Second, 4*time.Second)
				}
				probe := startCost(b, db, p)
				rate, lat, busy := createLoad(b, p.base, "t-", n, clients, 0)
				row := []string{strconv.Itoa(r), bin.name + " 64 clients", strconv.Itoa(n), fmt.Sprintf("%.0f", rate), fmtLat(lat, 0.5), fmtLat(lat, 0.99), strconv.FormatInt(busy, 10)}
				tab.Row(append(row, probe.end().cells(n)...)...)
				if bin.name != "old" {
					// Open loop at 70% of the peak this binary just reached.
					probe = startCost(b, db, p)
					rate70, lat70, busy70 := createLoad(b, p.base, "u-", n/2, clients, 0.7*rate)
					row = []string{strconv.Itoa(r), bin.name + " at 70% of peak", strconv.Itoa(n / 2), fmt.Sprintf("%.0f", rate70), fmtLat(lat70, 0.5), fmtLat(lat70, 0.99), strconv.FormatInt(busy70, 10)}
					tab.Row(append(row, probe.end().cells(n/2)...)...)
				}
				if bin.name == "new" {
					if !singleOnly {
						brate := batchLoad(b, p.base, "b-", nb, 10000)
						tab.Row(strconv.Itoa(r), bin.name+" batch 10000/request", strconv.Itoa(nb), fmt.Sprintf("%.0f", brate))
						c := ceiling(b, db, "c-", nb, 10000)
						tab.Row(strconv.Itoa(r), "ceiling: multi-row INSERT", strconv.Itoa(nb), fmt.Sprintf("%.0f", c))
					}
					ac := autocommitBaseline(b, db, min(n, 5000))
					tab.Row(strconv.Itoa(r), "one autocommit connection", strconv.Itoa(min(n, 5000)), fmt.Sprintf("%.0f", ac))
				}
				_ = db.Close()
				p.stop()
				drop()
			}
		}
	}
	b.StopTimer()
	summarize(b, "B6 creates (MariaDB, %d clients):\n%s", clients, tab)
}

type namedBin struct{ name, path string }

func parseBins(tb testing.TB, s string) []namedBin {
	tb.Helper()
	if s == "" {
		tb.Skipf("skipping: set %s=old=/path/axe-old,new=/path/axe-new", envCreateBins)
	}
	var out []namedBin
	for _, part := range strings.Split(s, ",") {
		name, path, ok := strings.Cut(part, "=")
		if !ok {
			tb.Fatalf("%s: %q is not name=path", envCreateBins, part)
		}
		out = append(out, namedBin{name, path})
	}
	return out
}

// TestCreatesSmoke is B6 at CI size: the current binary, built here, takes single creates
// from 8 clients and a batch, and every task is stored.
func TestCreatesSmoke(t *testing.T) {
	server := serverDSN(t)
	bin := t.TempDir() + "/axe"
	build := exec.Command("go", "build", "-o", bin, "../cmd/axe")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dsn, _ := scratchDB(t, server)
	p := startAxe(t, bin, dsn)
	rate, lat, _ := createLoad(t, p.base, "t-", 400, 8, 0)
	t.Setenv(envCreateClient, "fasthttp")
	frate, _, _ := createLoad(t, p.base, "f-", 200, 8, 0)
	brate := batchLoad(t, p.base, "b-", 3000, 1000)
	db, err := benchkit.OpenSQL(dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM task_def d JOIN task_runtime r ON r.task_id = d.id WHERE r.state = 'SCHEDULED'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3600 {
		t.Fatalf("%d scheduled tasks stored, want 3600", n)
	}
	var acts int
	if err := db.QueryRow(`SELECT COUNT(*) FROM task_action WHERE task_name LIKE 'b-%'`).Scan(&acts); err != nil {
		t.Fatal(err)
	}
	if acts != 3000 {
		t.Fatalf("%d action rows for 3000 batch creates, want one each", acts)
	}
	t.Logf("smoke: %.0f creates/s (p99 %s), %.0f/s on fasthttp, batch %.0f tasks/s", rate, fmtLat(lat, 0.99), frate, brate)
}
