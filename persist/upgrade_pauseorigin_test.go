package persist_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestUpgradeV16KeepsPauseOrigins: a database written by schema 16 (before pause origins),
// migrated in place on SQLite and on MySQL, reads its paused task with no origin (a pause
// whose origin was not kept, which a group's resume leaves paused), and then stores and reads
// back the origin of a group's pause.
func TestUpgradeV16KeepsPauseOrigins(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, dsn string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := persist.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("cannot open the v16 fixture with today's store: %v", err)
		}
		defer s.Close()
		pt, err := s.GetTask(ctx, "purge-cache")
		if err != nil {
			t.Fatal(err)
		}
		if !pt.Def.Paused || pt.Runtime.State != model.StatePaused || pt.Runtime.PausedBy != "" || pt.Runtime.Note != "paused for the migration window" {
			t.Fatalf("the paused task after the upgrade = %+v; want paused with its note and no origin", pt)
		}
		rt := pt.Runtime
		rt.PausedBy = model.PausedByGroup("ops")
		if err := s.ApplyBatch(ctx, &persist.Batch{Transitions: []persist.Transition{{ExpectVersion: pt.Runtime.Version, Runtime: rt}}}); err != nil {
			t.Fatal(err)
		}
		if pt, err = s.GetTask(ctx, "purge-cache"); err != nil || pt.Runtime.PausedBy != "group:ops" {
			t.Fatalf("the origin written after the upgrade reads %+v, %v", pt, err)
		}
	}
	t.Run(persist.SchemeSQLite, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "axe.db")
		copyFile(t, fixturePath("v16", "sqlite"), path)
		check(t, "sqlite:"+path)
	})
	t.Run(persist.SchemeMySQL, func(t *testing.T) {
		dsn := persisttest.MySQLDSN(t)
		loadMySQLDump(t, dsn, fixturePath("v16", "mysql.sql"))
		check(t, dsn)
	})
}
