package persist

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/model"
)

// dialect is everything that differs between MySQL and SQLite. The statements themselves are
// shared by sqlStore; a dialect only supplies fragments and error classification.
type dialect struct {
	kind string
	// forUpdate and forShare are appended to reads inside write transactions. They are empty
	// on SQLite, where every transaction holds the database write lock from BEGIN.
	forUpdate string
	forShare  string
	// leaseByName follows "lease" in the statements that name many rows of it (the shard
	// leases and fences, shards.go): it makes them look each row up by its name. MySQL
	// otherwise scans the small table whole and, under REPEATABLE READ, locks every row it
	// read, the other nodes' leases and fences included: a batch's fence read then held up
	// their renewals (seen: nodes dropping every shard under a burst).
	leaseByName string
	// dueFrom is LoadDue's FROM clause: it pins the next_trigger_time index and the join
	// order so rows stream in index order. stateFrom is LoadByState's.
	dueFrom   string
	stateFrom string
	// openFiresFrom is ListOpenFires' FROM clause: the due-time index of task_runtime drives,
	// and each row probes task_run's (task_id, scheduled_at) index, never a scan of the run
	// history.
	openFiresFrom string
	// maxParams bounds placeholders per statement.
	maxParams int
	// connBatches runs ApplyBatch on the driver connection (mysqlconn.go): the multi-row
	// statements are prepared once per connection, and their arguments skip database/sql's
	// conversion. MySQL only: its driver would otherwise interpolate every value into SQL
	// text for the server to parse again. SQLite binds values without parsing them anyway,
	// and statements prepared on the pool outside the immediate transaction ran into
	// SQLITE_BUSY in the conformance suite.
	connBatches bool
	// upsert returns the clause that turns a multi-row INSERT into an upsert on key that
	// replaces the update columns with the inserted values.
	upsert func(key, update []string) string
	// casUpsert, when set, returns the clause that turns a multi-row INSERT of runtime rows
	// into an upsert applying each row only where the stored version is steps below the
	// row's, and whose affected-row count tells whether every row applied (ApplyBatch's
	// guarded path, sqlbatch.go). Nil: every batch reads the versions first.
	casUpsert         func(update []string, steps int64) string
	isUniqueViolation func(error) bool
	// isRetryable reports errors after which TakeLease runs its transaction again.
	isRetryable func(error) bool
	// ensureLease inserts an unheld lease row named by its one argument unless it exists.
	ensureLease      string
	migrationsTable  string
	migrations       []migration
	transactionalDDL bool
	// isAlreadyApplied reports a migration statement's error that means its change is
	// already there (a column, an index), as a step interrupted half way leaves it.
	isAlreadyApplied func(error) bool
	// runsByTime and runsByTask name the index a run listing walks (browse.go): of every
	// run by time, of one task's by time. runsAllCond, when set, is the condition that
	// selects the part of runsByTime holding every run but the open run-now instances, and
	// runsOpenCond the one selecting those.
	runsByTime, runsByTask, runsAllCond, runsOpenCond string
	// openManualRuns is ListRunningManual's WHERE clause and openManualOrder its ORDER BY;
	// each store has its own index for it.
	openManualRuns, openManualOrder string
	// prunableRuns opens the pruner's condition on old runs ("" or a condition and " AND ")
	// so that it reads the index the store keeps for it.
	prunableRuns string
	// lockSchema serialises Migrate across processes; the returned func releases the lock.
	lockSchema func(ctx context.Context, conn *sql.Conn) (unlock func(), err error)
}

// Batch statement limits. Rows per statement are also bounded by placeholders and bytes:
// a statement must fit MySQL's max_allowed_packet (4 MB on old servers) once interpolated.
const (
	maxRowsPerStmt  = 500
	maxBytesPerStmt = 1 << 20
	maxIDsPerQuery  = 1000
)

// leaseRetries bounds how often TakeLease reruns its transaction (after creating the
// row, or after losing a race).
const leaseRetries = 5

// Executor statuses written by the store itself.
const executorAlive = "alive"

// executorLeft is the status of an executor that deregistered (dispatch.StatusLeft).
const executorLeft = "left"

