package admin

import (
	"github.com/valyala/fasthttp"
)

func (s *Server) getRun(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	run, err := s.cfg.Engine.API().Run(ctx, param(c, "ticket"))
	if err != nil {
		s.fail(c, err)
		return
	}
	s.maskRunParams(ctx, run)
	writeJSON(c, 200, run)
}
