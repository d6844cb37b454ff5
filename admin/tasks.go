package admin

import (
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

func (s *Server) createTask(c *fasthttp.RequestCtx) {
	spec, err := engine.DecodeTaskSpec(c.PostBody())
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	t, err := s.cfg.Engine.API().CreateTask(ctx, spec, actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusCreated, taskView(t))
}

func (s *Server) updateTask(c *fasthttp.RequestCtx) {
	spec, err := engine.DecodeTaskSpec(c.PostBody())
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	s.unmaskSpec(ctx, param(c, "name"), spec)
	t, err := s.cfg.Engine.API().UpdateTask(ctx, param(c, "name"), spec, actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, taskView(t))
}

func (s *Server) getTask(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	t, err := s.cfg.Engine.API().GetTask(ctx, param(c, "name"))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, taskView(t))
}

func (s *Server) deleteTask(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	name := param(c, "name")
	if err := s.cfg.Engine.API().DeleteTask(ctx, name, actor(c)); err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, map[string]string{"deleted": name})
}

var validStates = map[string]model.State{}

func init() {
	for _, st := range []model.State{model.StateWaiting, model.StateScheduled, model.StateRunning,
		model.StateSuccess, model.StateFailed, model.StateRetrying, model.StatePaused, model.StateKilled} {
		validStates[string(st)] = st
	}
}

func (s *Server) listTasks(c *fasthttp.RequestCtx) {
	args := c.QueryArgs()
	f := persist.TaskFilter{Group: string(args.Peek("group"))}
	if st := string(args.Peek("state")); st != "" {
		state, ok := validStates[strings.ToUpper(st)]
		if !ok {
			writeErr(c, 400, fmt.Sprintf("state: unknown state %q", st))
			return
		}
		f.State = state
	}
	limit, err := intArg(c, "limit", ListLimitDefault, 1, ListLimitMax)
	if err != nil {
		s.fail(c, err)
		return
	}
	f.Limit = limit
	after, err := intArg(c, "after", 0, 0, 1<<62)
	if err != nil {
		s.fail(c, err)
		return
	}
	f.AfterID = int64(after)
	if err := pageArgs(c, &f); err != nil {
		s.fail(c, err)
		return
	}
	if err := s.findArgs(c, &f); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	list, last, err := s.cfg.Engine.API().ListTasksPage(ctx, f)
	if err != nil {
		s.fail(c, err)
		return
	}
	// The engine filters by state after reading (so the filter agrees with the in-memory
	// runtime it shows) and may then return more than the limit; the answer never does.
	if len(list) > limit {
		list = list[:limit]
	}
	out := make([]wire.TaskView, 0, len(list))
	for i := range list {
		out = append(out, taskView(&list[i]))
	}
	page := s.taskPage(ctx, c, f, list, out, last)
	if string(c.QueryArgs().Peek("total")) == "1" {
		if err := s.taskTotal(ctx, f, page); err != nil {
			s.fail(c, err)
			return
		}
	}
	writeJSON(c, 200, page)
}

func (s *Server) pauseTask(c *fasthttp.RequestCtx)  { s.pauseResume(c, true) }
func (s *Server) resumeTask(c *fasthttp.RequestCtx) { s.pauseResume(c, false) }

func (s *Server) pauseResume(c *fasthttp.RequestCtx, pause bool) {
	var b wire.NoteBody
	if err := decodeOptional(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	if len(b.Note) > 1024 {
		writeErr(c, 400, "note: at most 1024 characters")
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	var t *model.Task
	var err error
	if pause {
		t, err = s.cfg.Engine.API().Pause(ctx, param(c, "name"), b.Note, actor(c))
	} else {
		t, err = s.cfg.Engine.API().Resume(ctx, param(c, "name"), b.Note, actor(c))
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, taskView(t))
}

func (s *Server) runTask(c *fasthttp.RequestCtx) {
	var b wire.RunBody
	if err := decodeOptional(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	run, err := s.cfg.Engine.API().RunNow(ctx, param(c, "name"), s.unmaskParams(ctx, param(c, "name"), b.Params), actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusAccepted, wire.RunNowAnswer{Task: run.TaskName, Ticket: run.Ticket})
}

// killTask is POST /api/v1/tasks/{name}/kill {"reason"}: every run of the task in flight
// ends (runkill.go).
func (s *Server) killTask(c *fasthttp.RequestCtx) {
	var b wire.KillBody
	if err := decodeOptional(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	t, err := s.cfg.Engine.API().KillTask(ctx, param(c, "name"), killReason(b), actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, taskView(t))
}

func taskView(t *model.Task) wire.TaskView {
	v := wire.TaskView{TaskDef: t.Def, Runtime: wire.TaskRuntime{Runtime: t.Runtime}}
	maskDef(&v.TaskDef)
	if v.DependsOn == nil {
		v.DependsOn = []string{}
	}
	if v.Runtime.State == model.StateRunning {
		// The store keeps the running fire's due there (model.Runtime); the next fire is
		// not known until the run ends.
		v.Runtime.NextTriggerTime = 0
	}
	if n := v.Runtime.NextTriggerTime; n > 0 {
		loc, err := time.LoadLocation(t.Def.Timezone)
		if err != nil {
			loc = time.UTC
		}
		v.Runtime.NextFireAt = time.UnixMilli(n).In(loc).Format(time.RFC3339Nano)
		if t.Def.JitterSec > 0 && t.Def.Trigger == model.TriggerCron && v.Runtime.State == model.StateScheduled {
			j := engine.JitterOffset(t.Def.Name, n, t.Def.JitterSec)
			v.Runtime.NextJitterMS = &j
		}
	}
	return v
}