// Column lists, in the order the encode and scan helpers use them.
var (
	// defCols ends with created_at so that UpdateTaskDef, which keeps created_at, can use
	// every column but the last; columns added by later schema steps go before updated_at.
	defCols = []string{"name", "grp", "trigger_type", "cron", "delay_ms", "depends_on",
		"depends_mode", "timezone", "timeout_sec", "retry_count", "retry_interval_sec",
		"priority", "callback", "params", "misfire_policy", "paused", "on_lost",
		"cron_dialect",                            // schema step 4
		"retain_history_ms", "retain_finished_ms", // schema step 5
		"sensitive_params",                     // schema step 6
		"pause_after_failures",                 // schema step 11
		"jitter_sec",                           // schema step 12
		"concurrency_key",                      // schema step 13
		"overlap_policy", "catchup_window_sec", // schema step 15
		"rate_key", // schema step 22
		"updated_at", "created_at"}
	runtimeCols = []string{"task_id", "state", "current_ticket", "attempt", "next_trigger_time",
		"last_trigger_time", "last_end_time", "last_executor", "success_count", "failure_count",
		"note",
		"last_result", "last_failure_at", // schema step 10
		"consecutive_failures", // schema step 11
		"paused_by",            // schema step 17
		"version"}              // last: the guarded upsert assigns it after the columns it guards
	runCols = []string{"ticket", "task_id", "task_name", "kind", "attempt", "scheduled_at",
		"dispatched_at", "executor", "ended_at", "result", "error", "duration_ms", "output", "detail",
		"params"} // schema step 19; last: the run upsert leaves it as the first row wrote it
	actionCols = []string{"task_id", "task_name", "ticket", "action", "from_state", "to_state",
		"actor", "at", "detail"}
	executorCols = []string{"app", "address", "protocol", "handlers", "registered_at",
		"last_heartbeat", "status", "dispatch_key", "incarnation"}
)

// taskSelect selects a definition (d) joined with its runtime (r), in taskScanner.scan's order.
const taskSelect = `SELECT d.id, d.name, d.grp, d.trigger_type, d.cron, d.delay_ms, d.depends_on,
	d.depends_mode, d.timezone, d.timeout_sec, d.retry_count, d.retry_interval_sec, d.priority,
	d.callback, d.params, d.misfire_policy, d.paused, d.created_at, d.updated_at,
	r.state, r.current_ticket, r.attempt, r.next_trigger_time, r.last_trigger_time,
	r.last_end_time, r.last_executor, r.success_count, r.failure_count, r.note, r.version,
	d.on_lost, d.cron_dialect, d.retain_history_ms, d.retain_finished_ms, d.sensitive_params,
	r.last_result, r.last_failure_at, d.pause_after_failures, r.consecutive_failures,
	d.jitter_sec, d.concurrency_key, d.overlap_policy, d.catchup_window_sec, r.paused_by, d.rate_key`

// taskJoin is the FROM clause of every task read but the streaming ones.
const taskJoin = ` FROM task_def d JOIN task_runtime r ON r.task_id = d.id`

// sqlStore implements Store on database/sql for both dialects.
type sqlStore struct {
	db *sql.DB
	d  *dialect
	m  *storeMetrics // shared by the copies Fenced makes
	// afterPing, when set, finishes the pool's set-up once a first connection is made.
	afterPing func()
	// consecutiveIDs: a multi-row INSERT of definitions gets consecutive ids from the one
	// LAST_INSERT_ID() reports (MySQL with innodb_autoinc_lock_mode 0 or 1 and
	// auto_increment_increment 1), so a batch of creates need not read them back
	// (taskbatch.go). Set by afterPing.
	consecutiveIDs bool
	// galera: the server is a Galera node (wsrep_on), where row and named locks are one
	// node's own. Fencing and Migrate's lock then work by writes that certification orders
	// across the cluster (galera.go). Set by afterPing.
	galera bool

	insertDef     string
	insertDefHead string // head of a multi-row insert of definitions (taskbatch.go)
	updateDef     string
	insertRuntime string // head of a multi-row insert
	upsertRuntime string // tail turning it into an upsert on task_id
	// casRuntime[k] is the tail turning it into an upsert guarded for chains of k+1 steps
	// (k < len); nil if the dialect has no guarded upsert.
	casRuntime     []string
	insertRun      string
	upsertRun      string
	insertAction   string
	upsertExecutor string
	runSelect      string
	// fence, when set, makes every write check the lease epoch in its transaction (a copy
	// made by Fenced, ha.go).
	fence *fence
}

var _ Store = (*sqlStore)(nil)

func newSQLStore(db *sql.DB, d *dialect) *sqlStore {
	setList := make([]string, 0, len(defCols)-1)
	for _, c := range defCols[:len(defCols)-1] {
		setList = append(setList, c+" = ?")
	}
	return &sqlStore{
		m:             newStoreMetrics(metrics.NewSet()), // OpenWith's set replaces it
		db:            db,
		d:             d,
		insertDef:     "INSERT INTO task_def (" + strings.Join(defCols, ", ") + ") VALUES " + valuesList(len(defCols), 1),
		insertDefHead: "INSERT INTO task_def (" + strings.Join(defCols, ", ") + ") VALUES ",
		updateDef:     "UPDATE task_def SET " + strings.Join(setList, ", ") + " WHERE id = ?",
		insertRuntime: "INSERT INTO task_runtime (" + strings.Join(runtimeCols, ", ") + ") VALUES ",
		upsertRuntime: d.upsert(runtimeCols[:1], runtimeCols[1:]),
		casRuntime:    casRuntime(d),
		insertRun:     "INSERT INTO task_run (" + strings.Join(runCols, ", ") + ") VALUES ",
		upsertRun:     d.upsert(runCols[:1], runCols[1:len(runCols)-1]),
		insertAction:  "INSERT INTO task_action (" + strings.Join(actionCols, ", ") + ") VALUES ",
		upsertExecutor: "INSERT INTO executor (" + strings.Join(executorCols, ", ") + ") VALUES " +
			valuesList(len(executorCols), 1) +
			// registered_at is not in the update list: a re-registration keeps it.
			d.upsert(executorCols[:2], []string{"protocol", "handlers", "last_heartbeat", "status", "dispatch_key", "incarnation"}),
		runSelect: "SELECT " + strings.Join(runCols, ", ") + " FROM task_run",
	}
}

