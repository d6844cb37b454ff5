// Package schedpeer is a minimal stand-in for the axe scheduler, used by the executor and
// agent tests: a real fasthttp server on loopback that implements the scheduler half of the
// executor protocol (register, heartbeat, callback), records every call, can inject faults,
// and can dispatch and kill runs on an executor. It implements docs/protocol.md independently
// of the SDK's own types, so the tests check the wire format, not shared structs.
//
// It is test support only: no scheduling, no persistence. Production code must not import it.
package schedpeer

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/axe-sched/axe/protocol"
	"github.com/valyala/fasthttp"
)

// Protocol paths served by the peer.
const (
	PathRegister      = protocol.PathRegister
	PathHeartbeat     = protocol.PathHeartbeat
	PathCallback      = protocol.PathCallback
	PathCallbackBatch = protocol.PathCallbackBatch
	PathDeregister    = protocol.PathDeregister
)

// WaitTimeout bounds every Wait* call: a generous limit on real I/O, never a pacing sleep.
const WaitTimeout = 10 * time.Second

// Config configures a Peer.
type Config struct {
	// Addr is the listen address. Defaults to "127.0.0.1:0".
	Addr string
	// Token, when set, is required on calls to the peer and sent on calls the peer makes.
	Token string
	// HeartbeatIntervalMS is returned by register. Defaults to 10000.
	HeartbeatIntervalMS int64
	// LostAfterMS is returned by register. Defaults to 30000.
	LostAfterMS int64
	// CallbackDelay holds every result callback (single or batch) this long before
	// answering it, as a scheduler under load would; calls are held concurrently.
	CallbackDelay time.Duration
	// Hold, when set, holds every result callback until it is closed; Arrived counts the
	// calls waiting on it. It lets a test keep every result sender of an executor busy.
	Hold <-chan struct{}
	// TLS, when set, serves the peer over HTTPS with it (URL is then https://).
	TLS *tls.Config
	// ExecutorTLS, when set, makes the calls to executors (Dispatch, Kill, Beat, Post) over
	// HTTPS with it as the client configuration.
	ExecutorTLS *tls.Config
}

// Registration is one decoded register body.
type Registration = protocol.Register

// Heartbeat is one decoded heartbeat body.
type Heartbeat = protocol.Heartbeat

// Callback is one decoded result callback body.
type Callback = protocol.Result

// Call is one request the peer received, with the status it answered.
type Call struct {
	Path   string
	Auth   string
	Body   []byte
	Status int
}

// Run is the body of POST /axe/run as the scheduler sends it.
type Run = protocol.Run

// Response is an executor's answer to a call the peer made.
type Response struct {
	Status int
	Body   []byte
}

// Decode unmarshals the response body into v.
func (r Response) Decode(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("cannot decode %q: %w", r.Body, err)
	}
	return nil
}

type executorKey struct{ app, address string }

// Peer is a running stand-in scheduler.
type Peer struct {
	cfg    Config
	ln     net.Listener
	srv    *fasthttp.Server
	client *fasthttp.Client
	done   chan struct{}

	mu          sync.Mutex
	unavailable bool
	primary     string // named in the 503 body while unavailable
	faults      map[string][]int
	executors   map[executorKey]Registration
	tickets     map[string]string // ticket → "open" | "done" | "stale"
	calls       []Call
	counts      map[string]int // calls per path
	results     []Callback     // every result received, single or in a batch, in order
	ticketFault map[string][]int
	arrived     int // result calls received, counted before Hold and CallbackDelay
	changed     chan struct{}
}

