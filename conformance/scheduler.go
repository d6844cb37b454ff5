package conformance

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/axe-sched/axe/protocol"
)

// Timings the suite's scheduler answers a registration with: short, so that heartbeats (and
// the re-registration after a 404) come within a second or so.
const (
	heartbeatIntervalMS = 500
	lostAfterMS         = 10000
)

// scheduler is the suite's stand-in for axe: a real HTTP server on loopback serving the
// scheduler's half of the executor protocol. It records every call, answers as axe does,
// and can refuse results and heartbeats on purpose.
type scheduler struct {
	token string
	srv   *http.Server
	ln    net.Listener

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every recorded call
	regs    []protocol.Register
	beats   []beatCall
	deregs  []protocol.Deregister
	results map[string][]protocol.Result // by ticket, every result received and decoded
	posts   map[string]int               // by ticket, every post of a result, refused ones too
	acked   map[string]bool              // tickets whose result was acknowledged (200)
	refuse  map[string]int               // by ticket, how many more posts to answer 503
	beat404 int                          // how many more heartbeats to answer 404
	faults  []string                     // calls the scheduler refused as malformed or unauthorized
}

// beatCall is one heartbeat and what it was answered.
type beatCall struct {
	protocol.Heartbeat
	code int
}

func newScheduler(listen, token string) (*scheduler, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("cannot listen for the executor at %s: %w", listen, err)
	}
	s := &scheduler{
		token:   token,
		ln:      ln,
		changed: make(chan struct{}),
		results: map[string][]protocol.Result{},
		posts:   map[string]int{},
		acked:   map[string]bool{},
		refuse:  map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+protocol.PathRegister, s.handleRegister)
	mux.HandleFunc("POST "+protocol.PathHeartbeat, s.handleHeartbeat)
	mux.HandleFunc("POST "+protocol.PathCallback, s.handleCallback)
	mux.HandleFunc("POST "+protocol.PathCallbackBatch, s.handleCallbackBatch)
	mux.HandleFunc("POST "+protocol.PathDeregister, s.handleDeregister)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the scheduler's base URL, what AXE_SCHEDULERS carries.
func (s *scheduler) URL() string { return "http://" + s.ln.Addr().String() }

func (s *scheduler) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		_ = s.srv.Close()
	}
}

// record runs f under the lock and wakes every waiter.
func (s *scheduler) record(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

// wait polls cond (under the lock) at every recorded call until it holds or timeout passes.
func (s *scheduler) wait(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		ok, ch := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// fault records a refused call and answers it.
func (s *scheduler) fault(w http.ResponseWriter, code int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.record(func() { s.faults = append(s.faults, msg) })
	answer(w, code, protocol.Error{Error: msg})
}

func answer(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// read checks the executor's bearer token and reads a body of at most limit bytes into v
// as the scheduler does (protocol.DecodeMessage, then v's Check). It answers and returns
// false when the call is refused.
func (s *scheduler) read(w http.ResponseWriter, r *http.Request, limit int64, v interface{ Check() error }) bool {
	body, ok := s.readBody(w, r, limit)
	if !ok {
		return false
	}
	err := protocol.DecodeMessage(body, v)
	if err == nil {
		err = v.Check()
	}
	if err != nil {
		s.fault(w, http.StatusBadRequest, "%s: %v", r.URL.Path, err)
		return false
	}
	return true
}

// readBody checks the executor's bearer token and reads a body of at most limit bytes.
func (s *scheduler) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	if s.token != "" {
		want := "Bearer " + s.token
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
			s.fault(w, http.StatusUnauthorized, "%s: missing or invalid token (the executor must send Authorization: Bearer <its token>)", r.URL.Path)
			return nil, false
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		s.fault(w, http.StatusBadRequest, "%s: cannot read the body: %v", r.URL.Path, err)
		return nil, false
	}
	if int64(len(body)) > limit {
		s.fault(w, http.StatusRequestEntityTooLarge, "%s: body over %d bytes", r.URL.Path, limit)
		return nil, false
	}
	return body, true
}

func (s *scheduler) handleRegister(w http.ResponseWriter, r *http.Request) {
	var reg protocol.Register
	if !s.read(w, r, protocol.MaxRegisterBodyBytes, &reg) {
		return
	}
	s.record(func() { s.regs = append(s.regs, reg) })
	answer(w, http.StatusOK, protocol.RegisterAnswer{HeartbeatIntervalMS: heartbeatIntervalMS, LostAfterMS: lostAfterMS,
		Version: protocol.Version})
}

func (s *scheduler) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	var hb protocol.Heartbeat
	if !s.read(w, r, protocol.MaxHeartbeatBodyBytes, &hb) {
		return
	}
	code := http.StatusOK
	s.record(func() {
		last, known := s.latest()
		switch {
		case s.beat404 > 0:
			s.beat404--
			code = http.StatusNotFound
		case !known || last.App != hb.App || last.Address != hb.Address:
			code = http.StatusNotFound
		case hb.Incarnation != "" && hb.Incarnation != last.Incarnation:
			code = http.StatusNotFound
		}
		s.beats = append(s.beats, beatCall{Heartbeat: hb, code: code})
	})
	if code == http.StatusNotFound {
		answer(w, code, protocol.Error{Error: "unknown executor"})
		return
	}
	answer(w, code, struct{}{})
}

// latest is the last registration (under the lock).
func (s *scheduler) latest() (protocol.Register, bool) {
	if len(s.regs) == 0 {
		return protocol.Register{}, false
	}
	return s.regs[len(s.regs)-1], true
}

func (s *scheduler) handleDeregister(w http.ResponseWriter, r *http.Request) {
	var d protocol.Deregister
	if !s.read(w, r, protocol.MaxHeartbeatBodyBytes, &d) {
		return
	}
	s.record(func() { s.deregs = append(s.deregs, d) })
	answer(w, http.StatusOK, protocol.DeregisterAnswer{OK: true})
}

func (s *scheduler) handleCallback(w http.ResponseWriter, r *http.Request) {
	var res protocol.Result
	if !s.read(w, r, protocol.MaxResultBodyBytes, &res) {
		return
	}
	item := s.settle(res)
	if item.Status != http.StatusOK {
		answer(w, item.Status, protocol.Error{Error: item.Error})
		return
	}
	answer(w, http.StatusOK, protocol.CallbackAnswer{OK: true, Duplicate: item.Duplicate})
}

func (s *scheduler) handleCallbackBatch(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r, protocol.MaxResultBodyBytes)
	if !ok {
		return
	}
	results, errs, err := protocol.DecodeResultBatch(body)
	if err != nil {
		s.fault(w, http.StatusBadRequest, "%s: %v", r.URL.Path, err)
		return
	}
	out := protocol.CallbackBatchAnswer{Results: make([]protocol.CallbackItem, len(results))}
	for i, res := range results {
		if errs[i] != nil {
			msg := fmt.Sprintf("%s: results[%d]: %v", r.URL.Path, i, errs[i])
			s.record(func() { s.faults = append(s.faults, msg) })
			out.Results[i] = protocol.CallbackItem{Status: http.StatusBadRequest, Error: msg}
			continue
		}
		out.Results[i] = s.settle(res)
	}
	answer(w, http.StatusOK, out)
}