// casRuntime builds the dialect's guarded upsert tails for runtime rows, for chains of 1 to
// casCachedSteps transitions; longer chains build theirs when they occur.
func casRuntime(d *dialect) []string {
	if d.casUpsert == nil {
		return nil
	}
	tails := make([]string, casCachedSteps)
	for k := range tails {
		tails[k] = d.casUpsert(runtimeCols[1:], int64(k+1))
	}
	return tails
}

// casCachedSteps is how many chain lengths have a ready guarded upsert tail.
const casCachedSteps = 8

// casTail returns the guarded upsert tail for a chain of steps transitions, and whether it is
// one of the ready ones (which alone may be prepared and cached).
func (s *sqlStore) casTail(steps int64) (string, bool) {
	if steps <= int64(len(s.casRuntime)) {
		return s.casRuntime[steps-1], true
	}
	return s.d.casUpsert(runtimeCols[1:], steps), false
}

// Kind is "mysql" or "sqlite".
func (s *sqlStore) Kind() string { return s.d.kind }

// Ping checks the database is reachable.
func (s *sqlStore) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("cannot reach the %s store: %w", s.d.kind, err)
	}
	return nil
}

// Close releases the connection pool.
func (s *sqlStore) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("cannot close the %s store: %w", s.d.kind, err)
	}
	return nil
}

// ---- tasks ----

// CreateTask inserts def, its runtime row and its dependency edges in one transaction.
func (s *sqlStore) CreateTask(ctx context.Context, def *model.TaskDef, rt *model.Runtime) error {
	args, deps, err := encodeDef(def)
	if err != nil {
		return err
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("cannot begin creating task %q: %w", def.Name, err)
	}
	defer rollback(tx)
	res, err := tx.ExecContext(ctx, s.insertDef, args...)
	if err != nil {
		if s.d.isUniqueViolation(err) {
			return fmt.Errorf("cannot create task %q: %w", def.Name, model.ErrTaskExists)
		}
		return fmt.Errorf("cannot insert task %q: %w", def.Name, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("cannot read the id of task %q: %w", def.Name, err)
	}
	row := *rt
	row.TaskID = id
	if _, err := tx.ExecContext(ctx, s.insertRuntime+valuesList(len(runtimeCols), 1), appendRuntimeArgs(nil, &row)...); err != nil {
		return fmt.Errorf("cannot insert the runtime of task %q: %w", def.Name, err)
	}
	if err := insertDeps(ctx, tx, id, deps); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("cannot commit task %q: %w", def.Name, err)
	}
	def.ID = id
	rt.TaskID = id
	return nil
}

// UpdateTaskDef replaces every definition column but created_at, and the dependency edges.
func (s *sqlStore) UpdateTaskDef(ctx context.Context, def *model.TaskDef) error {
	args, deps, err := encodeDef(def)
	if err != nil {
		return err
	}
	args = append(args[:len(args)-1], def.ID) // drop created_at, add the WHERE id
	tx, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("cannot begin updating task %d: %w", def.ID, err)
	}
	defer rollback(tx)
	res, err := tx.ExecContext(ctx, s.updateDef, args...)
	if err != nil {
		if s.d.isUniqueViolation(err) {
			return fmt.Errorf("cannot rename task %d to %q: %w", def.ID, def.Name, model.ErrTaskExists)
		}
		return fmt.Errorf("cannot update task %d: %w", def.ID, err)
	}
	// MySQL counts changed rows, not matched ones: an update that changes nothing says 0.
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM task_def WHERE id = ?`, def.ID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("cannot update task %d: %w", def.ID, model.ErrTaskNotFound)
		}
		if err != nil {
			return fmt.Errorf("cannot update task %d: %w", def.ID, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM task_dep WHERE task_id = ?`, def.ID); err != nil {
		return fmt.Errorf("cannot replace the dependencies of task %d: %w", def.ID, err)
	}
	if err := insertDeps(ctx, tx, def.ID, deps); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("cannot commit task %d: %w", def.ID, err)
	}
	return nil
}

