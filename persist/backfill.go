package persist

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/axe-sched/axe/model"
)

// Backfills (schema step 14). A backfill is one row with a cursor; its runs are ordinary run
// rows of kind backfill whose tickets are their fire records (fire.go), so this file only
// stores the row and answers the two questions recovery asks about its runs. The engine is
// the row's only writer while it holds the lease; every write replaces the row's progress
// with the engine's absolute values, so a retried write changes nothing.

// BackfillStore is what backfills need of a store.
type BackfillStore interface {
	// CreateBackfill inserts b and sets b.ID.
	CreateBackfill(ctx context.Context, b *model.Backfill) error
	// GetBackfill returns the backfill, or ErrBackfillNotFound.
	GetBackfill(ctx context.Context, id int64) (*model.Backfill, error)
	// ListBackfills returns the task's backfills (every task's when taskID is 0), newest
	// first; limit <= 0 means all.
	ListBackfills(ctx context.Context, taskID int64, limit int) ([]model.Backfill, error)
	// ListOpenBackfills returns the backfills still running and those whose runs may still
	// be in flight (Low <= To), oldest first.
	ListOpenBackfills(ctx context.Context) ([]model.Backfill, error)
	// SaveBackfill writes b's progress: Next, Low, the counters, Status, UpdatedAt, EndedAt
	// and Note, matched by ID.
	SaveBackfill(ctx context.Context, b *model.Backfill) error
	// ListBackfillOpenRuns returns the task's backfill runs still running with scheduled_at
	// in [from, to], oldest first; the (task_id, scheduled_at) index serves it.
	ListBackfillOpenRuns(ctx context.Context, taskID, from, to int64) ([]model.Run, error)
	// CountBackfillRuns counts the task's backfill runs with scheduled_at in [from, to] and
	// this detail (the backfill that made them), by result.
	CountBackfillRuns(ctx context.Context, taskID, from, to int64, detail string) (map[string]int64, error)
	// RunsByTicket returns the stored runs among tickets, in no particular order.
	RunsByTicket(ctx context.Context, tickets []string) ([]model.Run, error)
}

// ErrBackfillNotFound is model.ErrBackfillNotFound.
var ErrBackfillNotFound = model.ErrBackfillNotFound

var backfillCols = []string{"task_id", "task_name", "from_ms", "to_ms", "parallel", "cron", "cron_dialect",
	"timezone", "total",
	"next_fire", "low_fire", "started", "skipped", "succeeded", "failed", "status", "actor",
	"created_at", "updated_at", "ended_at", "note"}

const backfillSelect = `SELECT id, task_id, task_name, from_ms, to_ms, parallel, cron, cron_dialect, timezone, total, next_fire,
	low_fire, started, skipped, succeeded, failed, status, actor, created_at, updated_at, ended_at,
	note FROM backfill`

