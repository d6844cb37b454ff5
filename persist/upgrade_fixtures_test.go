package persist_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// Upgrade fixtures (testdata/upgrade/README.md): databases written by released schema
// versions, with what that version's code read from them. A schema change must migrate every
// one of them in place so that today's code reads the same tasks, runs, actions, executors
// and lease. A new schema version adds its fixture files and a row here; the rows of older
// versions stay.
var upgradeFixtures = []struct {
	name string // the files' names: <name>.sqlite, <name>.mysql.sql, <name>.want.json
	// adjust, when set, turns what the fixture's version read into what today's code must
	// read: a later migration that fills a new column with something other than its zero
	// value says so here.
	adjust func(*storeSnapshot)
}{
	{name: "v2", adjust: func(s *storeSnapshot) {
		// Migration 3 re-bases the lease expiry on the database's clock and leaves it expired:
		// a node-ms expiry cannot be compared with that clock, and no axe before it held the
		// lease. Holder and epoch carry over, so epochs never go back.
		s.Lease.ExpiresAt = 0
		unixDialect(s)
		bufferOne(s)
	}},
	{name: "v3", adjust: func(s *storeSnapshot) { unixDialect(s); bufferOne(s) }},
	{name: "v4", adjust: bufferOne},
	// Schema versions 1-4 and 6: "retention" was merged as step 5 after step 6 had shipped,
	// so a database of that build lacks a step below its newest.
	{name: "v6-without-5", adjust: bufferOne},
	{name: "v6", adjust: bufferOne},
	{name: "v7", adjust: bufferOne},
	{name: "v8", adjust: bufferOne},
	{name: "v9", adjust: bufferOne},
	{name: "v10", adjust: bufferOne},
	{name: "v11", adjust: bufferOne},
	{name: "v12", adjust: bufferOne},
	{name: "v13", adjust: bufferOne},
	{name: "v14", adjust: bufferOne},
	{name: "v15"},
	{name: "v16"},
	{name: "v17"},
	{name: "v20"},
	{name: "v22"},
}

// bufferOne is what migration 15 does to a task written before overlap policies: it stores
// buffer_one, which runs the latest fire due during a run right after it, as every task did.
func bufferOne(s *storeSnapshot) {
	for i := range s.Tasks {
		s.Tasks[i].Def.OverlapPolicy = "buffer_one"
	}
}

// unixDialect is what migration 4 does to a task written before dialects: it stores the
// unix dialect, so none changes meaning.
func unixDialect(s *storeSnapshot) {
	for i := range s.Tasks {
		s.Tasks[i].Def.CronDialect = "unix"
	}
}

// TestUpgradeFixtures opens each fixture with today's store, migrates it, and checks that it
// reads exactly what the fixture's own version read: every task keeps its definition and its
// next fire, every run and action is there once and reads alike.
func TestUpgradeFixtures(t *testing.T) {
	t.Parallel()
	for _, fx := range upgradeFixtures {
		t.Run(fx.name, func(t *testing.T) {
			want := readWant(t, fx.name)
			checkFixtureCoverage(t, want)
			if fx.adjust != nil {
				fx.adjust(want)
			}
			t.Run(persist.SchemeSQLite, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "axe.db")
				copyFile(t, fixturePath(fx.name, "sqlite"), path)
				checkUpgrade(t, "sqlite:"+path, want)
			})
			t.Run(persist.SchemeMySQL, func(t *testing.T) {
				dsn := persisttest.MySQLDSN(t) // a fresh database, dropped when the test ends
				loadMySQLDump(t, dsn, fixturePath(fx.name, "mysql.sql"))
				checkUpgrade(t, dsn, want)
			})
		})
	}
}

// TestEveryReleasedSchemaHasAFixture fails when the newest schema version has no fixture: a
// new migration step comes with the fixture of the version it creates.
func TestEveryReleasedSchemaHasAFixture(t *testing.T) {
	t.Parallel()
	newest := persist.SchemaVersion()
	name := fmt.Sprintf("v%d", newest)
	for _, fx := range upgradeFixtures {
		if fx.name == name {
			return
		}
	}
	t.Errorf("schema version %d has no upgrade fixture %s (testdata/upgrade/README.md)", newest, name)
}
