package persist

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/axe-sched/axe/model"
)

// ApplyBatch applies b in one transaction: the group commit (docs/design.md, "Write path").
//
// Invariants the batched writer relies on:
//   - All or nothing: a stale epoch, any failed CAS or any SQL error rolls back the whole
//     batch, runs and actions included.
//   - The CAS is decided on versions under lock, in batch order: a task may appear several
//     times and each transition expects the version its predecessor in the batch produced.
//     A failed transition does not advance the version. The conflicts reported are those
//     of versions read under lock (FOR UPDATE on MySQL, the database write lock on SQLite)
//     and checked in Go.
//   - A transition to a task without a runtime row (deleted) is a conflict; rows are never
//     recreated.
//   - Only the last runtime of each task is written; for a ticket repeated in Runs the last
//     row wins.
//   - Fires are inserted before Runs are upserted. A fire whose ticket is stored, or repeats
//     an earlier fire of the batch, fails the batch with a *FireRefusedError naming it
//     (fire.go); Runs of the same ticket later in the batch update the inserted row.
//
// Where the dialect has a guarded upsert (MySQL) and each task's transitions in the batch
// form an unbroken chain of versions, the versions are not read: the runtime rows are written
// by an upsert that applies each row only over the version its chain starts from, and the
// affected-row count proves that all of them applied. If one did not (a stale version, a
// deleted task), that transaction is rolled back and the batch runs again the reading way,
// which names the failing transitions. That saves the server a locked read per runtime row
// in the common case (BENCHMARKS.md, Profiles, fourth machine).
//
// On success each b.Transitions[i].Runtime.Version is set to ExpectVersion+1.
func (s *sqlStore) ApplyBatch(ctx context.Context, b *Batch) error {
	if len(b.Transitions) == 0 && len(b.Runs) == 0 && len(b.Actions) == 0 && len(b.Fires) == 0 && !b.hasTaskWrites() && !b.hasWorkflowWrites() {
		return nil
	}
	if b.Epoch > 0 && b.LeaseName == "" {
		return fmt.Errorf("cannot apply batch: epoch %d names no lease", b.Epoch)
	}
	if len(b.Shards) > 0 {
		fences, err := checkFences(b.Shards)
		if err != nil {
			return fmt.Errorf("cannot apply batch: %w", err)
		}
		b.Shards = fences
	}
	if idx := repeatedFires(b.Fires); len(idx) > 0 {
		return &FireRefusedError{Indexes: idx}
	}
	guarded := s.chains(b.Transitions)
	b.checkNames = lookUpNames(b.Creates)
	err := s.applyBatch(ctx, b, guarded)
	if guarded != nil && errors.Is(err, errGuardMissed) {
		s.m.batchGuardMisses.Inc()
		err = s.applyBatch(ctx, b, nil)
	}
	// A taken name is a unique violation rather than a conflict when the names were not
	// looked up first (lookUpNames), or were taken by a transaction that committed after
	// this one looked: run the batch again with the look-up, which names the creates.
	for retry := 0; retry < 2 && err != nil && len(b.Creates) > 0 && s.d.isUniqueViolation(err); retry++ {
		b.checkNames = true
		err = s.applyBatch(ctx, b, nil)
	}
	if err != nil && b.Epoch > 0 {
		err = s.refusedAtCommit(ctx, b.LeaseName, b.Epoch, err)
	}
	if err != nil && len(b.Shards) > 0 && !errors.Is(err, model.ErrLeaseLost) {
		err = s.shardsRefusedAtCommit(ctx, b.Shards, err)
	}
	if err != nil {
		return s.refusedFires(ctx, b, err)
	}
	for i := range b.Transitions {
		b.Transitions[i].Runtime.Version = b.Transitions[i].ExpectVersion + 1
	}
	return nil
}

// errGuardMissed reports that a guarded runtime upsert did not apply every row.
var errGuardMissed = errors.New("a guarded runtime write did not apply every row")

// chain is one task's transitions in a batch: the index of the last and how many there are.
type chain struct {
	last  int
	steps int64
}

// chains returns each task's chain in ts for the guarded path: nil when the dialect has no
// guarded upsert or when some transition does not expect the version its predecessor in the
// batch produces (a conflict whatever the store holds, which the reading way names).
func (s *sqlStore) chains(ts []Transition) map[int64]chain {
	if s.casRuntime == nil || len(ts) == 0 {
		return nil
	}
	out := make(map[int64]chain, len(ts))
	for i := range ts {
		id := ts[i].Runtime.TaskID
		c, seen := out[id]
		if seen && ts[i].ExpectVersion != ts[c.last].ExpectVersion+1 {
			return nil
		}
		out[id] = chain{last: i, steps: c.steps + 1}
	}
	return out
}

