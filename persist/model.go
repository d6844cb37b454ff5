// Package persist owns axe's durable state: the Store interface, its MySQL and embedded
// SQLite implementations, the schema and its migrations, and the batched writer that
// group-commits state transitions (docs/design.md, "Write path").
//
// The domain types (TaskDef, Run, State, …) live in package model; this package adds what
// only storage needs: Batch, Transition, Store.
//
// persist knows rows, not rules: it never decides whether a transition is legal (that is the
// engine's state-machine table); it only guarantees that a transition is applied as a
// compare-and-swap on the runtime row's version, that a batch is applied all or nothing, and
// that a batch fenced by a lease epoch fails once that epoch is no longer current.
//
// All times are Unix milliseconds (int64); 0 means "none".
package persist

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/axe-sched/axe/model"
)

// Storage's own sentinel errors. Stores wrap them, and the domain's errors of package model,
// with %w; callers test with errors.Is.
var (
	// ErrWriterClosed is returned by the batched writer after Stop.
	ErrWriterClosed = errors.New("writer closed")
	// ErrDuplicateFire is returned (inside a *FireRefusedError) when a fire record's insert
	// met a run row with the same ticket: that (task, fire time, attempt) was dispatched
	// already, and this one must not be (docs/ha.md, "The fire record").
	ErrDuplicateFire = errors.New("duplicate fire")
	// ErrNodeIDTaken is returned by ClaimNode and TouchNode when another live node uses the
	// id.
	ErrNodeIDTaken = errors.New("node id taken by another live node")
	// ErrWriterBusy is returned by Writer.Offer when the writer's queue is too full to take
	// more work that can wait (API creates); the caller should retry later.
	ErrWriterBusy = errors.New("writer busy")
	// ErrRejected is what a *RejectedError (a group the database refused for its values) and
	// a *ColumnError (a definition CheckTaskDef finds it would refuse) are.
	ErrRejected = errors.New("refused by the store")
)

// DueRef names a task due at NextTriggerTime; see Store.LoadDueRefs.
type DueRef struct {
	TaskID          int64
	NextTriggerTime int64
}

// Transition is one compare-and-swap of a runtime row: it applies only if the stored version
// equals ExpectVersion, and then stores Runtime with Version = ExpectVersion+1.
type Transition struct {
	ExpectVersion int64
	Runtime       model.Runtime // Runtime.TaskID names the row; Runtime.Version is set by the store
}

// Batch is one group commit: all of it is applied in one database transaction, or none of it.
type Batch struct {
	// Epoch fences the batch (docs/ha.md, "Fencing"): when > 0 the store applies the batch only if
	// the lease named LeaseName has this epoch, and fails with ErrLeaseLost otherwise.
	Epoch     int64
	LeaseName string
	// Shards fences the batch per shard (scale-out, shards.go): the store applies it only if
	// each listed shard's lease has the epoch given, checked inside the same transaction,
	// and fails with ErrLeaseLost otherwise. It may be given with or without Epoch.
	Shards []ShardFence

	Transitions []Transition
	Runs        []model.Run    // upserted by ticket: a later row for the same ticket replaces columns
	Actions     []model.Action // appended
	// Fires are fire records (docs/ha.md, "The fire record"): run rows inserted, never upserted, so
	// that a ticket already stored (the same task, fire time and attempt) fails the batch with a
	// *FireRefusedError. They are written before Runs.
	Fires []model.Run

	// Task writes (taskbatch.go), applied before the transitions, in this order: Deletes,
	// Creates, DefUpdates.
	Creates    []*TaskCreate
	DefUpdates []model.TaskDef // replace the definition named by ID and its dependency edges
	Deletes    []int64         // task ids: definition, runtime and edges go; runs and actions stay

	// Workflow writes (workflow.go), applied after the task writes and the runs: definitions
	// (WorkflowPuts, WorkflowDeletes), then runs and step runs, each upserted.
	WorkflowPuts    []WorkflowPut
	WorkflowDeletes []string
	// NewWorkflowRuns are inserted, never upserted: a run id stored fails the batch with
	// an error wrapping ErrWorkflowRunExists (a cron or backfill run of a logical time
	// that has one).
	NewWorkflowRuns []model.WorkflowRun
	WorkflowRuns    []model.WorkflowRun
	StepRuns        []model.StepRun
	// WorkflowBackfills write workflows' backfill rows (workflow.go, WorkflowBackfillPut),
	// after the runs: a run a backfill starts and its cursor's step commit together.
	WorkflowBackfills []WorkflowBackfillPut

	// checkNames makes the store look the creates' names up before inserting them; set by
	// ApplyBatch (taskbatch.go, lookUpNames).
	checkNames bool
}

