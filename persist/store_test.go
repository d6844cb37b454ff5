package persist_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestConformance runs the conformance suite against both stores. (TestMain, with its leak
// check, lives in writer_test.go: a package has one.)
func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run(persist.SchemeSQLite, func(t *testing.T) {
		t.Parallel()
		persisttest.RunConformance(t, func(t *testing.T) persist.Store { return persisttest.SQLite(t) })
	})
	t.Run(persist.SchemeMySQL, func(t *testing.T) {
		t.Parallel()
		persisttest.MySQL(t) // skips (or fails) the whole half when no server is configured
		persisttest.RunConformance(t, func(t *testing.T) persist.Store { return persisttest.MySQL(t) })
	})
}

func TestOpenRejectsBadDSNs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, dsn := range []string{
		"",
		"axe.db",
		"postgres:host=x",
		"sqlite:",
		"mysql:root:secret@tcp(127.0.0.1:3306)/", // no database name
	} {
		s, err := persist.Open(ctx, dsn)
		if err == nil {
			_ = s.Close()
			t.Fatalf("Open(%q) succeeded", dsn)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Fatalf("Open(%q) error leaks the password: %v", dsn, err)
		}
	}
}

// TestSQLiteReopen checks that what one store committed is there for the next process.
func TestSQLiteReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + t.TempDir() + "/axe.db"
	s, err := persist.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	def := &model.TaskDef{Name: "kept", Group: "default", Trigger: model.TriggerManual}
	rt := &model.Runtime{State: model.StateWaiting, Version: 1}
	if err := s.CreateTask(ctx, def, rt); err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	tr := persist.Transition{ExpectVersion: 1, Runtime: *rt}
	tr.Runtime.State = model.StateScheduled
	if err := s.ApplyBatch(ctx, &persist.Batch{Transitions: []persist.Transition{tr}}); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s, err = persist.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	got, err := s.GetTask(ctx, "kept")
	if err != nil {
		t.Fatalf("GetTask after reopen: %v", err)
	}
	if got.Runtime.State != model.StateScheduled || got.Runtime.Version != 2 {
		t.Fatalf("runtime after reopen: %+v", got.Runtime)
	}
}

// killHelperEnv names the database TestSQLiteKillHelper writes to; unset, the helper skips.
const killHelperEnv = "AXE_TEST_KILL_HELPER_DB"

// TestSQLiteSurvivesKill runs a writer in a child process, kills it with SIGKILL mid-stream
// and checks that every batch it reported committed is in the reopened database, and that
// the database is intact.
func TestSQLiteSurvivesKill(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "axe.db")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSQLiteKillHelper$")
	cmd.Env = append(os.Environ(), killHelperEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("StdoutPipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	// Wait for a few commits, then kill without warning.
	acked := int64(0)
	lines := bufio.NewScanner(out)
	for acked < 20 && lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), "committed "); ok {
			acked, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill helper: %v", err)
	}
	_ = cmd.Wait()
	if acked < 20 {
		t.Fatalf("helper acknowledged only %d batches before it stopped", acked)
	}

	s, err := persist.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer s.Close()
	task, err := s.GetTask(ctx, "survivor")
	if err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	// Version v+1 is stored by the batch the helper acknowledged as "committed v".
	if task.Runtime.Version < acked+1 {
		t.Fatalf("runtime version %d after kill; batch %d was acknowledged", task.Runtime.Version, acked)
	}
	runs, err := s.ListRuns(ctx, task.Def.ID, 0)
	if err != nil {
		t.Fatalf("ListRuns: %v", err)
	}
	// Every committed batch wrote its run with its runtime: all or nothing.
	if int64(len(runs)) != task.Runtime.Version-1 {
		t.Fatalf("%d runs for runtime version %d: a batch was torn", len(runs), task.Runtime.Version)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatalf("open for integrity check: %v", err)
	}
	defer db.Close()
	var verdict string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&verdict); err != nil || verdict != "ok" {
		t.Fatalf("integrity_check = %q, %v", verdict, err)
	}
}

