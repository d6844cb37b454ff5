package persist

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Pool sizing for MySQL. The batched writer holds one connection; API reads, the window
// loader and lease renewals need a few more. Connections are recycled well before a typical
// server wait_timeout so the pool never hands out one the server already dropped.
const (
	mysqlMaxOpenConns    = 16
	mysqlMaxIdleConns    = 8
	mysqlConnMaxLifetime = 5 * time.Minute
)

// mysqlMaxParams stays under the protocol's 65535 placeholders per prepared statement (it
// matters only when interpolateParams is turned off).
const mysqlMaxParams = 60000

// mysqlSchemaLockTimeoutSec bounds how long Migrate waits for another node's Migrate.
const mysqlSchemaLockTimeoutSec = 60

// MySQL error numbers the store reacts to.
const (
	mysqlErrDupFieldName       = 1060 // ADD COLUMN of a column that exists
	mysqlErrDupKeyName         = 1061 // CREATE INDEX of an index that exists
	mysqlErrDupEntry           = 1062
	mysqlErrCantDropFieldOrKey = 1091 // DROP of a column or index that does not exist
	mysqlErrDeadlock           = 1213
	// ER_UNKNOWN_SYSTEM_VARIABLE: SET of a variable this server does not have.
	mysqlErrUnknownSystemVariable = 1193
)

func openMySQL(dsn string, opts OpenOptions) (*sqlStore, error) {
	// Several addresses (a Galera cluster's nodes, mysqlhosts.go): the driver parses the
	// DSN with the first, and each node gets a copy of that configuration.
	prefix, addrs, suffix, err := splitHosts(dsn)
	if err != nil {
		return nil, fmt.Errorf("cannot parse mysql DSN: %w", err)
	}
	cfg, err := mysql.ParseDSN(prefix + addrs[0] + suffix)
	if err != nil {
		return nil, fmt.Errorf("cannot parse mysql DSN: %w", err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("cannot open mysql store: the DSN names no database (…/DBNAME)")
	}
	if !strings.Contains(dsn, "interpolateParams=") {
		cfg.InterpolateParams = true
	}
	hosts, err := newHostSet(cfg, addrs)
	if err != nil {
		return nil, err
	}
	if opts.Metrics != nil {
		hosts.m = newStoreMetrics(opts.Metrics)
	}
	bc := batchConnector{hosts: hosts, waitTimeoutUsed: new(atomic.Bool)}
	if opts.TxIdleTimeout > 0 {
		bc.txIdleSec = int(max(1, (opts.TxIdleTimeout+time.Second-1)/time.Second))
	}
	db := sql.OpenDB(bc)
	db.SetMaxOpenConns(mysqlMaxOpenConns)
	db.SetMaxIdleConns(mysqlMaxIdleConns)
	db.SetConnMaxLifetime(mysqlConnMaxLifetime)
	s := newSQLStore(db, mysqlDialect())
	s.afterPing = func() {
		if bc.waitTimeoutUsed.Load() {
			db.SetConnMaxIdleTime(time.Duration(bc.txIdleSec) * time.Second / 2)
		}
		s.consecutiveIDs = mysqlConsecutiveIDs(db)
		s.galera = mysqlWsrepOn(db)
	}
	return s, nil
}

// mysqlConsecutiveIDs reports whether the server gives the rows of one multi-row INSERT
// consecutive auto-increment ids, first the one LAST_INSERT_ID() reports: InnoDB does for
// such "simple inserts" under innodb_autoinc_lock_mode 0 (traditional) and 1 (consecutive,
// MariaDB's and MySQL 5.7's default), with an auto_increment_increment of 1. Under lock mode
// 2 (interleaved, MySQL 8's default) or a larger increment (Galera), or when the settings
// cannot be read, it is false and the ids are read back by name.
func mysqlConsecutiveIDs(db *sql.DB) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var mode, inc int64
	if err := db.QueryRowContext(ctx, `SELECT @@innodb_autoinc_lock_mode, @@auto_increment_increment`).Scan(&mode, &inc); err != nil {
		return false
	}
	return (mode == 0 || mode == 1) && inc == 1
}

