package persist_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/internal/test/galeratest"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// The store on a three-node MariaDB Galera cluster the test starts itself (internal/
// galeratest): one cluster for all of TestGalera's subtests, each of which first heals it
// (restarts, resumes or rejoins what the previous one broke). docs/galera-notes.md says what
// each of them shows.

// galeraTimeout bounds each subtest, a node's rejoin included.
const galeraTimeout = 4 * time.Minute

// galeraOpTimeout bounds each store call of the failover writers, as an HA node's lease
// calls are bounded (ha.Elector): without a bound a call on a frozen node waits for as long
// as the node is frozen. It is longer than the time the cluster holds every commit and
// causal read after losing a node, until it has evicted it (Galera's evs.suspect_timeout,
// 5 s): a shorter bound also fails calls begun in that time, after the loss.
const galeraOpTimeout = 15 * time.Second

func TestGalera(t *testing.T) {
	t.Parallel()
	c := galeratest.Start(t)
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, c *galeratest.Cluster)
	}{
		{"Conformance", testGaleraConformance},
		{"ReadsSeeOtherNodesWrites", testGaleraCausalReads},
		{"FailoverKill", func(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
			testGaleraFailover(t, ctx, c, func(n *galeratest.Node) error { n.Kill(); return nil })
		}},
		{"FailoverIsolate", func(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
			testGaleraFailover(t, ctx, c, func(n *galeratest.Node) error { return n.Isolate(ctx, true) })
		}},
		{"FailoverPause", testGaleraFailoverPause},
		{"CASAcrossNodes", testGaleraCASAcrossNodes},
		{"FireRecordAcrossNodes", testGaleraFireRecordAcrossNodes},
		{"LeaseTakeAcrossNodes", testGaleraLeaseTakeAcrossNodes},
		{"ShardTakeAcrossNodes", testGaleraShardTakeAcrossNodes},
		{"AutoIncrementAcrossNodes", testGaleraAutoIncrement},
		{"SchemaLockAcrossNodes", testGaleraSchemaLock},
		{"MigrateAcrossNodes", testGaleraMigrateAcrossNodes},
		{"FenceWaitsOnOneNode", testGaleraFenceOneNode},
		{"FenceTakeoverDoesNotWaitAcrossNodes", testGaleraFenceAcrossNodes},
		{"FenceRefusesStaleBatchAfterTakeover", testGaleraFenceStaleCommit},
		{"ShardFenceRefusesStaleBatchAfterTakeover", testGaleraShardFenceStaleCommit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), galeraTimeout)
			defer cancel()
			if err := c.Heal(ctx); err != nil {
				t.Fatalf("cannot heal the cluster: %v", err)
			}
			tc.fn(t, ctx, c)
		})
	}
}

