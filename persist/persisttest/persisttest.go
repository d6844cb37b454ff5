// Package persisttest gives tests of every axe package a fresh, real store (embedded SQLite
// or MySQL/MariaDB) and holds the conformance suite that both stores must pass.
//
// It owns only test scaffolding: databases it creates are named axe_t_<random>, so parallel
// packages and reruns never collide, and each is dropped when its test ends. Beside them it
// keeps, on each server it is given (the test server, a test's own Galera cluster), one
// database axe_t_template_<schema digest> holding axe's current schema, which CopySchema
// copies and nothing writes once it is made. It never touches any other database there.
package persisttest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/persist"
)

// Environment variables read by MySQL and MySQLDSN.
const (
	// EnvMySQLDSN is a go-sql-driver DSN of a server the tests may create databases on, e.g.
	// root:@tcp(127.0.0.1:3306)/ (a database name in it is ignored; a "mysql:" prefix is
	// accepted).
	EnvMySQLDSN = "AXE_TEST_MYSQL_DSN"
	// EnvRequireMySQL set to 1 turns a missing EnvMySQLDSN from a skip into a failure, so CI
	// cannot pass by silently skipping the MySQL half of the suite.
	EnvRequireMySQL = "AXE_REQUIRE_MYSQL"
)

// setupTimeout bounds creating and dropping a test database: generous, for a server other
// work keeps busy (a DROP beside a CPU hog took more than 30 s).
const setupTimeout = 2 * time.Minute

// SQLite returns a fresh embedded store in t.TempDir(), closed when the test ends.
func SQLite(t testing.TB) persist.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	s, err := persist.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"))
	if err != nil {
		t.Fatalf("cannot open sqlite store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// MySQL returns a store on a fresh database axe_t_<random>, created on the server named by
// AXE_TEST_MYSQL_DSN and dropped when the test ends. Without that variable the test is
// skipped, or fails when AXE_REQUIRE_MYSQL=1.
func MySQL(t testing.TB) persist.Store {
	t.Helper()
	dsn := MySQLSchemaDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	s, err := persist.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("cannot open mysql store: %v", err)
	}
	// Cleanups run last-registered first: the store closes before its database is dropped.
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// MySQLDSN creates a fresh database like MySQL does and returns its "mysql:…" DSN, for tests
// that open their own store (a daemon under test). The database is dropped when the test
// ends.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	raw := strings.TrimPrefix(os.Getenv(EnvMySQLDSN), persist.SchemeMySQL+":")
	if raw == "" {
		if os.Getenv(EnvRequireMySQL) == "1" {
			t.Fatalf("%s is unset but %s=1: set it to a server DSN, e.g. root:@tcp(127.0.0.1:3306)/", EnvMySQLDSN, EnvRequireMySQL)
		}
		t.Skipf("skipping MySQL: set %s to a server DSN, e.g. root:@tcp(127.0.0.1:3306)/", EnvMySQLDSN)
	}
	cfg, err := mysql.ParseDSN(raw)
	if err != nil {
		t.Fatalf("cannot parse %s: %v", EnvMySQLDSN, err)
	}
	name := "axe_t_" + randomHex()
	admin := cfg.Clone()
	admin.DBName = ""
	exec(t, admin, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	t.Cleanup(func() { exec(t, admin, "DROP DATABASE IF EXISTS "+name) })
	cfg.DBName = name
	return persist.SchemeMySQL + ":" + cfg.FormatDSN()
}

// serverDB opens a short-lived handle on the server of cfg, and a context bounded by
// setupTimeout for its statements; done closes both.
func serverDB(t testing.TB, cfg *mysql.Config) (db *sql.DB, ctx context.Context, done func()) {
	t.Helper()
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("cannot configure the MySQL test server: %v", err)
	}
	db = sql.OpenDB(connector)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	return db, ctx, func() { cancel(); _ = db.Close() }
}

// exec runs one statement on a short-lived connection to the server.
func exec(t testing.TB, cfg *mysql.Config, stmt string) {
	t.Helper()
	db, ctx, done := serverDB(t, cfg)
	defer done()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		t.Fatalf("cannot run %q on the MySQL test server: %v", stmt, err)
	}
}

// MySQLSchemaDSN is MySQLDSN with axe's current schema already in the database, for tests
// whose store or daemon would migrate an empty one anyway. Migrating a fresh database is
// about a second of DDL on a loaded box, and the suite makes hundreds; this copies the tables
// of a template migrated once (CREATE TABLE … LIKE in one round trip, and the rows of the
// tables the migrations fill), a third of that. A test of migrations wants MySQLDSN.
func MySQLSchemaDSN(t testing.TB) string {
	t.Helper()
	dsn := MySQLDSN(t)
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
	if err != nil {
		t.Fatalf("cannot parse %s: %v", dsn, err)
	}
	admin := cfg.Clone()
	admin.DBName = ""
	CopySchema(t, admin, cfg.DBName)
	return dsn
}

