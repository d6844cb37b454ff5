// Package persisttest gives tests of every axe package a fresh, real store (embedded SQLite
// or MySQL/MariaDB) and holds the conformance suite that both stores must pass.
//
// It owns only test scaffolding: databases it creates are named axe_t_<random>, so parallel
// packages and reruns never collide, and each is dropped when its test ends. It never
// touches any other database on the server.
package persisttest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
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

// setupTimeout bounds creating and dropping a test database.
const setupTimeout = 30 * time.Second

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
	dsn := MySQLDSN(t)
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

// exec runs one statement on a short-lived connection to the server.
func exec(t testing.TB, cfg *mysql.Config, stmt string) {
	t.Helper()
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("cannot configure the MySQL test server: %v", err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		t.Fatalf("cannot run %q on the MySQL test server: %v", stmt, err)
	}
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
