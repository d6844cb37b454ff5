// Package model is axe's domain vocabulary: a task's definition and runtime, its runs and
// audit actions, registered executors, the HA lease, the eight states, and the sentinel
// errors every layer shares. It imports nothing of axe, so that a client of the REST API can
// use these types without linking the storage or the engine.
//
// The rules (which transitions are legal, what a trigger means) live in the engine; model
// holds only the words. All times are Unix milliseconds (int64); 0 means "none".
package model

import (
	"encoding/json"
	"errors"
)

// State is a task's runtime state (docs/design.md, "State machine"). The legal transitions live in
// the engine.
type State string

// The eight states (docs/design.md, "State machine").
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

// Trigger types: what makes a task fire (docs/openapi.yaml, TaskSpec.trigger).
const (
	TriggerCron       = "cron"
	TriggerDelay      = "delay"
	TriggerManual     = "manual"
	TriggerDependency = "dependency"
	// TriggerWorkflow starts a workflow's run when a run of the workflow it names (After)
	// succeeds (docs/workflows.md).
	TriggerWorkflow = "workflow"
)

// Misfire policies: what a fire time that passed while no scheduler was active does (fire
// once now, or skip to the next).
const (
	MisfireFireOnce = "fire_once"
	MisfireSkip     = "skip"
)

// Overlap policies: what becomes of a cron fire due while the task's previous run is in
// flight (docs/design.md, "Overlap and catch-up").
const (
	OverlapSkip        = "skip"
	OverlapBufferOne   = "buffer_one" // the default: the latest such fire runs after the run
	OverlapBufferAll   = "buffer_all"
	OverlapCancelOther = "cancel_other"
	OverlapAllowAll    = "allow_all" // every fire runs, beside the runs still in flight
)

// Callback types: a plain HTTP endpoint whose response status is the result, or an executor
// (docs/protocol.md).
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
	RunManual    = "manual"    // run-now: outside the periodic state machine
	// RunBackfill is one fire time of a backfill: outside the periodic state machine like
	// run-now, but with the deterministic ticket of its fire time (its fire record).
	RunBackfill = "backfill"
)

// Sentinel errors of the domain. The stores and the engine wrap them with %w; callers test
// with errors.Is. persist re-exports them under the same names.
var (
	// ErrTaskNotFound is returned when no task has the given name or id.
	ErrTaskNotFound = errors.New("task not found")
	// ErrTaskExists is returned by CreateTask when the name is taken.
	ErrTaskExists = errors.New("task already exists")
	// ErrVersionConflict is returned (inside a *ConflictError) when a transition's CAS on
	// (task_id, version) matched no row: someone else changed the task first.
	ErrVersionConflict = errors.New("version conflict")
	// ErrLeaseLost is returned when a batch carries a lease epoch that is no longer current,
	// or a lease renewal finds another holder (docs/ha.md, "Fencing").
	ErrLeaseLost = errors.New("lease lost")
	// ErrLeaseDeadline is a lease gate's answer while the last successful renewal was sent
	// more than TTL − renew ago: the lease may still be this node's (a renewal can be stuck
	// in a slow database), but nothing is sent under it until a renewal succeeds. The engine
	// holds what it would send meanwhile instead of failing it.
	ErrLeaseDeadline = errors.New("lease renewal overdue")
	// ErrRunNotFound is returned by GetRun for an unknown ticket.
	ErrRunNotFound = errors.New("run not found")
	// ErrBackfillNotFound is returned by GetBackfill for an unknown id.
	ErrBackfillNotFound = errors.New("backfill not found")
	// ErrExecutorNotFound is returned by Heartbeat and SetExecutorStatus for an unknown
	// executor.
	ErrExecutorNotFound = errors.New("executor not found")
	// ErrShardNotHeld is the answer for a shard (model.ShardOf) this node does not hold at
	// the epoch asked about, or is still taking over or handing over: the shard loop's gate
	// gives it, and the engine gives it for a task, run or group in such a shard. The owner
	// of the shard must be asked (the API forwards the call to it, or answers 503).
	ErrShardNotHeld = errors.New("this node does not hold the shard")
)