// TestSQLiteKillHelper is the child process of TestSQLiteSurvivesKill: it commits batches
// until it is killed, printing each acknowledged one.
func TestSQLiteKillHelper(t *testing.T) {
	t.Parallel()
	path := os.Getenv(killHelperEnv)
	if path == "" {
		t.Skip("helper process of TestSQLiteSurvivesKill")
	}
	// Bounded so an orphaned helper cannot run forever.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := persist.Open(ctx, "sqlite:"+path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	def := &model.TaskDef{Name: "survivor", Group: "default", Trigger: model.TriggerCron}
	rt := &model.Runtime{State: model.StateScheduled, Version: 1}
	if err := s.CreateTask(ctx, def, rt); err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	for v := int64(1); ctx.Err() == nil; v++ {
		next := *rt
		next.NextTriggerTime = v
		ticket := fmt.Sprintf("k-%06d", v)
		b := &persist.Batch{
			Transitions: []persist.Transition{{ExpectVersion: v, Runtime: next}},
			Runs:        []model.Run{{Ticket: ticket, TaskID: def.ID, TaskName: def.Name, ScheduledAt: v, Output: strings.Repeat("o", 4096)}},
			Actions:     []model.Action{{TaskID: def.ID, TaskName: def.Name, Ticket: ticket, Action: "dispatch", At: v}},
		}
		if err := s.ApplyBatch(ctx, b); err != nil {
			t.Fatalf("ApplyBatch: %v", err)
		}
		fmt.Printf("committed %d\n", v)
	}
}

