package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
)

// Background work a steady phase can run beside its firing (Config.Background), to measure
// what it costs the lateness.
const (
	// BackgroundNone runs the phase alone.
	BackgroundNone = ""
	// BackgroundBulkPause holds BackgroundTasks more tasks, due a day later, and pauses all
	// of them with one POST /api/v1/tasks/bulk/pause a tenth into the window.
	BackgroundBulkPause = "bulk-pause"
	// BackgroundPrune holds BackgroundTasks run rows and twice as many action rows two
	// days old, and runs the pruner with a one-hour history retention: its first pass
	// starts a tenth into the window.
	BackgroundPrune = "prune"
)

// BackgroundTasksDefault is the size of the background work: 100,000 tasks (bulk-pause), or
// 100,000 run and 200,000 action rows (prune).
const BackgroundTasksDefault = 100000

// Background is what the background work of a phase did.
type Background struct {
	// Kind is Config.Background.
	Kind string
	// Rows is how many tasks the bulk call affected, or rows the pruner deleted by the end
	// of the phase.
	Rows int
	// Took is how long the bulk call took, or the pruner's passes from the first row
	// deleted to the last (0 when it deleted nothing).
	Took time.Duration
}

// seedBackground writes the rows the background work of cfg needs, beside the phase's n
// tasks (ids 1..n), before the engine starts.
func seedBackground(ctx context.Context, cfg Config, db *sql.DB, n int, written time.Time) error {
	switch cfg.Background {
	case BackgroundNone:
		return nil
	case BackgroundBulkPause:
		later := written.Add(24 * time.Hour).UnixMilli()
		return benchkit.InsertTasks(ctx, db, benchkit.Tasks{
			N: cfg.BackgroundTasks, FirstID: int64(n) + 1, Prefix: "bulk",
			Due:       func(int) int64 { return later },
			Callback:  model.Callback{Type: model.CallbackExecutor, App: benchApp, Handler: benchHandler},
			CreatedAt: written.UnixMilli(),
		})
	case BackgroundPrune:
		return seedHistory(ctx, db, cfg.BackgroundTasks, written.Add(-48*time.Hour).UnixMilli())
	}
	return fmt.Errorf("unknown background %q: want %q or %q", cfg.Background, BackgroundBulkPause, BackgroundPrune)
}

// seedHistory inserts runs finished (skipped) run rows and two action rows per run, all at old, for
// tasks that no longer exist: history the pruner removes.
func seedHistory(ctx context.Context, db *sql.DB, runs int, old int64) error {
	const per = 1000
	ts := strconv.FormatInt(old, 10)
	for from := 0; from < runs; from += per {
		var rs, as strings.Builder
		rs.WriteString(`INSERT INTO task_run (ticket, task_id, task_name, kind, attempt, scheduled_at, dispatched_at,
			executor, ended_at, result, error, duration_ms, output, detail) VALUES `)
		as.WriteString(`INSERT INTO task_action (task_id, task_name, ticket, action, from_state, to_state, actor, at, detail) VALUES `)
		for i := from; i < min(from+per, runs); i++ {
			id := strconv.Itoa(1_000_000_000 + i)
			if i > from {
				rs.WriteByte(',')
				as.WriteByte(',')
			}
			rs.WriteString("('old-" + id + "'," + id + ",'old-" + id + "','scheduled',1," + ts + "," + ts + ",'x'," + ts + ",'skipped','',0,'','')")
			as.WriteString("(" + id + ",'old-" + id + "','old-" + id + "','dispatch','SCHEDULED','RUNNING','scheduler'," + ts + ",''),")
			as.WriteString("(" + id + ",'old-" + id + "','old-" + id + "','result','RUNNING','SUCCESS','executor'," + ts + ",'')")
		}
		if _, err := db.ExecContext(ctx, rs.String()); err != nil {
			return fmt.Errorf("cannot insert old run rows: %w", err)
		}
		if _, err := db.ExecContext(ctx, as.String()); err != nil {
			return fmt.Errorf("cannot insert old action rows: %w", err)
		}
	}
	return nil
}

// backgroundEngine sets what the engine needs for the background work: the pruner's
// retention and the time of its first pass.
func backgroundEngine(cfg Config, ecfg *engine.Config, first time.Time, span time.Duration) {
	if cfg.Background != BackgroundPrune {
		return
	}
	ecfg.Retention.History = time.Hour
	ecfg.Retention.Finished = -1 // keep the phase's finished tasks: the phase counts them
	ecfg.Retention.Interval = time.Until(first) + span/10
}

// runBackground starts the background work of cfg against the API at base; the returned
// function waits for it and says what it did.
func runBackground(ctx context.Context, cfg Config, base string, first time.Time, span time.Duration) func() (*Background, error) {
	switch cfg.Background {
	case BackgroundBulkPause:
		type result struct {
			bg  *Background
			err error
		}
		done := make(chan result, 1)
		go func() {
			select {
			case <-time.After(time.Until(first.Add(span / 10))):
			case <-ctx.Done():
				done <- result{err: ctx.Err()}
				return
			}
			start := time.Now()
			body, _ := json.Marshal(map[string]string{"name_prefix": "bulk-", "note": "benchmark"})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/tasks/bulk/pause", bytes.NewReader(body))
			if err != nil {
				done <- result{err: err}
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- result{err: fmt.Errorf("bulk pause: %w", err)}
				return
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var out struct {
				Affected int `json:"affected"`
			}
			if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &out) != nil {
				done <- result{err: fmt.Errorf("bulk pause: status %d: %.300s", resp.StatusCode, data)}
				return
			}
			done <- result{bg: &Background{Kind: cfg.Background, Rows: out.Affected, Took: time.Since(start)}}
		}()
		return func() (*Background, error) { r := <-done; return r.bg, r.err }
	case BackgroundPrune:
		// The pruner is the engine's own; watch its counter to time its passes.
		stop := make(chan struct{})
		got := make(chan *Background, 1)
		go func() {
			var firstAt, lastAt time.Time
			var last float64
			read := func() float64 {
				return promValue(`axe_pruned_rows_total{table="task_run"}`) + promValue(`axe_pruned_rows_total{table="task_action"}`)
			}
			base := read()
			for {
				v := read() - base
				if v != last {
					if firstAt.IsZero() {
						firstAt = time.Now()
					}
					lastAt, last = time.Now(), v
				}
				select {
				case <-stop:
					got <- &Background{Kind: cfg.Background, Rows: int(last), Took: lastAt.Sub(firstAt)}
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		return func() (*Background, error) { close(stop); return <-got, nil }
	}
	return func() (*Background, error) { return nil, nil }
}
