package persist_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestUpgradeV17StoresRunParams: a database written by schema 17 (before run params),
// migrated in place on SQLite and on MySQL, gets step 19 (and no step 18, which is another
// change's), reads its runs with no params, and then stores a run-now's params with its
// first row and keeps them when the run's end is written without them.
func TestUpgradeV17StoresRunParams(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, dsn string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := persist.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("cannot open the v17 fixture with today's store: %v", err)
		}
		defer s.Close()
		steps := fmt.Sprint(appliedSteps(t, dsn))
		if want := fmt.Sprint(sortedSteps(persist.MigrationStatements(schemeOf(dsn)))); steps != want {
			t.Fatalf("after the upgrade schema_migrations lists %s, want %s", steps, want)
		}
		open, err := s.GetRun(ctx, "fx-rebuild-m1") // the fixture's run-now still running
		if err != nil {
			t.Fatal(err)
		}
		if open.Params != "" || open.Kind != model.RunManual {
			t.Fatalf("the fixture's open run-now after the upgrade = %+v; want no params", open)
		}
		pt, err := s.GetTask(ctx, "rebuild-index")
		if err != nil {
			t.Fatal(err)
		}
		const given = `{"day":"2026-12-01","full":true}`
		run := model.Run{Ticket: "m-params-1", TaskID: pt.Def.ID, TaskName: pt.Def.Name, Kind: model.RunManual, Attempt: 1,
			ScheduledAt: 1_800_000_000_000, DispatchedAt: 1_800_000_000_000, Result: model.ResultRunning, Params: given}
		if err := s.ApplyBatch(ctx, &persist.Batch{Runs: []model.Run{run}}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetRun(ctx, run.Ticket); err != nil || got.Params != given {
			t.Fatalf("the run-now written after the upgrade reads %+v, %v; want params %s", got, err, given)
		}
		// Its end, written as a run without params, keeps them.
		end := run
		end.Params, end.Result, end.EndedAt, end.DurationMS = "", model.ResultSuccess, run.DispatchedAt+1500, 1500
		if err := s.ApplyBatch(ctx, &persist.Batch{Runs: []model.Run{end}}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetRun(ctx, run.Ticket)
		if err != nil || got.Result != model.ResultSuccess || got.Params != given {
			t.Fatalf("after its end the run reads %+v, %v; want success with params %s", got, err, given)
		}
		runs, err := s.ListRuns(ctx, pt.Def.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		withParams := 0
		for _, r := range runs {
			if r.Params != "" {
				withParams++
			}
		}
		if len(runs) != 3 || withParams != 1 {
			t.Fatalf("rebuild-index has %d runs, %d with params; want 3, 1", len(runs), withParams)
		}
	}
	t.Run(persist.SchemeSQLite, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "axe.db")
		copyFile(t, fixturePath("v17", "sqlite"), path)
		check(t, "sqlite:"+path)
	})
	t.Run(persist.SchemeMySQL, func(t *testing.T) {
		dsn := persisttest.MySQLDSN(t)
		loadMySQLDump(t, dsn, fixturePath("v17", "mysql.sql"))
		check(t, dsn)
	})
}

// sortedSteps lists the versions of MigrationStatements in order.
func sortedSteps(m map[int]int) []int {
	out := make([]int, 0, len(m))
	for v := range m {
		out = append(out, v)
	}
	sort.Ints(out)
	return out
}

// schemeOf is the scheme of a DSN ("sqlite:…", "mysql:…").
func schemeOf(dsn string) string {
	scheme, _, _ := strings.Cut(dsn, ":")
	return scheme
}
