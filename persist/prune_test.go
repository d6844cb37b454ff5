package persist_test

import (
	"database/sql"
	"fmt"
	"slices"
	"testing"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestPruneRunsSkipsOpenRuns: the pruner deletes finished runs of both kinds scheduled
// before the cut-off, oldest first and at most limit a call, and never a run still running,
// periodic or run-now; a dry run counts the same runs and deletes none. On MySQL both the
// pruner and the list of open run-now runs read the one index schema step 7 keeps for them.
func TestPruneRunsSkipsOpenRuns(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		tk := newTask(t, s, "pruned")
		id := tk.rt.TaskID
		run := func(ticket, kind string, sched int64, result string) model.Run {
			r := model.Run{Ticket: ticket, TaskID: id, TaskName: tk.name, Kind: kind, Attempt: 1,
				ScheduledAt: sched, DispatchedAt: sched + 1, Result: result}
			if result != model.ResultRunning {
				r.EndedAt = sched + 2
			}
			return r
		}
		runs := []model.Run{
			run("done-2", model.RunScheduled, 2000, model.ResultSuccess),
			run("done-1", model.RunScheduled, 1000, model.ResultFailed),
			run("manual-done", model.RunManual, 1500, model.ResultSuccess),
			run("manual-open", model.RunManual, 500, model.ResultRunning),
			run("open", model.RunScheduled, 900, model.ResultRunning),
		}
		// Recent runs, so that the old ones are a small part of the table and an index
		// is the way the database should read them.
		for i := range 2000 {
			runs = append(runs, run(fmt.Sprintf("recent-%d", i), model.RunScheduled, 10_000+int64(i), model.ResultSuccess))
		}
		if err := s.ApplyBatch(ctx, &persist.Batch{Fires: runs}); err != nil {
			t.Fatal(err)
		}
		const cutoff = 5000
		p, ok := s.(persist.Pruner)
		if !ok {
			t.Fatalf("%T is no Pruner", s)
		}
		if n, err := p.PruneRuns(ctx, cutoff, cutoff, 100, true); err != nil || n != 3 {
			t.Fatalf("dry run counts %d runs (%v), want 3", n, err)
		}
		var order []string
		for range 4 {
			before := tickets(t, s, id)
			n, err := p.PruneRuns(ctx, cutoff, cutoff, 1, false)
			if err != nil {
				t.Fatal(err)
			}
			after := tickets(t, s, id)
			if int(n) != len(before)-len(after) || n > 1 {
				t.Fatalf("PruneRuns reported %d, deleted %d (limit 1)", n, len(before)-len(after))
			}
			for _, b := range before {
				if !slices.Contains(after, b) {
					order = append(order, b)
				}
			}
		}
		if want := []string{"done-1", "manual-done", "done-2"}; !slices.Equal(order, want) {
			t.Errorf("pruned %v in that order, want %v", order, want)
		}
		left := tickets(t, s, id)
		if len(left) != 2002 || !slices.Contains(left, "open") || !slices.Contains(left, "manual-open") {
			t.Errorf("%d runs left, want the 2000 recent and the two open ones", len(left))
		}
		open, err := s.ListRunningManual(ctx, 0)
		if err != nil || len(open) != 1 || open[0].Ticket != "manual-open" {
			t.Errorf("open run-now runs: %v (%v), want manual-open", open, err)
		}

		if s.Kind() != persist.SchemeMySQL {
			return
		}
		db := persist.DB(s)
		if _, err := db.ExecContext(ctx, `ANALYZE TABLE task_run`); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			what, q string
			args    []any
		}{
			{"the pruner's query", persist.OldRunsSelect(s, 100), []any{cutoff}},
			{"the open run-now list", persist.OpenManualRunsSelect(s), nil},
		} {
			if key := explainKey(t, db, c.q, c.args...); key != "idx_task_run_open_sched" {
				t.Errorf("%s reads index %q, want idx_task_run_open_sched: %s", c.what, key, c.q)
			}
		}
	})
}

// tickets lists the tickets of task id's runs.
func tickets(t *testing.T, s persist.Store, id int64) []string {
	t.Helper()
	runs, err := s.ListRuns(testCtx(t), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.Ticket
	}
	return out
}

// explainKey returns the index MySQL's plan for q reads its table by ("" for none).
func explainKey(t *testing.T, db *sql.DB, q string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(testCtx(t), "EXPLAIN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatalf("EXPLAIN %s returned no plan", q)
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	for i, c := range cols {
		if c == "key" {
			return vals[i].String
		}
	}
	t.Fatalf("EXPLAIN %s has no key column: %v", q, cols)
	return ""
}
