package persist

import (
	"context"
	"fmt"

	"github.com/axe-sched/axe/model"
)

// What TaskCreate.IfExists does when the name is taken.
const (
	// CreateFail makes a taken name a conflict: the batch fails with a *ConflictError whose
	// Creates names the create, and the writer fails only that create's group.
	CreateFail = iota
	// CreateSkip leaves the existing task as it is; the create's Outcome is CreateSkipped.
	CreateSkip
	// CreateReplace deletes the existing task (definition, runtime, edges; its runs and
	// actions stay) and creates this one in its place, with a new id.
	CreateReplace
)

// Outcomes of a TaskCreate, set by the store when its batch lands.
const (
	CreatedNew = iota + 1
	CreateSkipped
	CreateReplaced
)

// TaskCreate is one new task in a Batch: its definition, runtime and the action records that
// say it was created, written in the same transaction as the rest of the batch. The id is
// assigned by the database: when the batch lands the store has set it on Def.ID,
// Runtime.TaskID and every action's TaskID.
type TaskCreate struct {
	Def      *model.TaskDef
	Runtime  model.Runtime
	Actions  []model.Action
	IfExists int // CreateFail, CreateSkip or CreateReplace

	// Set by the store when the batch lands.
	Outcome    int   // CreatedNew, CreateSkipped or CreateReplaced
	ReplacedID int64 // with CreateReplaced: the id of the task deleted in its place
}

// rows is what the create weighs in a batch: definition, runtime, edges and actions.
func (c *TaskCreate) rows() int { return 2 + len(c.Def.DependsOn) + len(c.Actions) }

// hasTaskWrites reports whether b creates, updates or deletes tasks.
func (b *Batch) hasTaskWrites() bool {
	return len(b.Creates) > 0 || len(b.DefUpdates) > 0 || len(b.Deletes) > 0
}

// lookUpNames reports whether a batch of these creates must look their names up before it
// inserts them: when one of them skips or replaces a taken name. A batch of CreateFail
// creates only (every single create through the writer) inserts at once, and a taken name
// fails the insert with a unique violation: ApplyBatch then runs the batch again with the
// look-up, which names the creates that conflict. That saves a query per commit in the
// common case, where no name is taken.
func lookUpNames(cs []*TaskCreate) bool {
	for _, c := range cs {
		if c.IfExists != CreateFail {
			return true
		}
	}
	return false
}

// writeTaskChanges applies b's task writes in tx: the deletes, then the creates, then the
// definition updates. A taken name under CreateFail is a *ConflictError naming every such
// create, or, when b.checkNames is false, a unique violation of the insert; nothing is
// written then.
func (s *sqlStore) writeTaskChanges(ctx context.Context, tx batchTx, b *Batch) error {
	deletes := b.Deletes
	var fresh []*TaskCreate // the creates to insert
	if len(b.Creates) > 0 && !b.checkNames {
		fresh = b.Creates
		for _, c := range b.Creates {
			c.Outcome, c.ReplacedID = CreatedNew, 0
		}
	} else if len(b.Creates) > 0 {
		names := make([]string, len(b.Creates))
		for i, c := range b.Creates {
			c.Outcome, c.ReplacedID = 0, 0
			names[i] = c.Def.Name
		}
		existing, err := s.idsByName(ctx, tx, names)
		if err != nil {
			return err
		}
		var conflicts []int
		seen := make(map[string]bool, len(b.Creates))
		deletes = append([]int64(nil), b.Deletes...)
		for i, c := range b.Creates {
			name := c.Def.Name
			id, taken := existing[name]
			switch {
			case seen[name] && c.IfExists == CreateSkip:
				c.Outcome = CreateSkipped
			case seen[name]:
				// An earlier create of this batch has the name.
				conflicts = append(conflicts, i)
			case taken && c.IfExists == CreateSkip:
				c.Outcome = CreateSkipped
			case taken && c.IfExists == CreateReplace:
				c.Outcome, c.ReplacedID = CreateReplaced, id
				deletes = append(deletes, id)
				fresh = append(fresh, c)
			case taken:
				conflicts = append(conflicts, i)
			default:
				c.Outcome = CreatedNew
				fresh = append(fresh, c)
			}
			seen[name] = true
		}
		if len(conflicts) > 0 {
			return &ConflictError{Creates: conflicts}
		}
	}
	if err := s.deleteTasks(ctx, tx, deletes); err != nil {
		return err
	}
	if err := s.insertTasks(ctx, tx, fresh); err != nil {
		return err
	}
	for i := range b.DefUpdates {
		if err := s.updateDefTx(ctx, tx, &b.DefUpdates[i]); err != nil {
			return err
		}
	}
	return nil
}

// idsByName returns the id of every task named in names that exists.
func (s *sqlStore) idsByName(ctx context.Context, tx batchTx, names []string) (map[string]int64, error) {
	out := make(map[string]int64, len(names))
	per := min(maxIDsPerQuery, s.d.maxParams)
	args := make([]any, 0, min(per, len(names)))
	for start := 0; start < len(names); start += per {
		chunk := names[start:min(start+per, len(names))]
		args = args[:0]
		for _, n := range chunk {
			args = append(args, n)
		}
		q := `SELECT id, name FROM task_def WHERE name IN (` + placeholders(len(chunk)) + `)`
		if err := tx.queryIDNames(ctx, q, args, func(id int64, name string) { out[name] = id }); err != nil {
			return nil, fmt.Errorf("cannot look up task names: %w", err)
		}
	}
	return out, nil
}