// applyBatch runs b in one transaction. With guarded set the runtime rows go through the
// guarded upsert, and a row that did not apply fails it with errGuardMissed; otherwise the
// versions are read and checked first. On MySQL the transaction runs on the driver
// connection (mysqlconn.go).
func (s *sqlStore) applyBatch(ctx context.Context, b *Batch, guarded map[int64]chain) error {
	if !s.d.connBatches {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("cannot begin batch: %w", err)
		}
		return s.runBatch(ctx, sqlTx{tx}, b, guarded)
	}
	return s.onBatchConn(ctx, func(tx *connTx) error { return s.runBatch(ctx, tx, b, guarded) })
}

// runBatch writes b in tx and commits it, or rolls it back on failure.
func (s *sqlStore) runBatch(ctx context.Context, tx batchTx, b *Batch, guarded map[int64]chain) error {
	if err := s.writeBatch(ctx, tx, b, guarded); err != nil {
		if rbErr := tx.rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			return fmt.Errorf("%w (and the rollback failed: %w)", err, rbErr)
		}
		return err
	}
	if err := tx.commit(); err != nil {
		return fmt.Errorf("cannot commit batch: %w", err)
	}
	return nil
}

// writeBatch runs b's statements in tx.
func (s *sqlStore) writeBatch(ctx context.Context, tx batchTx, b *Batch, guarded map[int64]chain) error {
	if b.Epoch > 0 {
		if err := s.checkEpoch(ctx, tx, b.LeaseName, b.Epoch); err != nil {
			return err
		}
	}
	if err := s.checkShardFences(ctx, tx, b.Shards); err != nil {
		return err
	}
	if b.hasTaskWrites() {
		if err := s.writeTaskChanges(ctx, tx, b); err != nil {
			return err
		}
	}
	last := guarded
	if last == nil {
		var err error
		if last, err = s.casTransitions(ctx, tx, b.Transitions); err != nil {
			return err
		}
	}
	if err := s.writeRuntimes(ctx, tx, b.Transitions, last, guarded != nil); err != nil {
		return err
	}
	if err := s.writeFires(ctx, tx, b.Fires); err != nil {
		return err
	}
	if err := s.writeRuns(ctx, tx, b.Runs); err != nil {
		return err
	}
	if b.hasWorkflowWrites() {
		if err := s.writeWorkflows(ctx, tx, b); err != nil {
			return err
		}
	}
	return s.writeActions(ctx, tx, b.Actions)
}

// batchTx runs one batch transaction's statements: a database/sql transaction (SQLite), or
// one on a MySQL driver connection (connTx, mysqlconn.go), which also runs statements it
// prepared once per connection (stmtTx).
type batchTx interface {
	// exec runs a statement and returns the rows it affected.
	exec(ctx context.Context, query string, args []any) (int64, error)
	// queryInts runs a query of integer columns and calls row with each row's values.
	queryInts(ctx context.Context, query string, args []any, row func([]int64)) error
	// queryIDNames runs a query of an integer and a string column and calls row with each
	// row's values.
	queryIDNames(ctx context.Context, query string, args []any, row func(id int64, name string)) error
	commit() error
	rollback() error
}

// stmtTx is a batchTx that prepares the statement of key (ncols values per row) once per
// connection and runs it.
type stmtTx interface {
	batchTx
	execPrepared(ctx context.Context, key batchStmtKey, ncols int, args []any) (int64, error)
}

// sqlTx is a batchTx on database/sql.
type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) exec(ctx context.Context, query string, args []any) (int64, error) {
	return rowsAffected(t.tx.ExecContext(ctx, query, args...))
}

func (t sqlTx) queryInts(ctx context.Context, query string, args []any, row func([]int64)) error {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	ints := make([]int64, len(cols))
	dest := make([]any, len(cols))
	for i := range ints {
		dest[i] = &ints[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		row(ints)
	}
	return rows.Err()
}

func (t sqlTx) queryIDNames(ctx context.Context, query string, args []any, row func(int64, string)) error {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id   int64
			name string
		)
		if err := rows.Scan(&id, &name); err != nil {
			return err
		}
		row(id, name)
	}
	return rows.Err()
}

func (t sqlTx) commit() error   { return t.tx.Commit() }
func (t sqlTx) rollback() error { return t.tx.Rollback() }