func (s *sqlStore) CreateBackfill(ctx context.Context, b *model.Backfill) error {
	res, err := s.exec(ctx, "INSERT INTO backfill ("+strings.Join(backfillCols, ", ")+") VALUES "+
		valuesList(len(backfillCols), 1),
		b.TaskID, clip(b.TaskName, nameLen), b.From, b.To, b.Parallel, b.Cron, b.CronDialect, b.Timezone, b.Total, b.Next, b.Low, b.Started,
		b.Skipped, b.Succeeded, b.Failed, clip(b.Status, shortLen), clip(b.Actor, nameLen), b.CreatedAt,
		b.UpdatedAt, b.EndedAt, clip(b.Note, textLen))
	if err != nil {
		return fmt.Errorf("cannot create backfill: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("cannot read the new backfill's id: %w", err)
	}
	b.ID = id
	return nil
}

func (s *sqlStore) GetBackfill(ctx context.Context, id int64) (*model.Backfill, error) {
	bs, err := s.queryBackfills(ctx, backfillSelect+" WHERE id = ?", id)
	if err != nil {
		return nil, err
	}
	if len(bs) == 0 {
		return nil, fmt.Errorf("cannot get backfill %d: %w", id, ErrBackfillNotFound)
	}
	return &bs[0], nil
}

func (s *sqlStore) ListBackfills(ctx context.Context, taskID int64, limit int) ([]model.Backfill, error) {
	if taskID == 0 {
		return s.queryBackfills(ctx, backfillSelect+" ORDER BY id DESC"+limitClause(limit))
	}
	return s.queryBackfills(ctx, backfillSelect+" WHERE task_id = ? ORDER BY id DESC"+limitClause(limit), taskID)
}

func (s *sqlStore) ListOpenBackfills(ctx context.Context) ([]model.Backfill, error) {
	return s.queryBackfills(ctx, backfillSelect+" WHERE (status = ? OR low_fire <= to_ms)"+shardCond(ctx, "task_name")+" ORDER BY id", model.BackfillRunning)
}

func (s *sqlStore) SaveBackfill(ctx context.Context, b *model.Backfill) error {
	_, err := s.exec(ctx, `UPDATE backfill SET next_fire = ?, low_fire = ?, started = ?, skipped = ?,
		succeeded = ?, failed = ?, status = ?, updated_at = ?, ended_at = ?, note = ? WHERE id = ?`,
		b.Next, b.Low, b.Started, b.Skipped, b.Succeeded, b.Failed, clip(b.Status, shortLen), b.UpdatedAt,
		b.EndedAt, clip(b.Note, textLen), b.ID)
	if err != nil {
		return fmt.Errorf("cannot save backfill %d: %w", b.ID, err)
	}
	return nil
}

func (s *sqlStore) ListBackfillOpenRuns(ctx context.Context, taskID, from, to int64) ([]model.Run, error) {
	return s.queryRuns(ctx, s.runSelect+` WHERE task_id = ? AND scheduled_at >= ? AND scheduled_at <= ?
		AND kind = '`+model.RunBackfill+`' AND result = '`+model.ResultRunning+`' ORDER BY scheduled_at, ticket`,
		taskID, from, to)
}

func (s *sqlStore) RunsByTicket(ctx context.Context, tickets []string) ([]model.Run, error) {
	var out []model.Run
	per := min(maxIDsPerQuery, s.d.maxParams)
	for start := 0; start < len(tickets); start += per {
		chunk := tickets[start:min(start+per, len(tickets))]
		args := make([]any, len(chunk))
		for i := range chunk {
			args[i] = clip(chunk[i], ticketLen)
		}
		runs, err := s.queryRuns(ctx, s.runSelect+` WHERE ticket IN (`+placeholders(len(args))+`)`, args...)
		if err != nil {
			return nil, err
		}
		out = append(out, runs...)
	}
	return out, nil
}

func (s *sqlStore) CountBackfillRuns(ctx context.Context, taskID, from, to int64, detail string) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT result, COUNT(*) FROM task_run WHERE task_id = ?
		AND scheduled_at >= ? AND scheduled_at <= ? AND kind = '`+model.RunBackfill+`' AND detail = ?
		GROUP BY result`, taskID, from, to, detail)
	if err != nil {
		return nil, fmt.Errorf("cannot count backfill runs: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var r string
		var n int64
		if err := rows.Scan(&r, &n); err != nil {
			return nil, fmt.Errorf("cannot scan backfill run count: %w", err)
		}
		out[r] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot count backfill runs: %w", err)
	}
	return out, nil
}

func (s *sqlStore) queryBackfills(ctx context.Context, q string, args ...any) ([]model.Backfill, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot query backfills: %w", err)
	}
	defer rows.Close()
	var out []model.Backfill
	for rows.Next() {
		var b model.Backfill
		var note sql.NullString
		if err := rows.Scan(&b.ID, &b.TaskID, &b.TaskName, &b.From, &b.To, &b.Parallel, &b.Cron, &b.CronDialect, &b.Timezone, &b.Total, &b.Next,
			&b.Low, &b.Started, &b.Skipped, &b.Succeeded, &b.Failed, &b.Status, &b.Actor, &b.CreatedAt,
			&b.UpdatedAt, &b.EndedAt, &note); err != nil {
			return nil, fmt.Errorf("cannot scan backfill: %w", err)
		}
		b.Note = note.String
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read backfills: %w", err)
	}
	return out, nil
}
