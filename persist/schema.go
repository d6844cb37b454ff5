package persist

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// migration is one ordered schema step. Steps are append-only: a released step is never
// edited, a change is a new step. Every statement is written to be re-runnable (IF NOT
// EXISTS) because MySQL commits DDL implicitly, so a crash can leave a step half applied
// without its schema_migrations row.
type migration struct {
	version int
	name    string
	stmts   []string
	// fn, when set, runs after stmts: a data step that SQL alone cannot express. It must be
	// re-runnable too, for the same reason.
	fn func(ctx context.Context, q execQuerier) error
}

// Column sizes shared by both dialects. Identifiers are VARCHAR so they can be indexed;
// free text is TEXT. clip() bounds what the batch path writes to these sizes so that one
// oversized field can never make a whole group commit fail on MySQL's strict mode.
const (
	nameLen   = 255   // task names, groups, executor apps/addresses, actors
	ticketLen = 128   // run tickets
	shortLen  = 32    // states, results, kinds, trigger types, policies
	textLen   = 65535 // TEXT: error, output, detail, note (bytes)
	// pausedByLen holds a pause origin: "group:" and a group name (model.Runtime.PausedBy).
	pausedByLen = 300
)

// mysqlTableOpts makes every table InnoDB with binary utf8mb4 collation: names compare
// byte-for-byte, as they do in SQLite, so "Task" and "task" are two tasks on both stores.
const mysqlTableOpts = ` ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

var mysqlMigrations = []migration{{
	version: 1,
	name:    "initial schema",
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS task_def (
			id BIGINT NOT NULL AUTO_INCREMENT,
			name VARCHAR(255) NOT NULL,
			grp VARCHAR(255) NOT NULL,
			trigger_type VARCHAR(32) NOT NULL,
			cron VARCHAR(255) NOT NULL,
			delay_ms BIGINT NOT NULL,
			depends_on TEXT NOT NULL,
			depends_mode VARCHAR(32) NOT NULL,
			timezone VARCHAR(64) NOT NULL,
			timeout_sec INT NOT NULL,
			retry_count INT NOT NULL,
			retry_interval_sec INT NOT NULL,
			priority INT NOT NULL,
			callback TEXT NOT NULL,
			params MEDIUMTEXT NOT NULL,
			misfire_policy VARCHAR(32) NOT NULL,
			paused TINYINT NOT NULL,
			created_at BIGINT NOT NULL,
			updated_at BIGINT NOT NULL,
			PRIMARY KEY (id),
			UNIQUE KEY uk_task_def_name (name),
			KEY idx_task_def_grp (grp, id)
		)` + mysqlTableOpts,
		// No index on state: every transition changes it, and only start-up recovery and
		// the console filter by it. next_trigger_time is indexed for the window loader.
		`CREATE TABLE IF NOT EXISTS task_runtime (
			task_id BIGINT NOT NULL,
			state VARCHAR(32) NOT NULL,
			current_ticket VARCHAR(128) NOT NULL,
			attempt INT NOT NULL,
			next_trigger_time BIGINT NOT NULL,
			last_trigger_time BIGINT NOT NULL,
			last_end_time BIGINT NOT NULL,
			last_executor VARCHAR(255) NOT NULL,
			success_count BIGINT NOT NULL,
			failure_count BIGINT NOT NULL,
			note TEXT NOT NULL,
			version BIGINT NOT NULL,
			PRIMARY KEY (task_id),
			KEY idx_task_runtime_next (next_trigger_time)
		)` + mysqlTableOpts,
		`CREATE TABLE IF NOT EXISTS task_run (
			ticket VARCHAR(128) NOT NULL,
			task_id BIGINT NOT NULL,
			task_name VARCHAR(255) NOT NULL,
			kind VARCHAR(32) NOT NULL,
			attempt INT NOT NULL,
			scheduled_at BIGINT NOT NULL,
			dispatched_at BIGINT NOT NULL,
			executor VARCHAR(255) NOT NULL,
			ended_at BIGINT NOT NULL,
			result VARCHAR(32) NOT NULL,
			error TEXT NOT NULL,
			duration_ms BIGINT NOT NULL,
			output TEXT NOT NULL,
			detail TEXT NOT NULL,
			PRIMARY KEY (ticket),
			KEY idx_task_run_task (task_id, scheduled_at),
			KEY idx_task_run_result (result, scheduled_at)
		)` + mysqlTableOpts,
		`CREATE TABLE IF NOT EXISTS task_action (
			id BIGINT NOT NULL AUTO_INCREMENT,
			task_id BIGINT NOT NULL,
			task_name VARCHAR(255) NOT NULL,
			ticket VARCHAR(128) NOT NULL,
			action VARCHAR(32) NOT NULL,
			from_state VARCHAR(32) NOT NULL,
			to_state VARCHAR(32) NOT NULL,
			actor VARCHAR(255) NOT NULL,
			at BIGINT NOT NULL,
			detail TEXT NOT NULL,
			PRIMARY KEY (id),
			KEY idx_task_action_task (task_id, id)
		)` + mysqlTableOpts,
		`CREATE TABLE IF NOT EXISTS executor (
			app VARCHAR(255) NOT NULL,
			address VARCHAR(255) NOT NULL,
			protocol VARCHAR(32) NOT NULL,
			handlers TEXT NOT NULL,
			registered_at BIGINT NOT NULL,
			last_heartbeat BIGINT NOT NULL,
			status VARCHAR(32) NOT NULL,
			PRIMARY KEY (app, address)
		)` + mysqlTableOpts,
		`CREATE TABLE IF NOT EXISTS task_dep (
			task_id BIGINT NOT NULL,
			upstream_name VARCHAR(255) NOT NULL,
			PRIMARY KEY (task_id, upstream_name),
			KEY idx_task_dep_upstream (upstream_name)
		)` + mysqlTableOpts,
		`CREATE TABLE IF NOT EXISTS lease (
			name VARCHAR(255) NOT NULL,
			holder VARCHAR(255) NOT NULL,
			epoch BIGINT NOT NULL,
			expires_at BIGINT NOT NULL,
			PRIMARY KEY (name)
		)` + mysqlTableOpts,
	},
}, {
	version: 2,
	name:    "index open manual runs only",
	// idx_task_run_result moved every run in the index when its result was written: the
	// dearest row work of a dispatch (finishing run rows costs MariaDB about twice the CPU
	// with it: bench/rows_test.go). Only the recovery of in-flight run-now instances read
	// it, and periodic in-flight runs are found through their task's runtime. The stored
	// column is NULL except for a manual run still running, so finishing a periodic run
	// leaves its entry alone. Adding a stored column rebuilds task_run once. Plain DDL, not
	// IF [NOT] EXISTS (which MySQL lacks for columns and indexes): a re-run after a crash
	// meets "already exists" errors, which dialect.isAlreadyApplied lets through.
	stmts: []string{
		`ALTER TABLE task_run ADD COLUMN open_manual BIGINT AS
			(IF(result = 'running' AND kind = 'manual', scheduled_at, NULL)) STORED`,
		`CREATE INDEX idx_task_run_open_manual ON task_run (open_manual)`,
		`DROP INDEX idx_task_run_result ON task_run`,
	},
}, {
	version: 3,
	name:    "high availability: lease by the database clock, nodes, on_lost",
	// The lease's expiry becomes a time of the database's own clock (UTC_TIMESTAMP(6)), so no
	// node's clock ever judges it (docs/ha.md, "The lease"). The old expires_at was node
	// milliseconds and cannot be compared with that clock, and no earlier axe ever held the lease
	// (the daemon did not use it): each row keeps its holder and its epoch, so epochs never go
	// back, and reads as expired. nodes lists every scheduler of the database and when it was last
	// seen, by the same clock. on_lost is the per-task policy for an HTTP run left in doubt. Plain
	// DDL as in step 2: a re-run meets "already exists" errors, which dialect.isAlreadyApplied lets
	// through.
	stmts: []string{
		`ALTER TABLE lease ADD COLUMN expiry DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00'`,
		`ALTER TABLE lease DROP COLUMN expires_at`,
		`CREATE TABLE IF NOT EXISTS nodes (
			id VARCHAR(255) NOT NULL,
			advertise VARCHAR(255) NOT NULL,
			role VARCHAR(32) NOT NULL,
			instance VARCHAR(64) NOT NULL,
			started_at DATETIME(6) NOT NULL,
			last_seen DATETIME(6) NOT NULL,
			PRIMARY KEY (id)
		)` + mysqlTableOpts,
		`ALTER TABLE task_def ADD COLUMN on_lost VARCHAR(32) NOT NULL DEFAULT ''`,
	},
}, {
	version: 4,
	name:    "cron dialect per task",
	// Every task stored before dialects existed was read the unix way, so the default fills
	// the existing rows with 'unix' and none of them changes meaning. A re-run meets
	// "duplicate column", which dialect.isAlreadyApplied lets through.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN cron_dialect VARCHAR(32) NOT NULL DEFAULT 'unix'`,
	},
}, {
	version: 5,
	name:    "retention",
	// Per-task retention overrides (0: the server's setting), and an index that lets the
	// pruner find old runs without scanning the table. Actions need none: their ids follow
	// time, so the pruner finds its cut-off id by primary key. Plain DDL, as in step 2.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN retain_history_ms BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE task_def ADD COLUMN retain_finished_ms BIGINT NOT NULL DEFAULT 0`,
		`CREATE INDEX idx_task_run_sched ON task_run (scheduled_at)`,
	},
}, {
	version: 6,
	name:    "sensitive params",
	// The keys of params that reads mask, as a JSON array ('' for none). A default, so
	// existing rows need no rewrite.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN sensitive_params VARCHAR(4096) NOT NULL DEFAULT ''`,
	},
}, {
	version: 7,
	name:    "one index for open manual runs and the pruner",
	// Every fire inserts a run row, and each secondary index of task_run is an entry more to
	// insert. Step 2's index on open_manual and step 5's on scheduled_at become one on
	// (open_manual, scheduled_at): open_manual is NULL for every run but an open run-now
	// instance, so the open ones come out first-column first as before, and the pruner reads
	// the NULL prefix in scheduled_at order. An open run-now instance is never pruned, so
	// the pruner loses nothing by skipping them. The new index is built before the old ones
	// go; a re-run after a crash meets "already exists" or "can't drop", which
	// dialect.isAlreadyApplied lets through.
	stmts: []string{
		`CREATE INDEX idx_task_run_open_sched ON task_run (open_manual, scheduled_at)`,
		`DROP INDEX idx_task_run_open_manual ON task_run`,
		`DROP INDEX idx_task_run_sched ON task_run`,
	},
}, cronDaysStep, {
	version: 9,
	name:    "executor dispatch keys",
	// The key each executor's calls are signed with (hex of protocol.DispatchKey of the
	// token it registered with), so a restarted or newly promoted scheduler signs at once.
	// '' for the executors registered before, which predate signed calls. A re-run meets
	// "duplicate column", which dialect.isAlreadyApplied lets through.
	stmts: []string{
		`ALTER TABLE executor ADD COLUMN dispatch_key VARCHAR(128) NOT NULL DEFAULT ''`,
	},
}, {
	version: 10,
	name:    "last result per task, minute statistics",
	// The end of a run writes its result, and a failure's time, into the runtime row it
	// writes anyway (the same upsert: no statement more per fire), so that the console can
	// find a periodic task whose runs fail while it stays SCHEDULED. Rows written before say
	// '' and 0 until their next end. idx_task_runtime_failed serves "failed within": the
	// stores rewrite a secondary index entry only when its column changes, and
	// last_failure_at changes only with a failure, so a successful end costs it nothing (a
	// create adds one entry). minute_stats holds each node's fires, failures and
	// fire lateness per minute (admin's recorder writes one row per node per minute in which
	// anything fired; the pruner drops rows older than a day). ADD COLUMN with a default is
	// instant on MariaDB 10.3+ and MySQL 8; a re-run meets "duplicate column", which
	// dialect.isAlreadyApplied lets through.
	stmts: []string{
		`ALTER TABLE task_runtime ADD COLUMN last_result VARCHAR(32) NOT NULL DEFAULT ''`,
		`ALTER TABLE task_runtime ADD COLUMN last_failure_at BIGINT NOT NULL DEFAULT 0`,
		`CREATE INDEX idx_task_runtime_failed ON task_runtime (last_failure_at)`,
		`CREATE TABLE IF NOT EXISTS minute_stats (
			minute BIGINT NOT NULL,
			node VARCHAR(255) NOT NULL,
			fires BIGINT NOT NULL,
			failures BIGINT NOT NULL,
			late_sum_ms BIGINT NOT NULL,
			late_count BIGINT NOT NULL,
			PRIMARY KEY (minute, node)
		)` + mysqlTableOpts,
	},
}, {
	version: 11,
	name:    "pause on failure",
	// A task's bound on consecutive failed runs (0: never pause; the existing rows' default,
	// so none of them changes behaviour) and its runtime's count of them. The count is written
	// by the end of each run, in the runtime upsert that end writes anyway, so it moves with
	// the run's result in one transaction: a restart or a failover reads it back, neither
	// forgetting a failure nor counting one twice. Existing rows start at 0. ADD COLUMN with a
	// default is instant on MariaDB 10.3+ and MySQL 8; a re-run meets "duplicate column",
	// which dialect.isAlreadyApplied lets through.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN pause_after_failures INT NOT NULL DEFAULT 0`,
		`ALTER TABLE task_runtime ADD COLUMN consecutive_failures INT NOT NULL DEFAULT 0`,
	},
}, {
	version: 12,
	name:    "jitter",
	// A cron task's bound on the deterministic delay of each fire, in seconds (0: none; the
	// existing rows' default, so none of them changes behaviour). The offset itself is not
	// stored: it is a function of the task's name and the fire's nominal time, which every
	// node computes alike (engine.JitterOffset). ADD COLUMN with a default is instant on
	// MariaDB 10.3+ and MySQL 8; a re-run meets "duplicate column", which
	// dialect.isAlreadyApplied lets through.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN jitter_sec INT NOT NULL DEFAULT 0`,
	},
}, {
	version: 13,
	name:    "concurrency limits",
	// The limits of runs in flight per group and per concurrency key, and the key a task's
	// runs count in ('': none, the existing rows' default, so none of them changes
	// behaviour). The counts themselves are not stored: the engine rebuilds them at start
	// from the runs in flight it recovers (docs/design.md, Concurrency limits).
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS concurrency_limit (
			kind VARCHAR(32) NOT NULL,
			name VARCHAR(255) NOT NULL,
			max_runs INT NOT NULL,
			updated_at BIGINT NOT NULL,
			PRIMARY KEY (kind, name)
		)` + mysqlTableOpts,
		`ALTER TABLE task_def ADD COLUMN concurrency_key VARCHAR(255) NOT NULL DEFAULT ''`,
	},
}, {
	version: 14,
	name:    "backfills",
	// One row per backfill: its range, parallelism, total, cursor (next_fire: the next fire
	// time not yet started) and counters (persist/backfill.go). Its runs are ordinary run
	// rows, found by the (task_id, scheduled_at) index, so task_run is not touched. low_fire
	// bounds where recovery looks for the backfill's runs still in flight. A new table: a
	// re-run meets IF NOT EXISTS.
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS backfill (
			id BIGINT NOT NULL AUTO_INCREMENT,
			task_id BIGINT NOT NULL,
			task_name VARCHAR(255) NOT NULL,
			from_ms BIGINT NOT NULL,
			to_ms BIGINT NOT NULL,
			parallel INT NOT NULL,
			cron VARCHAR(255) NOT NULL,
			cron_dialect VARCHAR(32) NOT NULL,
			timezone VARCHAR(64) NOT NULL,
			total BIGINT NOT NULL,
			next_fire BIGINT NOT NULL,
			low_fire BIGINT NOT NULL,
			started BIGINT NOT NULL,
			skipped BIGINT NOT NULL,
			succeeded BIGINT NOT NULL,
			failed BIGINT NOT NULL,
			status VARCHAR(32) NOT NULL,
			actor VARCHAR(255) NOT NULL,
			created_at BIGINT NOT NULL,
			updated_at BIGINT NOT NULL,
			ended_at BIGINT NOT NULL,
			note TEXT NOT NULL,
			PRIMARY KEY (id),
			KEY idx_backfill_task (task_id, id)
		)` + mysqlTableOpts,
	},
}, {
	version: 15,
	name:    "overlap and catch-up",
	// A cron task's overlap policy (what becomes of fires due while its run is in flight)
	// and catch-up window (seconds of fires missed in downtime or a pause that run one by
	// one). The defaults are what every existing row did before: buffer_one runs the latest
	// fire due during a run right after it, as the coalescing did, and a window of 0 leaves
	// missed fires to misfire_policy. The catch-up's progress needs no column: it is the
	// runtime's next_trigger_time, the oldest missed fire not yet run. ADD COLUMN with a
	// default is instant on MariaDB 10.3+ and MySQL 8; a re-run meets "duplicate column",
	// which dialect.isAlreadyApplied lets through.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN overlap_policy VARCHAR(32) NOT NULL DEFAULT 'buffer_one'`,
		`ALTER TABLE task_def ADD COLUMN catchup_window_sec INT NOT NULL DEFAULT 0`,
	},
}, {
	version: 16,
	name:    "executor incarnations",
	// The incarnation each executor of protocol version 2 registered (the id of its
	// process), which the calls to it are signed for: a promoted primary, and every node of
	// a sharded cluster, sign for the process that runs now. '' for the executors registered
	// before, of version 1 or from a scheduler that did not keep it: their next heartbeat names
	// another incarnation, is answered 404, and they register again. The status column also
	// takes "left" (deregistered) from this version, which needs no change of the table. ADD
	// COLUMN with a default is instant on MariaDB 10.3+ and MySQL 8; a re-run meets "duplicate
	// column", which dialect.isAlreadyApplied lets through.
	stmts: []string{
		`ALTER TABLE executor ADD COLUMN incarnation VARCHAR(64) NOT NULL DEFAULT ''`,
	},
}, {
	version: 17,
	name:    "pause origin",
	// Who paused a paused task (model.Runtime.PausedBy): the task's own pause, a group's
	// (which group), a bulk pause, or pause-after-failures. A group resume resumes only the
	// tasks that group's pause paused. Rows paused before this step read '' (origin not
	// kept), which a group resume leaves paused and names. ADD COLUMN with a default is
	// instant on MariaDB 10.3+ and MySQL 8; a re-run meets "duplicate column", which
	// dialect.isAlreadyApplied lets through.
	stmts: []string{
		`ALTER TABLE task_runtime ADD COLUMN paused_by VARCHAR(300) NOT NULL DEFAULT ''`,
	},
}, {
	version: 18,
	name:    "workflows",
	// Workflows (persist/workflow.go, docs/workflows.md): new tables only, nothing of an
	// existing row changes. CREATE TABLE IF NOT EXISTS makes a re-run a no-op.
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS workflow (
			name VARCHAR(255) NOT NULL PRIMARY KEY,
			version INT NOT NULL,
			grp VARCHAR(255) NOT NULL DEFAULT '',
			paused TINYINT NOT NULL DEFAULT 0,
			next_fire BIGINT NOT NULL DEFAULT 0,
			created_at BIGINT NOT NULL,
			updated_at BIGINT NOT NULL
		)` + mysqlTableOpts,
		`CREATE TABLE IF NOT EXISTS workflow_version (
			name VARCHAR(255) NOT NULL,
			version INT NOT NULL,
			spec MEDIUMTEXT NOT NULL,
			created_at BIGINT NOT NULL,
			PRIMARY KEY (name, version)
		)` + mysqlTableOpts,
		`CREATE TABLE IF NOT EXISTS workflow_run (
			id VARCHAR(128) NOT NULL PRIMARY KEY,
			workflow VARCHAR(255) NOT NULL,
			version INT NOT NULL,
			scheduled_at BIGINT NOT NULL,
			trig VARCHAR(32) NOT NULL,
			params MEDIUMTEXT NOT NULL,
			state VARCHAR(32) NOT NULL,
			created_at BIGINT NOT NULL,
			ended_at BIGINT NOT NULL DEFAULT 0,
			error TEXT NOT NULL,
			KEY idx_workflow_run_sched (workflow, scheduled_at),
			KEY idx_workflow_run_state (state, created_at)
		)` + mysqlTableOpts,
		`CREATE TABLE IF NOT EXISTS workflow_step (
			run_id VARCHAR(128) NOT NULL,
			step VARCHAR(255) NOT NULL,
			idx INT NOT NULL,
			attempt INT NOT NULL,
			state VARCHAR(32) NOT NULL,
			ticket VARCHAR(128) NOT NULL DEFAULT '',
			started_at BIGINT NOT NULL DEFAULT 0,
			ended_at BIGINT NOT NULL DEFAULT 0,
			output MEDIUMTEXT NOT NULL,
			error TEXT NOT NULL,
			items INT NOT NULL DEFAULT 0,
			PRIMARY KEY (run_id, step, idx, attempt)
		)` + mysqlTableOpts,
	},
}, {
	version: 19,
	name:    "run params",
	// The params a run-now was given (model.Run.Params), JSON, written with the run's first
	// row and never changed by its later upserts. NULL for every other run: a fire runs
	// with its task's params, which its definition holds. A nullable column needs no
	// default, and ADD COLUMN of one is instant on MariaDB 10.3+ and MySQL 8; a re-run meets
	// "duplicate column", which dialect.isAlreadyApplied lets through.
	stmts: []string{
		`ALTER TABLE task_run ADD COLUMN params MEDIUMTEXT NULL`,
	},
}, {
	version: 20,
	name:    "concurrency slots across nodes",
	// The slots a sharded cluster's runs hold of the concurrency limits (persist/slots.go):
	// one row per run and limit it counts in, keyed by (ticket, kind), counted by (kind, name)
	// and found by shard when a shard's next owner reconciles them. slot_seq is written by
	// every slot transaction to lock the limit's row (an update orders it on Galera too).
	// CREATE ... IF NOT EXISTS; a re-run of the ADD COLUMN meets "duplicate column", which
	// dialect.isAlreadyApplied lets through.
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS concurrency_slot (
			ticket VARCHAR(128) NOT NULL,
			kind VARCHAR(32) NOT NULL,
			name VARCHAR(255) NOT NULL,
			shard INT NOT NULL,
			epoch BIGINT NOT NULL,
			taken_at BIGINT NOT NULL,
			PRIMARY KEY (ticket, kind),
			KEY idx_concurrency_slot_limit (kind, name),
			KEY idx_concurrency_slot_shard (shard, epoch)
		)` + mysqlTableOpts,
		// The best fire each node has waiting for each limit (persist/slots.go): a node
		// leaves a slot free for another's better waiter.
		`CREATE TABLE IF NOT EXISTS concurrency_wait (
			kind VARCHAR(32) NOT NULL,
			name VARCHAR(255) NOT NULL,
			node VARCHAR(255) NOT NULL,
			priority INT NOT NULL,
			fire_at BIGINT NOT NULL,
			since BIGINT NOT NULL,
			seen_at BIGINT NOT NULL,
			PRIMARY KEY (kind, name, node)
		)` + mysqlTableOpts,
		`ALTER TABLE concurrency_limit ADD COLUMN slot_seq BIGINT NOT NULL DEFAULT 0`,
	},
}, {
	version: 21,
	name:    "workflow backfills",
	// A workflow's backfill (persist/workflow.go, WorkflowBackfillPut): one row per workflow,
	// its range, parallelism, the schedule it was made with, and its cursor (next_fire), which
	// steps in the same transaction as the run it starts, under the workflow's shard fence:
	// the node that schedules the workflow pumps it, and the next one goes on from the row.
	// A new table: a re-run meets IF NOT EXISTS.
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS workflow_backfill (
			workflow VARCHAR(255) NOT NULL PRIMARY KEY,
			from_ms BIGINT NOT NULL,
			to_ms BIGINT NOT NULL,
			parallel INT NOT NULL,
			cron VARCHAR(255) NOT NULL,
			timezone VARCHAR(64) NOT NULL,
			total INT NOT NULL,
			next_fire BIGINT NOT NULL,
			started INT NOT NULL,
			skipped INT NOT NULL,
			state VARCHAR(32) NOT NULL,
			actor VARCHAR(255) NOT NULL,
			created_at BIGINT NOT NULL,
			updated_at BIGINT NOT NULL,
			ended_at BIGINT NOT NULL DEFAULT 0,
			KEY idx_workflow_backfill_state (state)
		)` + mysqlTableOpts,
	},
}, {
	version: 22,
	name:    "rate demand across nodes",
	// Each sharded node's recent demand per rate-limited downstream (persist/demand.go), so
	// that the nodes share a downstream's rate by demand rather than by shard count. Rows are
	// rewritten by their node every exchange and read only while fresh. CREATE ... IF NOT
	// EXISTS is re-runnable. And a task's rate_key (model.TaskDef.RateKey): the key of the
	// rate limit its runs take a token of in place of their downstream's, a template over
	// their params or a name; '' (every existing task) keeps the downstream. A re-run of the
	// ADD COLUMN meets "duplicate column", which dialect.isAlreadyApplied lets through.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN rate_key VARCHAR(255) NOT NULL DEFAULT ''`,
		`CREATE TABLE IF NOT EXISTS rate_demand (
			downstream VARCHAR(255) NOT NULL,
			node VARCHAR(255) NOT NULL,
			demand DOUBLE NOT NULL,
			seen_at BIGINT NOT NULL,
			PRIMARY KEY (downstream, node),
			KEY idx_rate_demand_node (node)
		)` + mysqlTableOpts,
	},
}}