// checkEpoch fails with ErrLeaseLost unless the lease's fence row carries epoch. On MySQL the
// row is share-locked until commit, so a takeover (which writes the fence row in its own
// transaction) cannot slip in between this check and the writes. The fence row is not the
// lease row itself: renewals write only that one, so they never wait behind a batch. On
// Galera, where that lock would be one node's own, the check writes the row (galeraFence).
func (s *sqlStore) checkEpoch(ctx context.Context, tx batchTx, lease string, epoch int64) error {
	if s.galera {
		return s.galeraFence(ctx, tx, lease, epoch)
	}
	return s.readEpoch(ctx, tx, lease, epoch)
}

// casTransitions locks the runtime rows of ts, simulates the transitions in order and
// returns each task's chain. Any failure is a *ConflictError listing every failing index.
func (s *sqlStore) casTransitions(ctx context.Context, tx batchTx, ts []Transition) (map[int64]chain, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	ids := make([]int64, 0, len(ts))
	for i := range ts {
		ids = append(ids, ts[i].Runtime.TaskID)
	}
	// Sorted ids make concurrent batches lock rows in the same order.
	slices.Sort(ids)
	ids = slices.Compact(ids)
	versions, err := s.readVersions(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	last := make(map[int64]chain, len(ids))
	var conflicts []int
	for i := range ts {
		id := ts[i].Runtime.TaskID
		v, ok := versions[id]
		if !ok || v != ts[i].ExpectVersion {
			conflicts = append(conflicts, i)
			continue
		}
		versions[id] = v + 1
		last[id] = chain{last: i, steps: last[id].steps + 1}
	}
	if len(conflicts) > 0 {
		return nil, &ConflictError{Indexes: conflicts}
	}
	return last, nil
}

// readVersions reads, under lock, the version of every existing runtime row in ids.
func (s *sqlStore) readVersions(ctx context.Context, tx batchTx, ids []int64) (map[int64]int64, error) {
	versions := make(map[int64]int64, len(ids))
	per := min(maxIDsPerQuery, s.d.maxParams)
	args := make([]any, 0, min(per, len(ids)))
	for start := 0; start < len(ids); start += per {
		chunk := ids[start:min(start+per, len(ids))]
		args = args[:0]
		for _, id := range chunk {
			args = append(args, id)
		}
		q := `SELECT task_id, version FROM task_runtime WHERE task_id IN (` + placeholders(len(chunk)) + `)` + s.d.forUpdate
		err := tx.queryInts(ctx, q, args, func(row []int64) { versions[row[0]] = row[1] })
		if err != nil {
			return nil, fmt.Errorf("cannot read runtime versions: %w", err)
		}
	}
	return versions, nil
}

// writeRuntimes upserts the final runtime of every task in chains. Unguarded, the rows exist
// and are locked (casTransitions checked), so the upsert only ever updates. Guarded, the
// upsert itself checks each version, one statement per chain length (nearly always 1), and
// anything but every row updated is errGuardMissed.
func (s *sqlStore) writeRuntimes(ctx context.Context, tx batchTx, ts []Transition, chains map[int64]chain, guarded bool) error {
	if len(chains) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(chains))
	for id := range chains {
		ids = append(ids, id)
	}
	// Sorted ids make concurrent batches lock rows in the same order (guarded, within each
	// chain length; batches that share tasks are rare there, one lane owns a task).
	slices.Sort(ids)
	groups := [][]int64{ids}
	if guarded {
		groups = groupBySteps(ids, chains)
	}
	var affected int64
	buf := batchArgs(len(ids) * len(runtimeCols))
	defer buf.release()
	for _, group := range groups {
		tail, cached := s.upsertRuntime, true
		if guarded {
			tail, cached = s.casTail(chains[group[0]].steps)
		}
		clear(buf.args) // the previous group's, which may have been longer
		args := buf.args[:0]
		for _, id := range group {
			t := &ts[chains[id].last]
			rt := t.Runtime
			rt.Version = t.ExpectVersion + 1
			args = appendRuntimeArgs(args, &rt)
		}
		buf.args = args
		var n int64
		var err error
		if cached {
			n, err = s.execRows(ctx, tx, s.insertRuntime, tail, len(runtimeCols), args)
		} else {
			n, err = s.execRowsText(ctx, tx, s.insertRuntime, tail, len(runtimeCols), args)
		}
		if err != nil {
			return fmt.Errorf("cannot write runtimes: %w", err)
		}
		affected += n
	}
	if guarded && affected != 2*int64(len(ids)) {
		return errGuardMissed
	}
	return nil
}

