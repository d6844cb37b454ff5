package client

// Workflows (docs/workflows.md): a DAG of steps run together for one logical time. Every
// call answers the API's own shapes (package wire, package model).

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wire"
)

// WorkflowView is a workflow as the API returns it: its current definition and next fire.
type WorkflowView = wire.WorkflowView

// WorkflowRunView is one run with its definition's version and every step's state, output
// and attempts (GET /api/v1/workflow-runs/{id}).
type WorkflowRunView = wire.WorkflowRunView

// WorkflowBackfillStatus is a workflow backfill's progress.
type WorkflowBackfillStatus = wire.WorkflowBackfillStatus

func workflowPath(name string) string { return "/api/v1/workflows/" + url.PathEscape(name) }

func workflowRunPath(id string) string { return "/api/v1/workflow-runs/" + url.PathEscape(id) }

// CreateWorkflow creates a workflow from def: raw JSON ([]byte), sent as it is so that the
// server sees (and refuses) every field it holds, or a value encoded as JSON (a
// model.WorkflowDef).
func (c *Client) CreateWorkflow(ctx context.Context, def any) (*WorkflowView, error) {
	var v WorkflowView
	return &v, c.Do(ctx, http.MethodPost, "/api/v1/workflows", def, &v)
}

// UpdateWorkflow stores def (as CreateWorkflow takes it) as the workflow's next version;
// runs in flight keep the version they started with.
func (c *Client) UpdateWorkflow(ctx context.Context, name string, def any) (*WorkflowView, error) {
	var v WorkflowView
	return &v, c.Do(ctx, http.MethodPut, workflowPath(name), def, &v)
}

// GetWorkflow returns one workflow.
func (c *Client) GetWorkflow(ctx context.Context, name string) (*WorkflowView, error) {
	var v WorkflowView
	return &v, c.Do(ctx, http.MethodGet, workflowPath(name), nil, &v)
}

// ListWorkflows returns every workflow.
func (c *Client) ListWorkflows(ctx context.Context) ([]WorkflowView, error) {
	var v wire.WorkflowList
	return v.Workflows, c.Do(ctx, http.MethodGet, "/api/v1/workflows", nil, &v)
}

// DeleteWorkflow deletes a workflow and its step tasks; its runs and records stay. The API
// refuses it (409) while the workflow has runs in flight.
func (c *Client) DeleteWorkflow(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, workflowPath(name), nil, nil)
}

// PauseWorkflow stops the workflow's trigger (runs in flight go on), with an optional note.
func (c *Client) PauseWorkflow(ctx context.Context, name, note string) (*WorkflowView, error) {
	return c.pauseWorkflow(ctx, name, "pause", note)
}

// ResumeWorkflow starts the workflow's trigger again, with an optional note.
func (c *Client) ResumeWorkflow(ctx context.Context, name, note string) (*WorkflowView, error) {
	return c.pauseWorkflow(ctx, name, "resume", note)
}

func (c *Client) pauseWorkflow(ctx context.Context, name, op, note string) (*WorkflowView, error) {
	var body any
	if note != "" {
		body = wire.WorkflowPauseBody{Note: note}
	}
	var v WorkflowView
	return &v, c.Do(ctx, http.MethodPost, workflowPath(name)+"/"+op, body, &v)
}

// RunWorkflow starts a run of the workflow for the logical time now with params (the
// workflow's own when nil) and returns it; its ID names it in the calls below.
func (c *Client) RunWorkflow(ctx context.Context, name string, params json.RawMessage) (*model.WorkflowRun, error) {
	return c.RunWorkflowWithKey(ctx, name, params, "")
}

// RunWorkflowWithKey is RunWorkflow with a key that names the run (none when empty): a start
// sent again with the same key, after an answer that never came, starts nothing and returns
// the run the key started.
func (c *Client) RunWorkflowWithKey(ctx context.Context, name string, params json.RawMessage, key string) (*model.WorkflowRun, error) {
	if len(params) > 0 && !json.Valid(params) {
		return nil, errors.New("params: must be JSON")
	}
	var body any
	if len(params) > 0 || key != "" {
		body = wire.WorkflowRunBody{Params: params, Key: key}
	}
	var v model.WorkflowRun
	return &v, c.Do(ctx, http.MethodPost, workflowPath(name)+"/run", body, &v)
}

