package admin

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
)

// Sentinel errors.
var (
	// ErrUnauthorized: a token is configured and the request did not carry it.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrBadRequest wraps malformed request parameters.
	ErrBadRequest = errors.New("bad request")
)

// statusOf maps errors to HTTP status codes: the one place where that mapping lives.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrBadRequest), errors.Is(err, engine.ErrInvalidTask), errors.Is(err, persist.ErrBadFilter),
		errors.Is(err, protocol.ErrMalformed):
		return fasthttp.StatusBadRequest
	case errors.Is(err, persist.ErrRejected):
		return fasthttp.StatusBadRequest
	case errors.Is(err, engine.ErrForeignApp), errors.Is(err, engine.ErrForeignExecutor):
		return fasthttp.StatusForbidden
	case errors.Is(err, ErrUnauthorized):
		return fasthttp.StatusUnauthorized
	case errors.Is(err, engine.ErrTaskNotFound), errors.Is(err, engine.ErrRunNotFound), errors.Is(err, engine.ErrBackfillNotFound),
		errors.Is(err, model.ErrExecutorNotFound), errors.Is(err, engine.ErrUnknownExecutor),
		errors.Is(err, engine.ErrLimitNotFound):
		return fasthttp.StatusNotFound
	case errors.Is(err, engine.ErrTaskExists), errors.Is(err, engine.ErrConflict),
		errors.Is(err, engine.ErrInvalidTransition), errors.Is(err, model.ErrVersionConflict),
		errors.Is(err, engine.ErrStaleTicket):
		return fasthttp.StatusConflict
	case errors.Is(err, persist.ErrWriterBusy), errors.Is(err, engine.ErrConcurrencyLimit), errors.Is(err, engine.ErrTooManyExecutors):
		return fasthttp.StatusTooManyRequests
	case errors.Is(err, engine.ErrNotRunning), errors.Is(err, model.ErrLeaseLost), errors.Is(err, engine.ErrStoreStalled),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, model.ErrShardNotHeld), errors.Is(err, engine.ErrRunNotWaiting),
		errors.Is(err, persist.ErrWriterClosed):
		return fasthttp.StatusServiceUnavailable
	default:
		return fasthttp.StatusInternalServerError
	}
}

func (s *Server) fail(c *fasthttp.RequestCtx, err error) {
	code, msg := s.errorOf(c, err)
	if code == fasthttp.StatusTooManyRequests || errors.Is(err, model.ErrShardNotHeld) || errors.Is(err, persist.ErrWriterClosed) {
		c.Response.Header.Set("Retry-After", strconv.Itoa(RetryAfterBusySec))
	}
	writeErr(c, code, msg)
}

// errorOf returns the status and message err is answered with, logging internal errors.
func (s *Server) errorOf(c *fasthttp.RequestCtx, err error) (int, string) {
	code := statusOf(err)
	msg := err.Error()
	if code == fasthttp.StatusInternalServerError {
		s.log.Error("API call failed", "method", string(c.Method()), "path", string(c.Path()), "error", err)
	}
	// Validation messages already name the field; drop the sentinel's prefix for readability.
	msg = strings.TrimPrefix(msg, engine.ErrInvalidTask.Error()+": ")
	msg = strings.TrimPrefix(msg, ErrBadRequest.Error()+": ")
	msg = strings.TrimPrefix(msg, persist.ErrBadFilter.Error()+": ")
	msg = strings.TrimPrefix(msg, engine.ErrForeignApp.Error()+": ")
	msg = strings.TrimPrefix(msg, engine.ErrForeignExecutor.Error()+": ")
	return code, msg
}

func writeErr(c *fasthttp.RequestCtx, code int, msg string) {
	writeJSON(c, code, map[string]string{"error": msg})
}

func writeJSON(c *fasthttp.RequestCtx, code int, v any) {
	c.SetStatusCode(code)
	c.SetContentType("application/json")
	enc := json.NewEncoder(c)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		c.SetStatusCode(fasthttp.StatusInternalServerError)
	}
}
