package persist_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestMigrationCronDialect upgrades a database made by the schema before step 4, holding a
// cron task written with that schema's columns only, and checks the task reads as unix
// afterwards (so "0 0 12 ? * 2" still means Tuesday) and that new tasks keep their own
// dialect, on both stores.
func TestMigrationCronDialect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		dsn    func(t *testing.T) string
		driver string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "axe.db") }, "sqlite"},
		{"mysql", func(t *testing.T) string { return persisttest.MySQLDSN(t) }, "mysql"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := tc.dsn(t)
			if err := persist.MigrateBefore(ctx, dsn, 4); err != nil {
				t.Fatalf("old schema: %v", err)
			}
			db, err := sql.Open(tc.driver, strings.TrimPrefix(strings.TrimPrefix(dsn, "mysql:"), "sqlite:"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var cols int
			colQuery := map[string]string{
				"sqlite": `SELECT COUNT(*) FROM pragma_table_info('task_def') WHERE name = 'cron_dialect'`,
				"mysql": `SELECT COUNT(*) FROM information_schema.columns
					WHERE table_schema = DATABASE() AND table_name = 'task_def' AND column_name = 'cron_dialect'`,
			}[tc.driver]
			if err := db.QueryRowContext(ctx, colQuery).Scan(&cols); err != nil || cols != 0 {
				t.Fatalf("cron_dialect columns before step 4 = %d, %v; want 0", cols, err)
			}
			// A row as the previous axe wrote it: every column it knew, nothing else.
			if _, err := db.ExecContext(ctx, `INSERT INTO task_def (name, grp, trigger_type, cron,
				delay_ms, depends_on, depends_mode, timezone, timeout_sec, retry_count,
				retry_interval_sec, priority, callback, params, misfire_policy, paused, created_at,
				updated_at) VALUES ('old', 'default', 'cron', '0 0 12 ? * 2', 0, '', '', 'UTC',
				300, 0, 30, 2, '{"type":"http","url":"http://127.0.0.1:1/"}', '', 'fire_once', 0, 1, 1)`); err != nil {
				t.Fatalf("insert an old row: %v", err)
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO task_runtime (task_id, state, current_ticket,
				attempt, next_trigger_time, last_trigger_time, last_end_time, last_executor,
				success_count, failure_count, note, version)
				SELECT id, 'SCHEDULED', '', 0, 0, 0, 0, '', 0, 0, '', 1 FROM task_def WHERE name = 'old'`); err != nil {
				t.Fatalf("insert an old runtime: %v", err)
			}

			s, err := persist.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("Open (migrate to the current schema): %v", err)
			}
			defer s.Close()
			old, err := s.GetTask(ctx, "old")
			if err != nil {
				t.Fatal(err)
			}
			if old.Def.CronDialect != "unix" || old.Def.Cron != "0 0 12 ? * 2" {
				t.Fatalf("old task after the upgrade: cron %q dialect %q; want the same cron, dialect unix", old.Def.Cron, old.Def.CronDialect)
			}
			var version int
			if err := db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&version); err != nil || version < 4 {
				t.Fatalf("schema version %d, %v; want at least 4", version, err)
			}
			def := &model.TaskDef{Name: "new", Group: "default", Trigger: model.TriggerCron,
				Cron: "0 0 12 ? * 2", CronDialect: "quartz", Timezone: "UTC", MisfirePolicy: "fire_once"}
			if err := s.CreateTask(ctx, def, &model.Runtime{State: model.StateScheduled, Version: 1}); err != nil {
				t.Fatal(err)
			}
			def.CronDialect = "unix"
			def.UpdatedAt = 2
			if err := s.UpdateTaskDef(ctx, def); err != nil {
				t.Fatal(err)
			}
			got, err := s.GetTask(ctx, "new")
			if err != nil || got.Def.CronDialect != "unix" {
				t.Fatalf("new task after an update: %+v, %v; want dialect unix", got, err)
			}
		})
	}
}
