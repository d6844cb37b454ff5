package admin

// Backfills: POST /api/v1/tasks/{name}/backfill starts one (engine/api_backfill.go), and
// /api/v1/tasks/{name}/backfills lists them, reads one and cancels one.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/wire"
)

func (s *Server) backfillRoutes(api *router.Group) {
	h := s.authed
	api.POST("/tasks/{name}/backfill", h(s.byTask(s.createBackfill)))
	api.GET("/tasks/{name}/backfills", h(s.listBackfills))
	api.GET("/tasks/{name}/backfills/{id}", h(s.getBackfill))
	api.DELETE("/tasks/{name}/backfills/{id}", h(s.byTask(s.cancelBackfill)))
	api.POST("/tasks/{name}/backfills/{id}/cancel", h(s.byTask(s.cancelBackfill)))
}

// parseBackfillTime reads an RFC 3339 time of the body's field; "" is left zero for the
// engine to refuse. A time at or before the Unix epoch is refused: a backfill's fire times
// and its cursor are Unix milliseconds in which 0 stands for "none", so a fire time at
// 1970-01-01T00:00:00Z would end the range before it starts (the engine answered that the
// range held no fire time), and none before it is a time a schedule has run.
func parseBackfillTime(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s: must be an RFC 3339 time with a zone, got %q", ErrBadRequest, field, v)
	}
	if t.UnixMilli() <= 0 {
		return time.Time{}, fmt.Errorf("%w: %s: must be after 1970-01-01T00:00:00Z (Unix time 0 stands for none in a backfill's records), got %q",
			ErrBadRequest, field, v)
	}
	return t, nil
}

func (s *Server) createBackfill(c *fasthttp.RequestCtx) {
	var b wire.BackfillBody
	if err := decodeStrict(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	from, err := parseBackfillTime("from", b.From)
	if err != nil {
		s.fail(c, err)
		return
	}
	to, err := parseBackfillTime("to", b.To)
	if err != nil {
		s.fail(c, err)
		return
	}
	parallel := 1
	if b.Parallel != nil {
		parallel = *b.Parallel
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	v, err := s.cfg.Engine.API().Backfills().Create(ctx, param(c, "name"), engine.BackfillRequest{From: from, To: to, Parallel: parallel}, actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusCreated, v)
}

func backfillID(c *fasthttp.RequestCtx) (int64, error) {
	id, err := strconv.ParseInt(param(c, "id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: id: must be a backfill id (a positive integer), got %q", ErrBadRequest, param(c, "id"))
	}
	return id, nil
}

func (s *Server) getBackfill(c *fasthttp.RequestCtx) {
	id, err := backfillID(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	v, err := s.cfg.Engine.API().Backfills().Get(ctx, param(c, "name"), id)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, v)
}

func (s *Server) cancelBackfill(c *fasthttp.RequestCtx) {
	id, err := backfillID(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	v, err := s.cfg.Engine.API().Backfills().Cancel(ctx, param(c, "name"), id, actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, v)
}

func (s *Server) listBackfills(c *fasthttp.RequestCtx) {
	limit, err := intArg(c, "limit", ListLimitDefault, 1, ListLimitMax)
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	out, err := s.cfg.Engine.API().Backfills().List(ctx, param(c, "name"), limit)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, wire.BackfillList{Backfills: out, Count: len(out)})
}