// CopySchema puts axe's current schema into the empty database name on admin's server (a
// go-sql-driver config without a database), copied from that server's template, which the
// first call for the server makes. MySQLSchemaDSN uses it on the test server; a test with a
// server of its own (a Galera cluster) calls it directly.
func CopySchema(t testing.TB, admin *mysql.Config, name string) {
	t.Helper()
	tpl := schemaTemplate(t, admin)
	var stmts []string
	for _, tb := range tpl.tables {
		stmts = append(stmts, fmt.Sprintf("CREATE TABLE `%s`.`%s` LIKE `%s`.`%s`", name, tb, tpl.name, tb))
	}
	for _, tb := range tpl.filled {
		stmts = append(stmts, fmt.Sprintf("INSERT INTO `%s`.`%s` SELECT * FROM `%s`.`%s`", name, tb, tpl.name, tb))
	}
	multi := admin.Clone()
	multi.MultiStatements = true
	exec(t, multi, strings.Join(stmts, ";\n"))
}

// template is the database CopySchema copies: its tables, and those with rows.
type template struct {
	name           string
	tables, filled []string
}

// schemaTpl holds the templates this process has found or made, by server address.
var schemaTpl struct {
	sync.Mutex
	m map[string]*template
}

// templateReady is the table a template's maker adds once the migrations are done: a
// template without it was left half made (a killed test process) and is made again.
const templateReady = "axe_template_ready"

// schemaTemplate returns the template of this build's schema on admin's server, making it
// first when no test process has: under a named lock of the server, so that packages
// testing at once make it once.
func schemaTemplate(t testing.TB, admin *mysql.Config) *template {
	t.Helper()
	schemaTpl.Lock()
	defer schemaTpl.Unlock()
	if tp := schemaTpl.m[admin.Addr]; tp != nil {
		return tp
	}
	tp := &template{name: "axe_t_template_" + persist.SchemaDigest()}
	db, ctx, done := serverDB(t, admin)
	defer done()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("cannot reach the MySQL test server: %v", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", tp.name, int(setupTimeout/time.Second)).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("cannot take the lock of the template database %s: %v (answer %v)", tp.name, err, got)
	}
	defer conn.ExecContext(context.Background(), "SELECT RELEASE_LOCK(?)", tp.name) //nolint:errcheck // the lock goes with the connection anyway
	var ready int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?", tp.name, templateReady).Scan(&ready); err != nil {
		t.Fatalf("cannot look for the template database %s: %v", tp.name, err)
	}
	if ready == 0 {
		for _, stmt := range []string{"DROP DATABASE IF EXISTS " + tp.name, "CREATE DATABASE " + tp.name + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"} {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("cannot run %q on the MySQL test server: %v", stmt, err)
			}
		}
		cfg := admin.Clone()
		cfg.DBName = tp.name
		s, err := persist.Open(ctx, persist.SchemeMySQL+":"+cfg.FormatDSN())
		if err != nil {
			t.Fatalf("cannot migrate the template database %s: %v", tp.name, err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("cannot close the template database %s: %v", tp.name, err)
		}
		if _, err := conn.ExecContext(ctx, "CREATE TABLE "+tp.name+"."+templateReady+" (made BIGINT NOT NULL)"); err != nil {
			t.Fatalf("cannot mark the template database %s made: %v", tp.name, err)
		}
	}
	rows, err := conn.QueryContext(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND table_name <> ? ORDER BY table_name", tp.name, templateReady)
	if err != nil {
		t.Fatalf("cannot list the template's tables: %v", err)
	}
	for rows.Next() {
		var tb string
		if err := rows.Scan(&tb); err != nil {
			t.Fatalf("cannot list the template's tables: %v", err)
		}
		tp.tables = append(tp.tables, tb)
	}
	if err := rows.Close(); err != nil {
		t.Fatalf("cannot list the template's tables: %v", err)
	}
	for _, tb := range tp.tables {
		var n int
		if err := conn.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM `%s`.`%s`", tp.name, tb)).Scan(&n); err != nil {
			t.Fatalf("cannot count the template's %s: %v", tb, err)
		}
		if n > 0 {
			tp.filled = append(tp.filled, tb)
		}
	}
	if len(tp.tables) == 0 {
		t.Fatalf("the template database %s has no tables", tp.name)
	}
	if schemaTpl.m == nil {
		schemaTpl.m = make(map[string]*template)
	}
	schemaTpl.m[admin.Addr] = tp
	return tp
}

func randomHex() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}

// Each runs fn as the subtests "sqlite" and "mysql", each on a fresh store.
func Each(t *testing.T, fn func(t *testing.T, s persist.Store)) {
	t.Helper()
	t.Run(persist.SchemeSQLite, func(t *testing.T) { fn(t, SQLite(t)) })
	t.Run(persist.SchemeMySQL, func(t *testing.T) { fn(t, MySQL(t)) })
}

// EachDSN is Each that also gives fn the store's DSN, for a test that reaches the database
// beside the store (RefuseParams) or opens another store on it.
func EachDSN(t *testing.T, fn func(t *testing.T, s persist.Store, dsn string)) {
	t.Helper()
	open := func(t *testing.T, dsn string) persist.Store {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		s, err := persist.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("cannot open %s: %v", dsn, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Run(persist.SchemeSQLite, func(t *testing.T) {
		dsn := persist.SchemeSQLite + ":" + filepath.Join(t.TempDir(), "axe.db")
		fn(t, open(t, dsn), dsn)
	})
	t.Run(persist.SchemeMySQL, func(t *testing.T) {
		dsn := MySQLDSN(t)
		fn(t, open(t, dsn), dsn)
	})
}
