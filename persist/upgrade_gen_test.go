package persist_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// EnvWriteUpgradeFixture names the schema version TestWriteUpgradeFixture writes fixtures
// for. Unset, the test is skipped. See testdata/upgrade/README.md.
const EnvWriteUpgradeFixture = "AXE_WRITE_UPGRADE_FIXTURE"

// EnvUpgradeFixtureName names the fixture's files instead of v<N>, for a schema that holds
// version N but not every version before it (a step merged below one already released).
const EnvUpgradeFixtureName = "AXE_UPGRADE_FIXTURE_NAME"

// TestWriteUpgradeFixture writes the upgrade fixture of the schema this code creates:
// testdata/upgrade/v<N>.sqlite, v<N>.mysql.sql (needs AXE_TEST_MYSQL_DSN) and v<N>.want.json,
// what this code reads back from them. N must be the schema version this code migrates to,
// so a fixture always holds exactly what its version wrote. Existing files are replaced.
func TestWriteUpgradeFixture(t *testing.T) {
	t.Parallel()
	raw := os.Getenv(EnvWriteUpgradeFixture)
	if raw == "" {
		t.Skipf("set %s=<schema version> to write upgrade fixtures", EnvWriteUpgradeFixture)
	}
	version, err := strconv.Atoi(raw)
	if err != nil || version < 1 {
		t.Fatalf("%s=%q: want a schema version (a positive integer)", EnvWriteUpgradeFixture, raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := os.MkdirAll(upgradeDir, 0o755); err != nil {
		t.Fatal(err)
	}

	// SQLite: fill a fresh file, close it (which folds the WAL into it) and copy it.
	tmp := filepath.Join(t.TempDir(), "axe.db")
	s, err := persist.Open(ctx, "sqlite:"+tmp)
	if err != nil {
		t.Fatal(err)
	}
	fillFixture(t, ctx, s)
	want, err := snapshot(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp + "-wal"); err == nil {
		if fi, _ := os.Stat(tmp + "-wal"); fi.Size() > 0 {
			t.Fatalf("the SQLite WAL was not folded into %s on close", tmp)
		}
	}
	if got := sqliteSchemaVersion(t, tmp); got != version {
		t.Fatalf("this code writes schema version %d, not %d: check out the commit of version %d to write its fixture", got, version, version)
	}
	name := fmt.Sprintf("v%d", version)
	if n := os.Getenv(EnvUpgradeFixtureName); n != "" {
		name = n
	}
	copyFile(t, tmp, fixturePath(name, "sqlite"))
	writeJSONFile(t, fixturePath(name, "want.json"), want)

	// MySQL: fill a fresh database the same way, check it reads alike, and dump it.
	dsn := persisttest.MySQLDSN(t)
	m, err := persist.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fillFixture(t, ctx, m)
	got, err := snapshot(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	compareSnapshots(t, got, want)
	dump, err := dumpMySQL(ctx, strings.TrimPrefix(dsn, persist.SchemeMySQL+":"), version)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fixturePath(name, "mysql.sql"), []byte(dump), 0o644); err != nil {
		t.Fatal(err)
	}
	checkFixtureCoverage(t, want)
}

// Fixture times: Unix ms from 2026-01-05 08:00:00 UTC on.
const fxT0 = int64(1_767_600_000_000)

// fillFixture writes the fixture's contents through the Store interface: nine tasks
// covering every trigger type and state, runs with every result and both kinds, actions
// (one an alert), two executors and a held lease.
func fillFixture(t *testing.T, ctx context.Context, s persist.Store) {
	t.Helper()
	httpCB := model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:8081/hook"}
	execCB := func(route string) model.Callback {
		return model.Callback{Type: model.CallbackExecutor, App: "billing", Handler: "invoice", Route: route}
	}
	type task struct {
		def model.TaskDef
		rt  model.Runtime
	}
	defs := []task{{
		def: model.TaskDef{Name: "nightly-report", Group: "reports", Trigger: model.TriggerCron, Cron: "0 2 * * *",
			Timezone: "Europe/Berlin", TimeoutSec: 600, RetryCount: 3, RetryIntervalSec: 60, Priority: 5,
			Callback: httpCB, Params: json.RawMessage(`{"format":"pdf","days":7}`), MisfirePolicy: model.MisfireFireOnce},
		rt: model.Runtime{State: model.StateScheduled, NextTriggerTime: fxT0 + 18*3600_000, LastTriggerTime: fxT0 - 6*3600_000,
			LastEndTime: fxT0 - 6*3600_000 + 4200, SuccessCount: 41, FailureCount: 2},
	}, {
		def: model.TaskDef{Name: "invoice-run", Group: "billing", Trigger: model.TriggerCron, Cron: "*/5 * * * *",
			Timezone: "UTC", TimeoutSec: 120, Priority: 9, Callback: execCB("least_busy"), MisfirePolicy: model.MisfireSkip},
		rt: model.Runtime{State: model.StateRunning, CurrentTicket: "fx-invoice-3", Attempt: 1, NextTriggerTime: fxT0,
			LastTriggerTime: fxT0, LastExecutor: "billing@10.0.0.7:9100", SuccessCount: 2},
	}, {
		def: model.TaskDef{Name: "welcome-mail", Group: "mail", Trigger: model.TriggerDelay, DelayMS: 90_000,
			Timezone: "UTC", TimeoutSec: 30, Callback: httpCB, MisfirePolicy: model.MisfireFireOnce},
		rt: model.Runtime{State: model.StateSuccess, LastTriggerTime: fxT0 + 90_000, LastEndTime: fxT0 + 91_250, SuccessCount: 1},
	}, {
		def: model.TaskDef{Name: "retry-export", Group: "mail", Trigger: model.TriggerDelay, DelayMS: 5_000,
			Timezone: "UTC", TimeoutSec: 10, RetryCount: 5, RetryIntervalSec: 30, Callback: execCB("failover"),
			MisfirePolicy: model.MisfireFireOnce},
		rt: model.Runtime{State: model.StateRetrying, Attempt: 2, NextTriggerTime: fxT0 + 65_000,
			LastTriggerTime: fxT0 + 5_000, LastEndTime: fxT0 + 15_000, LastExecutor: "billing@10.0.0.8:9100", FailureCount: 2},
	}, {
		def: model.TaskDef{Name: "rebuild-index", Group: "ops", Trigger: model.TriggerManual, Timezone: "Asia/Tokyo",
			TimeoutSec: 3600, Callback: execCB(""), Params: json.RawMessage(`["full"]`), MisfirePolicy: model.MisfireFireOnce},
		rt: model.Runtime{State: model.StateWaiting},
	}, {
		def: model.TaskDef{Name: "purge-cache", Group: "ops", Trigger: model.TriggerManual, Timezone: "UTC",
			TimeoutSec: 60, Callback: httpCB, MisfirePolicy: model.MisfireFireOnce, Paused: true},
		rt: model.Runtime{State: model.StatePaused, Note: "paused for the migration window", FailureCount: 1},
	}, {
		def: model.TaskDef{Name: "publish-report", Group: "reports", Trigger: model.TriggerDependency,
			DependsOn: []string{"nightly-report", "welcome-mail"}, DependsMode: "all", Timezone: "UTC", TimeoutSec: 60,
			Callback: execCB("consistent_hash"), MisfirePolicy: model.MisfireFireOnce},
		rt: model.Runtime{State: model.StateWaiting},
	}, {
		def: model.TaskDef{Name: "notify-finance", Group: "billing", Trigger: model.TriggerDependency,
			DependsOn: []string{"invoice-run"}, DependsMode: "any", Timezone: "UTC", TimeoutSec: 45, RetryCount: 1,
			RetryIntervalSec: 5, Callback: execCB("random"), MisfirePolicy: model.MisfireSkip},
		rt: model.Runtime{State: model.StateFailed, Attempt: 1, LastTriggerTime: fxT0 - 300_000,
			LastEndTime: fxT0 - 299_000, LastExecutor: "billing@10.0.0.7:9100", FailureCount: 3},
	}, {
		def: model.TaskDef{Name: "long-import", Group: "ops", Trigger: model.TriggerCron, Cron: "30 3 * * 1",
			Timezone: "America/New_York", TimeoutSec: 7200, Callback: execCB("round_robin"), MisfirePolicy: model.MisfireFireOnce},
		rt: model.Runtime{State: model.StateKilled, NextTriggerTime: fxT0 + 7*24*3600_000, LastTriggerTime: fxT0 - 3600_000,
			LastEndTime: fxT0 - 1800_000, LastExecutor: "billing@10.0.0.8:9100", Note: "killed by an operator"},
	}}
	byName := map[string]*model.Task{}
	for i := range defs {
		d := defs[i]
		d.def.CreatedAt = fxT0 - int64(len(defs)-i)*86_400_000
		d.def.UpdatedAt = d.def.CreatedAt + 1_000
		fixtureExtras(&d.def) // upgrade_fill_test.go: the columns of later schema versions
		// Every task is created WAITING at version 1 and then moved by one batch, as the
		// engine would, so versions and the transition path are those of a live store.
		rt := model.Runtime{State: model.StateWaiting, Version: 1}
		if err := s.CreateTask(ctx, &d.def, &rt); err != nil {
			t.Fatalf("CreateTask(%q): %v", d.def.Name, err)
		}
		byName[d.def.Name] = &model.Task{Def: d.def, Runtime: d.rt}
		byName[d.def.Name].Runtime.TaskID = d.def.ID
		fixtureRuntime(d.def.Name, &byName[d.def.Name].Runtime) // upgrade_fill_test.go
		if d.rt.State == model.StateWaiting {
			continue
		}
		if err := s.ApplyBatch(ctx, &persist.Batch{Transitions: []persist.Transition{{ExpectVersion: 1, Runtime: byName[d.def.Name].Runtime}}}); err != nil {
			t.Fatalf("transition of %q: %v", d.def.Name, err)
		}
	}
	// A definition update, so updated_at and the dependency edges went through UpdateTaskDef.
	pub := byName["publish-report"].Def
	pub.UpdatedAt = fxT0 - 3_600_000
	pub.Priority = 2
	if err := s.UpdateTaskDef(ctx, &pub); err != nil {
		t.Fatalf("UpdateTaskDef: %v", err)
	}

	run := func(task, ticket, kind, result string, attempt int, at int64, dur int64) model.Run {
		tk := byName[task]
		r := model.Run{Ticket: ticket, TaskID: tk.Def.ID, TaskName: task, Kind: kind, Attempt: attempt,
			ScheduledAt: at, DispatchedAt: at + 4, Result: result}
		if tk.Def.Callback.Type == model.CallbackExecutor {
			r.Executor = "billing@10.0.0.7:9100"
		}
		if result != model.ResultRunning {
			r.EndedAt = at + 4 + dur
			r.DurationMS = dur
		}
		return r
	}
	runs := []model.Run{
		run("nightly-report", "fx-nightly-1", model.RunScheduled, model.ResultSuccess, 1, fxT0-6*3600_000, 4196),
		run("nightly-report", "fx-nightly-0", model.RunScheduled, model.ResultTimeout, 1, fxT0-30*3600_000, 600_000),
		run("invoice-run", "fx-invoice-3", model.RunScheduled, model.ResultRunning, 1, fxT0, 0),
		run("invoice-run", "fx-invoice-2", model.RunScheduled, model.ResultLost, 1, fxT0-300_000, 0),
		run("welcome-mail", "fx-welcome-1", model.RunScheduled, model.ResultSuccess, 1, fxT0+90_000, 1246),
		run("retry-export", "fx-export-1", model.RunScheduled, model.ResultFailed, 1, fxT0+5_000, 10_000),
		run("retry-export", "fx-export-2", model.RunScheduled, model.ResultFailed, 2, fxT0+35_000, 812),
		run("rebuild-index", "fx-rebuild-m1", model.RunManual, model.ResultRunning, 1, fxT0+1_000, 0),
		run("rebuild-index", "fx-rebuild-m0", model.RunManual, model.ResultSuccess, 1, fxT0-86_400_000, 3_100_000),
		run("purge-cache", "fx-purge-1", model.RunScheduled, model.ResultSkipped, 1, fxT0-7_200_000, 0),
		run("notify-finance", "fx-notify-1", model.RunScheduled, model.ResultFailed, 1, fxT0-300_000, 1000),
		run("long-import", "fx-import-1", model.RunScheduled, model.ResultKilled, 1, fxT0-3600_000, 1_800_000),
	}
	runs[1].Error = "deadline exceeded after 600s"
	runs[3].Error = "executor billing@10.0.0.7:9100 lost with the run in flight"
	runs[5].Error = "exit status 3"
	runs[5].Output = "line 1\nline 2: it's \"quoted\" \\ and ; ends here;\nexport failed"
	runs[6].Error = "HTTP 500: upstream said no"
	runs[9].Detail = "misfire: skipped"
	runs[10].Error = "connection refused"
	runs[10].Detail = "released by fx-invoice-2"
	runs[11].Error = "executor: run killed"
	runs[11].Output = "imported 120000 rows, then a tab\t and ünïcödé"
	actions := []model.Action{}
	act := func(task, ticket, action string, from, to model.State, at int64, actor, detail string) {
		a := model.Action{TaskName: task, Ticket: ticket, Action: action, From: from, To: to, Actor: actor, At: at, Detail: detail}
		if tk := byName[task]; tk != nil {
			a.TaskID = tk.Def.ID
		}
		actions = append(actions, a)
	}
	act("nightly-report", "fx-nightly-1", "fire", model.StateScheduled, model.StateRunning, fxT0-6*3600_000, "scheduler", "")
	act("nightly-report", "fx-nightly-1", "success", model.StateRunning, model.StateScheduled, fxT0-6*3600_000+4200, "scheduler", "")
	act("invoice-run", "fx-invoice-3", "fire", model.StateScheduled, model.StateRunning, fxT0, "scheduler", "")
	act("retry-export", "fx-export-2", "retry", model.StateRunning, model.StateRetrying, fxT0+35_816, "scheduler", "attempt 2 of 6")
	act("purge-cache", "", "pause", model.StateWaiting, model.StatePaused, fxT0-100, "alice", "paused for the migration window")
	act("long-import", "fx-import-1", "kill", model.StateRunning, model.StateKilled, fxT0-1800_000, "bob", "")
	act("", "", "executor_lost", "", "", fxT0-299_500, "scheduler", "billing@10.0.0.9:9100 missed its heartbeats")
	if err := s.ApplyBatch(ctx, &persist.Batch{Runs: runs, Actions: actions}); err != nil {
		t.Fatalf("ApplyBatch(runs, actions): %v", err)
	}
	// A later row for a ticket replaces columns: the upsert path.
	up := runs[7]
	up.Detail = "started by carol"
	if err := s.ApplyBatch(ctx, &persist.Batch{Runs: []model.Run{up}}); err != nil {
		t.Fatalf("ApplyBatch(run update): %v", err)
	}

	for _, e := range []model.Executor{
		{App: "billing", Address: "10.0.0.7:9100", Protocol: "http", Handlers: []string{"invoice", "refund"},
			RegisteredAt: fxT0 - 86_400_000, LastHeartbeat: fxT0 - 2_000, Status: "alive"},
		{App: "billing", Address: "10.0.0.9:9100", Protocol: "http", Handlers: []string{"invoice"},
			RegisteredAt: fxT0 - 3_600_000, LastHeartbeat: fxT0 - 330_000, Status: "alive"},
	} {
		fixtureExecutor(&e)
		if err := s.UpsertExecutor(ctx, &e); err != nil {
			t.Fatalf("UpsertExecutor: %v", err)
		}
	}
	if err := s.Heartbeat(ctx, "billing", "10.0.0.7:9100", fxT0-1_000); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if err := s.SetExecutorStatus(ctx, "billing", "10.0.0.9:9100", "lost"); err != nil {
		t.Fatalf("SetExecutorStatus: %v", err)
	}
	// Two holders in turn, so the epoch is past its first value.
	la, ok, err := s.TakeLease(ctx, fixtureLease, "axe-a:8080", 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("TakeLease(a) = %v, %v", ok, err)
	}
	if err := s.ReleaseLease(ctx, fixtureLease, "axe-a:8080", la.Epoch); err != nil {
		t.Fatalf("ReleaseLease(a) = %v", err)
	}
	lb, ok, err := s.TakeLease(ctx, fixtureLease, "axe-b:8080", 15*time.Second)
	if err != nil || !ok {
		t.Fatalf("TakeLease(b) = %v, %v", ok, err)
	}
	if err := s.RenewLease(ctx, fixtureLease, "axe-b:8080", lb.Epoch, 15*time.Second); err != nil {
		t.Fatalf("RenewLease(b) = %v", err)
	}
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sqliteSchemaVersion reads the newest applied migration of the SQLite file at path.
func sqliteSchemaVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// dumpMySQL writes the database of dsn as SQL that loadMySQLDump reads back: SHOW CREATE
// TABLE of every table, then one INSERT per row, ordered by every column. Generated columns
// are left out of the INSERTs (the server computes them). Strings are quoted with their
// newlines escaped, so no value spans lines.
func dumpMySQL(ctx context.Context, dsn string, version int) (string, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return "", fmt.Errorf("cannot open mysql: %w", err)
	}
	defer db.Close()
	var out strings.Builder
	fmt.Fprintf(&out, "-- axe upgrade fixture: schema version %d, written by TestWriteUpgradeFixture\n", version)
	fmt.Fprintf(&out, "-- (persist/testdata/upgrade/README.md). One statement per line-ending ';'.\n\n")
	rows, err := db.QueryContext(ctx, `SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME`)
	if err != nil {
		return "", fmt.Errorf("cannot list tables: %w", err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return "", err
		}
		tables = append(tables, name)
	}
	if err := rows.Close(); err != nil {
		return "", err
	}
	sort.Strings(tables)
	for _, table := range tables {
		var name, create string
		if err := db.QueryRowContext(ctx, "SHOW CREATE TABLE `"+table+"`").Scan(&name, &create); err != nil {
			return "", fmt.Errorf("cannot show table %s: %w", table, err)
		}
		fmt.Fprintf(&out, "%s;\n\n", create)
	}
	for _, table := range tables {
		if err := dumpRows(ctx, db, table, &out); err != nil {
			return "", err
		}
	}
	return out.String(), nil
}

func dumpRows(ctx context.Context, db *sql.DB, table string, out *strings.Builder) error {
	cols, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND EXTRA NOT LIKE '%GENERATED%' ORDER BY ORDINAL_POSITION`, table)
	if err != nil {
		return fmt.Errorf("cannot list columns of %s: %w", table, err)
	}
	var names []string
	numeric := map[int]bool{}
	for cols.Next() {
		var name, typ string
		if err := cols.Scan(&name, &typ); err != nil {
			return err
		}
		switch strings.ToLower(typ) {
		case "tinyint", "smallint", "int", "bigint":
			numeric[len(names)] = true
		}
		names = append(names, name)
	}
	if err := cols.Close(); err != nil {
		return err
	}
	order := make([]string, len(names))
	for i := range names {
		order[i] = strconv.Itoa(i + 1)
	}
	quoted := "`" + strings.Join(names, "`, `") + "`"
	rows, err := db.QueryContext(ctx, "SELECT "+quoted+" FROM `"+table+"` ORDER BY "+strings.Join(order, ", "))
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", table, err)
	}
	defer rows.Close()
	vals := make([]sql.NullString, len(names))
	ptrs := make([]any, len(names))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		lits := make([]string, len(vals))
		for i, v := range vals {
			switch {
			case !v.Valid:
				lits[i] = "NULL"
			case numeric[i]:
				lits[i] = v.String
			default:
				lits[i] = mysqlQuote(v.String)
			}
		}
		fmt.Fprintf(out, "INSERT INTO `%s` (%s) VALUES (%s);\n", table, quoted, strings.Join(lits, ", "))
	}
	out.WriteString("\n")
	return rows.Err()
}

// mysqlQuote quotes s as a MySQL string literal (default sql_mode, backslash escapes on).
func mysqlQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`, "\r", `\r`, "\x00", `\0`, "\x1a", `\Z`)
	return "'" + r.Replace(s) + "'"
}
