package executor

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/axe-sched/axe/protocol"
	"github.com/valyala/fasthttp"
)

// HTTP server limits. Runs are small JSON documents; the timeouts only protect against stuck
// peers, since every handler answers without waiting for the run itself.
const (
	serverReadTimeout  = 30 * time.Second
	serverWriteTimeout = 30 * time.Second
	serverIdleTimeout  = 2 * time.Minute
)

// Request body limits, one per endpoint (bodyLimit). fasthttp reads a whole body before the
// handler runs, so each limit is set once the headers are read (Server.HeaderReceived) and a
// body over it is refused with 413 before it is read, by its Content-Length (or after the
// limit, for a chunked one).
const (
	// maxRunBody bounds POST /axe/run: one run, whose params are at most 64 KiB of JSON.
	maxRunBody = 1 << 20
	// maxRunsBody bounds POST /axe/runs: up to protocol.MaxRunsPerCall runs (the scheduler
	// sends at most 512 KiB a call, or one run alone when it is larger).
	maxRunsBody = 4 << 20
	// maxSmallBody bounds every other request, and every request without the scheduler's
	// token when one is set: a caller that may not run anything cannot make the executor read
	// megabytes first.
	maxSmallBody = 4 << 10
)

// bodyLimit is the body limit of a request with these headers and the endpoint it names;
// authorized is false for a request without a plausible scheduler signature, held to
// maxSmallBody.
func (e *Executor) bodyLimit(h *fasthttp.RequestHeader) (limit int, endpoint string, authorized bool) {
	if !e.plausible(h) {
		return maxSmallBody, "", false
	}
	limit, endpoint = maxSmallBody, requestPath(h.RequestURI())
	switch endpoint {
	case protocol.PathRun:
		limit = maxRunBody
	case protocol.PathRuns:
		limit = maxRunsBody
	case protocol.PathKill:
		limit = protocol.MaxKillBodyBytes
	}
	return limit, endpoint, true
}

// requestPath is the path of a request URI, as the router will see it: an origin-form URI of
// plain characters ("/axe/run", "/axe/runs?x=1") directly, any other through fasthttp's parser
// (FuzzRequestPath holds the two to each other).
func requestPath(raw []byte) string {
	if plainURI(raw) {
		if i := bytes.IndexByte(raw, '?'); i >= 0 {
			raw = raw[:i]
		}
		return string(raw)
	}
	uri := fasthttp.AcquireURI()
	defer fasthttp.ReleaseURI(uri)
	if err := uri.Parse(nil, raw); err != nil {
		return ""
	}
	return string(uri.Path())
}

// plainURI reports whether raw is an origin-form URI the parser would not rewrite: letters,
// digits, '/', '-', '_', '.', and after a '?' also '=' and '&', with no empty or dot segment.
func plainURI(raw []byte) bool {
	if len(raw) == 0 || raw[0] != '/' {
		return false
	}
	query := false
	for i, c := range raw {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		case c == '/' && !query:
			if i+1 < len(raw) && (raw[i+1] == '/' || raw[i+1] == '.') {
				return false
			}
		case c == '.' && !query:
		case c == '?' && !query:
			query = true
		case (c == '=' || c == '&' || c == '.') && query:
		default:
			return false
		}
	}
	return true
}

// requestConfig is the server's HeaderReceived: the body limit of the request.
func (e *Executor) requestConfig(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	limit, _, _ := e.bodyLimit(h)
	return fasthttp.RequestConfig{MaxRequestBodySize: limit}
}