func mysqlDialect() *dialect {
	return &dialect{
		kind:      SchemeMySQL,
		forUpdate: " FOR UPDATE",
		// A batch only reads the lease row; a shared lock lets batches run side by side
		// while a takeover (which locks the row exclusively) waits for them to finish.
		forShare:    " LOCK IN SHARE MODE",
		leaseByName: " FORCE INDEX (PRIMARY)",
		// FORCE INDEX: for a wide window the optimizer may prefer a full scan plus a sort,
		// which holds the whole result server-side before the first row streams out.
		dueFrom:   "task_runtime r FORCE INDEX (idx_task_runtime_next) STRAIGHT_JOIN task_def d ON d.id = r.task_id",
		stateFrom: "task_runtime r STRAIGHT_JOIN task_def d ON d.id = r.task_id",
		openFiresFrom: "task_runtime r FORCE INDEX (idx_task_runtime_next) STRAIGHT_JOIN task_run x FORCE INDEX (idx_task_run_task)" +
			" ON x.task_id = r.task_id AND x.scheduled_at = r.next_trigger_time",
		maxParams:   mysqlMaxParams,
		connBatches: true,
		upsert: func(_, update []string) string {
			var b strings.Builder
			b.WriteString(" ON DUPLICATE KEY UPDATE ")
			for i, c := range update {
				if i > 0 {
					b.WriteString(", ")
				}
				// VALUES(c) rather than the row-alias syntax: MariaDB has no row alias.
				b.WriteString(c + " = VALUES(" + c + ")")
			}
			return b.String()
		},
		casUpsert:         mysqlCASUpsert,
		isUniqueViolation: func(err error) bool { return mysqlErrIs(err, mysqlErrDupEntry) },
		isRetryable:       func(err error) bool { return mysqlErrIs(err, mysqlErrDeadlock) },
		ensureLease: `INSERT INTO lease (name, holder, epoch) VALUES (?, '', 0)
			ON DUPLICATE KEY UPDATE name = name`,
		migrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INT NOT NULL,
			name VARCHAR(255) NOT NULL,
			PRIMARY KEY (version)
		)` + mysqlTableOpts,
		migrations:       mysqlMigrations,
		transactionalDDL: false,
		isAlreadyApplied: func(err error) bool {
			return mysqlErrIs(err, mysqlErrDupFieldName) || mysqlErrIs(err, mysqlErrDupKeyName) ||
				mysqlErrIs(err, mysqlErrCantDropFieldOrKey)
		},
		// open_manual is NULL for every other run (schema step 2), so the open run-now runs
		// are the non-NULL part of idx_task_run_open_sched (step 7). There open_manual is the
		// run's scheduled_at, and InnoDB orders ties by the primary key, the ticket.
		openManualRuns:  ` WHERE open_manual IS NOT NULL`,
		openManualOrder: ` ORDER BY open_manual, ticket`,
		// The runs the pruner may delete are in the NULL part of the same index, in
		// scheduled_at order.
		prunableRuns: `open_manual IS NULL AND `,
		runsByTime:   "FORCE INDEX (idx_task_run_open_sched)",
		runsByTask:   "FORCE INDEX (idx_task_run_task)",
		runsAllCond:  "open_manual IS NULL",
		runsOpenCond: "open_manual IS NOT NULL",
		lockSchema:   mysqlLockSchema,
	}
}

// mysqlCASUpsert guards every assignment of an upsert with the CAS: a row applies only where
// the stored version is steps below the inserted one (the row is the last of a chain of steps
// transitions). update must end with version, so that the guards before it still read the
// stored version (MySQL and MariaDB assign left to right). The affected-row count is 2 for an
// updated row, 0 for one the guard kept and 1 for an inserted one (a row that did not exist),
// so n rows all applied exactly when it is 2n.
func mysqlCASUpsert(update []string, steps int64) string {
	if update[len(update)-1] != "version" {
		panic("persist: a guarded upsert must assign version last")
	}
	guard := "IF(version = VALUES(version) - " + strconv.FormatInt(steps, 10)
	var b strings.Builder
	b.WriteString(" ON DUPLICATE KEY UPDATE ")
	for i, c := range update {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c + " = " + guard + ", VALUES(" + c + "), " + c + ")")
	}
	return b.String()
}

// mysqlLockSchema takes a server-wide named lock for this database, so two axe nodes
// starting together do not run the same DDL at once. A Galera node's named locks are its own:
// there Migrate takes galeraLockSchema's row instead. The name hashes the database name to
// stay under the 64-character limit on lock names.
func mysqlLockSchema(ctx context.Context, conn *sql.Conn) (func(), error) {
	const name = `CONCAT('axe_migrate:', MD5(DATABASE()))`
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(`+name+`, ?)`, mysqlSchemaLockTimeoutSec).Scan(&got); err != nil {
		return nil, fmt.Errorf("cannot take the schema lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return nil, fmt.Errorf("cannot take the schema lock: another node held it for %d s", mysqlSchemaLockTimeoutSec)
	}
	return func() {
		// Background: the lock must be released even when ctx was cancelled. Should this
		// fail, closing the session releases the lock anyway.
		_, _ = conn.ExecContext(context.Background(), `DO RELEASE_LOCK(`+name+`)`)
	}, nil
}

func mysqlErrIs(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}