// ConflictError reports the transitions of a batch whose CAS failed. The batch was rolled
// back; nothing of it was applied. It unwraps to ErrVersionConflict.
type ConflictError struct {
	// Indexes into Batch.Transitions of the transitions that matched no row.
	Indexes []int
	// Creates are indexes into Batch.Creates of the creates whose name is taken (with
	// CreateFail).
	Creates []int
}

func (e *ConflictError) Error() string {
	if len(e.Indexes) == 0 && len(e.Creates) > 0 {
		return fmt.Sprintf("%d task name(s) already taken", len(e.Creates))
	}
	return fmt.Sprintf("version conflict on %d transition(s)", len(e.Indexes))
}

// Unwrap makes errors.Is(err, ErrVersionConflict) true for a transition conflict, and
// errors.Is(err, ErrTaskExists) true for a conflict of creates only.
func (e *ConflictError) Unwrap() error {
	if len(e.Indexes) == 0 && len(e.Creates) > 0 {
		return model.ErrTaskExists
	}
	return model.ErrVersionConflict
}

// TaskFilter narrows ListTasks. Zero fields do not filter.
type TaskFilter struct {
	Group   string
	State   model.State
	AfterID int64 // keyset pagination: only ids > AfterID
	Limit   int   // 0 = no limit
	// NamePrefix keeps the names that start with it; the unique name index serves it.
	NamePrefix string
	// Order is the sort, each served by an index: OrderID (the default, ""), OrderName,
	// OrderGroup (group, then id) or OrderNext (next fire, then id).
	Order string
	// Search keeps the tasks whose name, group or callback (its URL, app, handler) holds
	// each of its words (SearchWords), without case; no index serves it.
	Search string
	// LastResult keeps the tasks whose newest ended scheduled run had this result
	// (model.Runtime.LastResult); FailedSince those whose newest failure ended at or after
	// it (Unix ms). The runtime row holds both; idx_task_runtime_failed serves FailedSince.
	LastResult  string
	FailedSince int64
	// IDs, when not nil, keeps only these task ids (the open breakers, which only the
	// engine knows); an empty IDs matches nothing.
	IDs []int64
	// After is the sort key of the previous page's last row for OrderName (a name),
	// OrderGroup (a group), OrderNext and OrderFailed (Unix ms, decimal); AfterID breaks
	// its ties.
	// Empty starts at the first page.
	After string
}

// The sorts of TaskFilter.Order.
const (
	OrderID    = "id"
	OrderName  = "name"
	OrderGroup = "group"
	OrderNext  = "next"
	// OrderFailed is newest failure first (model.Runtime.LastFailureAt, then id, both
	// descending); the tasks that never failed come last.
	OrderFailed = "failed"
)