// requestError answers a request fasthttp could not read, in the protocol's error shape: 401
// for a body refused because the caller has no plausible scheduler signature (what it would have got had
// the body been small), 413 naming the limit for any other body over its limit; otherwise
// fasthttp's own statuses (431 for headers over the read buffer, 408 for a read that timed
// out, 400 for the rest).
func (e *Executor) requestError(rc *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var netErr *net.OpError
	switch {
	case errors.As(err, &small):
		writeJSON(rc, http.StatusRequestHeaderFieldsTooLarge, protocol.Error{Error: "request headers too large"})
		return
	case errors.As(err, &netErr) && netErr.Timeout():
		writeJSON(rc, http.StatusRequestTimeout, protocol.Error{Error: "request timed out"})
		return
	case !errors.Is(err, fasthttp.ErrBodyTooLarge):
		writeJSON(rc, http.StatusBadRequest, protocol.Error{Error: "malformed HTTP request"})
		return
	}
	rc.SetConnectionClose()
	limit, endpoint, authorized := e.bodyLimit(&rc.Request.Header)
	if !authorized {
		writeJSON(rc, http.StatusUnauthorized, protocol.Error{Error: protocol.ErrBadSignature.Error()})
		return
	}
	writeJSON(rc, http.StatusRequestEntityTooLarge, protocol.Error{
		Error: fmt.Sprintf("request body over the limit of %d bytes for %s", limit, endpoint)})
}

func (e *Executor) serve(ln net.Listener) {
	defer close(e.serveDone)
	if err := e.srv.Serve(ln); err != nil {
		e.log.Debug("executor HTTP server returned", "err", err)
	}
}

// serveHTTP routes the three executor endpoints. Authentication comes first so that an
// unauthenticated caller learns nothing, not even which paths exist.
func (e *Executor) serveHTTP(rc *fasthttp.RequestCtx) {
	if err := e.authorized(rc); err != nil {
		e.log.Warn("refused a call without a valid scheduler signature", "path", string(rc.Path()),
			"remote", rc.RemoteAddr().String(), "error", err)
		writeJSON(rc, http.StatusUnauthorized, protocol.Error{Error: err.Error()})
		return
	}
	switch string(rc.Path()) {
	case protocol.PathRun:
		if !rc.IsPost() {
			methodNotAllowed(rc, fasthttp.MethodPost)
			return
		}
		e.handleRun(rc)
	case protocol.PathRuns:
		if !rc.IsPost() {
			methodNotAllowed(rc, fasthttp.MethodPost)
			return
		}
		e.handleRuns(rc)
	case protocol.PathKill:
		if !rc.IsPost() {
			methodNotAllowed(rc, fasthttp.MethodPost)
			return
		}
		e.handleKill(rc)
	case protocol.PathBeat:
		if !rc.IsGet() {
			methodNotAllowed(rc, fasthttp.MethodGet)
			return
		}
		e.handleBeat(rc)
	default:
		writeJSON(rc, http.StatusNotFound, protocol.Error{Error: fmt.Sprintf("no endpoint %s", rc.Path())})
	}
}

// authScheme is the Register.Auth this executor sends: signed calls when it has a token.
func (e *Executor) authScheme() string {
	if e.dispatchKey == nil {
		return ""
	}
	return protocol.AuthSigned
}

// plausible reports, from the headers alone, whether a request may be read up to its
// endpoint's limit: no token is set, or it carries a well-formed signature of a time near
// now. authorized judges the whole request once it is read. (A probe of GET /axe/beat with
// the executor's own token needs no more than the small limit.)
func (e *Executor) plausible(h *fasthttp.RequestHeader) bool {
	return e.dispatchKey == nil || protocol.PlausibleCall(h.Peek(fasthttp.HeaderAuthorization), e.clock.Now())
}

// authorized checks that the scheduler signed the request: its path, X-Axe-Epoch header and
// body, for this executor's advertised address and current incarnation (the
// X-Axe-Incarnation header, which must be this process's own: a call captured before a
// restart is refused), under the key derived from Token. GET
// /axe/beat also takes this executor's own token as a bearer token, so an operator's probe
// needs no signature. Without a token, every request is authorized.
func (e *Executor) authorized(rc *fasthttp.RequestCtx) error {
	if e.dispatchKey == nil {
		return nil
	}
	h := &rc.Request.Header
	auth := h.Peek(fasthttp.HeaderAuthorization)
	if string(rc.Path()) == protocol.PathBeat && subtle.ConstantTimeCompare(auth, e.ownAuth) == 1 {
		return nil
	}
	return protocol.VerifyCallV2(e.dispatchKey, auth, e.advertise, string(rc.Path()),
		string(h.Peek(headerEpoch)), e.incarnation, string(h.Peek(protocol.HeaderIncarnation)), rc.PostBody(), e.clock.Now())
}

