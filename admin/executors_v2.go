package admin

import (
	"github.com/axe-sched/axe/protocol"
	"github.com/valyala/fasthttp"
)

// deregisterExecutor serves POST /api/v1/executors/deregister (docs/protocol.md): the
// executor stops getting new runs at once; the runs it holds go on and their results are
// taken. Executor scope; a token bound to apps deregisters only an executor of one of them
// (403). Idempotent: an unknown executor, or one already gone, is answered 200 too.
func (s *Server) deregisterExecutor(c *fasthttp.RequestCtx) {
	var msg protocol.Deregister
	if err := decodeMessage(c, &msg); err != nil {
		s.fail(c, err)
		return
	}
	if !s.allowApp(c, msg.App) {
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	if err := s.cfg.Engine.DeregisterExecutor(ctx, msg.App, msg.Address, msg.Incarnation); err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, protocol.DeregisterAnswer{OK: true})
}
