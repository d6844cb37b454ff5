package admin

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wire"
)

// groupTimeout bounds a group's pause or resume: a group of 100K tasks goes a page at a
// time behind the firing path's writes.
const groupTimeout = 5 * time.Minute

// pauseGroup is POST /api/v1/groups/{group}/pause {"note"}: the group's tasks not paused yet
// are paused as the group's pause. Answer: {"group", "tasks" (paused now), "already_paused"}.
func (s *Server) pauseGroup(c *fasthttp.RequestCtx) { s.groupOp(c, true) }

// resumeGroup is POST /api/v1/groups/{group}/resume {"note"}: the tasks the group's pause
// paused are resumed; the group's other paused tasks stay paused and are named. Answer:
// {"group", "tasks" (resumed), "left_paused": [{"name","paused_by","note"}], "left_paused_count"}.
func (s *Server) resumeGroup(c *fasthttp.RequestCtx) { s.groupOp(c, false) }

func (s *Server) groupOp(c *fasthttp.RequestCtx, pause bool) {
	var b wire.NoteBody
	if err := decodeOptional(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	group := param(c, "group")
	var res engine.GroupResult
	var err error
	out := map[string]any{"group": group}
	if pause {
		res, err = s.cfg.Engine.API().PauseGroup(ctx, group, b.Note, actor(c))
		out["already_paused"] = res.AlreadyPaused
	} else {
		res, err = s.cfg.Engine.API().ResumeGroup(ctx, group, b.Note, actor(c))
		left := res.LeftPaused
		if left == nil {
			left = []wire.PausedTask{}
		}
		out["left_paused"], out["left_paused_count"] = left, res.LeftPausedCount
	}
	out["tasks"] = res.Changed
	if err != nil {
		code, msg := s.errorOf(c, err)
		if code >= 500 && (res.Changed > 0 || errors.Is(err, model.ErrShardNotHeld)) {
			// Part of the group was done: the answer says what, with why the rest was not.
			if errors.Is(err, model.ErrShardNotHeld) {
				c.Response.Header.Set("Retry-After", strconv.Itoa(RetryAfterBusySec))
			}
			out["error"] = msg
			writeJSON(c, code, out)
			return
		}
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, out)
}

// concatLists appends, to each list of merged, the list of the same key in m: the answers
// of a call made of every node (fanOut) name what each did.
func concatLists(merged, m map[string]any) {
	for k, v := range m {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		have, _ := merged[k].([]any)
		merged[k] = append(have, list...)
	}
}