// handleRun admits a run; the result travels later by callback.
func (e *Executor) handleRun(rc *fasthttp.RequestCtx) {
	req, err := decodeRun(rc.PostBody())
	if err != nil {
		writeJSON(rc, http.StatusBadRequest, protocol.Error{Error: err.Error()})
		return
	}
	if err := checkRunHeaders(&rc.Request.Header, req); err != nil {
		writeJSON(rc, http.StatusBadRequest, protocol.Error{Error: err.Error()})
		return
	}
	if req.Epoch, err = requestEpoch(&rc.Request.Header, req.Epoch); err != nil {
		writeJSON(rc, http.StatusBadRequest, protocol.Error{Error: err.Error()})
		return
	}
	status, resp, after := e.admit(req)
	if after != nil {
		after()
	}
	if status == http.StatusAccepted {
		e.log.Debug("run accepted", "ticket", req.Ticket, "task", req.Task, "attempt", req.Attempt)
	}
	writeJSON(rc, status, resp)
}

// runAnswer answers one run of POST /axe/runs with what POST /axe/run would have answered.
type runAnswer struct {
	Code int `json:"code"`
	Body any `json:"body"`
}

// handleRuns admits several runs, each exactly as handleRun would: one refused run does not
// refuse the others. The scheduler sends them when more runs are due for this executor than
// its calls in flight can carry one by one.
func (e *Executor) handleRuns(rc *fasthttp.RequestCtx) {
	runs, err := decodeRuns(rc.PostBody())
	if err != nil {
		writeJSON(rc, http.StatusBadRequest, protocol.Error{Error: err.Error()})
		return
	}
	if _, err := requestEpoch(&rc.Request.Header, 0); err != nil {
		writeJSON(rc, http.StatusBadRequest, protocol.Error{Error: err.Error()})
		return
	}
	answers := make([]runAnswer, len(runs))
	var after []func()
	for i, run := range runs {
		if run.err == nil {
			run.req.Epoch, run.err = requestEpoch(&rc.Request.Header, run.req.Epoch)
		}
		if run.err != nil {
			answers[i] = runAnswer{http.StatusBadRequest, protocol.Error{Error: run.err.Error()}}
			continue
		}
		status, resp, a := e.admit(run.req)
		if a != nil {
			after = append(after, a)
		}
		answers[i] = runAnswer{status, resp}
	}
	for _, a := range after {
		a()
	}
	writeJSON(rc, http.StatusOK, struct {
		Results []runAnswer `json:"results"`
	}{answers})
}

// decodedRun is one run of POST /axe/runs as decodeRun would judge it alone.
type decodedRun struct {
	req protocol.Run
	err error
}

// decodeRuns decodes the body of POST /axe/runs (protocol.DecodeRunBatch): each run gets
// what decodeRun would return for it alone, so one malformed run refuses only itself.
func decodeRuns(body []byte) ([]decodedRun, error) {
	runs, errs, err := protocol.DecodeRunBatch(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRun, err)
	}
	out := make([]decodedRun, len(runs))
	for i, r := range runs {
		if errs[i] != nil {
			out[i].err = fmt.Errorf("%w: %w", ErrInvalidRun, errs[i])
			continue
		}
		out[i].req, out[i].err = checkRun(r)
	}
	return out, nil
}

