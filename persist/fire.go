package persist

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/axe-sched/axe/model"
)

// The fire record (docs/ha.md, "The fire record"). A fire's run row is keyed by its deterministic
// ticket (task, fire time, attempt), and the dispatch-time write of that row is a plain INSERT: the
// database itself refuses a second row for the same fire, in the same transaction as the
// SCHEDULED→RUNNING transition. So a fire can be dispatched only by the node whose insert landed,
// even when two nodes both believe they are primary and the runtime CAS was passed (a stale copy
// that happens to match, a bug). No index is added: the run table's primary key is the record.
// Later writes of the run (its result) are updates of that row.

// FireRefusedError reports the fire records of a batch that met an existing run row. The
// batch was rolled back; nothing of it was applied. It unwraps to ErrDuplicateFire.
type FireRefusedError struct {
	// Indexes into Batch.Fires of the refused records.
	Indexes []int
}

func (e *FireRefusedError) Error() string {
	return fmt.Sprintf("%d fire record(s) refused: the run already exists", len(e.Indexes))
}

// Unwrap makes errors.Is(err, ErrDuplicateFire) true.
func (e *FireRefusedError) Unwrap() error { return ErrDuplicateFire }

// errFireExists reports that a fire record's insert met an existing row; ApplyBatch then
// names the refused records.
var errFireExists = errors.New("a fire record exists")

// repeatedFires returns the indexes of fires whose ticket an earlier fire of the same batch
// already has: the database would refuse them, so the batch does not go there at all.
func repeatedFires(fires []model.Run) []int {
	if len(fires) < 2 {
		return nil
	}
	seen := make(map[string]struct{}, len(fires))
	var out []int
	for i := range fires {
		if _, ok := seen[fires[i].Ticket]; ok {
			out = append(out, i)
			continue
		}
		seen[fires[i].Ticket] = struct{}{}
	}
	return out
}

// existingFires returns the indexes of fires whose ticket is stored: after a batch was
// refused on a fire record, the ones to blame.
func (s *sqlStore) existingFires(ctx context.Context, fires []model.Run) ([]int, error) {
	stored := make(map[string]bool, len(fires))
	per := min(maxIDsPerQuery, s.d.maxParams)
	for start := 0; start < len(fires); start += per {
		chunk := fires[start:min(start+per, len(fires))]
		args := make([]any, 0, len(chunk))
		for i := range chunk {
			args = append(args, clip(chunk[i].Ticket, ticketLen))
		}
		rows, err := s.db.QueryContext(ctx, `SELECT ticket FROM task_run WHERE ticket IN (`+placeholders(len(args))+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("cannot look up fire records: %w", err)
		}
		for rows.Next() {
			var t string
			if err := rows.Scan(&t); err != nil {
				rows.Close()
				return nil, fmt.Errorf("cannot scan fire record: %w", err)
			}
			stored[t] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("cannot read fire records: %w", err)
		}
	}
	var out []int
	for i := range fires {
		if stored[clip(fires[i].Ticket, ticketLen)] {
			out = append(out, i)
		}
	}
	return out, nil
}

// refusedFires turns errFireExists from a batch into the *FireRefusedError naming the
// records to blame; any other error is returned as is.
func (s *sqlStore) refusedFires(ctx context.Context, b *Batch, err error) error {
	if !errors.Is(err, errFireExists) {
		return err
	}
	idx, qerr := s.existingFires(ctx, b.Fires)
	if qerr != nil {
		return fmt.Errorf("cannot apply batch: %w (and %w)", err, qerr)
	}
	if len(idx) == 0 {
		// The row that refused it is gone again (pruned): a transient failure.
		return fmt.Errorf("cannot apply batch: %w", err)
	}
	return &FireRefusedError{Indexes: idx}
}

// writeFires inserts the fire records; a stored ticket fails with errFireExists.
func (s *sqlStore) writeFires(ctx context.Context, tx batchTx, fires []model.Run) error {
	if len(fires) == 0 {
		return nil
	}
	buf := batchArgs(len(fires) * len(runCols))
	defer buf.release()
	for i := range fires {
		buf.args = appendRunArgs(buf.args, &fires[i])
	}
	if _, err := s.execRows(ctx, tx, s.insertRun, "", len(runCols), buf.args); err != nil {
		if s.d.isUniqueViolation(err) {
			return errFireExists
		}
		return fmt.Errorf("cannot write fire records: %w", err)
	}
	return nil
}

func appendRunArgs(args []any, r *model.Run) []any {
	return append(args, clip(r.Ticket, ticketLen), r.TaskID, clip(r.TaskName, nameLen),
		shortArg(r.Kind), r.Attempt, r.ScheduledAt, r.DispatchedAt, clip(r.Executor, nameLen),
		r.EndedAt, shortArg(r.Result), clip(r.Error, textLen), r.DurationMS,
		clip(r.Output, textLen), clip(r.Detail, textLen), runParams(r))
}

// runParams is the params column of r's row: NULL when the run was given none (a fire runs
// with its task's params, which the definition holds).
func runParams(r *model.Run) any {
	if len(r.Params) == 0 {
		return nil
	}
	return string(r.Params)
}

// ListOpenFires returns the periodic runs still running whose task's runtime does not say
// so: the fire record is the durable RUNNING marker of a fire (design.md, "Write path"), and
// until the run's end is written the runtime keeps the SCHEDULED (or RETRYING) state, the due
// time and the attempt the fire was made from. A run is open when its row is still
// `running` and it is the fire of that state: its scheduled_at is the runtime's
// next_trigger_time and its attempt the one that state fires (1, or the RETRYING attempt).
// Only tasks due before upTo are looked at (recovery passes now plus a margin: no fire can
// have been made of a due time later than the clock of the node that made it). Oldest first.
func (s *sqlStore) ListOpenFires(ctx context.Context, upTo int64) ([]model.Run, error) {
	cols := make([]string, len(runCols))
	for i, c := range runCols {
		cols[i] = "x." + c
	}
	q := "SELECT " + strings.Join(cols, ", ") + " FROM " + s.d.openFiresFrom +
		" WHERE r.next_trigger_time > 0 AND r.next_trigger_time < ?" +
		" AND r.state IN ('" + string(model.StateScheduled) + "', '" + string(model.StateRetrying) + "')" +
		" AND x.kind = '" + model.RunScheduled + "' AND x.result = '" + model.ResultRunning + "'" +
		" AND x.attempt = CASE WHEN r.state = '" + string(model.StateRetrying) + "' THEN r.attempt ELSE 1 END" +
		shardCond(ctx, "x.task_name") + " ORDER BY x.scheduled_at, x.ticket"
	return s.queryRuns(ctx, q, upTo)
}

// ListOpenParallelRuns returns the runs in flight of allow_all tasks (Store). The tasks are
// found by a scan of task_def, as LoadByState scans task_runtime at start; each one's runs
// through idx_task_run_task.
func (s *sqlStore) ListOpenParallelRuns(ctx context.Context) ([]model.Run, error) {
	cols := make([]string, len(runCols))
	for i, c := range runCols {
		cols[i] = "x." + c
	}
	q := "SELECT " + strings.Join(cols, ", ") + " FROM task_def d JOIN task_run x ON x.task_id = d.id" +
		" WHERE d.overlap_policy = '" + model.OverlapAllowAll + "'" +
		" AND x.kind = '" + model.RunScheduled + "' AND x.result = '" + model.ResultRunning + "'" +
		shardCond(ctx, "d.name") + " ORDER BY x.scheduled_at, x.ticket"
	return s.queryRuns(ctx, q)
}