// Callback says where a run is sent (docs/openapi.yaml, Callback).
type Callback struct {
	Type    string `json:"type"`              // "http" or "executor"
	URL     string `json:"url,omitempty"`     // http: the endpoint that receives POST
	App     string `json:"app,omitempty"`     // executor: the executor app name
	Handler string `json:"handler,omitempty"` // executor: the handler name within the app
	Route   string `json:"route,omitempty"`   // executor: routing strategy; "" = round robin
}

// TaskDef is a task definition (docs/openapi.yaml, TaskSpec). JSON names are the REST API's.
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
	// OnLost is what becomes of an HTTP run left in doubt by a failover or a restart:
	// "fail" ("" too: recorded lost, at most once) or "resend" (the same ticket sent again
	// as a new attempt of the fire).
	OnLost string `json:"on_lost,omitempty"`
	// CronDialect is how Cron reads ("unix" or "quartz"; lib/cron.Dialect). Stored
	// resolved, so a change of the server's default never changes a stored task; "" (a
	// row written before the column existed, or a non-cron task) reads as unix.
	CronDialect string `json:"cron_dialect,omitempty"`
	// SensitiveParams names the top-level keys of Params that API and console reads mask.
	SensitiveParams []string `json:"sensitive_params,omitempty"`
	// RetainHistoryMS and RetainFinishedMS override the server's retention for this task's
	// runs and actions, and for the task itself once it is a finished one-shot; 0 keeps the
	// server's setting (docs/retention.md).
	RetainHistoryMS  int64 `json:"retain_history_ms,omitempty"`
	RetainFinishedMS int64 `json:"retain_finished_ms,omitempty"`
	// PauseAfterFailures pauses the task after this many consecutive failed runs (0: never;
	// docs/operations.md, Pause on failure).
	PauseAfterFailures int `json:"pause_after_failures,omitempty"`
	// JitterSec delays each cron fire by a deterministic offset of 0 to JitterSec seconds,
	// derived from the task's name and the fire's nominal time (0: none; docs/design.md,
	// Jitter).
	JitterSec int `json:"jitter_sec,omitempty"`
	// ConcurrencyKey names the concurrency limit of kind "key" this task's runs count in,
	// beside its group's ("": none; docs/design.md, Concurrency limits).
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// RateKey names the rate limit this task's runs take a token of in place of their
	// downstream's: a name, or a template over the run's params (tenant:{params.tenant_id};
	// model.RenderKey) limited by a pattern (tenant:*). "": the downstream (docs/design.md,
	// Keyed limits).
	RateKey string `json:"rate_key,omitempty"`
	// OverlapPolicy decides the cron fires due while the task's run is in flight (one of
	// the Overlap* constants; "" reads as buffer_one, the stored default).
	OverlapPolicy string `json:"overlap_policy,omitempty"`
	// CatchupWindowSec: after downtime or a pause, the cron fires missed within this many
	// seconds before the task was taken up again run one after another, each with its own
	// time; older ones are skipped. 0: none, misfire_policy decides (docs/design.md,
	// "Overlap and catch-up").
	CatchupWindowSec int `json:"catchup_window_sec,omitempty"`
}

// Runtime is a task's runtime row, separate from its definition.
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
	// LastResult is the result of the task's newest scheduled run that ended ("" before
	// its first, or since an upgrade from a schema without it), LastFailureAt when the
	// newest of them that failed, timed out or was lost ended (0: none).
	LastResult    string `json:"last_result,omitempty"`
	LastFailureAt int64  `json:"last_failure_at,omitempty"`
	// ConsecutiveFailures counts the task's scheduled runs that failed or timed out in a row,
	// each after its last retry; a success sets it to 0, and so does a resume
	// (TaskDef.PauseAfterFailures).
	ConsecutiveFailures int `json:"consecutive_failures,omitempty"`
	// PausedBy says who paused a paused task (PausedBy*): its own pause, its creation paused,
	// a group's pause ("group:" + the group), a bulk pause, or pause-after-failures; "" for a
	// task not paused, or paused before the origin was kept. A group's resume resumes only
	// the tasks its pause paused and those created paused.
	PausedBy string `json:"paused_by,omitempty"`
	Version  int64  `json:"version"`
}