// decodeRunsEach splits the body into its runs and decodes each alone with decodeRun: what
// decodeRuns must agree with (FuzzDecodeRuns).
func decodeRunsEach(body []byte) ([]decodedRun, error) {
	var r protocol.RunBatch
	if err := protocol.DecodeMessage(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRun, err)
	}
	if n := len(r.Runs); n == 0 || n > protocol.MaxRunsPerCall {
		_, _, err := protocol.DecodeRunBatch(body)
		return nil, fmt.Errorf("%w: %w", ErrInvalidRun, err)
	}
	out := make([]decodedRun, len(r.Runs))
	for i, raw := range r.Runs {
		out[i].req, out[i].err = decodeRun(raw)
	}
	return out, nil
}

// checkRunHeaders rejects X-Axe-* headers that contradict the body. The body is authoritative;
// the headers exist for proxies and access logs, and a mismatch means a broken intermediary.
func checkRunHeaders(h *fasthttp.RequestHeader, req protocol.Run) error {
	for _, c := range []struct{ name, want string }{
		{protocol.HeaderTicket, req.Ticket},
		{protocol.HeaderTask, req.Task},
		{protocol.HeaderAttempt, strconv.Itoa(req.Attempt)},
	} {
		if got := h.Peek(c.name); len(got) > 0 && string(got) != c.want {
			return fmt.Errorf("%w: header %s is %q but the body says %q", ErrInvalidRun, c.name, got, c.want)
		}
	}
	return nil
}

// handleKill cancels the context of a running or queued ticket.
func (e *Executor) handleKill(rc *fasthttp.RequestCtx) {
	k, err := decodeKill(rc.PostBody())
	if err != nil {
		writeJSON(rc, http.StatusBadRequest, protocol.Error{Error: err.Error()})
		return
	}
	if k.Epoch, err = requestEpoch(&rc.Request.Header, k.Epoch); err != nil {
		writeJSON(rc, http.StatusBadRequest, protocol.Error{Error: err.Error()})
		return
	}
	e.mu.Lock()
	status, resp, stale := e.staleEpoch(k.Epoch, k.Shard)
	ar, ok := e.running[k.Ticket]
	e.mu.Unlock()
	if stale {
		writeJSON(rc, status, resp)
		return
	}
	if !ok {
		writeJSON(rc, http.StatusNotFound, protocol.Error{Error: fmt.Sprintf("ticket %q is not running here", k.Ticket)})
		return
	}
	ar.kill(ErrKilled)
	e.log.Info("run killed", "ticket", k.Ticket, "task", ar.run.Task)
	writeJSON(rc, http.StatusOK, protocol.KillAnswer{Killed: true})
}

// decodeKill parses and checks a POST /axe/kill body, read tolerantly
// (protocol.DecodeMessage); the error names the field.
func decodeKill(body []byte) (protocol.Kill, error) {
	var k protocol.Kill
	if len(body) > protocol.MaxKillBodyBytes {
		return protocol.Kill{}, fmt.Errorf("kill body over the limit of %d bytes", protocol.MaxKillBodyBytes)
	}
	if err := protocol.DecodeMessage(body, &k); err != nil {
		return protocol.Kill{}, err
	}
	if err := k.Check(); err != nil {
		return protocol.Kill{}, err
	}
	return k, nil
}

func (e *Executor) handleBeat(rc *fasthttp.RequestCtx) {
	e.mu.Lock()
	running := e.inflight
	e.mu.Unlock()
	writeJSON(rc, http.StatusOK, protocol.Beat{App: e.cfg.App, Running: running, Handlers: e.handlerNames})
}

func methodNotAllowed(rc *fasthttp.RequestCtx, allow string) {
	rc.Response.Header.Set(fasthttp.HeaderAllow, allow)
	writeJSON(rc, http.StatusMethodNotAllowed, protocol.Error{Error: fmt.Sprintf("use %s", allow)})
}

func writeJSON(rc *fasthttp.RequestCtx, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":"cannot encode response"}`)
	}
	rc.SetStatusCode(status)
	rc.SetContentType("application/json")
	rc.SetBody(body)
}
