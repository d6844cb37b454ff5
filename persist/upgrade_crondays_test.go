package persist_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestUpgradeKeepsCronDays upgrades a v7 database holding a unix expression whose days the
// new day rule reads differently ("*/2" in the day of month next to a day of week: odd days or
// Mondays before, odd days that are Mondays now; "5,*" or "10,?", which the old rule read as
// unrestricted). The upgrade must keep its days: the stored expression becomes one both rules
// read alike ("1-31/2", "*"), and the task's timeline says why. A second Migrate changes
// nothing more.
func TestUpgradeKeepsCronDays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ before, after string }{
		{"0 2 */2 * MON", "0 2 1-31/2 * MON"},
		{"0 2 5,* * MON", "0 2 * * MON"},
		{"0 2 10,? 1-12 MON,FRI", "0 2 * 1-12 MON,FRI"},
	} {
		t.Run(persist.SchemeSQLite+"/"+tc.before, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "axe.db")
			copyFile(t, fixturePath("v7", "sqlite"), path)
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			setCron(t, db, "nightly-report", tc.before)
			db.Close()
			checkCronDays(t, "sqlite:"+path, tc.before, tc.after)
		})
		t.Run(persist.SchemeMySQL+"/"+tc.before, func(t *testing.T) {
			dsn := persisttest.MySQLDSN(t)
			loadMySQLDump(t, dsn, fixturePath("v7", "mysql.sql"))
			db, err := sql.Open("mysql", strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
			if err != nil {
				t.Fatal(err)
			}
			setCron(t, db, "nightly-report", tc.before)
			db.Close()
			checkCronDays(t, dsn, tc.before, tc.after)
		})
	}
}

// setCron writes a cron expression into a task's row as the build of the fixture stored it.
func setCron(t *testing.T, db *sql.DB, name, cron string) {
	t.Helper()
	res, err := db.Exec(`UPDATE task_def SET cron = ? WHERE name = ?`, cron, name)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("no task %q in the fixture", name)
	}
}

func checkCronDays(t *testing.T, dsn, before, after string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := persist.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("cannot open the fixture with today's store: %v", err)
	}
	defer s.Close()
	for round := 1; round <= 2; round++ {
		if round == 2 {
			if err := s.Migrate(ctx); err != nil {
				t.Fatalf("second Migrate: %v", err)
			}
		}
		task, err := s.GetTask(ctx, "nightly-report")
		if err != nil {
			t.Fatal(err)
		}
		if task.Def.Cron != after {
			t.Fatalf("round %d: cron %q, want %q", round, task.Def.Cron, after)
		}
		acts, err := s.ListActions(ctx, task.Def.ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, a := range acts {
			if a.Action == "update" && a.Actor == "upgrade" {
				n++
				if !strings.Contains(a.Detail, before) || !strings.Contains(a.Detail, after) || a.From != task.Runtime.State {
					t.Errorf("the upgrade's action reads %+v", a)
				}
			}
		}
		if n != 1 {
			t.Errorf("round %d: %d upgrade actions, want 1", round, n)
		}
	}
	// The other cron task, whose "*/5" is in the minute field, is untouched.
	other, err := s.GetTask(ctx, "invoice-run")
	if err != nil {
		t.Fatal(err)
	}
	if other.Def.Cron != "*/5 * * * *" {
		t.Errorf("invoice-run's cron became %q", other.Def.Cron)
	}
}
