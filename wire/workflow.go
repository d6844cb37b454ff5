package wire

import (
	"encoding/json"

	"github.com/axe-sched/axe/model"
)

// WorkflowView is a workflow as GET /api/v1/workflows/{name} answers it: its current
// definition and its next cron fire.
type WorkflowView struct {
	model.WorkflowDef
	NextFire int64 `json:"next_fire,omitempty"`
}

// WorkflowList is GET /api/v1/workflows.
type WorkflowList struct {
	Workflows []WorkflowView `json:"workflows"`
}

// WorkflowRunBody is POST /api/v1/workflows/{name}/run: the run's params (the workflow's
// when none), and an optional key that names the run: a start sent again with the same key
// (after an answer that never came) starts nothing and answers the run the key started.
type WorkflowRunBody struct {
	Params json.RawMessage `json:"params,omitempty"`
	Key    string          `json:"key,omitempty"`
}

// WorkflowRunList is GET /api/v1/workflows/{name}/runs.
type WorkflowRunList struct {
	Runs []model.WorkflowRun `json:"runs"`
}

// WorkflowStepView is one step of a run in GET /api/v1/workflow-runs/{id}.
type WorkflowStepView struct {
	Name      string          `json:"name"`
	State     string          `json:"state"`
	Needs     []string        `json:"needs,omitempty"`
	Items     int             `json:"items,omitempty"`
	Succeeded int             `json:"succeeded,omitempty"`
	Failed    int             `json:"failed,omitempty"`
	Running   int             `json:"running,omitempty"`
	StartedAt int64           `json:"started_at,omitempty"`
	EndedAt   int64           `json:"ended_at,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
	Error     string          `json:"error,omitempty"`
	Attempts  []model.StepRun `json:"attempts"`
}

// WorkflowRunView is GET /api/v1/workflow-runs/{id}: the run, the version it runs, and
// every step with its state, output and attempts.
type WorkflowRunView struct {
	model.WorkflowRun
	Definition *model.WorkflowDef `json:"definition"`
	Steps      []WorkflowStepView `json:"steps"`
}

// WorkflowRerunBody is POST /api/v1/workflow-runs/{id}/rerun: {"from": "failed"} or
// {"step": NAME}.
type WorkflowRerunBody struct {
	From string `json:"from,omitempty"`
	Step string `json:"step,omitempty"`
}

// WorkflowCancelBody is POST /api/v1/workflow-runs/{id}/cancel.
type WorkflowCancelBody struct {
	Reason string `json:"reason,omitempty"`
}

// WorkflowSucceedBody is POST /api/v1/workflow-runs/{id}/steps/{step}/succeed.
type WorkflowSucceedBody struct {
	Output json.RawMessage `json:"output,omitempty"`
	Note   string          `json:"note,omitempty"`
}

// WorkflowPauseBody is POST /api/v1/workflows/{name}/pause.
type WorkflowPauseBody struct {
	Note string `json:"note,omitempty"`
}

// WorkflowBackfillBody is POST /api/v1/workflows/{name}/backfill: every cron fire time in
// [from, to) (RFC 3339), at most parallel runs at once.
type WorkflowBackfillBody struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Parallel int    `json:"parallel,omitempty"`
}

// WorkflowBackfillStatus is a workflow's latest backfill's progress, as stored.
type WorkflowBackfillStatus struct {
	Workflow string `json:"workflow"`
	Times    int    `json:"times"`
	Started  int    `json:"started"`
	Skipped  int    `json:"skipped"`
	Running  int    `json:"running"`
	Done     bool   `json:"done"`
}