// Start listens and serves until Close.
func Start(cfg Config) (*Peer, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.HeartbeatIntervalMS == 0 {
		cfg.HeartbeatIntervalMS = 10000
	}
	if cfg.LostAfterMS == 0 {
		cfg.LostAfterMS = 30000
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w", cfg.Addr, err)
	}
	p := &Peer{
		cfg:       cfg,
		ln:        ln,
		client:    &fasthttp.Client{Name: "schedpeer", ReadTimeout: WaitTimeout, WriteTimeout: WaitTimeout, TLSConfig: cfg.ExecutorTLS},
		done:      make(chan struct{}),
		faults:    make(map[string][]int),
		executors: make(map[executorKey]Registration),
		tickets:   make(map[string]string),
		counts:    make(map[string]int),
		changed:   make(chan struct{}),

		ticketFault: make(map[string][]int),
	}
	p.srv = &fasthttp.Server{Handler: p.serve, Name: "schedpeer"}
	serveLn := ln
	if cfg.TLS != nil {
		serveLn = tls.NewListener(ln, cfg.TLS)
	}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(serveLn)
	}()
	return p, nil
}

// URL is the base URL executors are configured with.
func (p *Peer) URL() string {
	if p.cfg.TLS != nil {
		return "https://" + p.ln.Addr().String()
	}
	return "http://" + p.ln.Addr().String()
}

// Addr is the listen address.
func (p *Peer) Addr() string { return p.ln.Addr().String() }

// Close stops serving and drops kept-alive connections.
func (p *Peer) Close() error {
	err := p.srv.Shutdown()
	_ = p.ln.Close() // in case Serve had not registered it yet when Shutdown ran
	<-p.done
	p.client.CloseIdleConnections()
	return err
}

// SetUnavailable makes the peer answer 503 to every executor call, like a backup scheduler.
func (p *Peer) SetUnavailable(unavailable bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unavailable = unavailable
	p.primary = ""
}

// SetBackupOf makes the peer answer every executor call like a backup scheduler that knows
// the primary: 503 {"error": "this node is a backup", "primary": primary}.
func (p *Peer) SetBackupOf(primary string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unavailable = true
	p.primary = primary
}

// FailNext makes the next len(statuses) calls to path answer those statuses.
func (p *Peer) FailNext(path string, statuses ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[path] = append(p.faults[path], statuses...)
}

// FailTicket makes the next len(statuses) results for ticket, alone or within a batch,
// answer those statuses.
func (p *Peer) FailTicket(ticket string, statuses ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ticketFault[ticket] = append(p.ticketFault[ticket], statuses...)
}

// Forget drops every registration, as a restarted scheduler without state would.
func (p *Peer) Forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.executors)
}

// OpenTicket makes the peer accept a callback for ticket without having dispatched it, as a
// restarted scheduler does for the runs it reloads from its store.
func (p *Peer) OpenTicket(ticket string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tickets[ticket] = "open"
}

// MarkStale makes callbacks for ticket answer 409, as for a run that already timed out.
func (p *Peer) MarkStale(ticket string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tickets[ticket] = "stale"
}

// Executors returns the registry, one entry per (app, address).
func (p *Peer) Executors() []Registration {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Registration, 0, len(p.executors))
	for _, r := range p.executors {
		out = append(out, r)
	}
	return out
}

// Calls returns the calls received on path, in order.
func (p *Peer) Calls(path string) []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Call
	for _, c := range p.calls {
		if c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

// WaitCalls waits until at least n calls were received on path and returns them all.
func (p *Peer) WaitCalls(path string, n int) ([]Call, error) {
	if err := p.WaitCount(path, n); err != nil {
		return nil, err
	}
	return p.Calls(path), nil
}

// WaitCount waits until at least n calls were received on path.
func (p *Peer) WaitCount(path string, n int) error {
	return p.waitUntil(n, "calls to "+path, func() int { return p.counts[path] })
}

// WaitCallbacks waits until at least n results were received, alone or in batches, and
// returns every result received so far, in order, whatever it was answered.
func (p *Peer) WaitCallbacks(n int) ([]Callback, error) {
	if err := p.waitUntil(n, "results", func() int { return len(p.results) }); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Callback(nil), p.results...), nil
}

