package benchkit

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// ants starts its package-level default pool when imported (through persist's
		// dependencies); fasthttp keeps process-wide helpers and idle cleaners.
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

// mysqlDSN returns a fresh database's DSN, or skips without a server.
func mysqlDSN(t *testing.T) string {
	t.Helper()
	return persisttest.MySQLSchemaDSN(t)
}

// TestCommandProxyCounts checks that the proxy counts one command per statement a client
// sends, transactions' BEGIN and COMMIT included, and nothing for the handshake.
func TestCommandProxyCounts(t *testing.T) {
	dsn := mysqlDSN(t)
	addr, err := Addr(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewCommandProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	proxied, err := WithAddr(dsn, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	db, err := OpenSQL(proxied, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for range 3 {
		var one int
		if err := db.QueryRowContext(ctx, "SELECT ?", 1).Scan(&one); err != nil || one != 1 {
			t.Fatalf("SELECT through the proxy: %v, %d", err, one)
		}
	}
	if got := p.Commands(); got != 3 {
		t.Fatalf("after 3 queries the proxy counted %d commands, want 3", got)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := tx.ExecContext(ctx, "DO 1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := p.Commands(); got != 3+4 {
		t.Fatalf("after a transaction of 2 statements the proxy counted %d commands, want 7", got)
	}
}

// TestInsertTasks checks that the fixture writes tasks the store reads back as it would
// tasks it created: ids, names, callback, due time and state, over several statements.
func TestInsertTasks(t *testing.T) {
	dsn := mysqlDSN(t)
	ctx := context.Background()
	s, err := persist.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := OpenSQL(dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const n = 2500 // three statements of at most 1000 rows
	base := time.Now().UnixMilli()
	cb := model.Callback{Type: model.CallbackExecutor, App: "bench", Handler: "noop"}
	err = InsertTasks(ctx, db, Tasks{N: n, FirstID: 10, Prefix: "fx", Due: func(i int) int64 { return base + int64(i) }, Callback: cb, CreatedAt: base - 1000})
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	err = s.LoadDue(ctx, 1, base+n, []model.State{model.StateScheduled}, func(task *model.Task) error {
		i := int(task.Def.ID - 10)
		if task.Def.Name != "fx-"+strconv.FormatInt(task.Def.ID, 10) || task.Runtime.NextTriggerTime != base+int64(i) ||
			task.Def.Callback != cb || task.Def.DelayMS != int64(i)+1000 || task.Runtime.Version != 1 {
			t.Errorf("task %d read back as %+v", task.Def.ID, *task)
		}
		count++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if count != n {
		t.Fatalf("LoadDue read %d tasks, want %d", count, n)
	}
	got, err := s.GetTask(ctx, "fx-2509")
	if err != nil || got.Def.ID != 2509 {
		t.Fatalf("GetTask(fx-2509) = %+v, %v", got, err)
	}
}

// TestServerPID checks that the pid read for the server is a running MariaDB/MySQL
// server, whenever its pid file is readable from here.
func TestServerPID(t *testing.T) {
	dsn := mysqlDSN(t)
	ctx := context.Background()
	db, err := OpenSQL(dsn, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var file string
	if err := db.QueryRowContext(ctx, `SELECT @@pid_file`).Scan(&file); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(file); err != nil {
		t.Skipf("the server's pid file is not readable here: %v", err)
	}
	pid := ServerPID(ctx, db)
	if pid == 0 {
		t.Fatalf("ServerPID = 0 though %s is readable", file)
	}
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		t.Fatal(err)
	}
	if c := strings.TrimSpace(string(comm)); c != "mariadbd" && c != "mysqld" {
		t.Errorf("ServerPID = %d, a %q process, want the database server", pid, c)
	}
	if cpu, err := ProcessCPU(pid); err != nil || cpu <= 0 {
		t.Errorf("ProcessCPU(server) = %s, %v; want some CPU time", cpu, err)
	}
}

// TestParseDSN checks the DSN helpers, and that an SQLite DSN is refused.
func TestParseDSN(t *testing.T) {
	d, err := WithAddr("mysql:u:p@tcp(db:3306)/axe", "127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	if a, err := Addr(d); err != nil || a != "127.0.0.1:9" {
		t.Fatalf("Addr(%q) = %q, %v", d, a, err)
	}
	if a, err := Addr("u:p@tcp(db:3306)/"); err != nil || a != "db:3306" {
		t.Fatalf("Addr of a DSN without scheme = %q, %v", a, err)
	}
	if _, err := Addr("sqlite:axe.db"); err == nil {
		t.Fatal("an sqlite DSN was accepted")
	}
}

func TestPercentileAndSummary(t *testing.T) {
	sorted := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    float64
		want int64
	}{{0, 1}, {0.5, 5}, {0.9, 9}, {0.99, 10}, {1, 10}} {
		if got := Percentile(sorted, c.p); got != c.want {
			t.Errorf("Percentile(1..10, %v) = %d, want %d", c.p, got, c.want)
		}
	}
	if got := Percentile([]int64(nil), 0.5); got != 0 {
		t.Errorf("Percentile(empty) = %d, want 0", got)
	}
	s := Summarize([]float64{5, 1, 3, 2})
	if s.N != 4 || s.Median != 2.5 || s.Min != 1 || s.Max != 5 {
		t.Errorf("Summarize = %+v, want N 4, median 2.5, min 1, max 5", s)
	}
	if got := s.Format("%.1f"); got != "2.5 (1.0–5.0)" {
		t.Errorf("Format = %q", got)
	}
	for v, want := range map[float64]string{123456: "123456", 12.34: "12.3", 1.234: "1.23", 0.001234: "0.0012", 0: "0"} {
		if got := Num(v); got != want {
			t.Errorf("Num(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestProcReadings checks the process readings against facts: this process has resident
// memory and has used CPU, and the machine has memory.
func TestProcReadings(t *testing.T) {
	if _, err := os.Stat("/proc/self/statm"); err != nil {
		t.Skip("no /proc on this system")
	}
	rss, err := RSS()
	if err != nil || rss <= 0 {
		t.Fatalf("RSS() = %d, %v", rss, err)
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) { // burn a little CPU so there is some to read
	}
	cpu, err := ProcessCPU(os.Getpid())
	if err != nil || cpu <= 0 {
		t.Fatalf("ProcessCPU(self) = %s, %v", cpu, err)
	}
	if self := CPUTime(); self < cpu-20*time.Millisecond {
		t.Errorf("CPUTime() = %s is below ProcessCPU(self) = %s", self, cpu)
	}
	if MemTotal() <= 0 {
		t.Error("MemTotal() found no memory")
	}
}