// DeleteTask removes the definition, runtime and dependency edges; runs and actions stay.
func (s *sqlStore) DeleteTask(ctx context.Context, id int64) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("cannot begin deleting task %d: %w", id, err)
	}
	defer rollback(tx)
	res, err := tx.ExecContext(ctx, `DELETE FROM task_def WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("cannot delete task %d: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("cannot delete task %d: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("cannot delete task %d: %w", id, model.ErrTaskNotFound)
	}
	for _, q := range []string{`DELETE FROM task_runtime WHERE task_id = ?`, `DELETE FROM task_dep WHERE task_id = ?`} {
		if _, err := tx.ExecContext(ctx, q, id); err != nil {
			return fmt.Errorf("cannot delete task %d: %w", id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("cannot commit deleting task %d: %w", id, err)
	}
	return nil
}

// GetTask returns the task by name, or ErrTaskNotFound.
func (s *sqlStore) GetTask(ctx context.Context, name string) (*model.Task, error) {
	return s.getTask(ctx, taskSelect+taskJoin+` WHERE d.name = ?`, name)
}

// GetTaskByID returns the task by id, or ErrTaskNotFound.
func (s *sqlStore) GetTaskByID(ctx context.Context, id int64) (*model.Task, error) {
	return s.getTask(ctx, taskSelect+taskJoin+` WHERE d.id = ?`, id)
}

func (s *sqlStore) getTask(ctx context.Context, q string, key any) (*model.Task, error) {
	var found *model.Task
	err := s.streamTasks(ctx, q, []any{key}, func(t *model.Task) error {
		found = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("cannot get task %v: %w", key, model.ErrTaskNotFound)
	}
	return found, nil
}

// openFireOfRuntime is true of a runtime row r whose fire is in flight though r does not say
// so: r keeps the SCHEDULED or RETRYING state it fired from until the run's end is written,
// and its fire record, still running, is the RUNNING marker (ListOpenFires).
const openFireOfRuntime = "(r.state IN ('" + string(model.StateScheduled) + "', '" + string(model.StateRetrying) + "')" +
	" AND r.next_trigger_time > 0 AND EXISTS (SELECT 1 FROM task_run x WHERE x.task_id = r.task_id" +
	" AND x.scheduled_at = r.next_trigger_time AND x.kind = '" + model.RunScheduled + "' AND x.result = '" + model.ResultRunning + "'" +
	" AND x.attempt = CASE WHEN r.state = '" + string(model.StateRetrying) + "' THEN r.attempt ELSE 1 END))"

// ListTasks returns tasks in f's order (by id unless f.Order says otherwise).
func (s *sqlStore) ListTasks(ctx context.Context, f TaskFilter) ([]model.Task, error) {
	where, args := s.taskTerms(f)
	where, args, order, err := f.keyset(where, args)
	if err != nil {
		return nil, err
	}
	if f.NamePrefix != "" {
		// '!' escapes LIKE's wildcards; task names cannot contain it.
		esc := likeEscaper.Replace(f.NamePrefix)
		where = append(where, "d.name LIKE ? ESCAPE '!'")
		args = append(args, esc+"%")
	}
	from, err := s.listFrom(ctx, f)
	if err != nil {
		return nil, err
	}
	q := taskSelect + from
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY " + order + limitClause(f.Limit)
	var out []model.Task
	err = s.streamTasks(ctx, q, args, func(t *model.Task) error {
		out = append(out, *t)
		return nil
	})
	return out, err
}

// CountTasks returns the number of task definitions.
func (s *sqlStore) CountTasks(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM task_def`).Scan(&n); err != nil {
		return 0, fmt.Errorf("cannot count tasks: %w", err)
	}
	return n, nil
}

// LoadDue streams the tasks due in [from, to) whose state is in states, in
// next_trigger_time order (ties by task id). No states means no tasks.
func (s *sqlStore) LoadDue(ctx context.Context, from, to int64, states []model.State, fn func(*model.Task) error) error {
	if len(states) == 0 || from >= to {
		return nil
	}
	args := make([]any, 0, 2+len(states))
	args = append(args, from, to)
	for _, st := range states {
		args = append(args, string(st))
	}
	q := taskSelect + " FROM " + s.d.dueFrom +
		" WHERE r.next_trigger_time > 0 AND r.next_trigger_time >= ? AND r.next_trigger_time < ?" +
		" AND r.state IN (" + placeholders(len(states)) + ")" + shardCond(ctx, "d.name") +
		" ORDER BY r.next_trigger_time, r.task_id"
	return s.streamTasks(ctx, q, args, fn)
}