// WaitArrived waits until at least n result calls (single or batch) have reached the peer,
// counting those still held by Config.Hold or CallbackDelay.
func (p *Peer) WaitArrived(n int) error {
	return p.waitUntil(n, "result calls arrived", func() int { return p.arrived })
}

// waitUntil waits until count, read under mu, reaches n; what names the count in the error.
func (p *Peer) waitUntil(n int, what string, count func() int) error {
	deadline := time.NewTimer(WaitTimeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		have, changed := count(), p.changed
		p.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("schedpeer: %d %s after %s, want %d", have, what, WaitTimeout, n)
		}
	}
}

// BatchSizes returns how many results each batch call carried, in order.
func (p *Peer) BatchSizes() []int {
	var out []int
	for _, c := range p.Calls(PathCallbackBatch) {
		var b struct {
			Results []json.RawMessage `json:"results"`
		}
		_ = json.Unmarshal(c.Body, &b)
		out = append(out, len(b.Results))
	}
	return out
}

// Registrations returns every register call decoded.
func (p *Peer) Registrations() []Registration {
	calls := p.Calls(PathRegister)
	out := make([]Registration, len(calls))
	for i, c := range calls {
		_ = json.Unmarshal(c.Body, &out[i])
	}
	return out
}

// Heartbeats returns every heartbeat call decoded.
func (p *Peer) Heartbeats() []Heartbeat {
	calls := p.Calls(PathHeartbeat)
	out := make([]Heartbeat, len(calls))
	for i, c := range calls {
		_ = json.Unmarshal(c.Body, &out[i])
	}
	return out
}

// Dispatch sends run to the executor at address with the peer's token and the X-Axe-*
// headers, and remembers the ticket so its callback is accepted.
// A run without an attempt goes as attempt 1, a scheduler's first.
func (p *Peer) Dispatch(address string, run Run) (Response, error) {
	if run.Attempt == 0 {
		run.Attempt = 1
	}
	p.mu.Lock()
	if _, known := p.tickets[run.Ticket]; !known {
		p.tickets[run.Ticket] = "open"
	}
	p.mu.Unlock()
	body, err := json.Marshal(run)
	if err != nil {
		return Response{}, fmt.Errorf("cannot encode run: %w", err)
	}
	return p.Post(address, protocol.PathRun, body, p.cfg.Token, map[string]string{
		protocol.HeaderTask:    run.Task,
		protocol.HeaderTicket:  run.Ticket,
		protocol.HeaderAttempt: strconv.Itoa(run.Attempt),
	})
}

// DispatchBatch sends runs to the executor at address in one POST /axe/runs with the peer's
// token, and remembers their tickets so their callbacks are accepted.
func (p *Peer) DispatchBatch(address string, runs []Run) (Response, error) {
	p.mu.Lock()
	runs = slices.Clone(runs)
	for i, run := range runs {
		if _, known := p.tickets[run.Ticket]; !known {
			p.tickets[run.Ticket] = "open"
		}
		if run.Attempt == 0 {
			runs[i].Attempt = 1
		}
	}
	p.mu.Unlock()
	body, err := json.Marshal(map[string][]Run{"runs": runs})
	if err != nil {
		return Response{}, fmt.Errorf("cannot encode runs: %w", err)
	}
	return p.Post(address, protocol.PathRuns, body, p.cfg.Token, nil)
}

// Kill asks the executor at address to kill ticket.
func (p *Peer) Kill(address, ticket string) (Response, error) {
	body, _ := json.Marshal(map[string]string{"ticket": ticket})
	return p.Post(address, protocol.PathKill, body, p.cfg.Token, nil)
}

// KillAtEpoch asks the executor at address to kill ticket, as a scheduler of lease epoch
// epoch would.
func (p *Peer) KillAtEpoch(address, ticket string, epoch int64) (Response, error) {
	body, _ := json.Marshal(map[string]any{"ticket": ticket, "epoch": epoch})
	return p.Post(address, "/axe/kill", body, p.cfg.Token, nil)
}

