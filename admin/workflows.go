package admin

// Workflows (docs/workflows.md): the REST paths of package workflow's service. On a sharded
// node each call about a workflow goes to the node that schedules its shard (byTask,
// byBodyName, byWorkflowRun).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
	"github.com/axe-sched/axe/workflow"
)

func (s *Server) workflowRoutes(api interface {
	GET(string, fasthttp.RequestHandler)
	POST(string, fasthttp.RequestHandler)
	PUT(string, fasthttp.RequestHandler)
	DELETE(string, fasthttp.RequestHandler)
}) {
	if s.cfg.Workflows == nil {
		return
	}
	h, wf, run := s.authed, s.byTask, s.byWorkflowRun
	api.POST("/workflows", h(s.byBodyName(s.createWorkflow)))
	api.GET("/workflows", h(s.listWorkflows))
	api.GET("/workflows/{name}", h(s.getWorkflow))
	api.PUT("/workflows/{name}", h(wf(s.updateWorkflow)))
	api.DELETE("/workflows/{name}", h(wf(s.deleteWorkflow)))
	api.POST("/workflows/{name}/run", h(wf(s.runWorkflow)))
	api.POST("/workflows/{name}/pause", h(wf(s.pauseWorkflow(true))))
	api.POST("/workflows/{name}/resume", h(wf(s.pauseWorkflow(false))))
	api.POST("/workflows/{name}/backfill", h(wf(s.backfillWorkflow)))
	api.GET("/workflows/{name}/backfill", h(s.backfillWorkflowStatus)) // read from the store: any node answers
	api.GET("/workflows/{name}/runs", h(s.workflowRuns))
	api.GET("/workflow-runs/{id}", h(s.workflowRun))
	api.POST("/workflow-runs/{id}/cancel", h(run(s.cancelWorkflowRun)))
	api.POST("/workflow-runs/{id}/rerun", h(run(s.rerunWorkflowRun)))
	api.POST("/workflow-runs/{id}/steps/{step}/succeed", h(run(s.succeedWorkflowStep)))
}

// byWorkflowRun routes a call about a run to the node that schedules its workflow's shard.
func (s *Server) byWorkflowRun(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if s.shards == nil {
		return next
	}
	return func(c *fasthttp.RequestCtx) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		run, _, err := s.cfg.Store.GetWorkflowRun(ctx, param(c, "id"))
		cancel()
		if err != nil {
			s.fail(c, wfErr(err))
			return
		}
		s.shards.route(c, model.ShardOf(run.Workflow), false, next)
	}
}

// wfErr maps the workflow service's errors onto the API's statuses.
func wfErr(err error) error {
	var fe *workflow.FieldError
	switch {
	case errors.As(err, &fe):
		return fmt.Errorf("%w: %s", ErrBadRequest, fe.Error())
	case errors.Is(err, workflow.ErrNotFound), errors.Is(err, persist.ErrWorkflowNotFound), errors.Is(err, persist.ErrWorkflowRunNotFound):
		return fmt.Errorf("%w: %s", errWFNotFound, err.Error())
	case errors.Is(err, workflow.ErrConflict), errors.Is(err, persist.ErrWorkflowRunExists):
		return fmt.Errorf("%w: %s", model.ErrVersionConflict, err.Error())
	}
	return err
}

var errWFNotFound = errors.New("not found")

func (s *Server) wfFail(c *fasthttp.RequestCtx, err error) {
	err = wfErr(err)
	if errors.Is(err, errWFNotFound) {
		writeErr(c, fasthttp.StatusNotFound, err.Error()[len("not found: "):])
		return
	}
	if errors.Is(err, model.ErrVersionConflict) {
		writeErr(c, fasthttp.StatusConflict, err.Error())
		return
	}
	s.fail(c, err)
}

func workflowView(w *model.Workflow) wire.WorkflowView {
	return wire.WorkflowView{WorkflowDef: w.Def, NextFire: w.NextFire}
}