// Store is the durable state of axe. Implementations: MySQL and embedded SQLite; both pass
// the conformance suite in persisttest. Every method is safe for concurrent use.
type Store interface {
	// Migrate creates or upgrades the schema. Idempotent.
	Migrate(ctx context.Context) error
	// Ping checks the database is reachable.
	Ping(ctx context.Context) error
	// Close releases the connection pool.
	Close() error

	// CreateTask inserts def, its runtime row and its dependency edges (def.DependsOn, by name)
	// atomically. It sets def.ID and rt.TaskID. A taken name gives ErrTaskExists.
	CreateTask(ctx context.Context, def *model.TaskDef, rt *model.Runtime) error
	// UpdateTaskDef replaces the definition (matched by def.ID) and its dependency edges.
	UpdateTaskDef(ctx context.Context, def *model.TaskDef) error
	// DeleteTask removes the definition, runtime and dependency edges of the task. Runs and
	// actions stay: the audit trail outlives the task.
	DeleteTask(ctx context.Context, id int64) error
	// GetTask returns the task by name, or ErrTaskNotFound.
	GetTask(ctx context.Context, name string) (*model.Task, error)
	// GetTaskByID returns the task by id, or ErrTaskNotFound.
	GetTaskByID(ctx context.Context, id int64) (*model.Task, error)
	// ListTasks returns tasks ordered by id.
	ListTasks(ctx context.Context, f TaskFilter) ([]model.Task, error)
	// CountTasks returns the number of task definitions.
	CountTasks(ctx context.Context) (int64, error)
	// LoadDue streams, in next_trigger_time order, every task whose runtime state is in states and
	// whose next_trigger_time is in [from, to) and > 0. It stops at the first error fn returns and
	// returns it. This is the window loader's query (docs/design.md, "Window and cold entries"); it
	// must use the next_trigger_time index.
	LoadDue(ctx context.Context, from, to int64, states []model.State, fn func(*model.Task) error) error
	// LoadDueRefs streams the task id and next_trigger_time of the rows LoadDue would
	// return, in no particular order, reading only task_runtime: the window loader holds
	// tasks that are not due soon as these references and reads the rest with LoadByIDs
	// shortly before they fire.
	LoadDueRefs(ctx context.Context, from, to int64, states []model.State, fn func(DueRef) error) error
	// LoadByIDs streams the tasks with the given ids in id order; ids without a task are
	// skipped.
	LoadByIDs(ctx context.Context, ids []int64, fn func(*model.Task) error) error
	// LoadByState streams every task whose runtime state is in states (recovery at start).
	LoadByState(ctx context.Context, states []model.State, fn func(*model.Task) error) error
	// Dependents returns the tasks that name upstream in depends_on.
	Dependents(ctx context.Context, upstream string) ([]model.Task, error)
	// UpstreamNames returns every task name that some task depends on.
	UpstreamNames(ctx context.Context) ([]string, error)

	// ApplyBatch applies b in one transaction (docs/design.md, "Write path"). A failed CAS returns
	// *ConflictError and applies nothing; a stale epoch returns ErrLeaseLost and applies nothing.
	ApplyBatch(ctx context.Context, b *Batch) error

	// GetRun returns the run with the ticket, or ErrRunNotFound.
	GetRun(ctx context.Context, ticket string) (*model.Run, error)
	// ListRuns returns the task's runs, newest first (by scheduled_at, then ticket).
	ListRuns(ctx context.Context, taskID int64, limit int) ([]model.Run, error)
	// ListRunningManual returns the run-now (RunManual) runs whose result is still
	// ResultRunning, oldest first (by scheduled_at, then ticket): the recovery of in-flight
	// run-now instances at start. Periodic runs in flight are found through their runtime
	// (RUNNING) or through ListOpenFires.
	ListRunningManual(ctx context.Context, limit int) ([]model.Run, error)
	// ListOpenFires returns the periodic runs still running whose task's runtime is still
	// in the SCHEDULED or RETRYING state the fire was made from (the fire record is the
	// durable RUNNING marker; the runtime follows with the run's end), for tasks due before
	// upTo, oldest first: the recovery of periodic runs in flight at start.
	ListOpenFires(ctx context.Context, upTo int64) ([]model.Run, error)
	// ListOpenParallelRuns returns the scheduled (RunScheduled) runs still running of tasks
	// whose overlap policy is allow_all, oldest first (by scheduled_at, then ticket): the
	// recovery of their runs in flight at start. Such a run's fire moved the runtime on to
	// the next fire in the same write (engine, core_parallel.go), so neither the runtime nor
	// ListOpenFires names it. A periodic run of the same task that ListOpenFires does name
	// (one fired before the policy became allow_all) is returned too; the caller skips what
	// it recovered already.
	ListOpenParallelRuns(ctx context.Context) ([]model.Run, error)
	// ListActions returns the task's action records, newest first (by id).
	ListActions(ctx context.Context, taskID int64, limit int) ([]model.Action, error)

	// UpsertExecutor registers an executor, idempotent by (App, Address): a second call
	// updates protocol, handlers, heartbeat and status, and keeps RegisteredAt.
	UpsertExecutor(ctx context.Context, e *model.Executor) error
	// Heartbeat sets last_heartbeat and status "alive", except that an executor whose status
	// is "left" (it deregistered and drains) stays "left" until it registers again
	// (UpsertExecutor). Unknown executors give ErrExecutorNotFound.
	Heartbeat(ctx context.Context, app, address string, at int64) error
	// SetExecutorStatus sets status ("alive" or "lost").
	SetExecutorStatus(ctx context.Context, app, address, status string) error
	// ListExecutors returns every executor ordered by (app, address).
	ListExecutors(ctx context.Context) ([]model.Executor, error)
	// DeleteExecutor forgets an executor; an unknown one is not an error.
	DeleteExecutor(ctx context.Context, app, address string) error

	// ListConcurrencyLimits returns every concurrency limit, ordered by (kind, name).
	ListConcurrencyLimits(ctx context.Context) ([]model.ConcurrencyLimit, error)
	// PutConcurrencyLimit creates the limit of (l.Kind, l.Name), or replaces its Max and
	// UpdatedAt.
	PutConcurrencyLimit(ctx context.Context, l model.ConcurrencyLimit) error
	// DeleteConcurrencyLimit removes the limit of (kind, name) and reports whether there was
	// one.
	DeleteConcurrencyLimit(ctx context.Context, kind, name string) (bool, error)

	// ReadLease returns the lease row, or a zero Lease when none exists.
	ReadLease(ctx context.Context, name string) (model.Lease, error)

	// The lease and the nodes of high availability (docs/ha.md, "The lease"; ha.go), the shard
	// leases of scale-out (shards.go), and Kind.
	ShardStore
	// Backfill rows and the run queries of their recovery (backfill.go).
	BackfillStore
	// Workflows, their runs and step runs (workflow.go).
	WorkflowStore
}

