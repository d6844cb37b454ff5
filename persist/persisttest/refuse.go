package persisttest

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/persist"
)

// RefuseParams makes the database behind dsn ("sqlite:PATH" or "mysql:DSN", migrated) refuse
// every insert and update of a task definition whose params contain marker, as a database
// refuses a value it cannot store: a trigger that aborts the statement (SQLite's
// SQLITE_CONSTRAINT_TRIGGER, MySQL's SIGNAL, error 1644). Every other write goes through. It
// is how tests reach the writer's handling of a refused group with a definition the engine's
// own checks accept, on both stores.
func RefuseParams(t testing.TB, dsn, marker string) {
	t.Helper()
	quoted := "'" + strings.ReplaceAll(marker, "'", "''") + "'"
	var (
		db    *sql.DB
		stmts []string
		err   error
	)
	switch {
	case strings.HasPrefix(dsn, persist.SchemeSQLite+":"):
		db, err = sql.Open("sqlite", strings.TrimPrefix(dsn, persist.SchemeSQLite+":"))
		for _, op := range []string{"INSERT", "UPDATE"} {
			stmts = append(stmts, `CREATE TRIGGER axe_t_refuse_`+strings.ToLower(op)+` BEFORE `+op+` ON task_def
				WHEN instr(NEW.params, `+quoted+`) > 0
				BEGIN SELECT RAISE(ABORT, 'refused by the test trigger'); END`)
		}
	case strings.HasPrefix(dsn, persist.SchemeMySQL+":"):
		var cfg *mysql.Config
		if cfg, err = mysql.ParseDSN(strings.TrimPrefix(dsn, persist.SchemeMySQL+":")); err == nil {
			db, err = sql.Open("mysql", cfg.FormatDSN())
		}
		for _, op := range []string{"INSERT", "UPDATE"} {
			stmts = append(stmts, `CREATE TRIGGER axe_t_refuse_`+strings.ToLower(op)+` BEFORE `+op+` ON task_def
				FOR EACH ROW BEGIN
					IF INSTR(NEW.params, `+quoted+`) > 0 THEN
						SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test trigger';
					END IF;
				END`)
		}
	default:
		t.Fatalf("RefuseParams: %q is neither a sqlite: nor a mysql: DSN", dsn)
	}
	if err != nil {
		t.Fatalf("RefuseParams: cannot open %s: %v", dsn, err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	for _, stmt := range stmts {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("RefuseParams: %v", err)
		}
	}
}