// settle records one checked result and says what a single callback would answer for it:
// 503 while the ticket is to be refused, 400 for a result that is not the registered
// executor's, else 200, duplicate when the ticket was acknowledged before.
func (s *scheduler) settle(res protocol.Result) protocol.CallbackItem {
	var item protocol.CallbackItem
	s.record(func() {
		s.posts[res.Ticket]++
		last, _ := s.latest()
		switch {
		case res.App != last.App || res.Address != last.Address:
			item = protocol.CallbackItem{Status: http.StatusBadRequest, Error: fmt.Sprintf(
				"app, address: the result names %s at %s, the executor registered %s at %s", res.App, res.Address, last.App, last.Address)}
		case s.refuse[res.Ticket] > 0:
			s.refuse[res.Ticket]--
			item = protocol.CallbackItem{Status: http.StatusServiceUnavailable, Error: "refused on purpose: the result must be re-sent"}
		default:
			item = protocol.CallbackItem{Status: http.StatusOK, OK: true, Duplicate: s.acked[res.Ticket]}
			s.acked[res.Ticket] = true
		}
		if item.Status == http.StatusBadRequest {
			s.faults = append(s.faults, "result of "+res.Ticket+": "+item.Error)
			return
		}
		s.results[res.Ticket] = append(s.results[res.Ticket], res)
	})
	return item
}

// waitResult waits for the n-th result of ticket (1-based) and returns it.
func (s *scheduler) waitResult(ctx context.Context, timeout time.Duration, ticket string, n int) (protocol.Result, error) {
	var got protocol.Result
	ok := s.wait(ctx, timeout, func() bool {
		if rs := s.results[ticket]; len(rs) >= n {
			got = rs[n-1]
			return true
		}
		return false
	})
	if !ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		have := len(s.results[ticket])
		err := fmt.Errorf("no result #%d of ticket %s within %s (%d received)", n, ticket, timeout, have)
		if len(s.faults) > 0 {
			err = fmt.Errorf("%w; last call the scheduler refused: %s", err, s.faults[len(s.faults)-1])
		}
		return protocol.Result{}, err
	}
	return got, nil
}

// resultCount is how many results of ticket were received.
func (s *scheduler) resultCount(ticket string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.results[ticket])
}

// errNoRegistration is returned when no executor registered in time.
var errNoRegistration = errors.New("no executor registered")