// WorkflowRuns lists the workflow's runs, newest logical time first: at most limit (0: the
// server's default of 100), of a logical time before before (Unix ms; 0: any).
func (c *Client) WorkflowRuns(ctx context.Context, name string, before int64, limit int) ([]model.WorkflowRun, error) {
	q := url.Values{}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := workflowPath(name) + "/runs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var v wire.WorkflowRunList
	return v.Runs, c.Do(ctx, http.MethodGet, path, nil, &v)
}

// GetWorkflowRun returns a run with every step's state, output and attempts.
func (c *Client) GetWorkflowRun(ctx context.Context, id string) (*WorkflowRunView, error) {
	var v WorkflowRunView
	return &v, c.Do(ctx, http.MethodGet, workflowRunPath(id), nil, &v)
}

// CancelWorkflowRun cancels a run, with an optional reason: its running steps are killed.
func (c *Client) CancelWorkflowRun(ctx context.Context, id, reason string) (*model.WorkflowRun, error) {
	var body any
	if reason != "" {
		body = wire.WorkflowCancelBody{Reason: reason}
	}
	var v model.WorkflowRun
	return &v, c.Do(ctx, http.MethodPost, workflowRunPath(id)+"/cancel", body, &v)
}

// RerunWorkflowFailed runs a run that ended again in place from its failed steps: the
// steps that succeeded keep their outputs and do not run again.
func (c *Client) RerunWorkflowFailed(ctx context.Context, id string) (*model.WorkflowRun, error) {
	return c.rerunWorkflow(ctx, id, wire.WorkflowRerunBody{From: "failed"})
}

// RerunWorkflowStep runs one step of a run that ended again, and every step after it.
func (c *Client) RerunWorkflowStep(ctx context.Context, id, step string) (*model.WorkflowRun, error) {
	return c.rerunWorkflow(ctx, id, wire.WorkflowRerunBody{Step: step})
}

func (c *Client) rerunWorkflow(ctx context.Context, id string, body wire.WorkflowRerunBody) (*model.WorkflowRun, error) {
	var v model.WorkflowRun
	return &v, c.Do(ctx, http.MethodPost, workflowRunPath(id)+"/rerun", body, &v)
}

// SucceedWorkflowStep marks a failed step of a run that ended succeeded with output (JSON;
// nil for none) and an optional note, and runs what follows it.
func (c *Client) SucceedWorkflowStep(ctx context.Context, id, step string, output json.RawMessage, note string) (*model.WorkflowRun, error) {
	if len(output) > 0 && !json.Valid(output) {
		return nil, errors.New("output: must be JSON")
	}
	var body any
	if len(output) > 0 || note != "" {
		body = wire.WorkflowSucceedBody{Output: output, Note: note}
	}
	var v model.WorkflowRun
	return &v, c.Do(ctx, http.MethodPost, workflowRunPath(id)+"/steps/"+url.PathEscape(step)+"/succeed", body, &v)
}

// BackfillWorkflow starts a run of the cron workflow for each of its fire times in
// [from, to) (RFC 3339), at most parallel at once (0: the server's default).
func (c *Client) BackfillWorkflow(ctx context.Context, name, from, to string, parallel int) (*WorkflowBackfillStatus, error) {
	var v WorkflowBackfillStatus
	body := wire.WorkflowBackfillBody{From: from, To: to, Parallel: parallel}
	return &v, c.Do(ctx, http.MethodPost, workflowPath(name)+"/backfill", body, &v)
}

// WorkflowBackfill returns the progress of the workflow's latest backfill on the node that
// schedules it (404 when that node has none: it lives there until a restart).
func (c *Client) WorkflowBackfill(ctx context.Context, name string) (*WorkflowBackfillStatus, error) {
	var v WorkflowBackfillStatus
	return &v, c.Do(ctx, http.MethodGet, workflowPath(name)+"/backfill", nil, &v)
}
