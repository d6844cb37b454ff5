// Package xxltest gives tests an XXL-JOB admin database of either schema generation on
// the MariaDB/MySQL server named by AXE_TEST_MYSQL_DSN, created fresh for each test and
// dropped when it ends. The schemas are written by hand (see README.md).
package xxltest

import (
	"context"
	"database/sql"
	_ "embed"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the test server

	"github.com/axe-sched/axe/persist/persisttest"
)

// The two schema generations.
const (
	Gen22 = "2.2" // job_cron
	Gen23 = "2.3" // schedule_type, schedule_conf, misfire_strategy
)

var (
	//go:embed xxl_job_2.2.sql
	schema22 string
	//go:embed xxl_job_2.3.sql
	schema23 string
)

// Database creates a fresh database with the XXL-JOB tables of generation gen and returns
// its "mysql:…" DSN and an open handle (closed when the test ends). Without
// AXE_TEST_MYSQL_DSN the test is skipped (see persisttest.MySQLDSN).
func Database(t testing.TB, gen string) (string, *sql.DB) {
	t.Helper()
	dsn := persisttest.MySQLDSN(t)
	db, err := sql.Open("mysql", strings.TrimPrefix(dsn, "mysql:"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	schema := schema23
	if gen == Gen22 {
		schema = schema22
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, stmt := range strings.Split(schema, ";") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("XXL-JOB %s schema: %v", gen, err)
		}
	}
	return dsn, db
}

// Exec runs statements on db, failing the test on an error.
func Exec(t testing.TB, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