// groupBySteps splits the sorted ids by the length of their chain, shortest first, each
// group still sorted.
func groupBySteps(ids []int64, chains map[int64]chain) [][]int64 {
	bySteps := make(map[int64][]int64, 1)
	for _, id := range ids {
		k := chains[id].steps
		bySteps[k] = append(bySteps[k], id)
	}
	groups := make([][]int64, 0, len(bySteps))
	for _, k := range slices.Sorted(maps.Keys(bySteps)) {
		groups = append(groups, bySteps[k])
	}
	return groups
}

// writeRuns upserts runs by ticket; for a ticket repeated in the batch only the last row
// is written, which is what a later-wins upsert would leave anyway.
func (s *sqlStore) writeRuns(ctx context.Context, tx batchTx, runs []model.Run) error {
	if len(runs) == 0 {
		return nil
	}
	lastOf := make(map[string]int, len(runs))
	for i := range runs {
		lastOf[runs[i].Ticket] = i
	}
	buf := batchArgs(len(lastOf) * len(runCols))
	defer buf.release()
	for i := range runs {
		r := &runs[i]
		if lastOf[r.Ticket] != i {
			continue
		}
		buf.args = appendRunArgs(buf.args, r)
	}
	if _, err := s.execRows(ctx, tx, s.insertRun, s.upsertRun, len(runCols), buf.args); err != nil {
		return fmt.Errorf("cannot write runs: %w", err)
	}
	return nil
}

// writeActions appends the action records in batch order, so their ids follow it.
func (s *sqlStore) writeActions(ctx context.Context, tx batchTx, actions []model.Action) error {
	if len(actions) == 0 {
		return nil
	}
	buf := batchArgs(len(actions) * len(actionCols))
	defer buf.release()
	for i := range actions {
		a := &actions[i]
		buf.args = append(buf.args, a.TaskID, clip(a.TaskName, nameLen), clip(a.Ticket, ticketLen),
			clip(a.Action, shortLen), shortArg(string(a.From)), shortArg(string(a.To)),
			clip(a.Actor, nameLen), a.At, clip(a.Detail, textLen))
	}
	if _, err := s.execRows(ctx, tx, s.insertAction, "", len(actionCols), buf.args); err != nil {
		return fmt.Errorf("cannot write actions: %w", err)
	}
	return nil
}

// shortArg is the argument for a short column's value v. The values of the enumerated
// columns (a run's kind and result, a task's state) come boxed once, as constants: a string
// converted to an argument is copied to the heap, and a fire writes a few of these in each
// of its four rows. Any other value is clipped and converted as usual.
func shortArg(v string) any {
	if a, ok := boxedShort[v]; ok {
		return a
	}
	return clip(v, shortLen)
}

// boxedShort holds each enumerated short value boxed once (shortArg).
var boxedShort = func() map[string]any {
	vals := []string{"", model.RunScheduled, model.RunManual, model.RunBackfill,
		model.ResultRunning, model.ResultSuccess, model.ResultFailed, model.ResultTimeout,
		model.ResultKilled, model.ResultLost, model.ResultSkipped}
	for _, st := range []model.State{model.StateWaiting, model.StateScheduled, model.StateRunning,
		model.StateSuccess, model.StateFailed, model.StateRetrying, model.StatePaused, model.StateKilled} {
		vals = append(vals, string(st))
	}
	m := make(map[string]any, len(vals))
	for _, v := range vals {
		m[v] = v
	}
	return m
}()

// argBuf is the argument list of a batch's multi-row statements, kept for the next batch:
// made afresh, 256 rows of 16 columns were a 64 KiB []any allocated, zeroed and charged to
// the collector for each table of every batch, a seventh of the bytes the scheduler
// allocated in a burst (BENCHMARKS.md, "CPU per fire").
type argBuf struct{ args []any }

var argBufs = sync.Pool{New: func() any { return new(argBuf) }}

// batchArgs returns an empty argument list with room for n values; release gives it back.
func batchArgs(n int) *argBuf {
	b := argBufs.Get().(*argBuf)
	if cap(b.args) < n {
		b.args = make([]any, 0, n)
	}
	return b
}

// release clears the list, which must no longer be in use, so that it keeps no values alive,
// and keeps it for the next batch.
func (b *argBuf) release() {
	clear(b.args)
	b.args = b.args[:0]
	argBufs.Put(b)
}

func appendRuntimeArgs(args []any, rt *model.Runtime) []any {
	return append(args, rt.TaskID, shortArg(string(rt.State)), clip(rt.CurrentTicket, ticketLen),
		rt.Attempt, rt.NextTriggerTime, rt.LastTriggerTime, rt.LastEndTime,
		clip(rt.LastExecutor, nameLen), rt.SuccessCount, rt.FailureCount, clip(rt.Note, textLen),
		shortArg(rt.LastResult), rt.LastFailureAt, rt.ConsecutiveFailures, clip(rt.PausedBy, pausedByLen), rt.Version)
}

