package dispatch

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestEpochHeaderAndGate checks that every request carries the dispatcher's epoch and that a
// closed gate keeps a request from leaving, however late it is asked (docs/ha.md, "Fencing").
func TestEpochHeaderAndGate(t *testing.T) {
	var hits atomic.Int64
	var epoch atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		epoch.Store(r.Header.Get(EpochHeader))
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	errClosed := errors.New("lease not sure")
	var closed atomic.Bool
	d := newDispatcher(t, Config{Epoch: 7, Gate: func() error {
		if closed.Load() {
			return errClosed
		}
		return nil
	}})
	req := &Request{URL: srv.URL, Task: "t", Ticket: "1-2-1", Attempt: 1, Body: []byte(`{}`), Deadline: time.Now().Add(5 * time.Second)}
	if o := d.Post(req); !o.OK() {
		t.Fatalf("open gate: %+v", o)
	}
	if got := epoch.Load(); got != "7" {
		t.Fatalf("%s = %v, want 7", EpochHeader, got)
	}
	closed.Store(true)
	o := d.Post(req)
	if !errors.Is(o.Err, ErrGated) || !errors.Is(o.Err, errClosed) || o.Status != 0 {
		t.Fatalf("closed gate: outcome %+v, want ErrGated wrapping the gate's error", o)
	}
	x := &Executor{Address: srv.Listener.Addr().String()}
	if o := d.Offer(x, req); !errors.Is(o.Err, ErrGated) {
		t.Fatalf("offer through a closed gate: %+v", o)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("server saw %d requests, want 1: nothing may leave through a closed gate", n)
	}

	plain := newDispatcher(t, Config{})
	if o := plain.Post(req); !o.OK() {
		t.Fatalf("no gate: %+v", o)
	}
	if got := epoch.Load(); got != "" {
		t.Fatalf("%s = %q without an epoch, want none", EpochHeader, got)
	}
}
