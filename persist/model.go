// Package persist owns axe's durable state: the Store interface, its MySQL and embedded
// SQLite implementations, the schema and its migrations, and the batched writer that
// group-commits state transitions (R7).
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
	"encoding/json"
	"errors"
	"fmt"
)

// State is a task's runtime state (SPEC R2.1). The legal transitions live in the engine.
type State string

// The eight states of SPEC R2.1.
const (
	StateWaiting   State = "WAITING"
	StateScheduled State = "SCHEDULED"
	StateRunning   State = "RUNNING"
	StateSuccess   State = "SUCCESS"
	StateFailed    State = "FAILED"
	StateRetrying  State = "RETRYING"
	StatePaused    State = "PAUSED"
	StateKilled    State = "KILLED"
)

// Trigger types (SPEC R1.1).
const (
	TriggerCron       = "cron"
	TriggerDelay      = "delay"
	TriggerManual     = "manual"
	TriggerDependency = "dependency"
)

// Misfire policies (SPEC R3.5).
const (
	MisfireFireOnce = "fire_once"
	MisfireSkip     = "skip"
)

// Callback types (SPEC R5.1).
const (
	CallbackHTTP     = "http"
	CallbackExecutor = "executor"
)

// Run results, stored in Run.Result.
const (
	ResultRunning = "running"
	ResultSuccess = "success"
	ResultFailed  = "failed"
	ResultTimeout = "timeout"
	ResultKilled  = "killed"
	ResultLost    = "lost" // the scheduler or executor died with the run in flight; outcome unknown
	ResultSkipped = "skipped"
)

// Run kinds, stored in Run.Kind.
const (
	RunScheduled = "scheduled" // a periodic/delay/dependency fire, or a retry of one
	RunManual    = "manual"    // run-now (R6.2): outside the periodic state machine
)

// Sentinel errors. Stores wrap them with %w; callers test with errors.Is.
var (
	// ErrTaskNotFound is returned when no task has the given name or id.
	ErrTaskNotFound = errors.New("task not found")
	// ErrTaskExists is returned by CreateTask when the name is taken.
	ErrTaskExists = errors.New("task already exists")
	// ErrVersionConflict is returned (inside a *ConflictError) when a transition's CAS on
	// (task_id, version) matched no row: someone else changed the task first.
	ErrVersionConflict = errors.New("version conflict")
	// ErrLeaseLost is returned when a batch carries a lease epoch that is no longer current,
	// or a lease renewal finds another holder (R8.3).
	ErrLeaseLost = errors.New("lease lost")
	// ErrRunNotFound is returned by GetRun for an unknown ticket.
	ErrRunNotFound = errors.New("run not found")
	// ErrWriterClosed is returned by the batched writer after Stop.
	ErrWriterClosed = errors.New("writer closed")
	// ErrExecutorNotFound is returned by Heartbeat and SetExecutorStatus for an unknown
	// executor.
	ErrExecutorNotFound = errors.New("executor not found")
	// ErrWriterBusy is returned by Writer.Offer when the writer's queue is too full to take
	// more work that can wait (API creates); the caller should retry later.
	ErrWriterBusy = errors.New("writer busy")
)

// Callback says where a run is sent (SPEC R1.1, R5.1).
type Callback struct {
	Type    string `json:"type"`              // "http" or "executor"
	URL     string `json:"url,omitempty"`     // http: the endpoint that receives POST
	App     string `json:"app,omitempty"`     // executor: the executor app name
	Handler string `json:"handler,omitempty"` // executor: the handler name within the app
	Route   string `json:"route,omitempty"`   // executor: routing strategy (R5.5); "" = round robin
}

// TaskDef is a task definition (SPEC R1.1). JSON names are the REST API's.
type TaskDef struct {
	ID               int64           `json:"id,omitempty"`
	Name             string          `json:"name"`
	Group            string          `json:"group"`
	Trigger          string          `json:"trigger"`
	Cron             string          `json:"cron,omitempty"`
	DelayMS          int64           `json:"delay_ms,omitempty"`
	DependsOn        []string        `json:"depends_on,omitempty"`
	DependsMode      string          `json:"depends_mode,omitempty"` // "all" (default) or "any"
	Timezone         string          `json:"timezone"`
	TimeoutSec       int             `json:"timeout_sec"`
	RetryCount       int             `json:"retry_count"`
	RetryIntervalSec int             `json:"retry_interval_sec"`
	Priority         int             `json:"priority"`
	Callback         Callback        `json:"callback"`
	Params           json.RawMessage `json:"params,omitempty"`
	MisfirePolicy    string          `json:"misfire_policy"`
	Paused           bool            `json:"paused"`
	CreatedAt        int64           `json:"created_at,omitempty"`
	UpdatedAt        int64           `json:"updated_at,omitempty"`
	// RetainHistoryMS and RetainFinishedMS override the server's retention for this task's
	// runs and actions, and for the task itself once it is a finished one-shot; 0 keeps the
	// server's setting (docs/retention.md).
	RetainHistoryMS  int64 `json:"retain_history_ms,omitempty"`
	RetainFinishedMS int64 `json:"retain_finished_ms,omitempty"`
}