// Beat calls GET /axe/beat on the executor at address.
func (p *Peer) Beat(address string) (Response, error) {
	return p.do(address, fasthttp.MethodGet, protocol.PathBeat, nil, p.cfg.Token, nil)
}

// Do makes a call without a body to path on the executor at address with exactly the given
// headers: no signature.
func (p *Peer) Do(address, method, path string, headers map[string]string) (Response, error) {
	return p.do(address, method, path, nil, "", headers)
}

// Post sends body to path on the executor at address, signed as the scheduler signs its
// calls to an executor that registered with token ("" for no signature): for the
// incarnation the executor at address last registered (in the X-Axe-Incarnation header,
// unless headers set that header, which is then signed as given), or as version 1 when it
// registered none.
func (p *Peer) Post(address, path string, body []byte, token string, headers map[string]string) (Response, error) {
	return p.do(address, fasthttp.MethodPost, path, body, token, headers)
}

func (p *Peer) do(address, method, path string, body []byte, token string, headers map[string]string) (Response, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	scheme := "http://"
	if p.cfg.ExecutorTLS != nil {
		scheme = "https://"
	}
	req.SetRequestURI(scheme + address + path)
	req.Header.SetMethod(method)
	req.Header.SetContentType("application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	if token != "" {
		inc := string(req.Header.Peek(protocol.HeaderIncarnation))
		if inc == "" {
			inc = p.incarnationOf(address)
		}
		if inc == "" {
			req.Header.Set("Authorization", protocol.SignCall(protocol.DispatchKey(token), time.Now(), address, path,
				string(req.Header.Peek("X-Axe-Epoch")), body))
		} else {
			req.Header.Set(protocol.HeaderIncarnation, inc)
			req.Header.Set("Authorization", protocol.SignCallV2(protocol.DispatchKey(token), time.Now(), address, path,
				string(req.Header.Peek("X-Axe-Epoch")), inc, body))
		}
	}
	req.SetBody(body)
	if err := p.client.DoTimeout(req, resp, WaitTimeout); err != nil {
		return Response{}, fmt.Errorf("cannot call %s%s: %w", address, path, err)
	}
	return Response{Status: resp.StatusCode(), Body: append([]byte(nil), resp.Body()...)}, nil
}

// incarnationOf is the incarnation the executor at address last registered, "" for none.
func (p *Peer) incarnationOf(address string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, r := range p.executors {
		if k.address == address {
			return r.Incarnation
		}
	}
	return ""
}

// Deregistrations returns every deregistration body received, in order.
func (p *Peer) Deregistrations() []protocol.Deregister {
	calls := p.Calls(PathDeregister)
	out := make([]protocol.Deregister, len(calls))
	for i, c := range calls {
		_ = json.Unmarshal(c.Body, &out[i])
	}
	return out
}

func (p *Peer) serve(rc *fasthttp.RequestCtx) {
	path := string(rc.Path())
	if path == PathCallback || path == PathCallbackBatch {
		p.mu.Lock()
		p.arrived++
		p.notifyLocked()
		p.mu.Unlock()
		if p.cfg.Hold != nil {
			<-p.cfg.Hold
		}
		if p.cfg.CallbackDelay > 0 {
			time.Sleep(p.cfg.CallbackDelay)
		}
	}
	body := append([]byte(nil), rc.PostBody()...)
	auth := string(rc.Request.Header.Peek("Authorization"))

	p.mu.Lock()
	defer p.mu.Unlock()
	status, resp := p.answerLocked(path, auth, body)
	p.calls = append(p.calls, Call{Path: path, Auth: auth, Body: body, Status: status})
	p.counts[path]++
	p.notifyLocked()

	out, _ := json.Marshal(resp)
	rc.SetStatusCode(status)
	rc.SetContentType("application/json")
	rc.SetBody(out)
}

