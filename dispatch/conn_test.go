package dispatch

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// restartable is an HTTP server on a fixed loopback address that can be stopped and started
// again on it, as a restarted executor or callback endpoint is; every request is counted.
type restartable struct {
	t    *testing.T
	addr string
	srv  *http.Server
	hits atomic.Int32
	// dropFirst, when set, makes the server read the first request and close its connection
	// without answering: a call in doubt.
	dropFirst atomic.Bool
}

func newRestartable(t *testing.T) *restartable {
	r := &restartable{t: t}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(r.stop)
	return r
}

func (r *restartable) serve(ln net.Listener) {
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.hits.Add(1)
		if r.dropFirst.CompareAndSwap(true, false) {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = c.Close()
			}
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})}
	go func() { _ = r.srv.Serve(ln) }()
}

func (r *restartable) stop() { _ = r.srv.Close() }

// restart closes the server and every connection it holds (the client's idle keep-alive
// connection gets its FIN), then listens on the same address again.
func (r *restartable) restart() {
	r.stop()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatalf("listen again on %s: %v", r.addr, err)
	}
	r.serve(ln)
}

func (r *restartable) request(ticket string) *Request {
	return &Request{URL: "http://" + r.addr + "/hook", Task: "t", Ticket: ticket, Body: []byte(`{}`),
		Deadline: time.Now().Add(5 * time.Second)}
}

func sendWait(t *testing.T, d *Dispatcher, req *Request) Outcome {
	t.Helper()
	ch := make(chan Outcome, 1)
	if err := d.Send(req, func(o Outcome) { ch <- o }); err != nil {
		t.Fatal(err)
	}
	return <-ch
}

// An idle keep-alive connection whose peer restarted is not a failed call: the request is
// refused on it before a byte is written and goes out on a new connection, for HTTP
// callbacks (which are never re-sent in doubt by default) as for executor calls, and no
// re-send in doubt is counted.
func TestRestartedPeerGetsTheNextCallOnANewConnection(t *testing.T) {
	d := newDispatcher(t, Config{Guard: mustGuard(t, GuardConfig{})})
	for _, via := range []string{"callback", "executor"} {
		srv := newRestartable(t)
		call := func(ticket string) Outcome {
			if via == "callback" {
				return sendWait(t, d, srv.request(ticket))
			}
			return d.Post(srv.request(ticket))
		}
		if o := call("t-1"); !o.OK() {
			t.Fatalf("%s: first call: %+v", via, o)
		}
		srv.restart()
		before := d.m.resendsInDoubt.Get()
		for i, ticket := range []string{"t-2", "t-3"} {
			if o := call(ticket); !o.OK() {
				t.Errorf("%s: call %d after the restart: %+v, want it delivered on a new connection", via, i+1, o)
			}
		}
		if n := srv.hits.Load(); n != 3 {
			t.Errorf("%s: the server saw %d calls, want 3", via, n)
		}
		if n := d.m.resendsInDoubt.Get() - before; n != 0 {
			t.Errorf("%s: %d re-sends in doubt, want 0: the stale connection was never written to", via, n)
		}
	}
}

// A call whose connection dies after the request was written is in doubt: an executor call
// is sent once more (executors de-duplicate by ticket); an HTTP callback fails with
// ErrInDoubt, unless its request says ResendInDoubt (on_lost: resend).
func TestCallInDoubtFollowsItsPolicy(t *testing.T) {
	d := newDispatcher(t, Config{})
	srv := newRestartable(t)

	srv.dropFirst.Store(true)
	if o := d.Post(srv.request("x-1")); !o.OK() {
		t.Errorf("executor call in doubt: %+v, want it sent once more and accepted", o)
	}
	if n := srv.hits.Swap(0); n != 2 {
		t.Errorf("executor call: the server saw %d requests, want 2", n)
	}

	srv.dropFirst.Store(true)
	o := sendWait(t, d, srv.request("c-1"))
	if o.OK() || !errors.Is(o.Err, ErrInDoubt) {
		t.Errorf("callback in doubt: %+v, want ErrInDoubt", o)
	}
	if n := srv.hits.Swap(0); n != 1 {
		t.Errorf("callback (on_lost: fail): the server saw %d requests, want 1", n)
	}

	srv.dropFirst.Store(true)
	req := srv.request("c-2")
	req.ResendInDoubt = true
	if o := sendWait(t, d, req); !o.OK() {
		t.Errorf("callback in doubt with ResendInDoubt: %+v, want it sent once more", o)
	}
	if n := srv.hits.Swap(0); n != 2 {
		t.Errorf("callback (on_lost: resend): the server saw %d requests, want 2", n)
	}
}