// preparedSizes are the row counts of the multi-row statements the batch path prepares once
// per connection and reuses on MySQL: a batch writes its rows 256 at a time, then what is
// left in the largest smaller sizes that fit (170 rows: 128 + 32 + 8, and 2 as statement
// text). A prepared statement saves the server lexing and parsing every value again: in a B4
// burst parsing was a fifth of MariaDB's CPU, and a prepared 256-row upsert of runtime rows
// measured 4.2 µs of server CPU per row against 5.4 µs for the same rows interpolated into
// SQL text. With only the 256-row size prepared, the remainders (a quarter of a burst's rows)
// still went as text, and statement text was a quarter of MariaDB's CPU in a burst's profile.
// Fewer rows than the smallest size go as one statement text per table, as cheap to parse as
// to execute: what a steady rate commits, a few rows at a time.
var preparedSizes = [...]int{256, 128, 64, 32, 16, 8}

// batchStmtKey names one cached statement of rows rows.
type batchStmtKey struct {
	head, tail string
	rows       int
}

// execRows runs head + VALUES groups + tail over args (ncols values per row), split as
// splitRows splits them: on MySQL chunks of the prepared sizes go through cached prepared
// statements, and the rest as statement text. It returns the rows affected in all.
// Only statements of a fixed set of tails may be prepared (cached), or the cache would grow.
func (s *sqlStore) execRows(ctx context.Context, tx batchTx, head, tail string, ncols int, args []any) (int64, error) {
	st, prepare := tx.(stmtTx)
	return s.execSplit(ctx, tx, st, prepare, head, tail, ncols, args)
}

// execRowsText is execRows with every statement as text.
func (s *sqlStore) execRowsText(ctx context.Context, tx batchTx, head, tail string, ncols int, args []any) (int64, error) {
	return s.execSplit(ctx, tx, nil, false, head, tail, ncols, args)
}

// execSplit runs the statements splitRows cuts args into, the prepared ones through st.
func (s *sqlStore) execSplit(ctx context.Context, tx batchTx, st stmtTx, prepare bool, head, tail string, ncols int, args []any) (int64, error) {
	var affected int64
	err := s.splitRows(args, ncols, prepare, func(rows int, prepared bool, chunk []any) error {
		var n int64
		var err error
		if prepared {
			n, err = st.execPrepared(ctx, batchStmtKey{head, tail, rows}, ncols, chunk)
		} else {
			n, err = tx.exec(ctx, head+valuesList(ncols, rows)+tail, chunk)
		}
		affected += n
		return err
	})
	if err != nil {
		return 0, err
	}
	return affected, nil
}

// splitRows cuts args (ncols values per row) into the statements a batch sends and calls
// each with every one in order, stopping at its first error. With prepare, whole chunks of
// the prepared sizes come first (prepared true); the rest go as statement text, at most
// perStmt rows each and within maxBytesPerStmt.
func (s *sqlStore) splitRows(args []any, ncols int, prepare bool, each func(rows int, prepared bool, chunk []any) error) error {
	perStmt := s.perStmt(ncols)
	if prepare {
		for _, rows := range preparedSizes {
			if rows > perStmt {
				continue
			}
			chunk := rows * ncols
			for len(args) >= chunk && rowBytes(args[:chunk]) <= maxBytesPerStmt {
				if err := each(rows, true, args[:chunk]); err != nil {
					return err
				}
				args = args[chunk:]
			}
		}
	}
	for len(args) > 0 {
		rows, size := 0, 0
		for rows < perStmt && rows*ncols < len(args) {
			size += rowBytes(args[rows*ncols : (rows+1)*ncols])
			if rows > 0 && size > maxBytesPerStmt {
				break
			}
			rows++
		}
		if err := each(rows, false, args[:rows*ncols]); err != nil {
			return err
		}
		args = args[rows*ncols:]
	}
	return nil
}

// perStmt is the most rows of ncols values one statement may carry.
func (s *sqlStore) perStmt(ncols int) int { return min(maxRowsPerStmt, s.d.maxParams/ncols) }

// rowsAffected is the affected-row count of a statement's result, or its error.
func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// rowBytes estimates the size of the values in row (one row or several) once sent.
func rowBytes(row []any) int {
	n := 0
	for _, v := range row {
		if s, ok := v.(string); ok {
			n += len(s) + 3
		} else {
			n += 20
		}
	}
	return n
}