func (p *Peer) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Peer) answerLocked(path, auth string, body []byte) (int, any) {
	if p.unavailable {
		return http.StatusServiceUnavailable, map[string]string{"error": "this node is a backup", "primary": p.primary}
	}
	if f := p.faults[path]; len(f) > 0 {
		p.faults[path] = f[1:]
		return f[0], errBody("injected fault")
	}
	if p.cfg.Token != "" && auth != "Bearer "+p.cfg.Token {
		return http.StatusUnauthorized, errBody("missing or invalid token")
	}
	switch path {
	case PathRegister:
		var r Registration
		if err := json.Unmarshal(body, &r); err != nil {
			return http.StatusBadRequest, errBody(err.Error())
		}
		if r.App == "" || r.Address == "" || (r.Protocol != "http" && r.Protocol != "https") || len(r.Handlers) == 0 {
			return http.StatusBadRequest, errBody("app, address, protocol and handlers are required")
		}
		p.executors[executorKey{r.App, r.Address}] = r
		return http.StatusOK, map[string]int64{
			"heartbeat_interval_ms": p.cfg.HeartbeatIntervalMS,
			"lost_after_ms":         p.cfg.LostAfterMS,
			"version":               protocol.Version,
		}
	case PathDeregister:
		// Recorded (Deregistrations) only: the executor stays known, and its heartbeats
		// while it drains are answered 200, as a scheduler answers them.
		var d protocol.Deregister
		if err := json.Unmarshal(body, &d); err != nil {
			return http.StatusBadRequest, errBody(err.Error())
		}
		return http.StatusOK, map[string]bool{"ok": true}
	case PathHeartbeat:
		var h Heartbeat
		if err := json.Unmarshal(body, &h); err != nil {
			return http.StatusBadRequest, errBody(err.Error())
		}
		if r, ok := p.executors[executorKey{h.App, h.Address}]; !ok || r.Incarnation != h.Incarnation {
			return http.StatusNotFound, errBody("unknown executor")
		}
		return http.StatusOK, struct{}{}
	case PathCallback:
		return p.resultLocked(body)
	case PathCallbackBatch:
		var b struct {
			Results []json.RawMessage `json:"results"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			return http.StatusBadRequest, errBody(err.Error())
		}
		if len(b.Results) == 0 {
			return http.StatusBadRequest, errBody("results: is required")
		}
		items := make([]map[string]any, len(b.Results))
		for i, r := range b.Results {
			status, resp := p.resultLocked(r)
			item := map[string]any{"status": status}
			switch v := resp.(type) {
			case map[string]bool:
				item["ok"], item["duplicate"] = v["ok"], v["duplicate"]
			case map[string]string:
				item["error"] = v["error"]
			}
			items[i] = item
		}
		return http.StatusOK, map[string]any{"results": items}
	}
	return http.StatusNotFound, errBody("no such endpoint")
}

// resultLocked records and answers one result, alone or from a batch.
func (p *Peer) resultLocked(body []byte) (int, any) {
	var c Callback
	if err := json.Unmarshal(body, &c); err != nil {
		return http.StatusBadRequest, errBody(err.Error())
	}
	p.results = append(p.results, c)
	if f := p.ticketFault[c.Ticket]; len(f) > 0 {
		p.ticketFault[c.Ticket] = f[1:]
		return f[0], errBody("injected fault")
	}
	if c.Status != "success" && c.Status != "failed" {
		return http.StatusBadRequest, errBody("status must be success or failed")
	}
	switch p.tickets[c.Ticket] {
	case "":
		return http.StatusNotFound, errBody("unknown ticket")
	case "stale":
		return http.StatusConflict, errBody("stale ticket")
	case "done":
		return http.StatusOK, map[string]bool{"ok": true, "duplicate": true}
	}
	p.tickets[c.Ticket] = "done"
	return http.StatusOK, map[string]bool{"ok": true}
}

func errBody(msg string) map[string]string { return map[string]string{"error": msg} }