// LoadDueRefs streams the (task id, next_trigger_time) pairs of LoadDue's rows from
// task_runtime alone. No ORDER BY: over most of a table a scan beats the index, and the
// loader does not need the order.
func (s *sqlStore) LoadDueRefs(ctx context.Context, from, to int64, states []model.State, fn func(DueRef) error) error {
	if len(states) == 0 || from >= to {
		return nil
	}
	args := make([]any, 0, 2+len(states))
	args = append(args, from, to)
	for _, st := range states {
		args = append(args, string(st))
	}
	q := "SELECT task_id, next_trigger_time FROM task_runtime" +
		" WHERE next_trigger_time > 0 AND next_trigger_time >= ? AND next_trigger_time < ?" +
		" AND state IN (" + placeholders(len(states)) + ")"
	if cond := shardCond(ctx, "d.name"); cond != "" {
		// The shard is the name's: read through the definitions, as LoadDue does.
		q = "SELECT r.task_id, r.next_trigger_time FROM " + s.d.dueFrom +
			" WHERE r.next_trigger_time > 0 AND r.next_trigger_time >= ? AND r.next_trigger_time < ?" +
			" AND r.state IN (" + placeholders(len(states)) + ")" + cond
	}
	return streamRows(ctx, s.db, q, args, func(rows *sql.Rows) (DueRef, error) {
		var r DueRef
		if err := rows.Scan(&r.TaskID, &r.NextTriggerTime); err != nil {
			return r, fmt.Errorf("cannot scan due task: %w", err)
		}
		return r, nil
	}, fn)
}

// loadByIDsChunk keeps LoadByIDs' statements short enough to plan and send quickly.
const loadByIDsChunk = 1000