// SQLite stores the same columns; INTEGER is 64-bit. AUTOINCREMENT (not a bare rowid) keeps
// ids of deleted tasks and actions from ever being handed out again.
var sqliteMigrations = []migration{{
	version: 1,
	name:    "initial schema",
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS task_def (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			name TEXT NOT NULL UNIQUE,
			grp TEXT NOT NULL,
			trigger_type TEXT NOT NULL,
			cron TEXT NOT NULL,
			delay_ms INTEGER NOT NULL,
			depends_on TEXT NOT NULL,
			depends_mode TEXT NOT NULL,
			timezone TEXT NOT NULL,
			timeout_sec INTEGER NOT NULL,
			retry_count INTEGER NOT NULL,
			retry_interval_sec INTEGER NOT NULL,
			priority INTEGER NOT NULL,
			callback TEXT NOT NULL,
			params TEXT NOT NULL,
			misfire_policy TEXT NOT NULL,
			paused INTEGER NOT NULL,
			created_at INTEGER NOT NULL,
			updated_at INTEGER NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS idx_task_def_grp ON task_def (grp, id)`,
		`CREATE TABLE IF NOT EXISTS task_runtime (
			task_id INTEGER PRIMARY KEY,
			state TEXT NOT NULL,
			current_ticket TEXT NOT NULL,
			attempt INTEGER NOT NULL,
			next_trigger_time INTEGER NOT NULL,
			last_trigger_time INTEGER NOT NULL,
			last_end_time INTEGER NOT NULL,
			last_executor TEXT NOT NULL,
			success_count INTEGER NOT NULL,
			failure_count INTEGER NOT NULL,
			note TEXT NOT NULL,
			version INTEGER NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS idx_task_runtime_next ON task_runtime (next_trigger_time)`,
		`CREATE TABLE IF NOT EXISTS task_run (
			ticket TEXT PRIMARY KEY,
			task_id INTEGER NOT NULL,
			task_name TEXT NOT NULL,
			kind TEXT NOT NULL,
			attempt INTEGER NOT NULL,
			scheduled_at INTEGER NOT NULL,
			dispatched_at INTEGER NOT NULL,
			executor TEXT NOT NULL,
			ended_at INTEGER NOT NULL,
			result TEXT NOT NULL,
			error TEXT NOT NULL,
			duration_ms INTEGER NOT NULL,
			output TEXT NOT NULL,
			detail TEXT NOT NULL
		)`,
		// ticket is in the run indexes because, unlike InnoDB, SQLite does not append the
		// primary key to secondary indexes; the listings order ties by ticket.
		`CREATE INDEX IF NOT EXISTS idx_task_run_task ON task_run (task_id, scheduled_at, ticket)`,
		`CREATE INDEX IF NOT EXISTS idx_task_run_result ON task_run (result, scheduled_at, ticket)`,
		`CREATE TABLE IF NOT EXISTS task_action (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			task_id INTEGER NOT NULL,
			task_name TEXT NOT NULL,
			ticket TEXT NOT NULL,
			action TEXT NOT NULL,
			from_state TEXT NOT NULL,
			to_state TEXT NOT NULL,
			actor TEXT NOT NULL,
			at INTEGER NOT NULL,
			detail TEXT NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS idx_task_action_task ON task_action (task_id, id)`,
		`CREATE TABLE IF NOT EXISTS executor (
			app TEXT NOT NULL,
			address TEXT NOT NULL,
			protocol TEXT NOT NULL,
			handlers TEXT NOT NULL,
			registered_at INTEGER NOT NULL,
			last_heartbeat INTEGER NOT NULL,
			status TEXT NOT NULL,
			PRIMARY KEY (app, address)
		)`,
		`CREATE TABLE IF NOT EXISTS task_dep (
			task_id INTEGER NOT NULL,
			upstream_name TEXT NOT NULL,
			PRIMARY KEY (task_id, upstream_name)
		)`,
		`CREATE INDEX IF NOT EXISTS idx_task_dep_upstream ON task_dep (upstream_name)`,
		`CREATE TABLE IF NOT EXISTS lease (
			name TEXT PRIMARY KEY,
			holder TEXT NOT NULL,
			epoch INTEGER NOT NULL,
			expires_at INTEGER NOT NULL
		)`,
	},
}, {
	version: 2,
	name:    "index open manual runs only",
	// As on MySQL: only run-now instances still running are indexed (a partial index; the
	// query must repeat its WHERE literally for SQLite to use it).
	stmts: []string{
		`CREATE INDEX IF NOT EXISTS idx_task_run_open_manual ON task_run (scheduled_at, ticket)
			WHERE result = 'running' AND kind = 'manual'`,
		`DROP INDEX IF EXISTS idx_task_run_result`,
	},
}, {
	version: 3,
	name:    "high availability: lease by the database clock, nodes, on_lost",
	// The same shape as on MySQL; times are UTC text 'YYYY-MM-DD HH:MM:SS.SSS', which
	// compares in time order. The embedded store refuses --ha (only one process can use
	// it), but its lease still fences batches the same way.
	stmts: []string{
		`ALTER TABLE lease ADD COLUMN expiry TEXT NOT NULL DEFAULT '1970-01-01 00:00:00.000'`,
		`ALTER TABLE lease DROP COLUMN expires_at`,
		`CREATE TABLE IF NOT EXISTS nodes (
			id TEXT PRIMARY KEY,
			advertise TEXT NOT NULL,
			role TEXT NOT NULL,
			instance TEXT NOT NULL,
			started_at TEXT NOT NULL,
			last_seen TEXT NOT NULL
		)`,
		`ALTER TABLE task_def ADD COLUMN on_lost TEXT NOT NULL DEFAULT ''`,
	},
}, {
	version: 4,
	name:    "cron dialect per task",
	// As on MySQL: existing rows take the default, 'unix'. The step runs in one transaction
	// with its schema_migrations row, so it is never half applied.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN cron_dialect TEXT NOT NULL DEFAULT 'unix'`,
	},
}, {
	version: 5,
	name:    "retention",
	// As on MySQL. SQLite's ADD COLUMN has no IF NOT EXISTS, but its DDL is transactional:
	// a step is never left half applied.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN retain_history_ms INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE task_def ADD COLUMN retain_finished_ms INTEGER NOT NULL DEFAULT 0`,
		`CREATE INDEX IF NOT EXISTS idx_task_run_sched ON task_run (scheduled_at, ticket)`,
	},
}, {
	version: 6,
	name:    "sensitive params",
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN sensitive_params TEXT NOT NULL DEFAULT ''`,
	},
}, {
	version: 7,
	name:    "one index for open manual runs and the pruner",
	// Nothing to change: SQLite's index of open run-now instances is partial (step 2), so
	// the runs of every other fire never enter it, and the pruner keeps its index on
	// scheduled_at. The step keeps the two stores at one version.
	stmts: nil,
}, cronDaysStep, {
	version: 9,
	name:    "executor dispatch keys",
	// As on MySQL.
	stmts: []string{
		`ALTER TABLE executor ADD COLUMN dispatch_key TEXT NOT NULL DEFAULT ''`,
	},
}, {
	version: 10,
	name:    "last result per task, minute statistics",
	// As on MySQL.
	stmts: []string{
		`ALTER TABLE task_runtime ADD COLUMN last_result TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE task_runtime ADD COLUMN last_failure_at INTEGER NOT NULL DEFAULT 0`,
		`CREATE INDEX IF NOT EXISTS idx_task_runtime_failed ON task_runtime (last_failure_at)`,
		`CREATE TABLE IF NOT EXISTS minute_stats (
			minute INTEGER NOT NULL,
			node TEXT NOT NULL,
			fires INTEGER NOT NULL,
			failures INTEGER NOT NULL,
			late_sum_ms INTEGER NOT NULL,
			late_count INTEGER NOT NULL,
			PRIMARY KEY (minute, node)
		)`,
	},
}, {
	version: 11,
	name:    "pause on failure",
	// As on MySQL.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN pause_after_failures INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE task_runtime ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0`,
	},
}, {
	version: 12,
	name:    "jitter",
	// As on MySQL.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN jitter_sec INTEGER NOT NULL DEFAULT 0`,
	},
}, {
	version: 13,
	name:    "concurrency limits",
	// As on MySQL.
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS concurrency_limit (
			kind TEXT NOT NULL,
			name TEXT NOT NULL,
			max_runs INTEGER NOT NULL,
			updated_at INTEGER NOT NULL,
			PRIMARY KEY (kind, name)
		)`,
		`ALTER TABLE task_def ADD COLUMN concurrency_key TEXT NOT NULL DEFAULT ''`,
	},
}, {
	version: 14,
	name:    "backfills",
	// As on MySQL.
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS backfill (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			task_id INTEGER NOT NULL,
			task_name TEXT NOT NULL,
			from_ms INTEGER NOT NULL,
			to_ms INTEGER NOT NULL,
			parallel INTEGER NOT NULL,
			cron TEXT NOT NULL,
			cron_dialect TEXT NOT NULL,
			timezone TEXT NOT NULL,
			total INTEGER NOT NULL,
			next_fire INTEGER NOT NULL,
			low_fire INTEGER NOT NULL,
			started INTEGER NOT NULL,
			skipped INTEGER NOT NULL,
			succeeded INTEGER NOT NULL,
			failed INTEGER NOT NULL,
			status TEXT NOT NULL,
			actor TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			updated_at INTEGER NOT NULL,
			ended_at INTEGER NOT NULL,
			note TEXT NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS idx_backfill_task ON backfill (task_id, id)`,
	},
}, {
	version: 15,
	name:    "overlap and catch-up",
	// As on MySQL.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN overlap_policy TEXT NOT NULL DEFAULT 'buffer_one'`,
		`ALTER TABLE task_def ADD COLUMN catchup_window_sec INTEGER NOT NULL DEFAULT 0`,
	},
}, {
	version: 16,
	name:    "executor incarnations",
	// As on MySQL.
	stmts: []string{
		`ALTER TABLE executor ADD COLUMN incarnation TEXT NOT NULL DEFAULT ''`,
	},
}, {
	version: 17,
	name:    "pause origin",
	// As on MySQL.
	stmts: []string{
		`ALTER TABLE task_runtime ADD COLUMN paused_by TEXT NOT NULL DEFAULT ''`,
	},
}, {
	version: 18,
	name:    "workflows",
	// As on MySQL.
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS workflow (
			name TEXT NOT NULL PRIMARY KEY,
			version INTEGER NOT NULL,
			grp TEXT NOT NULL DEFAULT '',
			paused INTEGER NOT NULL DEFAULT 0,
			next_fire INTEGER NOT NULL DEFAULT 0,
			created_at INTEGER NOT NULL,
			updated_at INTEGER NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS workflow_version (
			name TEXT NOT NULL,
			version INTEGER NOT NULL,
			spec TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			PRIMARY KEY (name, version)
		)`,
		`CREATE TABLE IF NOT EXISTS workflow_run (
			id TEXT NOT NULL PRIMARY KEY,
			workflow TEXT NOT NULL,
			version INTEGER NOT NULL,
			scheduled_at INTEGER NOT NULL,
			trig TEXT NOT NULL,
			params TEXT NOT NULL,
			state TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			ended_at INTEGER NOT NULL DEFAULT 0,
			error TEXT NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS idx_workflow_run_sched ON workflow_run (workflow, scheduled_at)`,
		`CREATE INDEX IF NOT EXISTS idx_workflow_run_state ON workflow_run (state, created_at)`,
		`CREATE TABLE IF NOT EXISTS workflow_step (
			run_id TEXT NOT NULL,
			step TEXT NOT NULL,
			idx INTEGER NOT NULL,
			attempt INTEGER NOT NULL,
			state TEXT NOT NULL,
			ticket TEXT NOT NULL DEFAULT '',
			started_at INTEGER NOT NULL DEFAULT 0,
			ended_at INTEGER NOT NULL DEFAULT 0,
			output TEXT NOT NULL,
			error TEXT NOT NULL,
			items INTEGER NOT NULL DEFAULT 0,
			PRIMARY KEY (run_id, step, idx, attempt)
		)`,
	},
}, {
	version: 19,
	name:    "run params",
	// As on MySQL.
	stmts: []string{
		`ALTER TABLE task_run ADD COLUMN params TEXT NULL`,
	},
}, {
	version: 20,
	name:    "concurrency slots across nodes",
	// As on MySQL.
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS concurrency_slot (
			ticket TEXT NOT NULL,
			kind TEXT NOT NULL,
			name TEXT NOT NULL,
			shard INTEGER NOT NULL,
			epoch INTEGER NOT NULL,
			taken_at INTEGER NOT NULL,
			PRIMARY KEY (ticket, kind)
		)`,
		`CREATE INDEX IF NOT EXISTS idx_concurrency_slot_limit ON concurrency_slot (kind, name)`,
		`CREATE INDEX IF NOT EXISTS idx_concurrency_slot_shard ON concurrency_slot (shard, epoch)`,
		`CREATE TABLE IF NOT EXISTS concurrency_wait (
			kind TEXT NOT NULL,
			name TEXT NOT NULL,
			node TEXT NOT NULL,
			priority INTEGER NOT NULL,
			fire_at INTEGER NOT NULL,
			since INTEGER NOT NULL,
			seen_at INTEGER NOT NULL,
			PRIMARY KEY (kind, name, node)
		)`,
		`ALTER TABLE concurrency_limit ADD COLUMN slot_seq INTEGER NOT NULL DEFAULT 0`,
	},
}, {
	version: 21,
	name:    "workflow backfills",
	// As on MySQL.
	stmts: []string{
		`CREATE TABLE IF NOT EXISTS workflow_backfill (
			workflow TEXT NOT NULL PRIMARY KEY,
			from_ms INTEGER NOT NULL,
			to_ms INTEGER NOT NULL,
			parallel INTEGER NOT NULL,
			cron TEXT NOT NULL,
			timezone TEXT NOT NULL,
			total INTEGER NOT NULL,
			next_fire INTEGER NOT NULL,
			started INTEGER NOT NULL,
			skipped INTEGER NOT NULL,
			state TEXT NOT NULL,
			actor TEXT NOT NULL,
			created_at INTEGER NOT NULL,
			updated_at INTEGER NOT NULL,
			ended_at INTEGER NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX IF NOT EXISTS idx_workflow_backfill_state ON workflow_backfill (state)`,
	},
}, {
	version: 22,
	name:    "rate demand across nodes",
	// As on MySQL.
	stmts: []string{
		`ALTER TABLE task_def ADD COLUMN rate_key TEXT NOT NULL DEFAULT ''`,
		`CREATE TABLE IF NOT EXISTS rate_demand (
			downstream TEXT NOT NULL,
			node TEXT NOT NULL,
			demand REAL NOT NULL,
			seen_at INTEGER NOT NULL,
			PRIMARY KEY (downstream, node)
		)`,
		`CREATE INDEX IF NOT EXISTS idx_rate_demand_node ON rate_demand (node)`,
	},
}}

