// Package dispatch sends runs to where they execute: an ants goroutine pool bounds the
// concurrency, a fasthttp client carries the requests. It owns the wire (headers, bodies,
// deadlines, connection reuse) and nothing of a task's state: it never reads or writes the
// store and never decides whether a run may be sent — the engine does that, and calls Send
// only after the run's SCHEDULED→RUNNING transition is durable (R7.2).
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/axe-sched/axe/internal/startstop"
	"github.com/panjf2000/ants/v2"
	"github.com/valyala/fasthttp"
)

// Defaults for Config.
const (
	// PoolSizeDefault bounds concurrent in-flight sends. HTTP-callback runs hold a worker for
	// the whole call (the response is the result), so the pool is sized for many slow
	// downstreams, not for CPU.
	PoolSizeDefault        = 10000
	MaxConnsPerHostDefault = 1024
	MaxBodyTailDefault     = 4096
)

// Sentinel errors.
var (
	// ErrStopped is returned by Send after Stop.
	ErrStopped = errors.New("dispatcher stopped")
	// ErrTimeout is the Outcome error of a call that did not answer before its deadline.
	ErrTimeout = errors.New("timeout")
)

// Config configures a Dispatcher.
type Config struct {
	// PoolSize is the number of concurrent sends. Defaults to PoolSizeDefault.
	PoolSize int
	// MaxConnsPerHost caps connections to one downstream. Defaults to MaxConnsPerHostDefault.
	MaxConnsPerHost int
	// MaxBodyTail is how many bytes of a response body are kept for the run record.
	// Defaults to MaxBodyTailDefault.
	MaxBodyTail int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.PoolSize == 0 {
		c.PoolSize = PoolSizeDefault
	}
	if c.MaxConnsPerHost == 0 {
		c.MaxConnsPerHost = MaxConnsPerHostDefault
	}
	if c.MaxBodyTail == 0 {
		c.MaxBodyTail = MaxBodyTailDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.PoolSize < 1 {
		return fmt.Errorf("pool size must be >= 1, got %d", c.PoolSize)
	}
	if c.MaxConnsPerHost < 1 {
		return fmt.Errorf("max conns per host must be >= 1, got %d", c.MaxConnsPerHost)
	}
	return nil
}

// Request is one HTTP delivery of a run.
type Request struct {
	URL      string
	Task     string
	Ticket   string
	Attempt  int
	Body     []byte // the run JSON
	Deadline time.Time
	// Token, when set, is sent as "Authorization: Bearer <token>".
	Token string
}

// Outcome is what came back.
type Outcome struct {
	Status   int    // HTTP status; 0 when no response arrived
	Body     []byte // the last MaxBodyTail bytes of the response body
	Err      error  // transport error, ErrTimeout, or nil
	Started  time.Time
	Duration time.Duration
}

// OK reports whether the call succeeded: any 2xx within the deadline (SPEC section 10).
func (o Outcome) OK() bool { return o.Err == nil && o.Status >= 200 && o.Status < 300 }

// Dispatcher sends requests on a bounded pool. Send never blocks its caller: requests wait in
// an internal queue for a pool worker, so a caller such as the batched writer's completion
// callback can hand work over without stalling.
type Dispatcher struct {
	cfg    Config
	pool   *ants.Pool
	client *fasthttp.Client

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []func()
	stopped bool // under mu: Go refuses work; set by Stop
	pumpWG  sync.WaitGroup
	life    startstop.Lifecycle
}

// New creates a Dispatcher. Call Start before Send.
func New(cfg Config) (*Dispatcher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cannot create dispatcher: %w", err)
	}
	pool, err := ants.NewPool(cfg.PoolSize, ants.WithPanicHandler(func(p any) {
		cfg.Logger.Error("dispatch worker panicked", "panic", p)
	}))
	if err != nil {
		return nil, fmt.Errorf("cannot create dispatch pool: %w", err)
	}
	d := &Dispatcher{
		cfg:  cfg,
		pool: pool,
		client: &fasthttp.Client{
			Name:            "axe",
			MaxConnsPerHost: cfg.MaxConnsPerHost,
			// With every connection to a host busy, wait for one instead of failing the run
			// at once with ErrNoFreeConns: a burst is to be late, never lost. Each call's own
			// deadline still bounds the wait.
			MaxConnWaitTimeout:            time.Hour,
			MaxIdleConnDuration:           30 * time.Second,
			NoDefaultUserAgentHeader:      false,
			DisableHeaderNamesNormalizing: false,
			MaxResponseBodySize:           1 << 20,
			ReadBufferSize:                8192,
		},
	}
	d.cond = sync.NewCond(&d.mu)
	return d, nil
}