// Runtime is a task's runtime row (SPEC R1.2), separate from its definition.
// NextTriggerTime is the next fire (Unix ms), 0 for none; while RUNNING it still holds the due
// time of the fire in flight, so that a cron cycle moves the task in the window index once.
// Only SCHEDULED and RETRYING tasks are ever armed from it.
type Runtime struct {
	TaskID          int64  `json:"-"`
	State           State  `json:"state"`
	CurrentTicket   string `json:"current_ticket,omitempty"`
	Attempt         int    `json:"attempt"`
	NextTriggerTime int64  `json:"next_trigger_time"`
	LastTriggerTime int64  `json:"last_trigger_time"`
	LastEndTime     int64  `json:"last_end_time"`
	LastExecutor    string `json:"last_executor,omitempty"`
	SuccessCount    int64  `json:"success_count"`
	FailureCount    int64  `json:"failure_count"`
	Note            string `json:"note,omitempty"` // operator note (pause reason)
	Version         int64  `json:"version"`
}

// Task is a definition joined with its runtime.
type Task struct {
	Def     TaskDef
	Runtime Runtime
}

// DueRef names a task due at NextTriggerTime; see Store.LoadDueRefs.
type DueRef struct {
	TaskID          int64
	NextTriggerTime int64
}

// Run is one dispatch (SPEC R1.3). Upserted by Ticket.
type Run struct {
	Ticket       string `json:"ticket"`
	TaskID       int64  `json:"task_id"`
	TaskName     string `json:"task"`
	Kind         string `json:"kind"`
	Attempt      int    `json:"attempt"`
	ScheduledAt  int64  `json:"scheduled_at"`
	DispatchedAt int64  `json:"dispatched_at"`
	Executor     string `json:"executor,omitempty"`
	EndedAt      int64  `json:"ended_at"`
	Result       string `json:"result"`
	Error        string `json:"error,omitempty"`
	DurationMS   int64  `json:"duration_ms"`
	Output       string `json:"output,omitempty"` // bounded output tail reported by an executor
	Detail       string `json:"detail,omitempty"` // e.g. which upstream runs released a dependency fire
}

// Action is one audit record (SPEC R1.4). Append-only.
type Action struct {
	ID       int64  `json:"id"`
	TaskID   int64  `json:"task_id"`
	TaskName string `json:"task"`
	Ticket   string `json:"ticket,omitempty"`
	Action   string `json:"action"`
	From     State  `json:"from,omitempty"`
	To       State  `json:"to,omitempty"`
	Actor    string `json:"actor"`
	At       int64  `json:"at"`
	Detail   string `json:"detail,omitempty"`
}

// Executor is one registered executor instance (SPEC R5.2), unique by (App, Address).
type Executor struct {
	App           string   `json:"app"`
	Address       string   `json:"address"`
	Protocol      string   `json:"protocol"`
	Handlers      []string `json:"handlers"`
	RegisteredAt  int64    `json:"registered_at"`
	LastHeartbeat int64    `json:"last_heartbeat"`
	Status        string   `json:"status"` // "alive" or "lost"
}

// Lease is the HA lease row (SPEC R8.1).
type Lease struct {
	Name      string `json:"name"`
	Holder    string `json:"holder"`
	Epoch     int64  `json:"epoch"`
	ExpiresAt int64  `json:"expires_at"`
}

// Transition is one compare-and-swap of a runtime row: it applies only if the stored version
// equals ExpectVersion, and then stores Runtime with Version = ExpectVersion+1.
type Transition struct {
	ExpectVersion int64
	Runtime       Runtime // Runtime.TaskID names the row; Runtime.Version is set by the store
}

// Batch is one group commit: all of it is applied in one database transaction, or none of it.
type Batch struct {
	// Epoch fences the batch (R8.3): when > 0 the store applies the batch only if the lease
	// named LeaseName has this epoch, and fails with ErrLeaseLost otherwise.
	Epoch     int64
	LeaseName string

	Transitions []Transition
	Runs        []Run    // upserted by ticket: a later row for the same ticket replaces columns
	Actions     []Action // appended

	// Task writes (taskbatch.go), applied before the transitions, in this order: Deletes,
	// Creates, DefUpdates.
	Creates    []*TaskCreate
	DefUpdates []TaskDef // replace the definition named by ID and its dependency edges
	Deletes    []int64   // task ids: definition, runtime and edges go; runs and actions stay
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
		return ErrTaskExists
	}
	return ErrVersionConflict
}

// TaskFilter narrows ListTasks. Zero fields do not filter.
type TaskFilter struct {
	Group   string
	State   State
	AfterID int64 // keyset pagination: only ids > AfterID
	Limit   int   // 0 = no limit
}