// LeaseStore is what high availability needs of a store (ha.Elector): the lease, the nodes
// table and the database's own judgement of time and writability. Store has it all; the
// elector is given no more than this.
type LeaseStore interface {
	// Kind is "mysql" or "sqlite".
	Kind() string

	// Every time below is the database's clock: no node passes its own.

	// TakeLease takes the lease named name for holder, with epoch+1 and an expiry ttl from
	// the database's now, when it is expired, released, or named for holder already (a
	// holder taking its own lease again starts a new epoch: what it did under the old one
	// is fenced off). It returns the lease as the database judges it after the call and
	// whether holder now holds it.
	TakeLease(ctx context.Context, name, holder string, ttl time.Duration) (LeaseState, bool, error)
	// RenewLease moves the expiry to ttl from the database's now, as a compare-and-swap on
	// holder and epoch. No row changed gives ErrLeaseLost: the caller must stop acting as
	// the holder at once.
	RenewLease(ctx context.Context, name, holder string, epoch int64, ttl time.Duration) error
	// ReleaseLease ends holder's lease at epoch now, keeping the epoch, so that another node
	// takes it at its next attempt. Releasing a lease no longer held changes nothing.
	ReleaseLease(ctx context.Context, name, holder string, epoch int64) error
	// LeaseState returns the lease as the database judges it now; a zero LeaseState when
	// there is none.
	LeaseState(ctx context.Context, name string) (LeaseState, error)
	// ClaimNode records n as a node of this database. The id is taken when no row has it,
	// when its row is n's own instance, stopped, or not seen for liveWithin; otherwise
	// ErrNodeIDTaken, with the live node returned.
	ClaimNode(ctx context.Context, n Node, liveWithin time.Duration) (Node, error)
	// TouchNode records that the node is alive in role. ErrNodeIDTaken when another
	// instance claimed the id meanwhile.
	TouchNode(ctx context.Context, id, instance, role string) error
	// ListNodes returns every node ordered by id, its age by the database's clock.
	ListNodes(ctx context.Context) ([]Node, error)
	// ReadOnly reports whether the database refuses writes (MySQL's @@read_only).
	ReadOnly(ctx context.Context) (bool, error)
}

// SearchWordsMax bounds the words of a task search.
const SearchWordsMax = 8

// SearchWords splits a task search into its words (split at white space), lower-cased: a
// task matches when it holds every one.
func SearchWords(q string) []string {
	words := strings.Fields(strings.ToLower(q))
	if len(words) > SearchWordsMax {
		words = words[:SearchWordsMax]
	}
	return words
}
