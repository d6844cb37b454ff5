package persist

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/axe-sched/axe/model"
)

// sqliteParams configure every pooled connection:
//   - _txlock=immediate: every transaction takes the write lock at BEGIN, so a read inside a
//     write transaction (the CAS versions of ApplyBatch, the lease row) cannot go stale
//     before the write, and two writers never deadlock upgrading read locks.
//   - busy_timeout: a writer waits for the lock instead of failing at once.
//   - WAL + synchronous=NORMAL: readers never block the writer, and a commit survives the
//     process dying (kill -9); only an OS crash can lose the last commits.
const sqliteParams = "_txlock=immediate" +
	"&_pragma=busy_timeout(30000)" +
	"&_pragma=journal_mode(WAL)" +
	"&_pragma=synchronous(NORMAL)"

// sqliteMaxConns bounds the pool. Writers are serialised by SQLite anyway; the extra
// connections serve readers (API calls, the window loader) while a batch commits.
const sqliteMaxConns = 8

// sqliteMaxParams stays under SQLITE_MAX_VARIABLE_NUMBER (32766 since SQLite 3.32).
const sqliteMaxParams = 32000

func openSQLite(path string) (*sqlStore, error) {
	file, userParams, _ := strings.Cut(path, "?")
	if file == "" {
		return nil, fmt.Errorf("cannot open sqlite store: empty path")
	}
	// Ours come first: the driver takes the first value of a repeated key.
	dsn := file + "?" + sqliteParams
	if userParams != "" {
		dsn += "&" + userParams
	}
	if err := registerCRC32(); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("cannot open sqlite store %q: %w", file, err)
	}
	db.SetMaxOpenConns(sqliteMaxConns)
	db.SetMaxIdleConns(sqliteMaxConns)
	return newSQLStore(db, sqliteDialect()), nil
}

func sqliteDialect() *dialect {
	return &dialect{
		kind: SchemeSQLite,
		// The immediate transaction already holds the database write lock.
		forUpdate: "",
		forShare:  "",
		// INDEXED BY makes the query fail rather than silently scan; CROSS JOIN pins
		// task_runtime as the outer loop so rows come out in index order.
		dueFrom:   "task_runtime r INDEXED BY idx_task_runtime_next CROSS JOIN task_def d ON d.id = r.task_id",
		stateFrom: "task_runtime r CROSS JOIN task_def d ON d.id = r.task_id",
		openFiresFrom: "task_runtime r INDEXED BY idx_task_runtime_next CROSS JOIN task_run x INDEXED BY idx_task_run_task" +
			" ON x.task_id = r.task_id AND x.scheduled_at = r.next_trigger_time",
		maxParams: sqliteMaxParams,
		upsert: func(key, update []string) string {
			var b strings.Builder
			b.WriteString(" ON CONFLICT(")
			b.WriteString(strings.Join(key, ", "))
			b.WriteString(") DO UPDATE SET ")
			for i, c := range update {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(c + " = excluded." + c)
			}
			return b.String()
		},
		isUniqueViolation: sqliteIsUnique,
		// Transactions hold the write lock from BEGIN: nothing to retry.
		isRetryable: func(error) bool { return false },
		ensureLease: `INSERT INTO lease (name, holder, epoch) VALUES (?, '', 0)
			ON CONFLICT(name) DO NOTHING`,
		migrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY,
			name TEXT NOT NULL
		)`,
		migrations:       sqliteMigrations,
		transactionalDDL: true,
		// SQLite's DDL here says IF [NOT] EXISTS and is transactional: nothing half applied.
		isAlreadyApplied: func(error) bool { return false },
		// Repeats the partial index's WHERE literally (bound values would not match it).
		runsByTime:      "INDEXED BY idx_task_run_sched",
		runsByTask:      "INDEXED BY idx_task_run_task",
		openManualRuns:  ` WHERE result = '` + model.ResultRunning + `' AND kind = '` + model.RunManual + `'`,
		openManualOrder: ` ORDER BY scheduled_at, ticket`,
		lockSchema: func(context.Context, *sql.Conn) (func(), error) {
			return func() {}, nil
		},
	}
}

func sqliteIsUnique(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	code := se.Code()
	return code == sqlite3.SQLITE_CONSTRAINT_UNIQUE || code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}