// Store is the durable state of axe. Implementations: MySQL and embedded SQLite; both pass
// the conformance suite in persisttest. Every method is safe for concurrent use.
type Store interface {
	// Migrate creates or upgrades the schema. Idempotent.
	Migrate(ctx context.Context) error
	// Ping checks the database is reachable.
	Ping(ctx context.Context) error
	// Close releases the connection pool.
	Close() error
	// Kind is "mysql" or "sqlite".
	Kind() string

	// CreateTask inserts def, its runtime row and its dependency edges (def.DependsOn, by name)
	// atomically. It sets def.ID and rt.TaskID. A taken name gives ErrTaskExists.
	CreateTask(ctx context.Context, def *TaskDef, rt *Runtime) error
	// UpdateTaskDef replaces the definition (matched by def.ID) and its dependency edges.
	UpdateTaskDef(ctx context.Context, def *TaskDef) error
	// DeleteTask removes the definition, runtime and dependency edges of the task. Runs and
	// actions stay: the audit trail outlives the task.
	DeleteTask(ctx context.Context, id int64) error
	// GetTask returns the task by name, or ErrTaskNotFound.
	GetTask(ctx context.Context, name string) (*Task, error)
	// GetTaskByID returns the task by id, or ErrTaskNotFound.
	GetTaskByID(ctx context.Context, id int64) (*Task, error)
	// ListTasks returns tasks ordered by id.
	ListTasks(ctx context.Context, f TaskFilter) ([]Task, error)
	// CountTasks returns the number of task definitions.
	CountTasks(ctx context.Context) (int64, error)
	// LoadDue streams, in next_trigger_time order, every task whose runtime state is in states
	// and whose next_trigger_time is in [from, to) and > 0. It stops at the first error fn
	// returns and returns it. This is the window loader's query (R3.3); it must use the
	// next_trigger_time index.
	LoadDue(ctx context.Context, from, to int64, states []State, fn func(*Task) error) error
	// LoadDueRefs streams the task id and next_trigger_time of the rows LoadDue would
	// return, in no particular order, reading only task_runtime: the window loader holds
	// tasks that are not due soon as these references and reads the rest with LoadByIDs
	// shortly before they fire.
	LoadDueRefs(ctx context.Context, from, to int64, states []State, fn func(DueRef) error) error
	// LoadByIDs streams the tasks with the given ids in id order; ids without a task are
	// skipped.
	LoadByIDs(ctx context.Context, ids []int64, fn func(*Task) error) error
	// LoadByState streams every task whose runtime state is in states (recovery at start).
	LoadByState(ctx context.Context, states []State, fn func(*Task) error) error
	// Dependents returns the tasks that name upstream in depends_on.
	Dependents(ctx context.Context, upstream string) ([]Task, error)
	// UpstreamNames returns every task name that some task depends on.
	UpstreamNames(ctx context.Context) ([]string, error)

	// ApplyBatch applies b in one transaction (R7.2). A failed CAS returns *ConflictError and
	// applies nothing; a stale epoch returns ErrLeaseLost and applies nothing.
	ApplyBatch(ctx context.Context, b *Batch) error

	// GetRun returns the run with the ticket, or ErrRunNotFound.
	GetRun(ctx context.Context, ticket string) (*Run, error)
	// ListRuns returns the task's runs, newest first (by scheduled_at, then ticket).
	ListRuns(ctx context.Context, taskID int64, limit int) ([]Run, error)
	// ListRunningManual returns the run-now (RunManual) runs whose result is still
	// ResultRunning, oldest first (by scheduled_at, then ticket): the recovery of in-flight
	// run-now instances at start. Periodic runs in flight are found through their runtime.
	ListRunningManual(ctx context.Context, limit int) ([]Run, error)
	// ListActions returns the task's action records, newest first (by id).
	ListActions(ctx context.Context, taskID int64, limit int) ([]Action, error)

	// UpsertExecutor registers an executor, idempotent by (App, Address): a second call
	// updates protocol, handlers, heartbeat and status, and keeps RegisteredAt.
	UpsertExecutor(ctx context.Context, e *Executor) error
	// Heartbeat sets last_heartbeat and status "alive". Unknown executors give
	// ErrExecutorNotFound.
	Heartbeat(ctx context.Context, app, address string, at int64) error
	// SetExecutorStatus sets status ("alive" or "lost").
	SetExecutorStatus(ctx context.Context, app, address, status string) error
	// ListExecutors returns every executor ordered by (app, address).
	ListExecutors(ctx context.Context) ([]Executor, error)

	// AcquireLease takes the lease named name for holder until now+ttlMS when it is free,
	// expired, or already held by holder (a renewal keeps the epoch; a takeover increments
	// it). It returns the lease as stored after the call and whether holder now holds it.
	AcquireLease(ctx context.Context, name, holder string, now, ttlMS int64) (Lease, bool, error)
	// ReadLease returns the lease row, or a zero Lease when none exists.
	ReadLease(ctx context.Context, name string) (Lease, error)
}