// SchemaVersion is the newest schema version this code migrates to.
func SchemaVersion() int { return mysqlMigrations[len(mysqlMigrations)-1].version }

// SchemaDigest names the MySQL schema this code migrates to by its steps' versions, names
// and statements (12 hex digits of their SHA-256): two builds with the same digest create
// the same tables. Tests name the migrated template database they copy by it.
func SchemaDigest() string {
	h := sha256.New()
	for _, m := range mysqlMigrations {
		fmt.Fprintf(h, "%d\x00%s\x00", m.version, m.name)
		for _, s := range m.stmts {
			fmt.Fprintf(h, "%s\x00", s)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// EnvMigratePause is a test hook that holds Migrate at one point for a test to kill the
// process there (persist/upgrade_kill_test.go): "V.K" after the K-th statement of step V has
// run (on SQLite, inside the step's transaction), "done" once every step is applied. Migrate
// then prints "axe: migration paused at <point>" on stderr and never returns. Unset, it
// costs nothing.
const EnvMigratePause = "AXE_TEST_MIGRATE_PAUSE"

// migratePause reports whether the hook holds Migrate after statement k (1-based) of step v;
// k 0 with v 0 asks about "done".
func migratePause(v, k int) {
	at := os.Getenv(EnvMigratePause)
	if at == "" {
		return
	}
	want := "done"
	if v > 0 {
		want = strconv.Itoa(v) + "." + strconv.Itoa(k)
	}
	if strings.TrimSpace(at) != want {
		return
	}
	fmt.Fprintf(os.Stderr, "axe: migration paused at %s\n", want)
	select {}
}

// Migrate creates or upgrades the schema. It is idempotent and safe to call from several
// processes at once: MySQL serialises callers with a named lock, a Galera cluster with a row
// of schema_lock (galeraLockSchema), SQLite with its write lock.
func (s *sqlStore) Migrate(ctx context.Context) error {
	// One connection for the whole run: the MySQL named lock belongs to a session.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("cannot migrate: %w", err)
	}
	defer conn.Close()
	var unlock func()
	if s.galera {
		ctx, unlock, err = s.galeraLockSchema(ctx, conn)
	} else {
		unlock, err = s.d.lockSchema(ctx, conn)
	}
	if err != nil {
		return fmt.Errorf("cannot migrate: %w", err)
	}
	defer unlock()
	if err := s.migrateLocked(ctx, conn); err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errSchemaLockLost) {
			return fmt.Errorf("%w (%w)", err, cause)
		}
		return err
	}
	return nil
}