// Pause origins (Runtime.PausedBy): who paused a task.
const (
	// PausedByTask: the task's own pause (API, CLI, console, an edit with paused: true).
	PausedByTask = "task"
	// PausedByCreate: created paused (an import's tasks wait for their group's resume).
	PausedByCreate = "create"
	// PausedByBulk: a bulk pause by selector.
	PausedByBulk = "bulk"
	// PausedByFailures: pause_after_failures.
	PausedByFailures = "failures"
	// PausedByGroupPrefix, followed by the group, is a group's pause.
	PausedByGroupPrefix = "group:"
)

// PausedByGroup is the pause origin of group's pause.
func PausedByGroup(group string) string { return PausedByGroupPrefix + group }

// Task is a definition joined with its runtime.
type Task struct {
	Def     TaskDef
	Runtime Runtime
}

// Run is one dispatch. Upserted by Ticket.
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
	// Params are the params a run-now was given, stored with the run (schema step 19);
	// empty for a run that ran with its task's params (every fire, a run-now given none).
	Params RunParams `json:"params,omitempty"`
}

// RunParams is a run's params, the JSON text itself: JSON reads and writes it as the value
// it holds, not as a string. A string, so that a Run stays comparable.
type RunParams string

// MarshalJSON writes the params as the JSON they are (null when empty).
func (p RunParams) MarshalJSON() ([]byte, error) {
	if p == "" {
		return []byte("null"), nil
	}
	if !json.Valid([]byte(p)) {
		return nil, errors.New("run params are not valid JSON")
	}
	return []byte(p), nil
}

// UnmarshalJSON keeps the JSON value as it is; null reads as none.
func (p *RunParams) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*p = ""
		return nil
	}
	*p = RunParams(b)
	return nil
}

// Action is one audit record (docs/operations.md, "Action records and the timeline").
// Append-only.
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

// Executor is one registered executor instance, unique by (App, Address): registering
// again after a restart creates no second one.
type Executor struct {
	App           string   `json:"app"`
	Address       string   `json:"address"`
	Protocol      string   `json:"protocol"`
	Handlers      []string `json:"handlers"`
	RegisteredAt  int64    `json:"registered_at"`
	LastHeartbeat int64    `json:"last_heartbeat"`
	Status        string   `json:"status"` // "alive", "lost" or "left" (deregistered, draining)
	// DispatchKey is the hex key the scheduler signs its calls to the executor with; "" for
	// an executor that predates signed calls. Never shown: it is not part of any view.
	DispatchKey string `json:"-"`
	// Incarnation is the id of the executor process that registered (protocol version 2),
	// which the scheduler's calls to it are signed for; "" for a version 1 executor. Not
	// shown: it is what a signed call must name.
	Incarnation string `json:"-"`
}

// Lease is the HA lease row (docs/ha.md, "The lease"). ExpiresAt is the expiry by the database's
// clock (Unix ms), for display only: no node's clock may judge it.
type Lease struct {
	Name      string `json:"name"`
	Holder    string `json:"holder"`
	Epoch     int64  `json:"epoch"`
	ExpiresAt int64  `json:"expires_at"`
}

// The kinds of ConcurrencyLimit.
const (
	LimitGroup = "group" // the runs of the tasks of one group
	LimitKey   = "key"   // the runs of the tasks whose concurrency_key is the name
)

// ConcurrencyLimit bounds how many runs of a group, or of a concurrency key, are in flight at
// once (docs/design.md, Concurrency limits).
type ConcurrencyLimit struct {
	Kind      string `json:"kind"` // LimitGroup or LimitKey
	Name      string `json:"name"`
	Max       int    `json:"max"`
	UpdatedAt int64  `json:"updated_at,omitempty"`
}
