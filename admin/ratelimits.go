package admin

import (
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/ratelimit"
	"github.com/axe-sched/axe/wire"
)

func (s *Server) getRateLimits(c *fasthttp.RequestCtx) {
	writeJSON(c, 200, s.cfg.Engine.API().RateLimits())
}

func (s *Server) setRateLimit(c *fasthttp.RequestCtx) {
	var b wire.RateLimitBody
	if err := decodeStrict(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	if b.Rate < 0 {
		writeErr(c, fasthttp.StatusBadRequest, fmt.Sprintf("rate: must be >= 0 per second (0 removes the limit), got %v", b.Rate))
		return
	}
	if b.Burst < 0 {
		writeErr(c, fasthttp.StatusBadRequest, fmt.Sprintf("burst: must be >= 0, got %d", b.Burst))
		return
	}
	if b.Rate > 0 && b.Burst == 0 {
		b.Burst = max(1, int(min(b.Rate, engine.MaxRateLimit))) // the engine refuses a rate over it
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	if err := s.cfg.Engine.API().SetRateLimit(ctx, b.Downstream, ratelimit.Limit{Rate: b.Rate, Burst: b.Burst}, actor(c)); err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, s.cfg.Engine.API().RateLimits())
}
