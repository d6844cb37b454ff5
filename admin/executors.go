package admin

import (
	"bytes"
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/wire"
)

func (s *Server) listExecutors(c *fasthttp.RequestCtx) {
	list := s.cfg.Engine.API().ExecutorViews()
	writeJSON(c, 200, map[string]any{"executors": list, "count": len(list)})
}

// decodeMessage decodes a required body of the executor protocol tolerantly
// (protocol.DecodeMessage: one object, members it does not know skipped, no repeated key,
// valid UTF-8, nothing after it) and checks it; the error names the field. The operators'
// API decodes strictly (decodeStrict).
func decodeMessage(c *fasthttp.RequestCtx, v interface{ Check() error }) error {
	if err := protocol.DecodeMessage(c.PostBody(), v); err != nil {
		return err
	}
	return v.Check()
}

func (s *Server) registerExecutor(c *fasthttp.RequestCtx) {
	var msg protocol.Register
	if err := decodeMessage(c, &msg); err != nil {
		s.fail(c, err)
		return
	}
	if !s.allowApp(c, msg.App) {
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	reg := wire.ExecutorRegistration{App: msg.App, Address: msg.Address, Protocol: msg.Protocol, Handlers: msg.Handlers,
		Auth: msg.Auth, Version: msg.Version, Incarnation: msg.Incarnation, Token: presentedToken(c)}
	if err := s.cfg.Engine.API().Executors().Register(ctx, reg); err != nil {
		s.fail(c, err)
		return
	}
	hb, lost := s.cfg.Engine.API().Executors().Timings()
	writeJSON(c, 200, protocol.RegisterAnswer{HeartbeatIntervalMS: hb.Milliseconds(), LostAfterMS: lost.Milliseconds(),
		Version: protocol.Version})
}

// presentedToken is the bearer token of the request, "" for none: an executor's dispatch key
// is derived from it (protocol.DispatchKey).
func presentedToken(c *fasthttp.RequestCtx) string {
	t, ok := bytes.CutPrefix(c.Request.Header.Peek(fasthttp.HeaderAuthorization), []byte("Bearer "))
	if !ok {
		return ""
	}
	return string(t)
}

func (s *Server) executorHeartbeat(c *fasthttp.RequestCtx) {
	var hb protocol.Heartbeat
	if err := decodeMessage(c, &hb); err != nil {
		s.fail(c, err)
		return
	}
	if !s.allowApp(c, hb.App) {
		return
	}
	if err := s.cfg.Engine.API().Executors().CheckIncarnation(hb.App, hb.Address, hb.Incarnation); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	if err := s.cfg.Engine.API().Executors().Heartbeat(ctx, hb.App, hb.Address, presentedToken(c)); err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, map[string]any{})
}

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
	if err := s.cfg.Engine.API().Executors().Deregister(ctx, msg.App, msg.Address, msg.Incarnation); err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusOK, protocol.DeregisterAnswer{OK: true})
}

// callback records one result. A token bound to apps reports only as one of them (allowApp),
// and the engine refuses a result naming an app other than its run's (engine.ErrForeignApp):
// together, an executor cannot settle another app's run.
func (s *Server) callback(c *fasthttp.RequestCtx) {
	var rep engine.Report
	if err := decodeMessage(c, &rep); err != nil {
		s.fail(c, err)
		return
	}
	if !s.allowApp(c, rep.App) {
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	dup, err := s.cfg.Engine.API().ReportResult(ctx, rep)
	if err != nil {
		s.fail(c, err)
		return
	}
	if dup {
		writeJSON(c, 200, map[string]bool{"ok": true, "duplicate": true})
		return
	}
	writeJSON(c, 200, map[string]bool{"ok": true})
}

// MaxCallbackBatch is the most results one POST /api/v1/callback/batch may carry.
const MaxCallbackBatch = protocol.MaxResultsPerCall

// callbackBatch records several results in one call, each exactly as callback would: a
// result refused (malformed, of another app, stale) does not refuse the others. The call
// itself fails only when the body is not a batch.
func (s *Server) callbackBatch(c *fasthttp.RequestCtx) {
	results, bad, err := protocol.DecodeResultBatch(c.PostBody())
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	out := make([]protocol.CallbackItem, len(results))
	p := principalOf(c)
	// Begin every result, then wait for each to be recorded: they share group commits, and
	// each is acknowledged only once durable.
	waits := make([]engine.ReportWait, len(results))
	for i, rep := range results {
		switch {
		case bad[i] != nil:
			out[i] = protocol.CallbackItem{Status: fasthttp.StatusBadRequest, Error: bad[i].Error()}
			continue
		case p != nil && !p.mayActFor(rep.App):
			out[i] = protocol.CallbackItem{Status: fasthttp.StatusForbidden, Error: fmt.Sprintf("token %q may not act for executor app %q", p.name, rep.App)}
			continue
		}
		waits[i] = s.cfg.Engine.API().BeginReport(ctx, rep)
	}
	for i, wait := range waits {
		if wait == nil {
			continue
		}
		dup, err := wait(ctx)
		if err != nil {
			code, msg := s.errorOf(c, err)
			out[i] = protocol.CallbackItem{Status: code, Error: msg}
			continue
		}
		out[i] = protocol.CallbackItem{Status: fasthttp.StatusOK, OK: true, Duplicate: dup}
	}
	writeJSON(c, 200, map[string]any{"results": out})
}
