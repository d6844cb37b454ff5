package model

import "encoding/json"

// Workflows (docs/workflows.md): a DAG of steps run together for one logical time. These
// are the stored shapes; the rules (validation, release, the run's state) live in package
// workflow.

// Step conditions: when a step whose upstreams have all ended runs.
const (
	CondAllSucceeded = "all_succeeded" // the default: every upstream succeeded
	CondAllDone      = "all_done"      // every upstream ended, whatever its result
	CondAnySucceeded = "any_succeeded" // at least one upstream succeeded
	CondAnyFailed    = "any_failed"    // at least one upstream failed: cleanup and alert steps
)

// Workflow run states.
const (
	WorkflowRunning   = "running"
	WorkflowSucceeded = "succeeded"
	WorkflowFailed    = "failed"
	WorkflowCancelled = "cancelled"
)

// Step run states (one attempt of one item of one step).
const (
	StepRunning   = "running"   // recorded and handed to the engine, no end yet
	StepSucceeded = "succeeded" // ended with success (or marked succeeded by an operator)
	StepFailed    = "failed"    // ended without success; the last attempt decides the step
	StepSkipped   = "skipped"   // its condition did not hold: never sent
	StepCancelled = "cancelled" // the run was cancelled before or while it ran
)

// WorkflowStep is one step of a workflow definition.
type WorkflowStep struct {
	Name             string   `json:"name"`
	Callback         Callback `json:"callback"`
	TimeoutSec       int      `json:"timeout_sec,omitempty"`
	RetryCount       int      `json:"retry_count,omitempty"`
	RetryIntervalSec int      `json:"retry_interval_sec,omitempty"`
	Priority         int      `json:"priority,omitempty"`
	ConcurrencyKey   string   `json:"concurrency_key,omitempty"`
	RateKey          string   `json:"rate_key,omitempty"`
	Needs            []string `json:"needs,omitempty"`
	Condition        string   `json:"condition,omitempty"`
	// FanOut names a JSON array the step runs once per item of: "params.KEY" or
	// "STEP.KEY" (a key of an upstream's output; STEP must be among the step's needs).
	FanOut string `json:"fan_out,omitempty"`
	// Parallelism caps the items of a fan-out in flight at once (0: FanOutParallelDefault).
	Parallelism int `json:"parallelism,omitempty"`
}

// WorkflowDef is a workflow definition: one version of it.
type WorkflowDef struct {
	Name    string `json:"name"`
	Group   string `json:"group,omitempty"`
	Trigger string `json:"trigger"` // cron, delay (DelayMS), manual or workflow (After)
	Cron    string `json:"cron,omitempty"`
	// DelayMS starts one run (trigger delay) this long after the workflow is created, or
	// resumed before that run started; once.
	DelayMS  int64           `json:"delay_ms,omitempty"`
	Timezone string          `json:"timezone,omitempty"`
	Params   json.RawMessage `json:"params,omitempty"`
	Steps    []WorkflowStep  `json:"steps"`
	// MisfirePolicy: what a cron fire missed while no node scheduled the workflow does.
	MisfirePolicy string `json:"misfire_policy,omitempty"`
	// After names the workflow whose succeeded runs start this one's (trigger "workflow"),
	// each for the same logical time.
	After string `json:"after,omitempty"`
	// PauseAfterFailures pauses the workflow's trigger after this many runs in a row ended
	// failed (0: never).
	PauseAfterFailures int `json:"pause_after_failures,omitempty"`
	// OverlapPolicy decides a cron fire due while a run of the workflow is running:
	// "allow_all" (the default: runs of different logical times side by side) or "skip".
	OverlapPolicy string `json:"overlap_policy,omitempty"`
	// JitterSec delays each cron fire by a deterministic offset of 0 to JitterSec seconds
	// (the run keeps the nominal logical time).
	JitterSec int `json:"jitter_sec,omitempty"`
	// CatchupWindowSec: cron fires missed within this many seconds before the workflow was
	// taken up again each get their run, oldest first; older ones follow MisfirePolicy.
	CatchupWindowSec int `json:"catchup_window_sec,omitempty"`
	// Version is set by the store: 1 at create, +1 at every update.
	Version   int   `json:"version"`
	Paused    bool  `json:"paused"`
	CreatedAt int64 `json:"created_at,omitempty"`
	UpdatedAt int64 `json:"updated_at,omitempty"`
}

// Workflow is a stored workflow: its current definition and its schedule's cursor.
type Workflow struct {
	Def WorkflowDef
	// NextFire is the next cron fire (Unix ms), 0 for none.
	NextFire int64
}

// WorkflowRun is one run of a workflow for one logical time.
type WorkflowRun struct {
	ID          string          `json:"id"`
	Workflow    string          `json:"workflow"`
	Version     int             `json:"version"`
	ScheduledAt int64           `json:"scheduled_at"` // the logical time
	Trigger     string          `json:"trigger"`      // cron, delay, manual, workflow or backfill
	Params      json.RawMessage `json:"params,omitempty"`
	State       string          `json:"state"`
	CreatedAt   int64           `json:"created_at"`
	EndedAt     int64           `json:"ended_at,omitempty"`
	Error       string          `json:"error,omitempty"`
}

// WorkflowBackfill is a workflow's backfill: runs for each cron fire time in [From, To),
// at most Parallel at once, started in order from the cursor Next (0 once every time has
// a run). It is stored, one row per workflow, so the node that schedules the workflow's
// shard pumps it, whichever node that is.
type WorkflowBackfill struct {
	Workflow  string `json:"workflow"`
	From      int64  `json:"from"`
	To        int64  `json:"to"`
	Parallel  int    `json:"parallel"`
	Cron      string `json:"cron"`
	Timezone  string `json:"timezone"`
	Total     int    `json:"total"`
	Next      int64  `json:"next"`
	Started   int    `json:"started"`
	Skipped   int    `json:"skipped"`
	State     string `json:"state"` // BackfillRunning until the cursor is spent, then BackfillDone
	Actor     string `json:"actor"`
	CreatedAt int64  `json:"created_at"`
	UpdatedAt int64  `json:"updated_at"`
	EndedAt   int64  `json:"ended_at,omitempty"`
}

// StepRun is one attempt of one item of one step of a workflow run. (RunID, Step, Index,
// Attempt) is its key: the store inserts it once and refuses it when it exists.
type StepRun struct {
	RunID     string          `json:"run_id"`
	Step      string          `json:"step"`
	Index     int             `json:"index"` // the fan-out item; 0 for a step without fan-out
	Attempt   int             `json:"attempt"`
	State     string          `json:"state"`
	Ticket    string          `json:"ticket,omitempty"`
	StartedAt int64           `json:"started_at,omitempty"`
	EndedAt   int64           `json:"ended_at,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
	Error     string          `json:"error,omitempty"`
	// Items is the fan-out's size, stored on item 0's rows; 0 for a step without fan-out.
	Items int `json:"items,omitempty"`
}
