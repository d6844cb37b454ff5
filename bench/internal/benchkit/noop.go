package benchkit

import (
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// NoopEndpoint is an HTTP server that answers every request 200 at once: the no-op
// downstream the suites dispatch to, so that what is measured is the scheduler, not the
// work. It counts requests and notes when the count reached the number it was told to
// expect.
type NoopEndpoint struct {
	srv    *fasthttp.Server
	ln     net.Listener
	served chan struct{}

	want      int64
	count     atomic.Int64
	reached   chan struct{}
	reachedAt atomic.Int64 // Unix ns
}

// StartNoopEndpoint serves on a free loopback port; Reached closes once want requests have
// arrived.
func StartNoopEndpoint(want int) (*NoopEndpoint, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cannot listen for the no-op endpoint: %w", err)
	}
	e := &NoopEndpoint{ln: ln, served: make(chan struct{}), want: int64(want), reached: make(chan struct{})}
	e.srv = &fasthttp.Server{
		Handler: e.handle,
		// Dispatchers may open a thousand connections at once in a burst.
		Concurrency: 1 << 16,
	}
	go func() {
		defer close(e.served)
		_ = e.srv.Serve(ln)
	}()
	return e, nil
}

func (e *NoopEndpoint) handle(rc *fasthttp.RequestCtx) {
	if e.count.Add(1) == e.want {
		e.reachedAt.Store(time.Now().UnixNano())
		close(e.reached)
	}
	rc.SetStatusCode(fasthttp.StatusOK)
}

// URL is the endpoint's address, http://127.0.0.1:PORT/noop.
func (e *NoopEndpoint) URL() string { return "http://" + e.ln.Addr().String() + "/noop" }

// Count returns how many requests have arrived.
func (e *NoopEndpoint) Count() int { return int(e.count.Load()) }

// Reached is closed once the expected number of requests has arrived.
func (e *NoopEndpoint) Reached() <-chan struct{} { return e.reached }

// ReachedAt is when the expected request count was reached; zero before.
func (e *NoopEndpoint) ReachedAt() time.Time {
	ns := e.reachedAt.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Close stops the server and waits for it.
func (e *NoopEndpoint) Close() error {
	err := e.srv.Shutdown()
	_ = e.ln.Close() // in case Serve had not registered it yet when Shutdown ran
	<-e.served
	return err
}
