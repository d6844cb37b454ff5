package persisttest

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/persist"
)

// HoldWrites stalls the database behind dsn ("sqlite:PATH" or "mysql:DSN", migrated) the way
// a database under another client's long write stalls: a second connection takes the write
// lock and keeps it, so the store's commits wait on it instead of failing. On SQLite that is
// a BEGIN IMMEDIATE transaction left open (the store waits within its busy_timeout); on
// MySQL, LOCK TABLES … WRITE on the tables a fire and a run's end write (the store waits on
// the metadata lock). It returns once the lock is held; release (idempotent, also run when
// the test ends) lets the store's commits through.
func HoldWrites(t testing.TB, dsn string) (release func()) {
	t.Helper()
	var (
		db   *sql.DB
		hold []string
		free string
		err  error
	)
	switch {
	case strings.HasPrefix(dsn, persist.SchemeSQLite+":"):
		// The lock is the database file's, so any connection to it will do; it waits for a
		// commit of the store's in progress rather than failing.
		db, err = sql.Open("sqlite", strings.TrimPrefix(dsn, persist.SchemeSQLite+":")+"?_pragma=busy_timeout(30000)")
		hold, free = []string{"BEGIN IMMEDIATE"}, "ROLLBACK"
	case strings.HasPrefix(dsn, persist.SchemeMySQL+":"):
		var cfg *mysql.Config
		if cfg, err = mysql.ParseDSN(strings.TrimPrefix(dsn, persist.SchemeMySQL+":")); err == nil {
			db, err = sql.Open("mysql", cfg.FormatDSN())
		}
		hold, free = []string{"LOCK TABLES task_run WRITE, task_runtime WRITE, task_action WRITE"}, "UNLOCK TABLES"
	default:
		t.Fatalf("HoldWrites: %q is neither a sqlite: nor a mysql: DSN", dsn)
	}
	if err != nil {
		t.Fatalf("HoldWrites: cannot open %s: %v", dsn, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		_ = db.Close()
		t.Fatalf("HoldWrites: cannot connect to %s: %v", dsn, err)
	}
	for _, stmt := range hold {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			_ = conn.Close()
			_ = db.Close()
			t.Fatalf("HoldWrites: %s: %v", stmt, err)
		}
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
			defer cancel()
			if _, err := conn.ExecContext(ctx, free); err != nil {
				t.Errorf("HoldWrites: %s: %v", free, err)
			}
			_ = conn.Close()
			_ = db.Close()
		})
	}
	t.Cleanup(release)
	return release
}