func (s *Server) createWorkflow(c *fasthttp.RequestCtx) {
	var d model.WorkflowDef
	if err := decodeStrict(c, &d); err != nil {
		s.fail(c, err)
		return
	}
	if d.Version != 0 || d.Paused || d.CreatedAt != 0 || d.UpdatedAt != 0 {
		writeErr(c, fasthttp.StatusBadRequest, "version, paused, created_at and updated_at are set by axe")
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	out, err := s.cfg.Workflows.Create(ctx, d, actor(c))
	if err != nil {
		s.wfFail(c, err)
		return
	}
	w, err := s.cfg.Workflows.Get(ctx, out.Name)
	if err != nil {
		s.wfFail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusCreated, workflowView(w))
}

func (s *Server) listWorkflows(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	ws, err := s.cfg.Workflows.List(ctx)
	if err != nil {
		s.wfFail(c, err)
		return
	}
	if !c.QueryArgs().GetBool("last_run") {
		out := wire.WorkflowList{Workflows: []wire.WorkflowView{}}
		for i := range ws {
			out.Workflows = append(out.Workflows, workflowView(&ws[i]))
		}
		writeJSON(c, fasthttp.StatusOK, out)
		return
	}
	// ?last_run=1 adds each workflow's newest run (the console's list shows its state): one
	// read of one run per workflow, off its runs' index.
	out := workflowListLast{Workflows: []workflowWithLast{}}
	for i := range ws {
		v := workflowWithLast{WorkflowView: workflowView(&ws[i])}
		runs, err := s.cfg.Workflows.Runs(ctx, ws[i].Def.Name, 0, 1)
		if err != nil {
			s.wfFail(c, err)
			return
		}
		if len(runs) > 0 {
			v.LastRun = &runs[0]
		}
		out.Workflows = append(out.Workflows, v)
	}
	writeJSON(c, fasthttp.StatusOK, out)
}

// workflowWithLast is a workflow of GET /api/v1/workflows?last_run=1: with its newest run.
type workflowWithLast struct {
	wire.WorkflowView
	LastRun *model.WorkflowRun `json:"last_run,omitempty"`
}

type workflowListLast struct {
	Workflows []workflowWithLast `json:"workflows"`
}

func (s *Server) getWorkflow(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	w, err := s.cfg.Workflows.Get(ctx, param(c, "name"))
	if err != nil {
		s.wfFail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, workflowView(w))
}

func (s *Server) updateWorkflow(c *fasthttp.RequestCtx) {
	var d model.WorkflowDef
	if err := decodeStrict(c, &d); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	d.Version, d.Paused, d.CreatedAt, d.UpdatedAt = 0, false, 0, 0
	if _, err := s.cfg.Workflows.Update(ctx, param(c, "name"), d, actor(c)); err != nil {
		s.wfFail(c, err)
		return
	}
	w, err := s.cfg.Workflows.Get(ctx, param(c, "name"))
	if err != nil {
		s.wfFail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, workflowView(w))
}

func (s *Server) deleteWorkflow(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	if err := s.cfg.Workflows.Delete(ctx, param(c, "name"), actor(c)); err != nil {
		s.wfFail(c, err)
		return
	}
	c.SetStatusCode(fasthttp.StatusNoContent)
}

func (s *Server) runWorkflow(c *fasthttp.RequestCtx) {
	var b wire.WorkflowRunBody
	if err := decodeOptional(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	run, started, err := s.cfg.Workflows.RunNow(ctx, param(c, "name"), b.Params, b.Key, actor(c))
	if err != nil {
		s.wfFail(c, err)
		return
	}
	code := fasthttp.StatusAccepted
	if !started {
		code = fasthttp.StatusOK // the key's run, started before
	}
	writeJSON(c, code, run)
}

func (s *Server) pauseWorkflow(paused bool) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		var b wire.WorkflowPauseBody
		if err := decodeOptional(c, &b); err != nil {
			s.fail(c, err)
			return
		}
		ctx, cancel := reqCtx(c)
		defer cancel()
		w, err := s.cfg.Workflows.SetPaused(ctx, param(c, "name"), paused, b.Note, actor(c))
		if err != nil {
			s.wfFail(c, err)
			return
		}
		writeJSON(c, fasthttp.StatusOK, workflowView(w))
	}
}