// deleteTasks removes the definitions, runtimes and edges of ids.
func (s *sqlStore) deleteTasks(ctx context.Context, tx batchTx, ids []int64) error {
	per := min(maxIDsPerQuery, s.d.maxParams)
	for start := 0; start < len(ids); start += per {
		chunk := ids[start:min(start+per, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		in := ` IN (` + placeholders(len(chunk)) + `)`
		for _, q := range []string{`DELETE FROM task_def WHERE id`, `DELETE FROM task_runtime WHERE task_id`, `DELETE FROM task_dep WHERE task_id`} {
			if _, err := tx.exec(ctx, q+in, args); err != nil {
				return fmt.Errorf("cannot delete tasks: %w", err)
			}
		}
	}
	return nil
}

// insertTasks writes the definitions of cs as multi-row inserts, reads back the ids the
// database gave them, and then writes their runtimes, edges and actions.
func (s *sqlStore) insertTasks(ctx context.Context, tx batchTx, cs []*TaskCreate) error {
	if len(cs) == 0 {
		return nil
	}
	args := make([]any, 0, len(cs)*len(defCols))
	names := make([]string, len(cs))
	for i, c := range cs {
		row, _, err := encodeDef(c.Def)
		if err != nil {
			return err
		}
		args = append(args, row...)
		names[i] = c.Def.Name
	}
	ids, err := s.insertDefs(ctx, tx, args)
	if err != nil {
		return fmt.Errorf("cannot insert task definitions: %w", err)
	}
	if ids == nil {
		byName, err := s.idsByName(ctx, tx, names)
		if err != nil {
			return err
		}
		ids = make([]int64, len(cs))
		for i, c := range cs {
			id, ok := byName[c.Def.Name]
			if !ok {
				return fmt.Errorf("cannot read the id of new task %q", c.Def.Name)
			}
			ids[i] = id
		}
	}
	args = args[:0]
	var deps []any
	nacts := 0
	for i, c := range cs {
		id := ids[i]
		c.Def.ID = id
		c.Runtime.TaskID = id
		for j := range c.Actions {
			c.Actions[j].TaskID = id
		}
		nacts += len(c.Actions)
		args = appendRuntimeArgs(args, &c.Runtime)
		for _, up := range dedupe(c.Def.DependsOn) {
			deps = append(deps, id, clip(up, nameLen))
		}
	}
	if _, err := s.execRows(ctx, tx, s.insertRuntime, "", len(runtimeCols), args); err != nil {
		return fmt.Errorf("cannot insert task runtimes: %w", err)
	}
	if len(deps) > 0 {
		if _, err := s.execRowsText(ctx, tx, "INSERT INTO task_dep (task_id, upstream_name) VALUES ", "", 2, deps); err != nil {
			return fmt.Errorf("cannot insert task dependencies: %w", err)
		}
	}
	acts := make([]model.Action, 0, nacts)
	for _, c := range cs {
		acts = append(acts, c.Actions...)
	}
	return s.writeActions(ctx, tx, acts)
}

// idTx is a batchTx whose inserts report the first id they gave (connTx, MySQL).
type idTx interface {
	execFirstID(ctx context.Context, query string, args []any) (n, first int64, err error)
	execPreparedFirstID(ctx context.Context, key batchStmtKey, ncols int, args []any) (n, first int64, err error)
}

// insertDefs inserts the definition rows of args (len(defCols) values each) and returns
// their ids in row order, or nil when the store cannot tell them without reading them back
// (idsByName). Where the ids are consecutive (sqlStore.consecutiveIDs) each statement's
// first id gives all of its rows'; the statements are split as execRows splits them
// (splitRows).
func (s *sqlStore) insertDefs(ctx context.Context, tx batchTx, args []any) ([]int64, error) {
	ncols := len(defCols)
	it, ok := tx.(idTx)
	if !s.consecutiveIDs || !ok {
		_, err := s.execRows(ctx, tx, s.insertDefHead, "", ncols, args)
		return nil, err
	}
	ids := make([]int64, 0, len(args)/ncols)
	err := s.splitRows(args, ncols, true, func(rows int, prepared bool, chunk []any) error {
		var n, first int64
		var err error
		if prepared {
			n, first, err = it.execPreparedFirstID(ctx, batchStmtKey{s.insertDefHead, "", rows}, ncols, chunk)
		} else {
			n, first, err = it.execFirstID(ctx, s.insertDefHead+valuesList(ncols, rows), chunk)
		}
		if err != nil {
			return err
		}
		if n != int64(rows) || first <= 0 {
			return fmt.Errorf("an insert of %d definitions reported %d rows from id %d", rows, n, first)
		}
		for k := range int64(rows) {
			ids = append(ids, first+k)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// updateDefTx replaces a definition's columns (but created_at) and its edges in tx. A
// definition that no longer exists is left alone: the transition that goes with an update
// then conflicts.
func (s *sqlStore) updateDefTx(ctx context.Context, tx batchTx, def *model.TaskDef) error {
	row, deps, err := encodeDef(def)
	if err != nil {
		return err
	}
	args := append(row[:len(row)-1], def.ID) // drop created_at, add the WHERE id
	if _, err := tx.exec(ctx, s.updateDef, args); err != nil {
		return fmt.Errorf("cannot update task %d: %w", def.ID, err)
	}
	if _, err := tx.exec(ctx, `DELETE FROM task_dep WHERE task_id = ?`, []any{def.ID}); err != nil {
		return fmt.Errorf("cannot replace the dependencies of task %d: %w", def.ID, err)
	}
	if len(deps) == 0 {
		return nil
	}
	dargs := make([]any, 0, 2*len(deps))
	for _, up := range deps {
		dargs = append(dargs, def.ID, up)
	}
	if _, err := tx.exec(ctx, "INSERT INTO task_dep (task_id, upstream_name) VALUES "+valuesList(2, len(deps)), dargs); err != nil {
		return fmt.Errorf("cannot insert the dependencies of task %d: %w", def.ID, err)
	}
	return nil
}