// migrateLocked is Migrate under the schema lock.
func (s *sqlStore) migrateLocked(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, s.d.migrationsTable); err != nil {
		return fmt.Errorf("cannot create schema_migrations: %w", err)
	}
	for _, m := range s.d.migrations {
		if err := s.applyMigration(ctx, conn, m); err != nil {
			return err
		}
	}
	var newest sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("cannot read schema version: %w", err)
	}
	if known := s.d.migrations[len(s.d.migrations)-1].version; newest.Int64 > int64(known) {
		return fmt.Errorf("cannot migrate: the database is at schema version %d, newer than this axe knows (%d)", newest.Int64, known)
	}
	migratePause(0, 0)
	return nil
}

// execQuerier is what a migration step needs: a connection or a transaction on it.
type execQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// applyMigration runs m unless schema_migrations already lists it. On SQLite the check, the
// DDL and the bookkeeping share one write transaction, so concurrent callers cannot both
// apply a step. MySQL commits DDL implicitly; there the named lock does that job.
func (s *sqlStore) applyMigration(ctx context.Context, conn *sql.Conn, m migration) error {
	if !s.d.transactionalDDL {
		return runMigration(ctx, conn, m, s.d.isAlreadyApplied)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("cannot begin migration %d: %w", m.version, err)
	}
	if err := runMigration(ctx, tx, m, s.d.isAlreadyApplied); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("cannot commit migration %d: %w", m.version, err)
	}
	return nil
}

// runMigration runs m's statements unless schema_migrations lists it; an error for which
// alreadyApplied holds means the statement took effect in an earlier, interrupted run.
func runMigration(ctx context.Context, q execQuerier, m migration, alreadyApplied func(error) bool) error {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, m.version).Scan(&n); err != nil {
		return fmt.Errorf("cannot read schema_migrations: %w", err)
	}
	if n > 0 {
		return nil
	}
	for i, stmt := range m.stmts {
		if _, err := q.ExecContext(ctx, stmt); err != nil && !alreadyApplied(err) {
			return fmt.Errorf("cannot apply migration %d (%s): %w", m.version, m.name, err)
		}
		migratePause(m.version, i+1)
	}
	if m.fn != nil {
		if err := m.fn(ctx, q); err != nil {
			return fmt.Errorf("cannot apply migration %d (%s): %w", m.version, m.name, err)
		}
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO schema_migrations (version, name) VALUES (?, ?)`, m.version, m.name); err != nil {
		return fmt.Errorf("cannot record migration %d: %w", m.version, err)
	}
	return nil
}
