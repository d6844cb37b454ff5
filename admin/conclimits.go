package admin

import (
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/wire"
)

// listConcurrencyLimits is GET /api/v1/concurrency-limits: every limit with its runs in
// flight and the fires waiting for it.
func (s *Server) listConcurrencyLimits(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	ls, err := s.cfg.Engine.API().ConcurrencyLimits(ctx)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, wire.ConcurrencyLimitList{Limits: ls})
}

func (s *Server) getConcurrencyLimit(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	v, err := s.cfg.Engine.API().ConcurrencyLimit(ctx, param(c, "kind"), param(c, "name"))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, v)
}

// putConcurrencyLimit is PUT /api/v1/concurrency-limits/{group|key}/{name} {"max": N}.
func (s *Server) putConcurrencyLimit(c *fasthttp.RequestCtx) {
	var b wire.ConcurrencyLimitBody
	if err := decodeStrict(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	if b.Max == nil {
		writeErr(c, fasthttp.StatusBadRequest, "max: is required: the runs in flight at once, 1.."+strconv.Itoa(engine.MaxConcurrencyLimit))
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	v, err := s.cfg.Engine.API().SetConcurrencyLimit(ctx, param(c, "kind"), param(c, "name"), *b.Max, actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, v)
}

func (s *Server) deleteConcurrencyLimit(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	kind, name := param(c, "kind"), param(c, "name")
	if err := s.cfg.Engine.API().DeleteConcurrencyLimit(ctx, kind, name, actor(c)); err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, map[string]string{"deleted": kind + " " + name})
}
