package persist_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/internal/test/testproxy"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestReachTimeoutBoundsThePingNotTheMigrations: OpenOptions.ReachTimeout gives up on a
// database that does not answer, but a migration step that waits longer than it (here, on a
// table another session holds locked, as a rebuild of a large table would take long) goes on
// until it is done.
func TestReachTimeoutBoundsThePingNotTheMigrations(t *testing.T) {
	t.Parallel()
	// Long enough for a loaded box's ping (300 ms was not, in a quiet whole-suite run), and
	// well below the time the migration is held.
	const reach = 2 * time.Second

	t.Run("migration outlasts it", func(t *testing.T) {
		t.Parallel()
		dsn := persisttest.MySQLDSN(t)
		loadMySQLDump(t, dsn, fixturePath("v20", "mysql.sql")) // step 22 alters task_def
		db, err := sql.Open("mysql", strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "LOCK TABLES task_def WRITE"); err != nil {
			t.Fatal(err)
		}
		type opened struct {
			s   persist.Store
			err error
		}
		done := make(chan opened, 1)
		began := time.Now()
		go func() {
			s, err := persist.OpenWith(context.Background(), dsn, persist.OpenOptions{ReachTimeout: reach})
			done <- opened{s, err}
		}()
		const held = 3 * reach
		select {
		case o := <-done:
			if o.s != nil {
				_ = o.s.Close()
			}
			t.Fatalf("open returned (%v) while task_def was locked: it cannot have migrated step 22", o.err)
		case <-time.After(held):
		}
		if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
			t.Fatal(err)
		}
		var o opened
		select {
		case o = <-done:
		case <-ctx.Done():
			t.Fatal("open did not return after the lock was released")
		}
		if o.err != nil {
			t.Fatalf("open after a migration step waited %s (ReachTimeout %s): %v", held, reach, o.err)
		}
		defer o.s.Close()
		if took := time.Since(began); took < held {
			t.Fatalf("open took %s, less than the %s task_def was locked", took, held)
		}
		var v int
		if err := db.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&v); err != nil || v != persist.SchemaVersion() {
			t.Fatalf("schema version %d (%v), want %d", v, err, persist.SchemaVersion())
		}
	})

	t.Run("unanswered ping", func(t *testing.T) {
		t.Parallel()
		dsn := persisttest.MySQLDSN(t)
		cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := testproxy.New(cfg.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.Blackhole(); err != nil {
			t.Fatal(err)
		}
		cfg.Addr = p.Addr()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		s, err := persist.OpenWith(ctx, persist.SchemeMySQL+":"+cfg.FormatDSN(), persist.OpenOptions{ReachTimeout: reach})
		if err == nil {
			_ = s.Close()
			t.Fatal("open through a blackhole succeeded")
		}
		if ctx.Err() != nil {
			t.Fatalf("open through a blackhole ran until the test's own deadline: %v", err)
		}
	})
}
