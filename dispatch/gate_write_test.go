package dispatch

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// TestGateIsAskedAsTheRequestLeaves checks that a request which passed the gate and was then
// held up before its first byte left (here in the dial, as a worker paused by SIGSTOP, a GC
// pause or a starved CPU would be) is refused if the gate closed meanwhile: the gate is asked
// again at the connection's first write, and nothing reaches the peer. The same holds on a
// reused connection, and for executor calls as for HTTP callbacks (docs/ha.md, "Fencing").
func TestGateIsAskedAsTheRequestLeaves(t *testing.T) {
	var hits, conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	errClosed := errors.New("lease not sure")
	var closed atomic.Bool
	// openFor, when >= 0, is how many more times the gate answers open before it closes.
	var openFor atomic.Int64
	openFor.Store(-1)
	// dialing is told when a dial of held.test begins; the dial then waits for resume.
	dialing, resume := make(chan struct{}), make(chan struct{})
	g := mustGuard(t, GuardConfig{})
	g.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		if host == "held.test" {
			dialing <- struct{}{}
			<-resume
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	d := newDispatcher(t, Config{Guard: g, Gate: func() error {
		if closed.Load() || openFor.Load() >= 0 && openFor.Add(-1) < 0 {
			return errClosed
		}
		return nil
	}})
	for _, via := range []string{"callback", "executor"} {
		closed.Store(false)
		req := &Request{URL: "http://held.test:" + port + "/hook", Task: "t", Ticket: via + "-1", Attempt: 1,
			Body: []byte(`{}`), Deadline: time.Now().Add(30 * time.Second)}
		got := make(chan Outcome, 1)
		if via == "callback" {
			if err := d.Send(req, func(o Outcome) { got <- o }); err != nil {
				t.Fatal(err)
			}
		} else {
			go func() { got <- d.Post(req) }()
		}
		<-dialing // past the gate, not yet connected
		closed.Store(true)
		close(resume)
		o := <-got
		resume = make(chan struct{})
		if !errors.Is(o.Err, ErrGated) || !errors.Is(o.Err, errClosed) || o.Status != 0 {
			t.Errorf("%s: the gate closed during the dial: outcome %+v, want ErrGated wrapping the gate's error", via, o)
		}
		if n := hits.Load(); n != 0 {
			t.Fatalf("%s: the peer saw %d requests, want 0: the gate closed before the first byte left", via, n)
		}
	}

	// A reused keep-alive connection asks the gate again for every request it carries.
	closed.Store(false)
	req := &Request{URL: srv.URL + "/hook", Task: "t", Ticket: "r-1", Attempt: 1, Body: []byte(`{}`),
		Deadline: time.Now().Add(30 * time.Second)}
	if o := d.Post(req); !o.OK() {
		t.Fatalf("open gate: %+v", o)
	}
	newConns := conns.Load()
	openFor.Store(1) // open for do's own check, closed at the write
	o := d.Post(req)
	if !errors.Is(o.Err, ErrGated) || !errors.Is(o.Err, errClosed) || o.Status != 0 {
		t.Errorf("reused connection: outcome %+v, want ErrGated wrapping the gate's error", o)
	}
	if n := conns.Load() - newConns; n != 0 {
		t.Errorf("%d new connections, want the idle one reused", n)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the peer saw %d requests, want only the first", n)
	}
}
