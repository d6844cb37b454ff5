package admin

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"
)

func (s *Server) readyz(c *fasthttp.RequestCtx) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Store.Ping(ctx); err != nil {
		writeErr(c, fasthttp.StatusServiceUnavailable, "store unreachable: "+err.Error())
		return
	}
	if s.ready != nil {
		if err := s.ready(); err != nil {
			writeErr(c, fasthttp.StatusServiceUnavailable, err.Error())
			return
		}
	}
	writeJSON(c, 200, map[string]string{"status": "ready", "shards": allShards})
}
