package persist

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Pruner deletes what retention lets go (docs/retention.md). Both stores implement it. Each
// call deletes at most limit rows of its kind, in one short transaction, oldest first, so
// a caller can pace itself between calls; with dryRun it counts what it would delete (all of
// it, not limit) and deletes nothing.
type Pruner interface {
	// PruneRuns deletes finished runs scheduled before before. A task with its own
	// RetainHistoryMS keeps its runs for that long after now instead.
	PruneRuns(ctx context.Context, before, now int64, limit int, dryRun bool) (int64, error)
	// PruneActions deletes action records written before before, with the same per-task
	// overrides as PruneRuns.
	PruneActions(ctx context.Context, before, now int64, limit int, dryRun bool) (int64, error)
	// PruneFinished deletes one-shot (delay) tasks that reached a final state and will not
	// fire again, ended before before (or RetainFinishedMS before now for a task that sets
	// it), and returns their ids. Their runs and actions stay until history retention.
	PruneFinished(ctx context.Context, before, now int64, limit int, dryRun bool) ([]int64, int64, error)
}

var _ Pruner = (*sqlStore)(nil)

// historyOverrides returns the tasks with their own history retention.
func (s *sqlStore) historyOverrides(ctx context.Context) (map[int64]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, retain_history_ms FROM task_def WHERE retain_history_ms > 0`)
	if err != nil {
		return nil, fmt.Errorf("cannot read retention overrides: %w", err)
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var id, ms int64
		if err := rows.Scan(&id, &ms); err != nil {
			return nil, fmt.Errorf("cannot read retention overrides: %w", err)
		}
		out[id] = ms
	}
	return out, rows.Err()
}

// maxOverrides bounds how many per-task overrides the history pruner honours by name in its
// queries; tasks past that keep the server's retention.
const maxOverrides = 1000

func notIn(col string, ids map[int64]int64) string {
	if len(ids) == 0 || len(ids) > maxOverrides {
		return ""
	}
	var b strings.Builder
	b.WriteString(" AND " + col + " NOT IN (")
	first := true
	for id := range ids {
		if !first {
			b.WriteString(", ")
		}
		first = false
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteString(")")
	return b.String()
}

// oldRuns is the condition on the runs history retention lets go, over every task but
// those in over (which keep their own); it takes the cut-off time as its one argument.
func (s *sqlStore) oldRuns(over map[int64]int64) string {
	return ` WHERE ` + s.d.prunableRuns + `scheduled_at < ? AND result <> 'running'` + notIn("task_id", over)
}

// oldRunsSelect selects up to limit tickets of oldRuns, oldest first.
func (s *sqlStore) oldRunsSelect(over map[int64]int64, limit int) string {
	return `SELECT ticket FROM task_run` + s.oldRuns(over) + ` ORDER BY scheduled_at LIMIT ` + strconv.Itoa(limit)
}

// PruneRuns deletes up to limit finished runs scheduled before before (see Pruner).
func (s *sqlStore) PruneRuns(ctx context.Context, before, now int64, limit int, dryRun bool) (int64, error) {
	over, err := s.historyOverrides(ctx)
	if err != nil {
		return 0, err
	}
	if dryRun {
		var n int64
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM task_run`+s.oldRuns(over), before).Scan(&n); err != nil {
			return 0, fmt.Errorf("cannot count old runs: %w", err)
		}
		for id, ms := range over {
			var k int64
			if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM task_run WHERE task_id = ? AND scheduled_at < ? AND result <> 'running'`, id, now-ms).Scan(&k); err != nil {
				return 0, fmt.Errorf("cannot count old runs: %w", err)
			}
			n += k
		}
		return n, nil
	}
	n, err := s.deleteKeys(ctx, s.oldRunsSelect(over, limit), []any{before}, `DELETE FROM task_run WHERE ticket IN `)
	if err != nil || len(over) > maxOverrides {
		return n, err
	}
	for id, ms := range over {
		if int(n) >= limit {
			break
		}
		k, err := s.deleteKeys(ctx, `SELECT ticket FROM task_run WHERE task_id = ? AND scheduled_at < ? AND result <> 'running' LIMIT `+strconv.Itoa(limit-int(n)),
			[]any{id, now - ms}, `DELETE FROM task_run WHERE ticket IN `)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// deleteKeys reads the keys sel returns and deletes them with del + "(…)" in one
// transaction. Reading first keeps the statements the same on both dialects: MySQL takes
// no LIMIT in an IN subquery, and SQLite takes none on DELETE.
func (s *sqlStore) deleteKeys(ctx context.Context, sel string, args []any, del string) (int64, error) {
	tx, err := s.begin(ctx) // fenced on an HA primary's store, as every write
	if err != nil {
		return 0, fmt.Errorf("cannot begin pruning: %w", err)
	}
	defer rollback(tx)
	rows, err := tx.QueryContext(ctx, sel, args...)
	if err != nil {
		return 0, fmt.Errorf("cannot select rows to prune: %w", err)
	}
	var keys []any
	for rows.Next() {
		var k any
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return 0, fmt.Errorf("cannot select rows to prune: %w", err)
		}
		if b, ok := k.([]byte); ok {
			k = string(b)
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("cannot select rows to prune: %w", err)
	}
	if len(keys) == 0 {
		return 0, nil
	}
	res, err := tx.ExecContext(ctx, del+"("+placeholders(len(keys))+")", keys...)
	if err != nil {
		return 0, fmt.Errorf("cannot prune: %w", err)
	}
	n, _ := res.RowsAffected()
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("cannot commit pruning: %w", err)
	}
	return n, nil
}

// PruneActions deletes up to limit action records written before before (see Pruner).
// task_action has no index on at: its ids follow time, so the oldest rows are the first by
// primary key, and the scan stops at the first page that holds nothing to delete.
func (s *sqlStore) PruneActions(ctx context.Context, before, now int64, limit int, dryRun bool) (int64, error) {
	over, err := s.historyOverrides(ctx)
	if err != nil {
		return 0, err
	}
	if dryRun {
		var n int64
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM task_action WHERE at < ?`+notIn("task_id", over), before).Scan(&n); err != nil {
			return 0, fmt.Errorf("cannot count old actions: %w", err)
		}
		return n, nil
	}
	var deleted int64
	var after int64
	for deleted < int64(limit) {
		rows, err := s.db.QueryContext(ctx, `SELECT id, task_id, at FROM task_action WHERE id > ? ORDER BY id LIMIT `+strconv.Itoa(limit), after)
		if err != nil {
			return deleted, fmt.Errorf("cannot select actions to prune: %w", err)
		}
		var ids []any
		seen, old := 0, 0
		for rows.Next() {
			var id, task, at int64
			if err := rows.Scan(&id, &task, &at); err != nil {
				rows.Close()
				return deleted, fmt.Errorf("cannot select actions to prune: %w", err)
			}
			seen++
			after = id
			cut := before
			if ms, ok := over[task]; ok {
				cut = now - ms
			}
			if at < cut {
				ids = append(ids, id)
			}
			if at < before {
				old++
			}
		}
		rows.Close()
		if len(ids) > 0 {
			res, err := s.exec(ctx, `DELETE FROM task_action WHERE id IN (`+placeholders(len(ids))+`)`, ids...)
			if err != nil {
				return deleted, fmt.Errorf("cannot prune actions: %w", err)
			}
			n, _ := res.RowsAffected()
			deleted += n
		}
		if seen < limit || old == 0 {
			return deleted, nil
		}
	}
	return deleted, nil
}

