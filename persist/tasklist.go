package persist

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/axe-sched/axe/model"
)

// ErrBadFilter is returned (wrapped, naming the field) by ListTasks for a TaskFilter it
// cannot serve.
var ErrBadFilter = errors.New("bad task filter")

// keyset adds f's name prefix and page cursor to the WHERE terms and returns the ORDER BY.
// Every order is one an index serves, so a page costs the rows it returns whatever the table
// holds: the unique name index, idx_task_def_grp (grp, id) and idx_task_runtime_next, whose
// entries end in the primary key (InnoDB) or rowid (SQLite), i.e. the task id.
func (f TaskFilter) keyset(where []string, args []any) ([]string, []any, string, error) {
	if p := f.NamePrefix; p != "" {
		// A range on the name, not LIKE: SQLite's LIKE ignores case and uses no index, and
		// both stores compare names bytewise (utf8mb4_bin, BINARY). Names are ASCII.
		last := p[len(p)-1]
		for i := 0; i < len(p); i++ {
			if p[i] < 0x20 || p[i] >= 0x7f {
				return nil, nil, "", fmt.Errorf("%w: name_prefix: names are printable ASCII, got %q", ErrBadFilter, p)
			}
		}
		where = append(where, "d.name >= ?", "d.name < ?")
		args = append(args, p, p[:len(p)-1]+string(last+1))
	}
	switch f.Order {
	case "", OrderID:
		if f.AfterID > 0 {
			where = append(where, "d.id > ?")
			args = append(args, f.AfterID)
		}
		return where, args, "d.id", nil
	case OrderName:
		if f.After != "" {
			where = append(where, "d.name > ?")
			args = append(args, f.After)
		}
		return where, args, "d.name", nil
	case OrderGroup:
		if f.After != "" || f.AfterID > 0 {
			where = append(where, "(d.grp > ? OR (d.grp = ? AND d.id > ?))")
			args = append(args, f.After, f.After, f.AfterID)
		}
		return where, args, "d.grp, d.id", nil
	case OrderNext:
		if f.After != "" || f.AfterID > 0 {
			at, err := strconv.ParseInt(f.After, 10, 64)
			if err != nil {
				return nil, nil, "", fmt.Errorf("%w: cursor: the next-fire key must be an integer, got %q", ErrBadFilter, f.After)
			}
			where = append(where, "(r.next_trigger_time > ? OR (r.next_trigger_time = ? AND r.task_id > ?))")
			args = append(args, at, at, f.AfterID)
		}
		return where, args, "r.next_trigger_time, r.task_id", nil
	case OrderFailed:
		// Newest failure first, walking idx_task_runtime_failed backwards; the tasks that
		// never failed (0) come last.
		if f.After != "" || f.AfterID > 0 {
			at, err := strconv.ParseInt(f.After, 10, 64)
			if err != nil {
				return nil, nil, "", fmt.Errorf("%w: cursor: the failure-time key must be an integer, got %q", ErrBadFilter, f.After)
			}
			where = append(where, "(r.last_failure_at < ? OR (r.last_failure_at = ? AND r.task_id < ?))")
			args = append(args, at, at, f.AfterID)
		}
		return where, args, "r.last_failure_at DESC, r.task_id DESC", nil
	}
	return nil, nil, "", fmt.Errorf("%w: sort: must be id, name, group, next or failed, got %q", ErrBadFilter, f.Order)
}

// GroupCount is how many tasks of a group are in one state.
type GroupCount struct {
	Group string      `json:"group"`
	State model.State `json:"state"`
	Count int64       `json:"count"`
}

// GroupCounter is implemented by the SQL stores: task counts by group and state.
type GroupCounter interface {
	GroupCounts(ctx context.Context) ([]GroupCount, error)
}

// GroupCounts counts the tasks by group and durable state, a fire in flight counted RUNNING
// as ListTasks shows it. It reads every runtime row once (no index holds both columns), and
// probes the run index for the SCHEDULED and RETRYING ones, which the groups page pays for on
// demand, never a fire.
func (s *sqlStore) GroupCounts(ctx context.Context) ([]GroupCount, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT d.grp, CASE WHEN `+openFireOfRuntime+` THEN '`+string(model.StateRunning)+`' ELSE r.state END AS st, COUNT(*)`+
		taskJoin+` GROUP BY d.grp, st ORDER BY d.grp, st`)
	if err != nil {
		return nil, fmt.Errorf("cannot count tasks by group: %w", err)
	}
	defer rows.Close()
	var out []GroupCount
	for rows.Next() {
		var g GroupCount
		if err := rows.Scan(&g.Group, &g.State, &g.Count); err != nil {
			return nil, fmt.Errorf("cannot read group counts: %w", err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read group counts: %w", err)
	}
	return out, nil
}

// stateDriveShare is the share of the sampled tasks at or under which a state-filtered page
// is read from the runtime table first (see listFrom); stateSample is how many runtime rows
// at each end of the table the sample reads.
const (
	stateDriveShare = 10
	stateSample     = 1000
)

// listFrom is ListTasks' FROM clause. Without a state filter it is the plain join, which the
// optimizer walks in the order's index, reading no more rows than the page holds.
//
// The state is in no index (an index on it would be written by every fire), so with a state
// filter that walk reads rows until the page is full: a state held by few tasks, or by
// none, costs a walk over every task, two clustered-index lookups each (at 100K tasks on
// MariaDB, 0.2 to 0.5 s for a state nobody is in). The other way round, scanning the narrow
// runtime table in key order and reading the definitions of the matching rows only, costs
// one sequential scan plus a lookup and a sort per match: cheap for a rare state, dear for
// a common one, whose walk fills a page after a few rows. So a state-filtered page first
// reads the state of the oldest and the newest stateSample runtime rows (by primary key, a
// few milliseconds) and reads from the runtime side when at most a tenth of them match.
// The sample only picks the plan: both plans return the same rows.
func (s *sqlStore) listFrom(ctx context.Context, f TaskFilter) (string, error) {
	if !f.runtimeOnly() || f.Limit <= 0 {
		return taskJoin, nil
	}
	// The same shape for every runtime filter: the state, the last result, the newest
	// failure. Only the plain state is sampled for the state (a fire in flight counts the
	// same either way for the choice of plan).
	var (
		pred []string
		args []any
	)
	if f.State != "" {
		pred = append(pred, "state = ?")
		args = append(args, string(f.State))
	}
	if f.LastResult != "" {
		pred = append(pred, "last_result = ?")
		args = append(args, f.LastResult)
	}
	if f.FailedSince > 0 {
		pred = append(pred, "last_failure_at >= ?")
		args = append(args, f.FailedSince)
	}
	const cols = "state, last_result, last_failure_at"
	var total, match int64
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN `+strings.Join(pred, " AND ")+` THEN 1 ELSE 0 END), 0) FROM (
		SELECT `+cols+` FROM (SELECT `+cols+` FROM task_runtime ORDER BY task_id LIMIT `+strconv.Itoa(stateSample)+`) oldest
		UNION ALL
		SELECT `+cols+` FROM (SELECT `+cols+` FROM task_runtime ORDER BY task_id DESC LIMIT `+strconv.Itoa(stateSample)+`) newest) sample`,
		args...).Scan(&total, &match)
	if err != nil {
		return "", fmt.Errorf("cannot sample the tasks' runtime: %w", err)
	}
	if match*stateDriveShare <= total {
		return " FROM " + s.d.stateFrom, nil
	}
	return taskJoin, nil
}
