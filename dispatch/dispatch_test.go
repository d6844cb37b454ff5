package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/internal/test/leaktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Options()...)
}

func newDispatcher(t *testing.T, cfg Config) *Dispatcher {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return d
}

func TestPostCarriesHeadersBodyAndOutcome(t *testing.T) {
	var got http.Header
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		b := make([]byte, r.ContentLength)
		_, _ = r.Body.Read(b)
		body = string(b)
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, "0123456789")
	}))
	defer srv.Close()
	d := newDispatcher(t, Config{MaxBodyTail: 4})
	o := d.Post(&Request{URL: srv.URL, Task: "t1", Ticket: "1-2-3", Attempt: 3, Body: []byte(`{"a":1}`),
		Deadline: time.Now().Add(5 * time.Second), Token: "sekret"})
	if !o.OK() || o.Status != 202 || string(o.Body) != "6789" {
		t.Fatalf("outcome = %+v", o)
	}
	if got.Get("X-Axe-Task") != "t1" || got.Get("X-Axe-Ticket") != "1-2-3" || got.Get("X-Axe-Attempt") != "3" ||
		got.Get("Authorization") != "Bearer sekret" || got.Get("Content-Type") != "application/json" || body != `{"a":1}` {
		t.Errorf("request headers %v body %q", got, body)
	}
}

func TestPostTimeoutAndRefusal(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	d := newDispatcher(t, Config{})
	o := d.Post(&Request{URL: srv.URL, Deadline: time.Now().Add(200 * time.Millisecond)})
	if !errors.Is(o.Err, ErrTimeout) || o.OK() {
		t.Errorf("hanging server: %+v, want ErrTimeout", o)
	}
	o = d.Post(&Request{URL: "http://127.0.0.1:1/", Deadline: time.Now().Add(time.Second)})
	if o.Err == nil || o.OK() {
		t.Errorf("closed port: %+v, want an error", o)
	}
}

func TestSendNeverBlocksAndStopDrains(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		hits.Add(1)
	}))
	defer srv.Close()
	d, err := New(Config{PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var done sync.WaitGroup
	const n = 40
	done.Add(n)
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := d.Send(&Request{URL: srv.URL, Deadline: time.Now().Add(10 * time.Second)}, func(Outcome) { done.Done() }); err != nil {
			t.Fatal(err)
		}
	}
	// 40 sends on 2 workers take >= 400 ms to run; queueing them must not.
	if queued := time.Since(start); queued > 200*time.Millisecond {
		t.Errorf("queueing 40 sends blocked for %s", queued)
	}
	if err := d.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	done.Wait()
	if hits.Load() != n {
		t.Errorf("stop drained %d of %d sends", hits.Load(), n)
	}
	if err := d.Send(&Request{URL: srv.URL}, func(Outcome) {}); !errors.Is(err, ErrStopped) {
		t.Errorf("send after stop = %v, want ErrStopped", err)
	}
	if err := d.Stop(context.Background()); err != nil {
		t.Errorf("second stop = %v", err)
	}
}

func TestStopWithoutStart(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestBusyConnectionsMakeCallsWaitNotFail: with every connection to a host in use, a call
// waits for one (bounded by its deadline) instead of failing at once.
func TestBusyConnectionsMakeCallsWaitNotFail(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond)
	}))
	defer srv.Close()
	d := newDispatcher(t, Config{MaxConnsPerHost: 1})
	var wg sync.WaitGroup
	outs := make([]Outcome, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = d.Post(&Request{URL: srv.URL, Deadline: time.Now().Add(10 * time.Second)})
		}()
	}
	wg.Wait()
	for i, o := range outs {
		if !o.OK() {
			t.Errorf("call %d: %+v", i, o)
		}
	}
}
