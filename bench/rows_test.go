package bench

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// Row costs: MariaDB's CPU per row for the row shapes a dispatch writes, through the store's
// own batch path (persist ApplyBatch, 2,048 rows per commit as the writer batches them), read
// from the server's /proc/<pid>/stat. It explains where B3's and B4's database time goes and
// checks schema decisions: finishing run rows with and without the index on their result
// that schema step 2 replaced, and a cron cycle's two runtime writes as the engine made them
// before (the fire moved the task's entry in the window index, and so did the run's end) and
// as it makes them now (only the run's end moves it); and the whole of what a one-shot task's
// dispatch commits, as a B4 burst writes it: the fire and the end, each a runtime, a run row
// and an action record, in batches of mixed rows.
//
//	go test -run '^$' -bench RowCost -benchtime 3x ./bench/ -args -rows.size=2e5
//
// Needs the server's pid file readable here (a local server); otherwise it skips.

var flagRowsSize = flag.String("rows.size", "", "row costs: rows per measured shape (env "+envRowsSize+"; default 2e3)")

const envRowsSize = "AXE_BENCH_ROWS_SIZE"

// flagRowsEnd makes the one-shot ends write a last result into the runtime row, as the
// engine does since schema step 10: "" none (the rows before it), "success" (a steady value:
// the same each pass) or "failed" (a failure time that changes each pass, which moves the
// task's entry in idx_task_runtime_failed).
var flagRowsEnd = flag.String("rows.end", "", "row costs: the last result the one-shot ends write: '', success or failed")

// rowsPerCommit is the writer's default batch bound.
const rowsPerCommit = 2048

// oldRunResultIndex is the index schema step 2 dropped, put back to compare.
const oldRunResultIndex = `CREATE INDEX idx_task_run_result ON task_run (result, scheduled_at)`

type rowCostFixture struct {
	store persist.Store
	db    *sql.DB
	pid   int
	n     int
	pass  int // distinguishes tickets and versions between iterations
}