// TestMySQLSeveralHostsNeedGalera: a DSN of several addresses on servers that are not Galera
// nodes (here the one MariaDB twice, under two names) is refused at Open, naming why.
func TestMySQLSeveralHostsNeedGalera(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLDSN(t)
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
	if err != nil {
		t.Fatal(err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admin := sql.OpenDB(connector)
	defer admin.Close()
	var wsrep int
	if err := admin.QueryRowContext(testCtx(t), "SELECT @@wsrep_on").Scan(&wsrep); err == nil && wsrep == 1 {
		t.Skipf("the test server at %s is a Galera node: two of its addresses are rightly accepted", cfg.Addr)
	}
	host, port, _ := strings.Cut(cfg.Addr, ":")
	other := "localhost"
	if host == "localhost" {
		other = "127.0.0.1"
	}
	two := strings.Replace(dsn, "("+cfg.Addr+")", "("+cfg.Addr+","+other+":"+port+")", 1)
	if two == dsn {
		t.Fatalf("cannot list the test server twice in %q", dsn)
	}
	s, err := persist.Open(testCtx(t), two)
	if err == nil {
		_ = s.Close()
		t.Fatal("Open with two addresses of a server without wsrep succeeded")
	}
	if !strings.Contains(err.Error(), "wsrep_on is off") || !strings.Contains(err.Error(), "asynchronous replicas") {
		t.Fatalf("Open with two addresses = %v, want a refusal naming wsrep_on", err)
	}
}

// ---- helpers ----

// galeraDatabase creates a fresh database through a node that answers and drops it when t
// ends.
func galeraDatabase(t *testing.T, c *galeratest.Cluster) string {
	t.Helper()
	name := fmt.Sprintf("axe_t_%016x", rand.Uint64())
	galeraExec(t, c, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	t.Cleanup(func() { galeraExec(t, c, "DROP DATABASE IF EXISTS "+name) })
	// The other nodes run the CREATE in the cluster's order, after the one that took it
	// answered: a store connecting to one of them names the database at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range c.Nodes() {
		if !n.Running() || n.Paused() {
			continue
		}
		var found int
		if err := nodeConn(t, ctx, n, 1).QueryRowContext(ctx,
			"SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&found); err != nil || found != 1 {
			t.Fatalf("database %s on %s after its CREATE: %d, %v", name, n.Name, found, err)
		}
	}
	return name
}

// galeraExec runs q through the first node of the cluster that takes it.
func galeraExec(t *testing.T, c *galeratest.Cluster, q string) {
	t.Helper()
	if err := c.Exec(q); err != nil {
		t.Error(err)
	}
}

// galeraStore opens a store on database db through the given nodes, in that order.
func galeraStore(t *testing.T, c *galeratest.Cluster, db string, nodes ...int) persist.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := persist.OpenWith(ctx, persist.SchemeMySQL+":"+c.ServerDSN(nodes...)+db, persist.OpenOptions{Metrics: testMetrics(t)})
	if err != nil {
		t.Fatalf("cannot open a store through nodes %v: %v", nodes, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// storeNode names the Galera node a pooled connection of s is on.
func storeNode(ctx context.Context, s persist.Store) (string, error) {
	var name string
	err := persist.DB(s).QueryRowContext(ctx, "SELECT @@wsrep_node_name").Scan(&name)
	return name, err
}

// nodeConn is a connection of its own to node n, with wsrep_sync_wait as given.
func nodeConn(t *testing.T, ctx context.Context, n *galeratest.Node, syncWait int) *sql.Conn {
	t.Helper()
	db, err := n.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION wsrep_sync_wait = %d", syncWait)); err != nil {
		t.Fatal(err)
	}
	return conn
}

func nodeStatus(t *testing.T, ctx context.Context, n *galeratest.Node, name string) string {
	t.Helper()
	st, err := n.Status(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return st[name]
}

// raceStores calls call for every store at once, each on its own goroutine released at the
// same moment, and returns their errors in the stores' order.
func raceStores(stores []persist.Store, call func(i int, s persist.Store) error) []error {
	errs := make([]error, len(stores))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			<-start
			errs[i] = call(i, s)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}

// ---- conformance ----

// testGaleraConformance runs the store's conformance suite on one Galera node. Each test's
// database gets the schema copied from a template migrated once in the cluster, as on the
// plain server: migrating a fresh database runs every migration as replicated DDL, about 5 s
// a test here (the suite's migration tests, and MigrateAcrossNodes, migrate for real).
func testGaleraConformance(t *testing.T, _ context.Context, c *galeratest.Cluster) {
	admin, err := mysql.ParseDSN(c.ServerDSN(0))
	if err != nil {
		t.Fatal(err)
	}
	persisttest.RunConformance(t, func(t *testing.T) persist.Store {
		db := galeraDatabase(t, c)
		persisttest.CopySchema(t, admin, db)
		return galeraStore(t, c, db, 0)
	})
}

// testGaleraCausalReads: a store's sessions wait for causality (wsrep_sync_wait), so what
// one store commits through node 1 another reads at once through node 2. A session without
// it may miss the write; how often is logged.
func testGaleraCausalReads(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	w, r := galeraStore(t, c, db, 0), galeraStore(t, c, db, 1)
	var wait int
	if err := persist.DB(r).QueryRowContext(ctx, "SELECT @@session.wsrep_sync_wait").Scan(&wait); err != nil || wait != 1 {
		t.Fatalf("a store session's wsrep_sync_wait = %d, %v; want 1", wait, err)
	}
	plain := nodeConn(t, ctx, c.Node(1), 0)
	missed := 0
	const n = 100
	for i := range n {
		k, err := createTask(ctx, w, fmt.Sprintf("causal-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.ApplyBatch(ctx, batchOf(k.next())); err != nil {
			t.Fatal(err)
		}
		var v int64
		err = plain.QueryRowContext(ctx, "SELECT version FROM "+db+".task_runtime WHERE task_id = ?", k.rt.TaskID).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && v != k.rt.Version) {
			missed++
		} else if err != nil {
			t.Fatal(err)
		}
		got, err := r.GetTaskByID(ctx, k.rt.TaskID)
		if err != nil || got.Runtime.Version != k.rt.Version {
			t.Fatalf("read through node 2 right after the write through node 1: %+v, %v; want version %d", got, err, k.rt.Version)
		}
	}
	t.Logf("a session without wsrep_sync_wait missed %d of %d writes made through another node just before", missed, n)
}

// ---- failover ----

// failoverWriter is one writer of the failover tests: a task it moves on batch by batch,
// and a task create every fourth step, one call at a time.
type failoverWriter struct {
	k       *task
	start   int64 // the task's version when created
	created []string
	// ok counts calls that succeeded; failed those that did not, with their errors and
	// when they began.
	ok     atomic.Int64
	failed []failedCall
}

type failedCall struct {
	began time.Time
	err   error
}

// run calls the store until stop is closed. After a failed call (an unknown outcome) it
// reads the task back, so the next batch expects what the store holds.
func (w *failoverWriter) run(ctx context.Context, s persist.Store, id int, stop <-chan struct{}) {
	for step := 0; ; step++ {
		select {
		case <-stop:
			return
		default:
		}
		began := time.Now()
		cctx, cancel := context.WithTimeout(ctx, galeraOpTimeout)
		var err error
		name := ""
		if step%4 == 3 {
			name = fmt.Sprintf("w%d-%d", id, step)
			_, err = createTask(cctx, s, name)
		} else {
			err = s.ApplyBatch(cctx, batchOf(w.k.next()))
		}
		cancel()
		if err == nil {
			w.ok.Add(1)
			if name != "" {
				w.created = append(w.created, name)
			}
			continue
		}
		w.failed = append(w.failed, failedCall{began: began, err: err})
		for ctx.Err() == nil {
			cctx, cancel := context.WithTimeout(ctx, galeraOpTimeout)
			got, err := s.GetTask(cctx, w.k.name)
			cancel()
			if err == nil {
				w.k.rt = got.Runtime
				break
			}
		}
	}
}

// runWriters runs n writers on s, calls fault once each has made some calls, and stops
// them once each has made as many more after it. It returns the writers and when the fault
// was done.
func runWriters(t *testing.T, ctx context.Context, s persist.Store, n int, fault func() error) ([]*failoverWriter, time.Time) {
	t.Helper()
	const calls = 12
	ws := make([]*failoverWriter, n)
	for i := range ws {
		k := newTask(t, s, fmt.Sprintf("w%d", i))
		ws[i] = &failoverWriter{k: k, start: k.rt.Version}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() { w.run(ctx, s, i, stop) })
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for i, w := range ws {
		for w.ok.Load() < calls {
			if ctx.Err() != nil {
				t.Fatalf("writer %d made %d calls before the fault, want %d", i, w.ok.Load(), calls)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	before := make([]int64, n)
	for i, w := range ws {
		before[i] = w.ok.Load()
	}
	if err := fault(); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	for i, w := range ws {
		for w.ok.Load() < before[i]+calls {
			if ctx.Err() != nil {
				t.Fatalf("writer %d made %d calls after the fault, want %d", i, w.ok.Load()-before[i], calls)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return ws, at
}

// checkWriters checks that every call reported done is in the database, read through
// another store on another node: each task at the version its writer last saw, and every
// task it created.
func checkWriters(t *testing.T, ctx context.Context, s persist.Store, ws []*failoverWriter) {
	t.Helper()
	for i, w := range ws {
		got, err := s.GetTask(ctx, w.k.name)
		if err != nil || got.Runtime.Version != w.k.rt.Version {
			t.Errorf("writer %d's task: %+v, %v; want version %d", i, got.Runtime, err, w.k.rt.Version)
		}
		if done := w.ok.Load() - int64(len(w.created)); got.Runtime.Version < w.start+done {
			t.Errorf("writer %d's task at version %d after %d batches reported done from version %d", i, got.Runtime.Version, done, w.start)
		}
		for _, name := range w.created {
			if _, err := s.GetTask(ctx, name); err != nil {
				t.Errorf("writer %d's task %s, reported created: %v", i, name, err)
			}
		}
	}
}

// testGaleraFailover runs writers on a store given all three nodes while fault takes the
// node in use (the first) away: each writer sees at most the failure of the one call it had
// in flight, the store goes on through the next node, and every call reported done is on
// the surviving nodes.
func testGaleraFailover(t *testing.T, ctx context.Context, c *galeratest.Cluster, fault func(*galeratest.Node) error) {
	db := galeraDatabase(t, c)
	s := galeraStore(t, c, db, 0, 1, 2)
	if node, err := storeNode(ctx, s); err != nil || node != "n1" {
		t.Fatalf("the store is on node %q (%v), want n1, the first listed", node, err)
	}
	switches := counterValue(t, "axe_store_db_node_switches_total")
	ws, at := runWriters(t, ctx, s, 4, func() error { return fault(c.Node(0)) })
	for i, w := range ws {
		if len(w.failed) > 1 {
			t.Errorf("writer %d saw %d failed calls, want at most the one in flight: %v", i, len(w.failed), w.failed)
		}
		for _, f := range w.failed {
			t.Logf("writer %d: a call begun %s after the fault failed: %v", i, f.began.Sub(at).Round(time.Millisecond), f.err)
		}
	}
	if node, err := storeNode(ctx, s); err != nil || node != "n2" {
		t.Errorf("after the fault the store is on node %q (%v), want n2, the next listed", node, err)
	}
	if counterValue(t, "axe_store_db_node_switches_total") == switches {
		t.Error("axe_store_db_node_switches_total did not move")
	}
	checkWriters(t, ctx, galeraStore(t, c, db, 2), ws)
}

// testGaleraFailoverPause freezes the node in use (SIGSTOP): its sockets stay open and
// nothing answers, so calls in flight wait out their deadline, and so may calls begun
// before the other two nodes evicted it (the cluster holds every commit until then). Every
// call begun once they have formed a primary component of two succeeds, through the next
// node, and every call reported done is on the surviving nodes.
func testGaleraFailoverPause(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	s := galeraStore(t, c, db, 0, 1, 2)
	var evicted time.Time
	ws, _ := runWriters(t, ctx, s, 4, func() error {
		if err := c.Node(0).Pause(); err != nil {
			return err
		}
		began := time.Now()
		err := c.WaitSynced(ctx)
		evicted = time.Now()
		t.Logf("the other two evicted the frozen node after %s", evicted.Sub(began).Round(time.Millisecond))
		return err
	})
	for i, w := range ws {
		for _, f := range w.failed {
			if f.began.After(evicted) {
				t.Errorf("writer %d: a call begun after the eviction failed: %v", i, f.err)
			} else {
				t.Logf("writer %d: a call begun before the eviction failed: %v", i, f.err)
			}
		}
	}
	if node, err := storeNode(ctx, s); err != nil || node != "n2" {
		t.Errorf("after the freeze the store is on node %q (%v), want n2", node, err)
	}
	checkWriters(t, ctx, galeraStore(t, c, db, 2), ws)
}

// ---- the SQL under Galera's rules ----

// testGaleraCASAcrossNodes races two stores on two nodes, round after round, to move one
// task from the same version. The row locks of the CAS (FOR UPDATE, or the guarded upsert)
// are each node's own, so the loser is not made to wait: it fails at commit, by
// certification, or sees the new version. Exactly one of each round's two batches lands.
func testGaleraCASAcrossNodes(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	stores := []persist.Store{galeraStore(t, c, db, 0), galeraStore(t, c, db, 1)}
	k := newTask(t, stores[0], "cas")
	const rounds = 40
	counts := map[string]int{}
	for round := range rounds {
		batches := make([]*persist.Batch, len(stores))
		for i := range stores {
			g := *k
			g.name = fmt.Sprintf("cas-%d-%d", round, i) // distinct tickets
			batches[i] = batchOf(g.next())
		}
		errs := raceStores(stores, func(i int, s persist.Store) error { return s.ApplyBatch(ctx, batches[i]) })
		landed := 0
		for _, err := range errs {
			var ce *persist.ConflictError
			switch {
			case err == nil:
				landed++
				counts["landed"]++
			case errors.As(err, &ce):
				counts["conflict"]++
			case isDeadlock(err):
				counts["deadlock at commit"]++
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if landed != 1 {
			t.Fatalf("round %d: %d of the two batches landed (%v), want exactly one", round, landed, errs)
		}
		k.rt.Version++
		got, err := stores[1].GetTask(ctx, "cas")
		if err != nil || got.Runtime.Version != k.rt.Version {
			t.Fatalf("round %d: task at %+v, %v; want version %d", round, got.Runtime, err, k.rt.Version)
		}
	}
	t.Logf("%d rounds across two nodes: %v", rounds, counts)
}

// testGaleraFireRecordAcrossNodes races two stores on two nodes to insert the fire record of
// the same fire (one ticket), round after round: the run table's primary key is checked by
// certification across nodes, so exactly one insert lands and the other is refused (as a
// duplicate, or as a deadlock at commit).
func testGaleraFireRecordAcrossNodes(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	stores := []persist.Store{galeraStore(t, c, db, 0), galeraStore(t, c, db, 1)}
	k := newTask(t, stores[0], "fire")
	const rounds = 40
	counts := map[string]int{}
	for round := range rounds {
		ticket := fmt.Sprintf("fire-%d", round)
		errs := raceStores(stores, func(i int, s persist.Store) error {
			return s.ApplyBatch(ctx, &persist.Batch{Fires: []model.Run{{Ticket: ticket, TaskID: k.rt.TaskID,
				TaskName: k.name, Kind: model.RunScheduled, Attempt: 1, ScheduledAt: int64(round),
				DispatchedAt: int64(round), Executor: fmt.Sprintf("node-%d", i), Result: model.ResultRunning}}})
		})
		landed := -1
		for i, err := range errs {
			var fr *persist.FireRefusedError
			switch {
			case err == nil:
				if landed >= 0 {
					t.Fatalf("round %d: both nodes inserted fire record %s", round, ticket)
				}
				landed = i
				counts["landed"]++
			case errors.As(err, &fr):
				counts["refused as a duplicate"]++
			case isDeadlock(err):
				counts["deadlock at commit"]++
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if landed < 0 {
			t.Fatalf("round %d: neither fire record landed: %v", round, errs)
		}
		run, err := stores[1-landed].GetRun(ctx, ticket)
		if err != nil || run.Executor != fmt.Sprintf("node-%d", landed) {
			t.Fatalf("round %d: run %s = %+v, %v; want the one inserted through node %d", round, ticket, run, err, landed+1)
		}
	}
	t.Logf("%d rounds across two nodes: %v", rounds, counts)
}

// testGaleraLeaseTakeAcrossNodes races three stores on three nodes to take a released
// lease, round after round: each round exactly one takes it, at the next epoch, and the
// fence then admits that epoch's batches through any node and refuses the one before.
func testGaleraLeaseTakeAcrossNodes(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	stores := []persist.Store{galeraStore(t, c, db, 0), galeraStore(t, c, db, 1), galeraStore(t, c, db, 2)}
	k := newTask(t, stores[0], "fenced")
	const lease = "scheduler"
	var epoch int64
	for round := range 20 {
		states := make([]persist.LeaseState, len(stores))
		oks := make([]bool, len(stores))
		errs := raceStores(stores, func(i int, s persist.Store) error {
			var err error
			states[i], oks[i], err = s.TakeLease(ctx, lease, fmt.Sprintf("node-%d", i), time.Minute)
			return err
		})
		winner := -1
		for i := range stores {
			if errs[i] != nil {
				t.Fatalf("round %d: TakeLease through node %d: %v", round, i+1, errs[i])
			}
			if oks[i] {
				if winner >= 0 {
					t.Fatalf("round %d: nodes %d and %d both took the lease: %+v", round, winner+1, i+1, states)
				}
				winner = i
			}
		}
		if winner < 0 || states[winner].Epoch != epoch+1 {
			t.Fatalf("round %d: winner %d with %+v, want one at epoch %d", round, winner+1, states, epoch+1)
		}
		epoch = states[winner].Epoch
		other := stores[(winner+1)%3]
		b := batchOf(k.next())
		b.LeaseName = lease
		if round > 0 {
			b.Epoch = epoch - 1
			if err := other.ApplyBatch(ctx, b); !errors.Is(err, model.ErrLeaseLost) {
				t.Fatalf("round %d: a batch of the previous epoch through another node = %v, want ErrLeaseLost", round, err)
			}
		}
		b.Epoch = epoch
		if err := other.ApplyBatch(ctx, b); err != nil {
			t.Fatalf("round %d: a batch of the new epoch through another node: %v", round, err)
		}
		if err := stores[winner].ReleaseLease(ctx, lease, fmt.Sprintf("node-%d", winner), epoch); err != nil {
			t.Fatal(err)
		}
	}
}

// testGaleraShardTakeAcrossNodes races three stores on three nodes to take every shard,
// round after round: certification lets each shard go to exactly one of them, at the next
// epoch, and a batch fenced by a shard's previous epoch is refused through any node while
// one fenced by its new epoch lands.
func testGaleraShardTakeAcrossNodes(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	stores := []persist.Store{galeraStore(t, c, db, 0), galeraStore(t, c, db, 1), galeraStore(t, c, db, 2)}
	k := newTask(t, stores[0], "sharded")
	for round := range 8 {
		taken := make([][]persist.ShardLease, len(stores))
		errs := raceStores(stores, func(i int, s persist.Store) error {
			var err error
			taken[i], err = s.TakeShards(ctx, fmt.Sprintf("node-%d", i), allShards(), time.Minute)
			return err
		})
		owner := map[int]int{}
		counts := make([]int, len(stores))
		for i := range stores {
			if errs[i] != nil {
				t.Fatalf("round %d: TakeShards through node %d: %v", round, i+1, errs[i])
			}
			for _, l := range taken[i] {
				if o, dup := owner[l.Shard]; dup {
					t.Fatalf("round %d: shard %d taken through nodes %d and %d", round, l.Shard, o+1, i+1)
				}
				if l.Epoch != int64(round+1) {
					t.Fatalf("round %d: shard %d taken at epoch %d, want %d", round, l.Shard, l.Epoch, round+1)
				}
				owner[l.Shard] = i
			}
			counts[i] = len(taken[i])
		}
		if len(owner) != model.ShardCount {
			t.Fatalf("round %d: %d shards taken, want all %d (%v)", round, len(owner), model.ShardCount, counts)
		}
		t.Logf("round %d: shards taken through each node: %v", round, counts)
		// The fence of the shard holding "sharded", through a node other than its taker's.
		shard := model.ShardOf("sharded")
		other := stores[(owner[shard]+1)%3]
		g := k.next()
		b := &persist.Batch{Transitions: g.Transitions, Runs: g.Runs, Actions: g.Actions}
		if round > 0 {
			b.Shards = []persist.ShardFence{{Shard: shard, Epoch: int64(round)}}
			if err := other.ApplyBatch(ctx, b); !errors.Is(err, model.ErrLeaseLost) {
				t.Fatalf("round %d: a batch of shard %d's previous epoch through another node = %v, want ErrLeaseLost", round, shard, err)
			}
		}
		b.Shards = []persist.ShardFence{{Shard: shard, Epoch: int64(round + 1)}}
		if err := other.ApplyBatch(ctx, b); err != nil {
			t.Fatalf("round %d: a batch of shard %d's new epoch through another node: %v", round, shard, err)
		}
		for i, s := range stores {
			if err := s.ReleaseShards(ctx, fmt.Sprintf("node-%d", i), fencesOf(taken[i])); err != nil {
				t.Fatal(err)
			}
		}
	}
	k.checkLanded(t, stores[1])
}

// testGaleraAutoIncrement: Galera gives each node its own auto-increment offset and an
// increment of the cluster's size, so one multi-row INSERT's ids are not consecutive. The
// store reads them back by name there; creates through two nodes at once get distinct ids
// that match their names.
func testGaleraAutoIncrement(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	stores := []persist.Store{galeraStore(t, c, db, 0), galeraStore(t, c, db, 1)}
	var inc int
	if err := persist.DB(stores[0]).QueryRowContext(ctx, "SELECT @@auto_increment_increment").Scan(&inc); err != nil || inc != galeratest.Size {
		t.Fatalf("auto_increment_increment = %d, %v; want %d (wsrep_auto_increment_control)", inc, err, galeratest.Size)
	}
	if persist.ConsecutiveIDs(stores[0]) {
		t.Fatal("the store takes a Galera node's ids for consecutive")
	}
	batches := make([]*persist.Batch, len(stores))
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i, s := range stores {
		b := &persist.Batch{}
		for j := range 50 {
			name := fmt.Sprintf("n%d-%d", i, j)
			b.Creates = append(b.Creates, &persist.TaskCreate{
				Def:     &model.TaskDef{Name: name, Group: "default", Trigger: model.TriggerManual, Timezone: "UTC", Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/x"}},
				Runtime: model.Runtime{State: model.StateScheduled, Version: 1},
			})
		}
		batches[i] = b
		wg.Go(func() { errs[i] = s.ApplyBatch(ctx, b) })
	}
	wg.Wait()
	seen := map[int64]string{}
	for i, b := range batches {
		if errs[i] != nil {
			t.Fatalf("creates through node %d: %v", i+1, errs[i])
		}
		for _, cr := range b.Creates {
			if prev, dup := seen[cr.Def.ID]; dup {
				t.Fatalf("id %d given to %s and %s", cr.Def.ID, prev, cr.Def.Name)
			}
			seen[cr.Def.ID] = cr.Def.Name
			got, err := stores[1-i].GetTaskByID(ctx, cr.Def.ID)
			if err != nil || got.Def.Name != cr.Def.Name {
				t.Fatalf("task %d, reported %s: %+v, %v", cr.Def.ID, cr.Def.Name, got.Def, err)
			}
		}
	}
}

// testGaleraSchemaLock: on Galera, Migrate's lock is a row of schema_lock that a committed
// UPDATE takes, so it holds across the cluster (GET_LOCK, one node's own, did not). Here the
// lock is held through node 1, as a Migrate in progress holds it; a store opened through
// node 2 on the same new database waits and creates no table until it is freed, then opens.
func testGaleraSchemaLock(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	release, err := persist.HoldSchemaLock(ctx, persist.SchemeMySQL+":"+c.ServerDSN(0)+db)
	if err != nil {
		t.Fatalf("cannot hold the schema lock through node 1: %v", err)
	}
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	opened := make(chan error, 1)
	go func() {
		s, err := persist.Open(ctx, persist.SchemeMySQL+":"+c.ServerDSN(1)+db)
		if err == nil {
			_ = s.Close()
		}
		opened <- err
	}()
	watch := nodeConn(t, ctx, c.Node(2), 1)
	tables := func() int {
		var n int
		if err := watch.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME <> 'schema_lock'", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Three seconds of the store's Open, polling the lock every 250 ms: it must neither
	// return nor create a table while node 1's session holds the lock.
	for range 12 {
		select {
		case err := <-opened:
			t.Fatalf("Open through node 2 returned while node 1 held the schema lock: %v", err)
		case <-time.After(250 * time.Millisecond):
		}
		if n := tables(); n != 0 {
			t.Fatalf("Open through node 2 created %d tables while node 1 held the schema lock", n)
		}
	}
	release()
	released = true
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("Open through node 2 after the schema lock was freed: %v", err)
		}
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if tables() == 0 {
		t.Fatal("Open through node 2 created no table")
	}
}

// testGaleraMigrateAcrossNodes: two axe processes starting on a new database through two
// nodes at once both open it; each migration step is applied once, and the lock is free
// after. Ten rounds, each on a new database.
func testGaleraMigrateAcrossNodes(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	for round := range 10 {
		db := galeraDatabase(t, c)
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				<-start
				s, err := persist.Open(ctx, persist.SchemeMySQL+":"+c.ServerDSN(i)+db)
				if err == nil {
					err = s.Close()
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: Open through node %d while node %d opened too: %v", round, i+1, 2-i, err)
			}
		}
		conn := nodeConn(t, ctx, c.Node(2), 1)
		var steps, newest int
		if err := conn.QueryRowContext(ctx, "SELECT COUNT(*), MAX(version) FROM "+db+".schema_migrations").Scan(&steps, &newest); err != nil {
			t.Fatal(err)
		}
		// Every step once: as many as the code has, which may skip a number (a step number
		// taken by a change merged later).
		if want := len(persist.MigrationStatements(persist.SchemeMySQL)); newest != persist.SchemaVersion() || steps != want {
			t.Fatalf("round %d: schema_migrations has %d steps up to %d, want %d up to %d", round, steps, newest, want, persist.SchemaVersion())
		}
		var holder string
		if err := conn.QueryRowContext(ctx, "SELECT holder FROM "+db+".schema_lock WHERE name = 'migrate'").Scan(&holder); err != nil || holder != "" {
			t.Fatalf("round %d: the schema lock after both opened is held by %q (%v)", round, holder, err)
		}
	}
}

// ---- the fence ----

// batchGate is a context whose Err blocks the first time a batch asks for it past its fence
// check (or, unfenced, at its first write): in the driver's check before the statement, so
// the batch holds its transaction open, with the fence row locked (on Galera, written), as
// a batch of an old primary still committing does. paused is closed then; the batch goes on
// once resume is closed.
type batchGate struct {
	context.Context
	paused, resume chan struct{}
	once           sync.Once
}

func newBatchGate(ctx context.Context) *batchGate {
	return &batchGate{Context: ctx, paused: make(chan struct{}), resume: make(chan struct{})}
}

func (g *batchGate) Err() error {
	if pastFenceCheck() {
		g.once.Do(func() {
			close(g.paused)
			<-g.resume
		})
	}
	return g.Context.Err()
}

// pastFenceCheck reports whether the caller runs inside a batch's writes after its fence
// check.
func pastFenceCheck() bool {
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(3, pc)])
	inBatch, inFence := false, false
	for {
		f, more := frames.Next()
		inBatch = inBatch || strings.HasSuffix(f.Function, ".(*sqlStore).writeBatch")
		inFence = inFence || strings.HasSuffix(f.Function, ".(*sqlStore).checkEpoch") ||
			strings.HasSuffix(f.Function, ".(*sqlStore).checkShardFences")
		if !more {
			return inBatch && !inFence
		}
	}
}

// fenceSetup is an old primary's store (old) holding the lease, with one fenced batch of
// its epoch paused past the fence check, and a new primary's store (next).
type fenceSetup struct {
	old, next persist.Store
	k         *task
	start     int64 // the task's version before the paused batch
	lease     string
	epoch     int64
	gate      *batchGate
	done      chan error // the paused batch's result
}

func startFenced(t *testing.T, ctx context.Context, c *galeratest.Cluster, db string, oldNode, nextNode int, lease string) *fenceSetup {
	t.Helper()
	f := &fenceSetup{old: galeraStore(t, c, db, oldNode), next: galeraStore(t, c, db, nextNode), lease: lease,
		done: make(chan error, 1)}
	f.k = newTask(t, f.old, "fenced-"+lease)
	l, ok, err := f.old.TakeLease(ctx, lease, "old", time.Minute)
	if err != nil || !ok {
		t.Fatalf("TakeLease(old) = %+v, %v, %v", l, ok, err)
	}
	f.epoch, f.start = l.Epoch, f.k.rt.Version
	b := batchOf(f.k.next())
	b.LeaseName, b.Epoch = lease, l.Epoch
	f.gate = newBatchGate(ctx)
	go func() { f.done <- f.old.ApplyBatch(f.gate, b) }()
	select {
	case <-f.gate.paused:
	case err := <-f.done:
		t.Fatalf("the old primary's batch ended before its writes: %v", err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	// The old primary's lease ends (released here; expiring is the same to the fence) while
	// its batch is still open.
	if err := f.old.ReleaseLease(ctx, lease, "old", l.Epoch); err != nil {
		t.Fatal(err)
	}
	return f
}

// startShardFenced is startFenced for a shard: the old owner holds shard's lease and its
// batch, fenced by that shard alone, is paused past the fence check; then it releases the
// shard.
func startShardFenced(t *testing.T, ctx context.Context, c *galeratest.Cluster, db string, oldNode, nextNode, shard int) *fenceSetup {
	t.Helper()
	f := &fenceSetup{old: galeraStore(t, c, db, oldNode), next: galeraStore(t, c, db, nextNode), lease: model.ShardLeaseName(shard),
		done: make(chan error, 1)}
	f.k = newTask(t, f.old, fmt.Sprintf("fenced-shard-%d", shard))
	taken, err := f.old.TakeShards(ctx, "old", []int{shard}, time.Minute)
	if err != nil || len(taken) != 1 {
		t.Fatalf("TakeShards(old, %d) = %+v, %v", shard, taken, err)
	}
	f.epoch, f.start = taken[0].Epoch, f.k.rt.Version
	b := batchOf(f.k.next())
	b.Shards = []persist.ShardFence{{Shard: shard, Epoch: f.epoch}}
	f.gate = newBatchGate(ctx)
	go func() { f.done <- f.old.ApplyBatch(f.gate, b) }()
	select {
	case <-f.gate.paused:
	case err := <-f.done:
		t.Fatalf("the old owner's batch ended before its writes: %v", err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if err := f.old.ReleaseShards(ctx, "old", b.Shards); err != nil {
		t.Fatal(err)
	}
	return f
}

// testGaleraShardFenceStaleCommit is testGaleraFenceStaleCommit for a shard's fence: a batch
// of a shard's old owner, past its fence check on one node when the shard is taken over
// through another node that the first lags behind, is refused at commit with ErrLeaseLost and
// writes nothing.
func testGaleraShardFenceStaleCommit(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	galeraExec(t, c, "CREATE TABLE "+db+".lag_pad (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(200)) ENGINE=InnoDB")
	writer := nodeConn(t, ctx, c.Node(1), 0)
	stale := nodeConn(t, ctx, c.Node(0), 0)
	rows := 200_000
	for round := range 4 {
		shard := 10 + round
		f := startShardFenced(t, ctx, c, db, 0, 1, shard)
		if _, err := writer.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s.lag_pad (pad) SELECT REPEAT('x', 200) FROM %s.seq_1_to_%d", db, db, rows)); err != nil {
			t.Fatal(err)
		}
		taken, err := f.next.TakeShards(ctx, "next", []int{shard}, time.Minute)
		if err != nil || len(taken) != 1 || taken[0].Epoch != f.epoch+1 {
			t.Fatalf("the takeover of shard %d through node 2 = %+v, %v", shard, taken, err)
		}
		var seen int64
		if err := stale.QueryRowContext(ctx, "SELECT epoch FROM "+db+".lease WHERE name = ?", f.lease+"#fence").Scan(&seen); err != nil {
			t.Fatal(err)
		}
		certFailures := nodeStatus(t, ctx, c.Node(0), "wsrep_local_cert_failures")
		err = f.finish(ctx)
		if !errors.Is(err, model.ErrLeaseLost) {
			t.Fatalf("round %d: the old owner's batch of shard %d at epoch %d after epoch %d was taken through node 2 = %v, want ErrLeaseLost",
				round, shard, f.epoch, taken[0].Epoch, err)
		}
		got, gerr := f.next.GetTask(ctx, f.k.name)
		if gerr != nil || got.Runtime.Version != f.start {
			t.Fatalf("round %d: task after the refused batch: %+v, %v; want it unchanged at version %d", round, got.Runtime, gerr, f.start)
		}
		after := nodeStatus(t, ctx, c.Node(0), "wsrep_local_cert_failures")
		if seen == f.epoch && after != certFailures {
			t.Logf("round %d: node 1 had not applied the takeover (fence at epoch %d); certification refused the batch (wsrep_local_cert_failures %s -> %s): %v",
				round, seen, certFailures, after, err)
			return
		}
		t.Logf("round %d: node 1 applied the takeover within %d rows' time (fence seen at %d, cert failures %s -> %s); again with more",
			round, rows, seen, certFailures, after)
		rows *= 2
	}
	t.Fatal("node 1 never lagged behind the takeover: certification refusing the stale batch was not shown")
}

// finish lets the paused batch go on and returns its result.
func (f *fenceSetup) finish(ctx context.Context) error {
	close(f.gate.resume)
	select {
	case err := <-f.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fenceWaiters counts the other sessions of conn's node running a statement on lease's
// fence row. MariaDB's INNODB_TRX reports a transaction waiting for that row as RUNNING,
// not LOCK WAIT, and INNODB_LOCK_WAITS stays empty, so the wait is seen in PROCESSLIST.
func fenceWaiters(t *testing.T, ctx context.Context, conn *sql.Conn, lease string) int {
	t.Helper()
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
		WHERE ID <> CONNECTION_ID() AND COMMAND = 'Query' AND INFO LIKE ?`,
		"%"+lease+"#fence%").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// testGaleraFenceOneNode: with the old and the new primary on the same node, the fence
// works as on one server: the takeover waits, in a row-lock wait, for the old primary's
// batch, which commits under the old epoch; then the takeover lands.
func testGaleraFenceOneNode(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	f := startFenced(t, ctx, c, db, 0, 0, "one-node")
	took := make(chan error, 1)
	var l persist.LeaseState
	go func() {
		var ok bool
		var err error
		l, ok, err = f.next.TakeLease(ctx, f.lease, "next", time.Minute)
		if err == nil && !ok {
			err = fmt.Errorf("not taken: %+v", l)
		}
		took <- err
	}()
	watch := nodeConn(t, ctx, c.Node(0), 0)
	// The takeover waits when its statement on the fence row is seen running in two polls
	// 200 ms apart and it has not returned; it must be seen within 10 s, far inside the
	// server's 50 s lock wait limit.
	deadline := time.After(10 * time.Second)
	for seen := 0; seen < 2; {
		if fenceWaiters(t, ctx, watch, f.lease) > 0 {
			seen++
		} else {
			seen = 0
		}
		select {
		case err := <-took:
			t.Fatalf("the takeover on the old primary's node did not wait for its open batch: %v", err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-deadline:
			t.Fatal("the takeover's statement on the fence row was not seen running within 10 s")
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := f.finish(ctx); err != nil {
		t.Fatalf("the old primary's batch, begun before the takeover: %v", err)
	}
	t.Logf("the takeover waited on the fence row until the batch committed")
	if err := <-took; err != nil || l.Epoch != f.epoch+1 {
		t.Fatalf("the takeover after the batch: %+v, %v; want epoch %d", l, err, f.epoch+1)
	}
}

// testGaleraFenceAcrossNodes: with the old primary on node 1 and the new one on node 2, the
// takeover does not wait for the old primary's open batch: the batch's lock on the fence row
// is node 1's own. The fence holds by certification instead: when node 1 applies the
// takeover's write set, its applier aborts the local transaction that holds the lock
// (a brute-force abort), and the batch, run again, meets the new epoch.
func testGaleraFenceAcrossNodes(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	aborts := nodeStatus(t, ctx, c.Node(0), "wsrep_local_bf_aborts")
	f := startFenced(t, ctx, c, db, 0, 1, "two-nodes")
	l, ok, err := f.next.TakeLease(ctx, f.lease, "next", time.Minute)
	if err != nil || !ok || l.Epoch != f.epoch+1 {
		t.Fatalf("the takeover through node 2 while node 1's batch is open = %+v, %v, %v; want taken at epoch %d",
			l, ok, err, f.epoch+1)
	}
	// A causal read through node 1 returns once node 1 has applied the takeover.
	if st, err := f.old.LeaseState(ctx, f.lease); err != nil || st.Epoch != l.Epoch {
		t.Fatalf("the lease read through node 1 after the takeover = %+v, %v; want epoch %d", st, err, l.Epoch)
	}
	if got := nodeStatus(t, ctx, c.Node(0), "wsrep_local_bf_aborts"); got == aborts {
		t.Errorf("node 1 applied the takeover without aborting the open batch (wsrep_local_bf_aborts still %s)", got)
	}
	err = f.finish(ctx)
	if !errors.Is(err, model.ErrLeaseLost) {
		t.Fatalf("the old primary's batch after the takeover reached its node = %v, want ErrLeaseLost", err)
	}
	got, err := f.next.GetTask(ctx, f.k.name)
	if err != nil || got.Runtime.Version != f.start {
		t.Fatalf("task after the refused batch = %+v, %v; want it unchanged at version %d", got.Runtime, err, f.start)
	}
}

// testGaleraFenceStaleCommit: the old primary's batch on node 1 has passed its fence (epoch
// e: on Galera an update of the fence row); the takeover commits through node 2 (epoch e+1)
// while node 1 is still applying an earlier large write set, so node 1 has not yet applied
// the takeover when the batch commits. The batch's write set and the takeover's share the
// fence row's key and the batch did not see the takeover: certification refuses the batch
// at its commit (wsrep_local_cert_failures on node 1), the store reads the fence again and
// reports ErrLeaseLost, and the task is unchanged. With the fence of one server (a shared
// lock, node 1's own) this batch committed after the takeover. A round in which node 1
// applied the takeover before the batch went on (its applier then aborts the batch, which
// meets the new epoch when run again) must refuse the batch too, and the next round writes
// a larger set.
func testGaleraFenceStaleCommit(t *testing.T, ctx context.Context, c *galeratest.Cluster) {
	db := galeraDatabase(t, c)
	galeraExec(t, c, "CREATE TABLE "+db+".lag_pad (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(200)) ENGINE=InnoDB")
	writer := nodeConn(t, ctx, c.Node(1), 0)
	stale := nodeConn(t, ctx, c.Node(0), 0)
	rows := 200_000
	for round := range 4 {
		lease := fmt.Sprintf("stale-%d", round)
		f := startFenced(t, ctx, c, db, 0, 1, lease)
		if !persist.Galera(f.old) {
			t.Fatal("the store on node 1 did not find its server to be a Galera node")
		}
		// A large write set through node 2: node 1 takes a while to apply it, and applies
		// the takeover only after it.
		if _, err := writer.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s.lag_pad (pad) SELECT REPEAT('x', 200) FROM %s.seq_1_to_%d", db, db, rows)); err != nil {
			t.Fatal(err)
		}
		l, ok, err := f.next.TakeLease(ctx, lease, "next", time.Minute)
		if err != nil || !ok || l.Epoch != f.epoch+1 {
			t.Fatalf("the takeover through node 2 = %+v, %v, %v", l, ok, err)
		}
		var seen int64
		if err := stale.QueryRowContext(ctx, "SELECT epoch FROM "+db+".lease WHERE name = ?", lease+"#fence").Scan(&seen); err != nil {
			t.Fatal(err)
		}
		certFailures := nodeStatus(t, ctx, c.Node(0), "wsrep_local_cert_failures")
		err = f.finish(ctx)
		if !errors.Is(err, model.ErrLeaseLost) {
			t.Fatalf("round %d: the old primary's batch of epoch %d after epoch %d was taken through node 2 = %v, want ErrLeaseLost",
				round, f.epoch, l.Epoch, err)
		}
		got, gerr := f.next.GetTask(ctx, f.k.name)
		if gerr != nil || got.Runtime.Version != f.start {
			t.Fatalf("round %d: task after the refused batch: %+v, %v; want it unchanged at version %d", round, got.Runtime, gerr, f.start)
		}
		now, lerr := f.next.LeaseState(ctx, lease)
		if lerr != nil || now.Epoch != f.epoch+1 || now.Holder != "next" {
			t.Fatalf("round %d: lease after the refused batch: %+v, %v", round, now, lerr)
		}
		after := nodeStatus(t, ctx, c.Node(0), "wsrep_local_cert_failures")
		if seen == f.epoch && after != certFailures {
			t.Logf("round %d: node 1 had not applied the takeover (fence at epoch %d); certification refused the batch (wsrep_local_cert_failures %s -> %s): %v",
				round, seen, certFailures, after, err)
			return
		}
		// Node 1 applied the takeover before the batch's commit: its applier aborted the
		// batch, which met the new epoch when run again. Nothing to show; more rows.
		t.Logf("round %d: node 1 applied the takeover within %d rows' time (fence seen at %d, cert failures %s -> %s); again with more",
			round, rows, seen, certFailures, after)
		rows *= 2
	}
	t.Fatal("node 1 never lagged behind the takeover: certification refusing the stale batch was not shown")
}
