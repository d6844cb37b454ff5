package persist_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestMigrateStep3InPlace takes a database back to schema version 2, with a lease row whose
// expiry is in node milliseconds far ahead, and opens it again: step 3 keeps the row's
// holder and epoch, judges it expired (a node's clock cannot be trusted), and the next
// takeover goes on from that epoch. Tasks keep everything; on MySQL the step also replays
// over itself, as after a crash half way.
func TestMigrateStep3InPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, driver string
		dsn          func(t *testing.T) string
		back         []string
	}{{
		name: persist.SchemeSQLite, driver: "sqlite",
		dsn: func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "axe.db") },
		back: []string{`ALTER TABLE lease ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0`, `ALTER TABLE lease DROP COLUMN expiry`,
			`DROP TABLE nodes`, `ALTER TABLE task_def DROP COLUMN on_lost`},
	}, {
		name: persist.SchemeMySQL, driver: "mysql",
		dsn: func(t *testing.T) string { return persisttest.MySQLDSN(t) },
		back: []string{`ALTER TABLE lease ADD COLUMN expires_at BIGINT NOT NULL DEFAULT 0`, `ALTER TABLE lease DROP COLUMN expiry`,
			`DROP TABLE nodes`, `ALTER TABLE task_def DROP COLUMN on_lost`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := tc.dsn(t)
			s, err := persist.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			def := &model.TaskDef{Name: "kept", Group: "g", Trigger: model.TriggerManual, Timezone: "UTC",
				Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/"}}
			if err := s.CreateTask(ctx, def, &model.Runtime{State: model.StateWaiting, Version: 1}); err != nil {
				t.Fatalf("CreateTask: %v", err)
			}
			_ = s.Close()
			db, err := sql.Open(tc.driver, strings.TrimPrefix(strings.TrimPrefix(dsn, "mysql:"), "sqlite:"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			stmts := append(tc.back, `DELETE FROM schema_migrations WHERE version = 3`,
				`INSERT INTO lease (name, holder, epoch, expires_at) VALUES ('scheduler', 'old-node', 7, 9999999999999)`)
			for _, stmt := range stmts {
				if _, err := db.ExecContext(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			s, err = persist.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("Open of a version-2 database: %v", err)
			}
			defer s.Close()
			check := func(what string) {
				t.Helper()
				l, err := s.LeaseState(ctx, "scheduler")
				if err != nil || l.Holder != "old-node" || l.Epoch != 7 || l.Held {
					t.Fatalf("%s: lease = %+v, %v; want old-node at epoch 7, expired", what, l, err)
				}
				got, err := s.GetTask(ctx, "kept")
				if err != nil || got.Def.Group != "g" || got.Def.OnLost != "" {
					t.Fatalf("%s: task = %+v, %v", what, got, err)
				}
			}
			check("after step 3")
			if tc.driver == "mysql" {
				// Replay: the step's statements meet their own effects.
				if _, err := db.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = 3`); err != nil {
					t.Fatal(err)
				}
				if err := s.Migrate(ctx); err != nil {
					t.Fatalf("Migrate over an applied step 3: %v", err)
				}
				check("after replaying step 3")
			}
			l, ok, err := s.TakeLease(ctx, "scheduler", "new-node", time.Minute)
			if err != nil || !ok || l.Epoch != 8 {
				t.Fatalf("TakeLease after the migration = %+v, %v, %v; want epoch 8", l, ok, err)
			}
		})
	}
}