// Start starts the pump that feeds the pool.
func (d *Dispatcher) Start(ctx context.Context) error {
	err := d.life.StartOnce(func() error {
		d.pumpWG.Add(1)
		go d.pump()
		return nil
	})
	if errors.Is(err, startstop.ErrStarted) || errors.Is(err, startstop.ErrStopped) {
		return nil // starting twice, or after Stop, does nothing
	}
	return err
}

// Go runs fn on the pool. It never blocks; fn is queued until a worker is free.
func (d *Dispatcher) Go(fn func()) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return ErrStopped
	}
	d.queue = append(d.queue, fn)
	if len(d.queue) == 1 {
		d.cond.Signal()
	}
	return nil
}

// Send posts req on the pool and calls done with the outcome from the worker. It never
// blocks.
func (d *Dispatcher) Send(req *Request, done func(Outcome)) error {
	return d.Go(func() { done(d.Post(req)) })
}

// Post performs req on the calling goroutine.
func (d *Dispatcher) Post(req *Request) Outcome {
	r := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(r)
	defer fasthttp.ReleaseResponse(resp)
	r.SetRequestURI(req.URL)
	r.Header.SetMethod(fasthttp.MethodPost)
	r.Header.SetContentType("application/json")
	r.Header.Set("X-Axe-Task", req.Task)
	r.Header.Set("X-Axe-Ticket", req.Ticket)
	r.Header.Set("X-Axe-Attempt", strconv.Itoa(req.Attempt))
	if req.Token != "" {
		r.Header.Set("Authorization", "Bearer "+req.Token)
	}
	r.SetBodyRaw(req.Body)
	start := time.Now()
	err := d.client.DoDeadline(r, resp, req.Deadline)
	out := Outcome{Started: start, Duration: time.Since(start)}
	if err != nil {
		if errors.Is(err, fasthttp.ErrTimeout) {
			out.Err = ErrTimeout
		} else {
			out.Err = err
		}
		return out
	}
	out.Status = resp.StatusCode()
	out.Body = d.tail(resp.Body())
	return out
}

func (d *Dispatcher) pump() {
	defer d.pumpWG.Done()
	for {
		d.mu.Lock()
		for len(d.queue) == 0 && !d.stopped {
			d.cond.Wait()
		}
		if len(d.queue) == 0 && d.stopped {
			d.mu.Unlock()
			return
		}
		batch := d.queue
		d.queue = nil
		d.mu.Unlock()
		for _, fn := range batch {
			// Submit blocks while every worker is busy: that is the pool's bound at work.
			if err := d.pool.Submit(fn); err != nil {
				d.cfg.Logger.Error("cannot submit to dispatch pool", "error", err)
				fn() // the pool is closing; run it here rather than lose a result
			}
		}
	}
}

// Running reports the number of busy workers.
func (d *Dispatcher) Running() int { return d.pool.Running() }

// Queued reports the number of sends waiting for a worker.
func (d *Dispatcher) Queued() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue)
}

// Stop stops accepting sends, lets every queued and in-flight send finish (each is bounded by
// its own deadline) or ctx expire, and releases the pool. Idempotent; safe without Start.
func (d *Dispatcher) Stop(ctx context.Context) error {
	return d.life.StopOnce(ctx, func(started bool) error { return d.stop(ctx, started) })
}

func (d *Dispatcher) stop(ctx context.Context, started bool) error {
	d.mu.Lock()
	d.stopped = true
	d.cond.Broadcast()
	d.mu.Unlock()
	defer d.client.CloseIdleConnections()
	if started {
		done := make(chan struct{})
		go func() { d.pumpWG.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			// Close the pool anyway: the pump then runs what is left itself (each send is
			// bounded by its own deadline) and exits.
			d.pool.Release()
			return fmt.Errorf("cannot drain dispatch queue: %w", ctx.Err())
		}
	}
	timeout := time.Minute
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if err := d.pool.ReleaseTimeout(timeout); err != nil {
		d.pool.Release()
		return fmt.Errorf("cannot drain dispatch pool: %w", err)
	}
	return nil
}
