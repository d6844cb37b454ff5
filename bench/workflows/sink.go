package workflows

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// receipt is one request the sink received.
type receipt struct {
	ticket     string
	runID      string // the step params' run_id; "" for a task that is no step
	step       string
	scheduled  int64 // the request's scheduled_at, Unix ms
	at         int64 // arrival, Unix ns
	answeredAt int64 // when the handler returned its answer, Unix ns
}

// sink is every step's and task's callback: it answers 200 at once (a step named split with
// the fan-out's items), keeps every receipt and never de-duplicates, so a request sent twice
// shows as two receipts.
type sink struct {
	srv    *fasthttp.Server
	ln     net.Listener
	served chan struct{}

	splitBody []byte // the answer of a step named "split"

	mu   sync.Mutex
	recs []receipt

	count atomic.Int64
	last  atomic.Int64 // the latest arrival, Unix ns

	// hold is the current holdFor, nil before the first.
	hold atomic.Pointer[hold]
	held atomic.Int64 // requests the current hold held
}

// hold: requests of step wait until n of them arrived (or idle passed without a new one),
// then are all released at once, each answered after a random delay in [0, spread); delays
// answers each request of a step after a random delay in its [lo, hi) (steps that take
// time, so that runs stay in flight).
type hold struct {
	step   string
	n      int
	spread time.Duration
	delays map[string][2]time.Duration
	heldAt atomic.Int64
	gate   chan struct{}
	once   sync.Once
}

func (h *hold) release() { h.once.Do(func() { close(h.gate) }) }

func startSink(fanOutItems int) (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{ln: ln, served: make(chan struct{})}
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := range fanOutItems {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(i))
	}
	b.WriteString(`]}`)
	s.splitBody = b.Bytes()
	s.srv = &fasthttp.Server{Handler: s.handle, Concurrency: 1 << 16, MaxRequestBodySize: 64 << 20}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

func (s *sink) url() string { return "http://" + s.ln.Addr().String() + "/step" }

func (s *sink) close() {
	s.release()
	_ = s.srv.Shutdown()
	_ = s.ln.Close()
	<-s.served
}

// holdFor makes the next n requests of step wait for each other (see hold).
func (s *sink) holdFor(step string, n int, idle, spread time.Duration, delays map[string][2]time.Duration) {
	h := &hold{step: step, n: n, spread: spread, delays: delays, gate: make(chan struct{})}
	s.held.Store(0)
	s.hold.Store(h)
	go func() {
		for {
			select {
			case <-h.gate:
				return
			case <-time.After(idle / 4):
			}
			if at := h.heldAt.Load(); at > 0 && time.Since(time.Unix(0, at)) > idle {
				h.release()
				return
			}
		}
	}()
}

// release releases the requests the current hold holds.
func (s *sink) release() {
	if h := s.hold.Load(); h != nil {
		h.release()
	}
}

// reset forgets the receipts.
func (s *sink) reset() {
	s.mu.Lock()
	s.recs = nil
	s.mu.Unlock()
	s.count.Store(0)
	s.last.Store(0)
}

var (
	keyRunID     = []byte(`"run_id":"`)
	keyStep      = []byte(`"step":"`)
	keyScheduled = []byte(`"scheduled_at":`)
	keyParams    = []byte(`"params":{`)
)

// field returns the string value after key in b, or "".
func field(b, key []byte) string {
	i := bytes.Index(b, key)
	if i < 0 {
		return ""
	}
	rest := b[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

func (s *sink) handle(rc *fasthttp.RequestCtx) {
	r := receipt{ticket: string(rc.Request.Header.Peek("X-Axe-Ticket")), at: time.Now().UnixNano()}
	body := rc.PostBody()
	if i := bytes.Index(body, keyScheduled); i >= 0 {
		rest := body[i+len(keyScheduled):]
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		r.scheduled, _ = strconv.ParseInt(string(rest[:j]), 10, 64)
	}
	// The workflow context is the request's params, which come before its inputs.
	if i := bytes.Index(body, keyParams); i >= 0 {
		params := body[i:]
		r.runID, r.step = field(params, keyRunID), field(params, keyStep)
	}
	if h := s.hold.Load(); h != nil && r.step != "" {
		if r.step == h.step {
			h.heldAt.Store(r.at)
			if int(s.held.Add(1)) >= h.n {
				h.release()
			}
			<-h.gate
			if h.spread > 0 {
				time.Sleep(rand.N(h.spread))
			}
		}
		if d, ok := h.delays[r.step]; ok {
			time.Sleep(d[0] + rand.N(d[1]-d[0]))
		}
	}
	rc.SetStatusCode(fasthttp.StatusOK)
	rc.SetContentType("application/json")
	if r.step == "split" {
		rc.SetBody(s.splitBody)
	} else {
		rc.SetBodyString(`{"ok":true}`)
	}
	r.answeredAt = time.Now().UnixNano()
	s.mu.Lock()
	s.recs = append(s.recs, r)
	s.mu.Unlock()
	s.count.Add(1)
	for {
		l := s.last.Load()
		if r.at <= l || s.last.CompareAndSwap(l, r.at) {
			break
		}
	}
}

// receipts returns a copy of the receipts so far.
func (s *sink) receipts() []receipt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]receipt(nil), s.recs...)
}

// waitCount waits until n requests arrived and returns the time of the latest arrival.
func (s *sink) waitCount(ctx context.Context, n int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for s.count.Load() < int64(n) {
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%w: %d of %d requests arrived within %s", errTimeout, s.count.Load(), n, timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return time.Unix(0, s.last.Load()), nil
}

// waitSettled waits until n requests arrived or, after the first, none arrived for quiet
// (runs that failed send no more steps); it returns the latest arrival and the count.
func (s *sink) waitSettled(ctx context.Context, n int, quiet, timeout time.Duration) (time.Time, int, error) {
	deadline := time.Now().Add(timeout)
	for {
		got, last := int(s.count.Load()), s.last.Load()
		if got >= n || (last > 0 && time.Since(time.Unix(0, last)) > quiet) {
			return time.Unix(0, last), got, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, got, fmt.Errorf("%w: %d of %d requests arrived within %s", errTimeout, got, n, timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, got, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// duplicates counts the tickets received more than once.
func duplicates(recs []receipt) int {
	seen := make(map[string]int, len(recs))
	d := 0
	for _, r := range recs {
		seen[r.ticket]++
		if seen[r.ticket] > 1 {
			d++
		}
	}
	return d
}