func newRowCostFixture(tb testing.TB, n int) *rowCostFixture {
	tb.Helper()
	ctx := context.Background()
	store, db := scratchStore(tb, 2)
	pid := benchkit.ServerPID(ctx, db)
	if pid == 0 {
		tb.Skip("skipping: the MySQL server's CPU is not readable from here (no local pid file)")
	}
	due := time.Now().Add(time.Hour).UnixMilli()
	err := benchkit.InsertTasks(ctx, db, benchkit.Tasks{
		N: n, Prefix: "r", Due: func(i int) int64 { return due + int64(i) },
		Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/never"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return &rowCostFixture{store: store, db: db, pid: pid, n: n}
}

// serverCPU runs fn and returns the server CPU it cost per row, in µs.
func (f *rowCostFixture) serverCPU(rows int, fn func() error) (float64, error) {
	c0, err := benchkit.ProcessCPU(f.pid)
	if err != nil {
		return 0, err
	}
	if err := fn(); err != nil {
		return 0, err
	}
	c1, err := benchkit.ProcessCPU(f.pid)
	if err != nil {
		return 0, err
	}
	return float64((c1 - c0).Microseconds()) / float64(rows), nil
}

func (f *rowCostFixture) exec(ctx context.Context, stmt string) error {
	_, err := f.db.ExecContext(ctx, stmt)
	return err
}

// runs writes n run rows with result, rowsPerCommit per batch; the tickets are the pass's, so
// a second call in the same pass updates the rows of the first.
func (f *rowCostFixture) runs(ctx context.Context, result string) error {
	now := time.Now().UnixMilli()
	for from := 0; from < f.n; from += rowsPerCommit {
		b := &persist.Batch{}
		for i := from; i < min(from+rowsPerCommit, f.n); i++ {
			id := int64(i + 1)
			r := model.Run{
				Ticket: strconv.FormatInt(id, 10) + "-" + strconv.Itoa(f.pass),
				TaskID: id, TaskName: "r-" + strconv.FormatInt(id, 10), Kind: model.RunScheduled, Attempt: 1,
				ScheduledAt: int64(f.pass)*1e6 + id, DispatchedAt: now, Executor: "127.0.0.1:9", Result: result,
			}
			if result != model.ResultRunning {
				r.EndedAt, r.DurationMS = now+3, 3
			}
			b.Runs = append(b.Runs, r)
		}
		if err := f.store.ApplyBatch(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// transitions moves every task i to state with next_trigger_time next(i), expecting
// version, rowsPerCommit per batch.
func (f *rowCostFixture) transitions(ctx context.Context, state model.State, next func(i int) int64, version int64) error {
	now := time.Now().UnixMilli()
	for from := 0; from < f.n; from += rowsPerCommit {
		b := &persist.Batch{}
		for i := from; i < min(from+rowsPerCommit, f.n); i++ {
			b.Transitions = append(b.Transitions, persist.Transition{ExpectVersion: version, Runtime: model.Runtime{
				TaskID: int64(i + 1), State: state, CurrentTicket: "t-" + strconv.Itoa(i), Attempt: 1,
				NextTriggerTime: next(i), LastTriggerTime: now,
			}})
		}
		if err := f.store.ApplyBatch(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// Row-cost figures, in the order the table shows them.
const (
	rcRunInsert        = "run rows inserted (running), µs/row"
	rcRunFinish        = "run rows finished, µs/row"
	rcRunInsertOld     = "run rows inserted, old result index, µs/row"
	rcRunFinishOld     = "run rows finished, old result index, µs/row"
	rcFinishIndexRatio = "finishing runs, old index ÷ now"
	// A cron cycle is two runtime transitions (each a CAS read and an upsert): the fire and
	// the run's end, which re-arms the task. The engine's fire used to set next_trigger_time
	// to 0 and the end set the next due: two moves in the window index; now the fire keeps it.
	rcFireZero    = "cron fire, next due → 0 (before), µs/row"
	rcEndFromZero = "cron end, next 0 → due (before), µs/row"
	rcFireKeeps   = "cron fire, next unchanged (now), µs/row"
	rcEndFromDue  = "cron end, next due → due (now), µs/row"
	rcCycleBefore = "cron cycle before, µs/task"
	rcCycleNow    = "cron cycle now, µs/task"
	rcCycleRatio  = "cron cycle, before ÷ now"
	// A one-shot task's dispatch as a burst commits it: the fire (runtime to RUNNING keeping
	// its due time, run row inserted, action) and the end (runtime to SUCCESS with
	// next_trigger_time 0, run row finished, action), three rows per task each.
	rcOneShotFire = "one-shot fire, 3 rows, µs/task"
	rcOneShotEnd  = "one-shot end, 3 rows, µs/task"
	rcOneShotTask = "one-shot task's writes, µs/task"
)

// transitionsPerPass is how many transitions measure makes per task and pass.
const transitionsPerPass = 7

// dispatches writes, for every task, what the engine commits for a one-shot task's fire (end
// false) or its end: the runtime transition expecting version, the run row and the action
// record, rowsPerCommit rows per batch as a burst's commits carry them. due(i) is the task's
// stored due time, which the fire keeps and the end clears.
func (f *rowCostFixture) dispatches(ctx context.Context, end bool, version int64, due func(i int) int64) error {
	now := time.Now().UnixMilli()
	per := rowsPerCommit / 3
	for from := 0; from < f.n; from += per {
		b := &persist.Batch{}
		for i := from; i < min(from+per, f.n); i++ {
			id := int64(i + 1)
			name := "r-" + strconv.FormatInt(id, 10)
			ticket := "d-" + strconv.FormatInt(id, 10) + "-" + strconv.Itoa(f.pass)
			rt := model.Runtime{TaskID: id, State: model.StateRunning, CurrentTicket: ticket, Attempt: 1,
				NextTriggerTime: due(i), LastTriggerTime: now}
			run := model.Run{Ticket: ticket, TaskID: id, TaskName: name, Kind: model.RunScheduled, Attempt: 1,
				ScheduledAt: due(i), DispatchedAt: now, Executor: "127.0.0.1:9", Result: model.ResultRunning}
			act := model.Action{TaskID: id, TaskName: name, Ticket: ticket, Action: "dispatch",
				From: model.StateScheduled, To: model.StateRunning, Actor: "scheduler", At: now}
			if end {
				rt.State, rt.NextTriggerTime, rt.LastEndTime, rt.SuccessCount = model.StateSuccess, 0, now+3, 1
				switch *flagRowsEnd {
				case model.ResultSuccess:
					rt.LastResult = model.ResultSuccess
				case model.ResultFailed:
					rt.LastResult, rt.LastFailureAt = model.ResultFailed, now+3
				}
				run.EndedAt, run.DurationMS, run.Result = now+3, 3, model.ResultSuccess
				act.Action, act.From, act.To, act.At = "success", model.StateRunning, model.StateSuccess, now+3
			}
			b.Transitions = append(b.Transitions, persist.Transition{ExpectVersion: version, Runtime: rt})
			b.Runs = append(b.Runs, run)
			b.Actions = append(b.Actions, act)
		}
		if err := f.store.ApplyBatch(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// measure takes one pass over every shape and adds its figures to s.
func (f *rowCostFixture) measure(ctx context.Context, s *benchkit.Series) error {
	f.pass++
	version := int64(1 + transitionsPerPass*(f.pass-1))
	step := func(name string, fn func() error) (float64, error) {
		v, err := f.serverCPU(f.n, fn)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		s.Add(name, v)
		return v, nil
	}
	if err := f.exec(ctx, `TRUNCATE TABLE task_run`); err != nil {
		return err
	}
	// insertAndFinish writes the pass's runs as running, then finished, and returns the
	// cost of finishing them.
	insertAndFinish := func(insert, finish string) (float64, error) {
		if _, err := step(insert, func() error { return f.runs(ctx, model.ResultRunning) }); err != nil {
			return 0, err
		}
		return step(finish, func() error { return f.runs(ctx, model.ResultSuccess) })
	}
	now, err := insertAndFinish(rcRunInsert, rcRunFinish)
	if err != nil {
		return err
	}
	for _, stmt := range []string{`TRUNCATE TABLE task_run`, oldRunResultIndex} {
		if err := f.exec(ctx, stmt); err != nil {
			return err
		}
	}
	old, err := insertAndFinish(rcRunInsertOld, rcRunFinishOld)
	if err != nil {
		return err
	}
	if err := f.exec(ctx, `DROP INDEX idx_task_run_result ON task_run`); err != nil {
		return err
	}
	s.Add(rcFinishIndexRatio, old/now)

	// Each cycle's dues are a minute after the previous ones, as a cron task's would be; one
	// base per pass, so a shape that keeps a due time writes exactly the stored one.
	base := time.Now().Add(time.Hour).UnixMilli()
	due := func(cycle int) func(i int) int64 {
		return func(i int) int64 { return base + int64(cycle)*60_000 + int64(i) }
	}
	zero := func(int) int64 { return 0 }
	var costs [4]float64
	for k, tr := range []struct {
		name  string
		state model.State
		next  func(i int) int64
	}{
		{rcFireZero, model.StateRunning, zero},
		{rcEndFromZero, model.StateScheduled, due(1)},
		{rcFireKeeps, model.StateRunning, due(1)},
		{rcEndFromDue, model.StateScheduled, due(2)},
	} {
		if costs[k], err = step(tr.name, func() error { return f.transitions(ctx, tr.state, tr.next, version+int64(k)) }); err != nil {
			return err
		}
	}
	s.Add(rcCycleBefore, costs[0]+costs[1])
	s.Add(rcCycleNow, costs[2]+costs[3])
	s.Add(rcCycleRatio, (costs[0]+costs[1])/(costs[2]+costs[3]))

	// The tasks now rest at their cycle-2 dues.
	return f.oneShot(ctx, s, version+4, due(2), due(3))
}

// oneShot fires and ends every task as a one-shot task (the fire expecting version, the end
// version+1; due is the stored due time), adds the two costs and their sum to s, then re-arms
// the tasks at rearm (not measured, expecting version+2) so the next cycle starts from a due
// time again.
func (f *rowCostFixture) oneShot(ctx context.Context, s *benchkit.Series, version int64, due, rearm func(i int) int64) error {
	fire, err := f.serverCPU(f.n, func() error { return f.dispatches(ctx, false, version, due) })
	if err != nil {
		return fmt.Errorf("%s: %w", rcOneShotFire, err)
	}
	end, err := f.serverCPU(f.n, func() error { return f.dispatches(ctx, true, version+1, due) })
	if err != nil {
		return fmt.Errorf("%s: %w", rcOneShotEnd, err)
	}
	s.Add(rcOneShotFire, fire)
	s.Add(rcOneShotEnd, end)
	s.Add(rcOneShotTask, fire+end)
	return f.transitions(ctx, model.StateScheduled, rearm, version+2)
}

func BenchmarkRowCost(b *testing.B) {
	n := sizeParam(b, flagRowsSize, envRowsSize, 2e3)
	f := newRowCostFixture(b, n)
	var s benchkit.Series
	b.Run("rows="+sizeName(n), func(b *testing.B) {
		ctx := context.Background()
		for range b.N {
			if err := f.measure(ctx, &s); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(s.Summary(rcRunFinish).Median, "finish-µs/row")
		b.ReportMetric(s.Summary(rcFinishIndexRatio).Median, "x-old-index")
		b.ReportMetric(s.Summary(rcOneShotTask).Median, "one-shot-µs/task")
	})
	summarize(b, "Row costs: MariaDB CPU per row through persist ApplyBatch, %d rows per shape, %d rows per commit; load average %s\n%s",
		n, rowsPerCommit, benchkit.LoadAverage(), s.Table())
}

// BenchmarkDispatchRows repeats only the one-shot dispatch shapes, b.N cycles of fire, end
// and an unmeasured re-arm over the same tasks, and reports the MariaDB CPU per task of each
// cycle. With nothing else in between (the full suite truncates tables and builds indexes)
// it is the steadier figure for comparing store changes at two commits:
//
//	go test -run '^$' -bench DispatchRows -benchtime 4x ./bench/ -args -rows.size=2e5
func BenchmarkDispatchRows(b *testing.B) {
	n := sizeParam(b, flagRowsSize, envRowsSize, 2e3)
	f := newRowCostFixture(b, n)
	base := time.Now().Add(2 * time.Hour).UnixMilli()
	due := func(i int) int64 { return base + int64(i) }
	// Arm every task at due first (unmeasured), so each fire keeps the stored due time.
	if err := f.transitions(context.Background(), model.StateScheduled, due, 1); err != nil {
		b.Fatal(err)
	}
	var s benchkit.Series
	version := int64(2)
	b.Run("rows="+sizeName(n), func(b *testing.B) {
		ctx := context.Background()
		for range b.N {
			f.pass++
			if err := f.oneShot(ctx, &s, version, due, due); err != nil {
				b.Fatal(err)
			}
			version += 3
		}
		b.ReportMetric(s.Summary(rcOneShotTask).Median, "µs/task")
	})
	summarize(b, "Dispatch rows: MariaDB CPU per one-shot task's fire and end commits, %d tasks, %d rows per commit; load average %s\n%s",
		n, rowsPerCommit, benchkit.LoadAverage(), s.Table())
}

// TestRowCostSmoke takes one small pass and checks that every shape wrote what it should:
// the runs end finished (those of the run shapes and the one-shot dispatches), the old index
// is gone again, every task took every transition and was re-armed, every dispatch left two
// action records.
func TestRowCostSmoke(t *testing.T) {
	const n = 500
	f := newRowCostFixture(t, n)
	ctx := context.Background()
	var s benchkit.Series
	if err := f.measure(ctx, &s); err != nil {
		t.Fatal(err)
	}
	var runs, finished, versions, state, actions, oldIndex int
	if err := f.db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM task_run),
		(SELECT COUNT(*) FROM task_run WHERE result = ? AND ended_at > 0),
		(SELECT COUNT(*) FROM task_runtime WHERE version = ?),
		(SELECT COUNT(*) FROM task_runtime WHERE state = ? AND next_trigger_time > 0),
		(SELECT COUNT(*) FROM task_action WHERE action IN ('dispatch', 'success')),
		(SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
			AND table_name = 'task_run' AND index_name = 'idx_task_run_result')`,
		model.ResultSuccess, 1+transitionsPerPass, string(model.StateScheduled)).Scan(
		&runs, &finished, &versions, &state, &actions, &oldIndex); err != nil {
		t.Fatal(err)
	}
	if runs != 2*n || finished != 2*n || versions != n || state != n || actions != 2*n || oldIndex != 0 {
		t.Errorf("runs %d, finished %d (want %d each); runtimes at version %d %d, re-armed %d (want %d each); "+
			"dispatch actions %d (want %d); old index entries %d (want 0)",
			runs, finished, 2*n, 1+transitionsPerPass, versions, state, n, actions, 2*n, oldIndex)
	}
	for _, name := range []string{rcRunInsert, rcRunFinish, rcRunFinishOld, rcFireZero, rcEndFromDue, rcCycleNow, rcOneShotTask} {
		if v := s.Summary(name); v.N != 1 || v.Median < 0 {
			t.Errorf("%s: %+v, want one non-negative figure", name, v)
		}
	}
}