// finishedWhere selects the finished one-shot tasks: a delay task with no fire ahead, in a
// final state, that ended.
const finishedWhere = ` FROM task_runtime r JOIN task_def d ON d.id = r.task_id
	WHERE r.next_trigger_time = 0 AND d.trigger_type = 'delay' AND r.last_end_time > 0
	AND r.state IN ('SUCCESS', 'FAILED', 'KILLED', 'WAITING')
	AND r.last_end_time < CASE WHEN d.retain_finished_ms > 0 THEN ? - d.retain_finished_ms ELSE ? END`

// PruneFinished deletes up to limit finished one-shot tasks (see Pruner).
func (s *sqlStore) PruneFinished(ctx context.Context, before, now int64, limit int, dryRun bool) ([]int64, int64, error) {
	if dryRun {
		var n int64
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*)`+finishedWhere+shardCond(ctx, "d.name"), now, before).Scan(&n); err != nil {
			return nil, 0, fmt.Errorf("cannot count finished tasks: %w", err)
		}
		return nil, n, nil
	}
	rows, err := s.db.QueryContext(ctx, `SELECT r.task_id`+finishedWhere+shardCond(ctx, "d.name")+` LIMIT `+strconv.Itoa(limit), now, before)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot select finished tasks: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, 0, fmt.Errorf("cannot select finished tasks: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("cannot select finished tasks: %w", err)
	}
	if len(ids) == 0 {
		return nil, 0, nil
	}
	b := &Batch{Deletes: ids, Shards: shardFencesOf(ctx)}
	if s.fence != nil {
		b.Epoch, b.LeaseName = s.fence.epoch, s.fence.lease
	}
	if err := s.ApplyBatch(ctx, b); err != nil {
		return nil, 0, fmt.Errorf("cannot prune finished tasks: %w", err)
	}
	return ids, int64(len(ids)), nil
}