func (s *Server) backfillWorkflow(c *fasthttp.RequestCtx) {
	var b wire.WorkflowBackfillBody
	if err := decodeStrict(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	from, err := time.Parse(time.RFC3339, b.From)
	if err != nil {
		writeErr(c, fasthttp.StatusBadRequest, "from: must be an RFC 3339 time, got "+fmt.Sprintf("%q", b.From))
		return
	}
	to, err := time.Parse(time.RFC3339, b.To)
	if err != nil {
		writeErr(c, fasthttp.StatusBadRequest, "to: must be an RFC 3339 time, got "+fmt.Sprintf("%q", b.To))
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	st, err := s.cfg.Workflows.Backfill(ctx, param(c, "name"), from, to, b.Parallel, actor(c))
	if err != nil {
		s.wfFail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusAccepted, wire.WorkflowBackfillStatus(*st))
}

func (s *Server) backfillWorkflowStatus(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	st, err := s.cfg.Workflows.BackfillStatus(ctx, param(c, "name"))
	if err != nil {
		s.wfFail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, wire.WorkflowBackfillStatus(*st))
}

func (s *Server) workflowRuns(c *fasthttp.RequestCtx) {
	limit, err := intArg(c, "limit", 100, 1, 1000)
	if err != nil {
		s.fail(c, err)
		return
	}
	before, err := intArg(c, "before", 0, 0, 1<<62)
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	if _, err := s.cfg.Workflows.Get(ctx, param(c, "name")); err != nil {
		s.wfFail(c, err)
		return
	}
	runs, err := s.cfg.Workflows.Runs(ctx, param(c, "name"), int64(before), limit)
	if err != nil {
		s.wfFail(c, err)
		return
	}
	if runs == nil {
		runs = []model.WorkflowRun{}
	}
	writeJSON(c, fasthttp.StatusOK, wire.WorkflowRunList{Runs: runs})
}

func (s *Server) workflowRun(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	v, err := s.cfg.Workflows.GetRun(ctx, param(c, "id"))
	if err != nil {
		s.wfFail(c, err)
		return
	}
	out := wire.WorkflowRunView{WorkflowRun: v.Run, Definition: v.Def, Steps: []wire.WorkflowStepView{}}
	for _, st := range v.Steps {
		if st.Attempts == nil {
			st.Attempts = []model.StepRun{}
		}
		out.Steps = append(out.Steps, wire.WorkflowStepView(st))
	}
	writeJSON(c, fasthttp.StatusOK, out)
}

func (s *Server) cancelWorkflowRun(c *fasthttp.RequestCtx) {
	var b wire.WorkflowCancelBody
	if err := decodeOptional(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	run, err := s.cfg.Workflows.Cancel(ctx, param(c, "id"), b.Reason, actor(c))
	if err != nil {
		s.wfFail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, run)
}

func (s *Server) rerunWorkflowRun(c *fasthttp.RequestCtx) {
	var b wire.WorkflowRerunBody
	if err := decodeStrict(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	run, err := s.cfg.Workflows.Rerun(ctx, param(c, "id"), b.From, b.Step, actor(c))
	if err != nil {
		s.wfFail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusAccepted, run)
}

func (s *Server) succeedWorkflowStep(c *fasthttp.RequestCtx) {
	var b wire.WorkflowSucceedBody
	if err := decodeOptional(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	run, err := s.cfg.Workflows.Succeed(ctx, param(c, "id"), param(c, "step"), b.Output, b.Note, actor(c))
	if err != nil {
		s.wfFail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusAccepted, run)
}

// notStepTask refuses a change made directly to a workflow step's task: its definition is
// the workflow's, and its runs are the workflow's steps (kill one by its ticket instead).
func (s *Server) notStepTask(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		name := param(c, "name")
		if i := strings.IndexByte(name, '/'); i > 0 && workflow.IsStepTaskName(name) {
			writeErr(c, fasthttp.StatusConflict, fmt.Sprintf("task %q runs step %q of workflow %q: change the workflow (/api/v1/workflows/%s), or kill one step run by its ticket",
				name, name[i+1:], name[:i], name[:i]))
			return
		}
		next(c)
	}
}