// LoadByIDs streams the tasks with the given ids in id order, at most loadByIDsChunk ids
// per statement.
func (s *sqlStore) LoadByIDs(ctx context.Context, ids []int64, fn func(*model.Task) error) error {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	per := min(loadByIDsChunk, s.d.maxParams)
	for start := 0; start < len(ids); start += per {
		chunk := ids[start:min(start+per, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		q := taskSelect + taskJoin + " WHERE d.id IN (" + placeholders(len(chunk)) + ") ORDER BY d.id"
		if err := s.streamTasks(ctx, q, args, fn); err != nil {
			return err
		}
	}
	return nil
}

// LoadByState streams, in task id order, every task whose state is in states. No states
// means no tasks.
func (s *sqlStore) LoadByState(ctx context.Context, states []model.State, fn func(*model.Task) error) error {
	if len(states) == 0 {
		return nil
	}
	args := make([]any, 0, len(states))
	for _, st := range states {
		args = append(args, string(st))
	}
	q := taskSelect + " FROM " + s.d.stateFrom +
		" WHERE r.state IN (" + placeholders(len(states)) + ")" + shardCond(ctx, "d.name") + " ORDER BY r.task_id"
	return s.streamTasks(ctx, q, args, fn)
}

// Dependents returns the tasks that name upstream in depends_on, ordered by id.
func (s *sqlStore) Dependents(ctx context.Context, upstream string) ([]model.Task, error) {
	q := taskSelect + ` FROM task_dep p JOIN task_def d ON d.id = p.task_id
		JOIN task_runtime r ON r.task_id = d.id WHERE p.upstream_name = ?` + shardCond(ctx, "d.name") + ` ORDER BY d.id`
	var out []model.Task
	err := s.streamTasks(ctx, q, []any{upstream}, func(t *model.Task) error {
		out = append(out, *t)
		return nil
	})
	return out, err
}

// UpstreamNames returns every task name that some task depends on.
func (s *sqlStore) UpstreamNames(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT upstream_name FROM task_dep`)
	if err != nil {
		return nil, fmt.Errorf("cannot query upstream names: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("cannot scan upstream name: %w", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read upstream names: %w", err)
	}
	return out, nil
}

// streamTasks runs q and hands each task to fn as it arrives: nothing is buffered, so a
// window of a million tasks never sits in a slice. fn's error stops the stream.
func (s *sqlStore) streamTasks(ctx context.Context, q string, args []any, fn func(*model.Task) error) error {
	var sc taskScanner
	return streamRows(ctx, s.db, q, args, sc.scan, fn)
}

// streamRows runs q, decodes each row with scan and hands it to fn as it arrives. An error
// of fn stops the stream and is returned as is; cancelling on an early stop lets the MySQL
// driver drop the rest of the result instead of reading it all off the wire.
func streamRows[T any](ctx context.Context, db *sql.DB, q string, args []any, scan func(*sql.Rows) (T, error), fn func(T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("cannot query: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return err
		}
		if err := fn(v); err != nil {
			cancel()
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read rows: %w", err)
	}
	return nil
}

// taskScanner decodes the task rows of one stream. Rows next to each other mostly share
// their callback (the tasks of one executor handler, or of one HTTP endpoint), so it
// decodes a callback only when its text differs from the previous row's, and those tasks
// share the decoded strings. In a burst's promotions the callback's json.Unmarshal was
// half of the scan's CPU.
type taskScanner struct {
	lastCallback []byte         // the previous row's callback column
	callback     model.Callback // lastCallback decoded
}

func (sc *taskScanner) scan(rows *sql.Rows) (*model.Task, error) {
	t := new(model.Task)
	d, r := &t.Def, &t.Runtime
	// RawBytes: the JSON columns are decoded before the next row, so they need no copy.
	var deps, callback sql.RawBytes
	var params []byte
	var sensitive sql.RawBytes
	err := rows.Scan(&d.ID, &d.Name, &d.Group, &d.Trigger, &d.Cron, &d.DelayMS, &deps,
		&d.DependsMode, &d.Timezone, &d.TimeoutSec, &d.RetryCount, &d.RetryIntervalSec, &d.Priority,
		&callback, &params, &d.MisfirePolicy, &d.Paused, &d.CreatedAt, &d.UpdatedAt,
		&r.State, &r.CurrentTicket, &r.Attempt, &r.NextTriggerTime, &r.LastTriggerTime,
		&r.LastEndTime, &r.LastExecutor, &r.SuccessCount, &r.FailureCount, &r.Note, &r.Version,
		&d.OnLost, &d.CronDialect, &d.RetainHistoryMS, &d.RetainFinishedMS, &sensitive,
		&r.LastResult, &r.LastFailureAt, &d.PauseAfterFailures, &r.ConsecutiveFailures,
		&d.JitterSec, &d.ConcurrencyKey, &d.OverlapPolicy, &d.CatchupWindowSec, &r.PausedBy, &d.RateKey)
	if err != nil {
		return nil, fmt.Errorf("cannot scan task: %w", err)
	}
	if len(sensitive) > 0 {
		if err := json.Unmarshal(sensitive, &d.SensitiveParams); err != nil {
			return nil, fmt.Errorf("cannot decode sensitive_params of task %d: %w", d.ID, err)
		}
	}
	r.TaskID = d.ID
	if len(deps) > 0 {
		if err := json.Unmarshal(deps, &d.DependsOn); err != nil {
			return nil, fmt.Errorf("cannot decode depends_on of task %d: %w", d.ID, err)
		}
	}
	if len(callback) > 0 {
		if !bytes.Equal(callback, sc.lastCallback) {
			var cb model.Callback
			if err := json.Unmarshal(callback, &cb); err != nil {
				return nil, fmt.Errorf("cannot decode callback of task %d: %w", d.ID, err)
			}
			sc.callback, sc.lastCallback = cb, append(sc.lastCallback[:0], callback...)
		}
		d.Callback = sc.callback
	}
	if len(params) > 0 {
		d.Params = params
	}
	return t, nil
}

// encodeDef returns the column values of def in defCols order, and its deduplicated
// upstream names.
func encodeDef(def *model.TaskDef) ([]any, []string, error) {
	callback, err := json.Marshal(def.Callback)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot encode the callback of task %q: %w", def.Name, err)
	}
	deps := dedupe(def.DependsOn)
	var depsJSON string
	if len(deps) > 0 {
		b, err := json.Marshal(deps)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot encode depends_on of task %q: %w", def.Name, err)
		}
		depsJSON = string(b)
	}
	var sensitive string
	if len(def.SensitiveParams) > 0 {
		b, err := json.Marshal(def.SensitiveParams)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot encode sensitive_params of task %q: %w", def.Name, err)
		}
		sensitive = string(b)
	}
	return []any{def.Name, def.Group, def.Trigger, def.Cron, def.DelayMS, depsJSON,
		def.DependsMode, def.Timezone, def.TimeoutSec, def.RetryCount, def.RetryIntervalSec,
		def.Priority, string(callback), string(def.Params), def.MisfirePolicy, def.Paused,
		def.OnLost, def.CronDialect, def.RetainHistoryMS, def.RetainFinishedMS, sensitive, def.PauseAfterFailures, def.JitterSec, def.ConcurrencyKey, def.OverlapPolicy, def.CatchupWindowSec, def.RateKey, def.UpdatedAt, def.CreatedAt}, deps, nil
}

// insertDeps writes the task_dep edges of task id. depends_on also lives on task_def as
// JSON, so reading a task needs no join; task_dep exists for Dependents' indexed lookup.
func insertDeps(ctx context.Context, tx *sql.Tx, id int64, deps []string) error {
	if len(deps) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(deps))
	for _, name := range deps {
		args = append(args, id, name)
	}
	q := "INSERT INTO task_dep (task_id, upstream_name) VALUES " + valuesList(2, len(deps))
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("cannot insert the dependencies of task %d: %w", id, err)
	}
	return nil
}

func dedupe(names []string) []string {
	if len(names) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// ---- runs and actions ----

// GetRun returns the run with the ticket, or ErrRunNotFound.
func (s *sqlStore) GetRun(ctx context.Context, ticket string) (*model.Run, error) {
	runs, err := s.queryRuns(ctx, s.runSelect+` WHERE ticket = ?`, ticket)
	if err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("cannot get run %q: %w", ticket, model.ErrRunNotFound)
	}
	return &runs[0], nil
}

// ListRuns returns the task's runs, newest first; limit <= 0 means all.
func (s *sqlStore) ListRuns(ctx context.Context, taskID int64, limit int) ([]model.Run, error) {
	return s.queryRuns(ctx, s.runSelect+` WHERE task_id = ? ORDER BY scheduled_at DESC, ticket DESC`+limitClause(limit), taskID)
}

// ListRunningManual returns the run-now instances still running, oldest first; limit <= 0
// means all.
func (s *sqlStore) ListRunningManual(ctx context.Context, limit int) ([]model.Run, error) {
	return s.queryRuns(ctx, s.runSelect+s.d.openManualRuns+shardCond(ctx, "task_name")+s.d.openManualOrder+limitClause(limit))
}

func (s *sqlStore) queryRuns(ctx context.Context, q string, args ...any) ([]model.Run, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot query runs: %w", err)
	}
	defer rows.Close()
	var out []model.Run
	for rows.Next() {
		var r model.Run
		var params sql.NullString
		if err := rows.Scan(&r.Ticket, &r.TaskID, &r.TaskName, &r.Kind, &r.Attempt, &r.ScheduledAt,
			&r.DispatchedAt, &r.Executor, &r.EndedAt, &r.Result, &r.Error, &r.DurationMS,
			&r.Output, &r.Detail, &params); err != nil {
			return nil, fmt.Errorf("cannot scan run: %w", err)
		}
		if params.Valid && params.String != "" {
			r.Params = model.RunParams(params.String)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read runs: %w", err)
	}
	return out, nil
}

// ListActions returns the task's action records, newest first; limit <= 0 means all.
func (s *sqlStore) ListActions(ctx context.Context, taskID int64, limit int) ([]model.Action, error) {
	return s.queryActions(ctx, "SELECT id, "+strings.Join(actionCols, ", ")+" FROM task_action WHERE task_id = ? ORDER BY id DESC"+limitClause(limit), taskID)
}

// queryActions runs q, which selects id and then actionCols, and scans its rows.
func (s *sqlStore) queryActions(ctx context.Context, q string, args ...any) ([]model.Action, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot query actions: %w", err)
	}
	defer rows.Close()
	var out []model.Action
	for rows.Next() {
		var a model.Action
		if err := rows.Scan(&a.ID, &a.TaskID, &a.TaskName, &a.Ticket, &a.Action, &a.From, &a.To,
			&a.Actor, &a.At, &a.Detail); err != nil {
			return nil, fmt.Errorf("cannot scan action: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read actions: %w", err)
	}
	return out, nil
}

// ---- executors ----

// UpsertExecutor registers e, idempotent by (App, Address); a re-registration keeps the
// stored RegisteredAt.
func (s *sqlStore) UpsertExecutor(ctx context.Context, e *model.Executor) error {
	handlers, err := json.Marshal(e.Handlers)
	if err != nil {
		return fmt.Errorf("cannot encode the handlers of executor %s@%s: %w", e.App, e.Address, err)
	}
	if _, err := s.exec(ctx, s.upsertExecutor, e.App, e.Address, e.Protocol,
		string(handlers), e.RegisteredAt, e.LastHeartbeat, e.Status, e.DispatchKey, e.Incarnation); err != nil {
		return fmt.Errorf("cannot register executor %s@%s: %w", e.App, e.Address, err)
	}
	return nil
}

// Heartbeat sets last_heartbeat and status "alive", keeping "left" (a deregistered executor
// that drains): only a registration ends it.
func (s *sqlStore) Heartbeat(ctx context.Context, app, address string, at int64) error {
	return s.updateExecutor(ctx, app, address,
		`UPDATE executor SET last_heartbeat = ?, status = CASE WHEN status = ? THEN status ELSE ? END WHERE app = ? AND address = ?`,
		at, executorLeft, executorAlive, app, address)
}

// SetExecutorStatus sets the executor's status.
func (s *sqlStore) SetExecutorStatus(ctx context.Context, app, address, status string) error {
	return s.updateExecutor(ctx, app, address,
		`UPDATE executor SET status = ? WHERE app = ? AND address = ?`, status, app, address)
}

func (s *sqlStore) updateExecutor(ctx context.Context, app, address, q string, args ...any) error {
	res, err := s.exec(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("cannot update executor %s@%s: %w", app, address, err)
	}
	if n, err := res.RowsAffected(); err == nil && n > 0 {
		return nil
	}
	// MySQL reports 0 for an update that changes nothing: look before calling it unknown.
	var one int
	err = s.db.QueryRowContext(ctx, `SELECT 1 FROM executor WHERE app = ? AND address = ?`, app, address).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("cannot update executor %s@%s: %w", app, address, model.ErrExecutorNotFound)
	}
	if err != nil {
		return fmt.Errorf("cannot update executor %s@%s: %w", app, address, err)
	}
	return nil
}

// DeleteExecutor forgets an executor (one a bounded registration took the place of).
func (s *sqlStore) DeleteExecutor(ctx context.Context, app, address string) error {
	if _, err := s.exec(ctx, `DELETE FROM executor WHERE app = ? AND address = ?`, app, address); err != nil {
		return fmt.Errorf("cannot delete executor %s@%s: %w", app, address, err)
	}
	return nil
}

// ListExecutors returns every executor ordered by (app, address).
func (s *sqlStore) ListExecutors(ctx context.Context) ([]model.Executor, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT "+strings.Join(executorCols, ", ")+" FROM executor ORDER BY app, address")
	if err != nil {
		return nil, fmt.Errorf("cannot query executors: %w", err)
	}
	defer rows.Close()
	var out []model.Executor
	for rows.Next() {
		var (
			e        model.Executor
			handlers sql.RawBytes
		)
		if err := rows.Scan(&e.App, &e.Address, &e.Protocol, &handlers, &e.RegisteredAt,
			&e.LastHeartbeat, &e.Status, &e.DispatchKey, &e.Incarnation); err != nil {
			return nil, fmt.Errorf("cannot scan executor: %w", err)
		}
		if len(handlers) > 0 {
			if err := json.Unmarshal(handlers, &e.Handlers); err != nil {
				return nil, fmt.Errorf("cannot decode the handlers of executor %s@%s: %w", e.App, e.Address, err)
			}
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read executors: %w", err)
	}
	return out, nil
}

// ---- concurrency limits ----

// ListConcurrencyLimits returns every limit ordered by (kind, name).
func (s *sqlStore) ListConcurrencyLimits(ctx context.Context) ([]model.ConcurrencyLimit, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT kind, name, max_runs, updated_at FROM concurrency_limit ORDER BY kind, name`)
	if err != nil {
		return nil, fmt.Errorf("cannot query concurrency limits: %w", err)
	}
	defer rows.Close()
	var out []model.ConcurrencyLimit
	for rows.Next() {
		var l model.ConcurrencyLimit
		if err := rows.Scan(&l.Kind, &l.Name, &l.Max, &l.UpdatedAt); err != nil {
			return nil, fmt.Errorf("cannot scan concurrency limit: %w", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read concurrency limits: %w", err)
	}
	return out, nil
}

// PutConcurrencyLimit replaces the limit of (kind, name) in one transaction: a delete and an
// insert, which both dialects read alike. Every node of a sharded cluster puts the same limit
// at once (the API fans the call out), so a deadlock between them is tried again.
func (s *sqlStore) PutConcurrencyLimit(ctx context.Context, l model.ConcurrencyLimit) error {
	for attempt := 0; ; attempt++ {
		err := s.putConcurrencyLimit(ctx, l)
		if err == nil || !s.d.isRetryable(err) || attempt >= slotRetries || ctx.Err() != nil {
			return err
		}
		slotBackoff(ctx, attempt)
	}
}

// putConcurrencyLimit writes l in one statement: every node of a sharded cluster writes the
// same row at once (the API fans the call out), and a delete and an insert in one
// transaction deadlocked there (each transaction's gap lock against the other's insert).
func (s *sqlStore) putConcurrencyLimit(ctx context.Context, l model.ConcurrencyLimit) error {
	q := `INSERT INTO concurrency_limit (kind, name, max_runs, updated_at) VALUES (?, ?, ?, ?)`
	if s.d.kind == SchemeMySQL {
		q += ` ON DUPLICATE KEY UPDATE max_runs = VALUES(max_runs), updated_at = VALUES(updated_at)`
	} else {
		q += ` ON CONFLICT (kind, name) DO UPDATE SET max_runs = excluded.max_runs, updated_at = excluded.updated_at`
	}
	if _, err := s.exec(ctx, q, l.Kind, l.Name, l.Max, l.UpdatedAt); err != nil {
		return fmt.Errorf("cannot set concurrency limit %s %s: %w", l.Kind, l.Name, err)
	}
	return nil
}

// DeleteConcurrencyLimit removes the limit of (kind, name).
func (s *sqlStore) DeleteConcurrencyLimit(ctx context.Context, kind, name string) (bool, error) {
	res, err := s.exec(ctx, `DELETE FROM concurrency_limit WHERE kind = ? AND name = ?`, kind, name)
	if err != nil {
		return false, fmt.Errorf("cannot delete concurrency limit %s %s: %w", kind, name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("cannot delete concurrency limit %s %s: %w", kind, name, err)
	}
	return n > 0, nil
}

// ---- lease and nodes: ha.go ----

// ---- helpers ----

// rollback ends a transaction that was not committed; after Commit it is a no-op.
func rollback(tx *sql.Tx) { _ = tx.Rollback() }

// placeholders returns "?, ?, …" with n marks.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// valuesList returns nrows "(?, …)" groups of ncols marks, comma separated.
func valuesList(ncols, nrows int) string {
	row := "(" + placeholders(ncols) + ")"
	var b strings.Builder
	b.Grow(nrows * (len(row) + 2))
	for i := range nrows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

func limitClause(limit int) string {
	if limit <= 0 {
		return ""
	}
	return " LIMIT " + strconv.Itoa(limit)
}

// clip makes s storable in a column of size bytes: invalid UTF-8 (which MySQL's strict mode
// rejects) is replaced and the tail beyond size is cut at a rune boundary. Byte length bounds
// character length, so this also fits VARCHAR(size).
func clip(s string, size int) string {
	if len(s) <= size && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= size {
		return s
	}
	cut := size
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
