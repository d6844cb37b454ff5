package admin

import (
	"context"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wire"
)

// killReason is a kill's reason: Reason, else Note.
func killReason(b wire.KillBody) string {
	if b.Reason != "" {
		return b.Reason
	}
	return b.Note
}

// killRun is POST /api/v1/runs/{ticket}/kill {"reason"}: the run with ticket ends KILLED,
// whatever its kind (periodic, run-now, allow_all, backfill). It answers the run's record
// as the kill left it; 404 for an unknown ticket, 409 for a run that has ended.
func (s *Server) killRun(c *fasthttp.RequestCtx) {
	var b wire.KillBody
	if err := decodeOptional(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	run, err := s.cfg.Engine.API().KillRun(ctx, param(c, "ticket"), killReason(b), actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, run)
}

// byTicket routes a call about the run its path names ({ticket}) as a call about the run's
// task: on a sharded node, to the node that schedules the task's shard, which holds the run
// in flight. A ticket the database does not know (or cannot be read) is served here, where it
// is answered as it would be anywhere.
func (s *Server) byTicket(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if s.shards == nil {
		return next
	}
	return func(c *fasthttp.RequestCtx) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		run, err := s.cfg.Store.GetRun(ctx, param(c, "ticket"))
		cancel()
		if err != nil {
			if !errors.Is(err, model.ErrRunNotFound) {
				s.log.Warn("cannot read a run to route a call", "ticket", param(c, "ticket"), "error", err)
			}
			next(c)
			return
		}
		s.shards.route(c, model.ShardOf(run.TaskName), false, next)
	}
}