// TestMigrateResumesInterruptedStep replays a schema step that a crash cut off half way (on
// MySQL DDL commits one statement at a time, so a step can be partly applied without its
// schema_migrations row): Migrate must finish it, not fail on what is already there.
func TestMigrateResumesInterruptedStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		scheme, dsn func(t *testing.T) string
		driver      string
		// redoLast puts back what the last statement of step 2 removed, so that replaying the
		// step meets two statements already applied and one not.
		redoLast, countIndex string
	}{{
		scheme: func(*testing.T) string { return persist.SchemeSQLite },
		dsn:    func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "axe.db") },
		driver: "sqlite", redoLast: `CREATE INDEX idx_task_run_result ON task_run (result, scheduled_at, ticket)`,
		countIndex: `SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = ?`,
	}, {
		scheme: func(*testing.T) string { return persist.SchemeMySQL },
		dsn:    func(t *testing.T) string { return persisttest.MySQLDSN(t) },
		driver: "mysql", redoLast: `CREATE INDEX idx_task_run_result ON task_run (result, scheduled_at)`,
		countIndex: `SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics
			WHERE table_schema = DATABASE() AND table_name = 'task_run' AND index_name = ?`,
	}} {
		t.Run(tc.scheme(t), func(t *testing.T) {
			dsn := tc.dsn(t)
			s, err := persist.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			def := &model.TaskDef{Name: "m", Group: "default", Trigger: model.TriggerManual}
			if err := s.CreateTask(ctx, def, &model.Runtime{State: model.StateWaiting, Version: 1}); err != nil {
				t.Fatalf("CreateTask: %v", err)
			}
			run := model.Run{Ticket: "m-1", TaskID: def.ID, TaskName: "m", Kind: model.RunManual,
				Attempt: 1, ScheduledAt: 10, DispatchedAt: 10, Result: model.ResultRunning}
			if err := s.ApplyBatch(ctx, &persist.Batch{Runs: []model.Run{run}}); err != nil {
				t.Fatalf("ApplyBatch: %v", err)
			}
			_ = s.Close()

			db, err := sql.Open(tc.driver, strings.TrimPrefix(strings.TrimPrefix(dsn, "mysql:"), "sqlite:"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, stmt := range []string{`DELETE FROM schema_migrations WHERE version = 2`, tc.redoLast} {
				if _, err := db.ExecContext(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}

			s, err = persist.Open(ctx, dsn)
			if err != nil {
				t.Fatalf("Open over the interrupted step: %v", err)
			}
			defer s.Close()
			runs, err := s.ListRunningManual(ctx, 0)
			if err != nil || len(runs) != 1 || runs[0] != run {
				t.Fatalf("ListRunningManual = %+v, %v; want [%+v]", runs, err, run)
			}
			var versions, left int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = 2`).Scan(&versions); err != nil || versions != 1 {
				t.Fatalf("schema_migrations rows of step 2 = %d, %v; want 1", versions, err)
			}
			if err := db.QueryRowContext(ctx, tc.countIndex, "idx_task_run_result").Scan(&left); err != nil || left != 0 {
				t.Fatalf("idx_task_run_result indexes left = %d, %v; want 0", left, err)
			}
		})
	}
}

// TestBatchGuardMisses checks which way ApplyBatch writes runtimes: on MySQL a batch whose
// transitions all hold goes through the version-guarded upsert alone (no miss), a stale one
// misses once and is run again the reading way, which names it; SQLite always reads.
func TestBatchGuardMisses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		scheme   string
		open     func(t *testing.T) persist.Store
		onStaleN uint64
	}{
		{persist.SchemeSQLite, func(t *testing.T) persist.Store {
			return openCounted(t, persist.SchemeSQLite+":"+filepath.Join(t.TempDir(), "axe.db"))
		}, 0},
		{persist.SchemeMySQL, func(t *testing.T) persist.Store { return openCounted(t, persisttest.MySQLDSN(t)) }, 1},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			s := tc.open(t)
			var ids []int64
			for i := range 3 {
				def := &model.TaskDef{Name: fmt.Sprintf("g-%d", i), Group: "default", Trigger: model.TriggerDelay,
					DelayMS: 1000, Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/x"}}
				if err := s.CreateTask(ctx, def, &model.Runtime{State: model.StateScheduled, NextTriggerTime: 100, Version: 1}); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, def.ID)
			}
			batch := func(expect ...int64) *persist.Batch {
				b := &persist.Batch{}
				for i, id := range ids {
					b.Transitions = append(b.Transitions, persist.Transition{ExpectVersion: expect[i],
						Runtime: model.Runtime{TaskID: id, State: model.StateRunning, Version: expect[i]}})
				}
				return b
			}
			misses := func() uint64 { return counterValue(t, "axe_store_batch_guard_misses_total") }

			before := misses()
			if err := s.ApplyBatch(ctx, batch(1, 1, 1)); err != nil {
				t.Fatalf("ApplyBatch: %v", err)
			}
			if got := misses() - before; got != 0 {
				t.Fatalf("a batch whose transitions all hold missed %d times, want 0", got)
			}
			before = misses()
			err := s.ApplyBatch(ctx, batch(2, 1, 2))
			var ce *persist.ConflictError
			if !errors.As(err, &ce) || len(ce.Indexes) != 1 || ce.Indexes[0] != 1 {
				t.Fatalf("ApplyBatch(one stale) = %v, want a conflict at index 1", err)
			}
			if got := misses() - before; got != tc.onStaleN {
				t.Fatalf("the stale batch missed %d times, want %d", got, tc.onStaleN)
			}
			for i, id := range ids {
				got, err := s.GetTaskByID(ctx, id)
				if err != nil || got.Runtime.Version != 2 {
					t.Fatalf("task %d after the rejected batch: %+v, %v; want version 2", i, got, err)
				}
			}
		})
	}
}

// openCounted opens a store whose series are in testMetrics, closed when the test ends.
func openCounted(t *testing.T, dsn string) persist.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := persist.OpenWith(ctx, dsn, persist.OpenOptions{Metrics: testMetrics(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
