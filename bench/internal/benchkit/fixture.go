package benchkit

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/axe-sched/axe/model"
)

// Fixture insertion limits: 1000 rows keep one INSERT near 300 KB, far below
// max_allowed_packet, and four connections keep MariaDB's two cores busy without making
// the inserts contend on the same index pages.
const (
	fixtureRowsPerStmt = 1000
	fixtureWorkers     = 4
)

// Tasks describes one-shot (delay) tasks inserted straight into the axe schema, SCHEDULED
// and armed at their due time: what the window loader finds after CreateTask, without
// paying for a million CreateTask calls.
type Tasks struct {
	// N is the number of tasks.
	N int
	// FirstID is the id of the first task; ids are consecutive. Zero means 1.
	FirstID int64
	// Prefix starts every task name: Prefix-<id>. Empty means "bench".
	Prefix string
	// Due returns the next_trigger_time (Unix ms) of the i-th task, 0 <= i < N. Required.
	Due func(i int) int64
	// Callback is every task's callback. Required.
	Callback model.Callback
	// CreatedAt stamps created_at and updated_at (Unix ms); delay_ms is Due(i)-CreatedAt.
	CreatedAt int64
	// TimeoutSec is every task's timeout_sec. Zero means 300, the product default.
	TimeoutSec int
}

// InsertTasks writes the definitions and runtime rows of f with multi-row INSERTs on up to
// four connections of db.
func InsertTasks(ctx context.Context, db *sql.DB, f Tasks) error {
	if f.Due == nil {
		return fmt.Errorf("cannot insert tasks: Due is required")
	}
	if f.FirstID == 0 {
		f.FirstID = 1
	}
	if f.Prefix == "" {
		f.Prefix = "bench"
	}
	if f.TimeoutSec == 0 {
		f.TimeoutSec = 300
	}
	cb, err := json.Marshal(f.Callback)
	if err != nil {
		return fmt.Errorf("cannot encode callback: %w", err)
	}
	callback := quote(string(cb))

	chunks := make(chan int)
	errs := make(chan error, fixtureWorkers)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range fixtureWorkers {
		wg.Go(func() {
			var defs, rts strings.Builder
			for from := range chunks {
				to := min(from+fixtureRowsPerStmt, f.N)
				f.statements(&defs, &rts, from, to, callback)
				if _, err := db.ExecContext(ctx, defs.String()); err != nil {
					errs <- fmt.Errorf("cannot insert task definitions %d..%d: %w", from, to, err)
					cancel()
					return
				}
				if _, err := db.ExecContext(ctx, rts.String()); err != nil {
					errs <- fmt.Errorf("cannot insert task runtimes %d..%d: %w", from, to, err)
					cancel()
					return
				}
			}
		})
	}
feed:
	for from := 0; from < f.N; from += fixtureRowsPerStmt {
		select {
		case chunks <- from:
		case <-ctx.Done():
			break feed
		}
	}
	close(chunks)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

// statements builds the two INSERTs for tasks [from, to) as literal SQL: interpolating
// 19,000 arguments through database/sql would cost more than the server's work.
func (f *Tasks) statements(defs, rts *strings.Builder, from, to int, callback string) {
	defs.Reset()
	rts.Reset()
	defs.WriteString(`INSERT INTO task_def (id, name, grp, trigger_type, cron, delay_ms, depends_on,
		depends_mode, timezone, timeout_sec, retry_count, retry_interval_sec, priority, callback,
		params, misfire_policy, paused, created_at, updated_at) VALUES `)
	rts.WriteString(`INSERT INTO task_runtime (task_id, state, current_ticket, attempt,
		next_trigger_time, last_trigger_time, last_end_time, last_executor, success_count,
		failure_count, note, version) VALUES `)
	prefix := escape(f.Prefix)
	created := strconv.FormatInt(f.CreatedAt, 10)
	timeout := strconv.Itoa(f.TimeoutSec)
	for i := from; i < to; i++ {
		id := strconv.FormatInt(f.FirstID+int64(i), 10)
		due := f.Due(i)
		if i > from {
			defs.WriteByte(',')
			rts.WriteByte(',')
		}
		defs.WriteString("(" + id + ",'" + prefix + "-" + id + "','bench','" + model.TriggerDelay + "',''," +
			strconv.FormatInt(due-f.CreatedAt, 10) + ",'','','UTC'," + timeout + ",0,30,2," + callback + ",'','" +
			model.MisfireFireOnce + "',0," + created + "," + created + ")")
		rts.WriteString("(" + id + ",'" + string(model.StateScheduled) + "','',0," +
			strconv.FormatInt(due, 10) + ",0,0,'',0,0,'',1)")
	}
}

// quote renders s as a single-quoted SQL string literal.
func quote(s string) string { return "'" + escape(s) + "'" }

// escape makes s safe inside a single-quoted SQL string literal.
func escape(s string) string { return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) }
