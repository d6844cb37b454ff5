// Package xxltest gives tests an XXL-JOB admin database of any schema generation on
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

// The schema generations, each a hand-written file (see README.md).
const (
	Gen20    = "2.0"   // XXL_JOB_QRTZ_TRIGGER_INFO beside Quartz's tables; no trigger_status
	Gen21    = "2.1"   // xxl_job_info with job_cron and trigger_status; a group's `order`
	Gen22    = "2.2"   // job_cron
	Gen23    = "2.3"   // schedule_type, schedule_conf, misfire_strategy
	GenLater = "later" // 2.3 with a group's name and access_token
)

var (
	//go:embed xxl_job_2.0.sql
	schema20 string
	//go:embed xxl_job_2.1.sql
	schema21 string
	//go:embed xxl_job_2.2.sql
	schema22 string
	//go:embed xxl_job_2.3.sql
	schema23 string
	//go:embed xxl_job_later.sql
	schemaLater string

	schemas = map[string]string{Gen20: schema20, Gen21: schema21, Gen22: schema22, Gen23: schema23, GenLater: schemaLater}
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
	schema, ok := schemas[gen]
	if !ok {
		t.Fatalf("no XXL-JOB schema generation %q", gen)
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
