package persist

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	}
	return nil, nil, "", fmt.Errorf("%w: sort: must be id, name, group or next, got %q", ErrBadFilter, f.Order)
}

// GroupCount is how many tasks of a group are in one state.
type GroupCount struct {
	Group string `json:"group"`
	State State  `json:"state"`
	Count int64  `json:"count"`
}

// GroupCounter is implemented by the SQL stores: task counts by group and state.
type GroupCounter interface {
	GroupCounts(ctx context.Context) ([]GroupCount, error)
}

// GroupCounts counts the tasks by group and durable state. It reads every runtime row once
// (no index holds both columns), which the groups page pays for on demand, never a fire.
func (s *sqlStore) GroupCounts(ctx context.Context) ([]GroupCount, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT d.grp, r.state, COUNT(*)`+taskJoin+` GROUP BY d.grp, r.state ORDER BY d.grp, r.state`)
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
