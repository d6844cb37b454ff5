package benchkit

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// Lateness returns, sorted, dispatched_at - scheduled_at in milliseconds of every run row:
// how late each fire left the scheduler, as the audit trail recorded it.
func Lateness(ctx context.Context, db *sql.DB) ([]int64, error) { return LatenessSince(ctx, db, 0) }

// LatenessSince is Lateness of the run rows scheduled at or after since (Unix ms), leaving
// out older history a benchmark seeded.
func LatenessSince(ctx context.Context, db *sql.DB, since int64) ([]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT dispatched_at - scheduled_at FROM task_run WHERE scheduled_at >= ?`, since)
	if err != nil {
		return nil, fmt.Errorf("cannot read run rows: %w", err)
	}
	defer rows.Close()
	var late []int64
	for rows.Next() {
		var ms int64
		if err := rows.Scan(&ms); err != nil {
			return nil, fmt.Errorf("cannot read run rows: %w", err)
		}
		late = append(late, ms)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read run rows: %w", err)
	}
	slices.Sort(late)
	return late, nil
}

// Recorded counts what the audit trail holds: runtime rows in state, run rows with result,
// and action records.
func Recorded(ctx context.Context, db *sql.DB, state, result string) (runtimes, runs, actions int, err error) {
	err = db.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM task_runtime WHERE state = ?),
		(SELECT COUNT(*) FROM task_run WHERE result = ?),
		(SELECT COUNT(*) FROM task_action)`, state, result).Scan(&runtimes, &runs, &actions)
	if err != nil {
		err = fmt.Errorf("cannot count recorded rows: %w", err)
	}
	return runtimes, runs, actions, err
}

// Failures summarises the run rows that did not succeed: up to five (result, error) pairs
// with their counts, most frequent first, as one line.
func Failures(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, `SELECT result, LEFT(error, 160), COUNT(*) AS n FROM task_run
		WHERE result <> 'success' GROUP BY 1, 2 ORDER BY n DESC LIMIT 5`)
	if err != nil {
		return "", fmt.Errorf("cannot read failed runs: %w", err)
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var result, text string
		var n int
		if err := rows.Scan(&result, &text, &n); err != nil {
			return "", fmt.Errorf("cannot read failed runs: %w", err)
		}
		parts = append(parts, fmt.Sprintf("%d× %s %q", n, result, text))
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("cannot read failed runs: %w", err)
	}
	return strings.Join(parts, "; "), nil
}
