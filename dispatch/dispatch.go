// Package dispatch sends runs to where they execute: a pool of long-lived workers (pool.go)
// bounds the concurrency, a fasthttp client carries the requests. It owns the wire (headers, bodies,
// deadlines, connection reuse) and nothing of a task's state: it never reads or writes the
// store and never decides whether a run may be sent — the engine does that, and calls Send
// only after the run's SCHEDULED→RUNNING transition is durable (docs/design.md, "Write path").
package dispatch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/protocol"
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
	// ErrGated is the Outcome error of a request Config.Gate kept from being sent.
	ErrGated = errors.New("not sent")
	// ErrInDoubt marks (wrapped) a call whose connection failed after the request had been
	// sent: the peer may have received it.
	ErrInDoubt = errors.New("the connection failed after the request was sent, so it may have been delivered")
	// errStaleConn is the error of a write refused because the peer had already closed the
	// connection: nothing of the request was sent (conn.go).
	errStaleConn = errors.New("the peer had closed the idle connection; nothing was sent on it")
)

// dispatchMetrics are the dispatcher's series, in Config.Metrics. Got or created, so that the
// dispatchers of one set (one per engine) count together.
type dispatchMetrics struct {
	// resendsInDoubt counts the calls sent once more after their connection failed in doubt.
	resendsInDoubt *metrics.Counter
	// offerBatches and offerBatchedRuns count the batched run offers and the runs in them.
	offerBatches     *metrics.Counter
	offerBatchedRuns *metrics.Counter
}

func newDispatchMetrics(s *metrics.Set) *dispatchMetrics {
	return &dispatchMetrics{
		resendsInDoubt:   s.GetOrCreateCounter("axe_dispatch_resends_in_doubt_total"),
		offerBatches:     s.GetOrCreateCounter("axe_dispatch_run_batches_total"),
		offerBatchedRuns: s.GetOrCreateCounter("axe_dispatch_batched_runs_total"),
	}
}

// EpochHeader carries the dispatching primary's lease epoch (Config.Epoch).
const EpochHeader = "X-Axe-Epoch"

// gate asks Config.Gate, then the request's own gate (nil: none), whether a request may
// leave now.
func (d *Dispatcher) gate(own func() error) error {
	if d.cfg.Gate != nil {
		if err := d.cfg.Gate(); err != nil {
			return fmt.Errorf("%w: %w", ErrGated, err)
		}
	}
	if own != nil {
		if err := own(); err != nil {
			return fmt.Errorf("%w: %w", ErrGated, err)
		}
	}
	return nil
}

// setEpoch adds the epoch header when there is one: epoch when > 0, else Config.Epoch.
func (d *Dispatcher) setEpoch(r *fasthttp.Request, epoch int64) {
	if epoch <= 0 {
		epoch = d.cfg.Epoch
	}
	if epoch > 0 {
		r.Header.Set(EpochHeader, strconv.FormatInt(epoch, 10))
	}
}

// authorize sets the Authorization header of a call to an executor: its signature under
// key when the executor has one — for its incarnation, carried in the X-Axe-Incarnation
// header, when it registered one (protocol.SignCallV2), else as version 1 — or the legacy
// bearer token when there is one. The path and epoch it signs are the request's own, so
// the header is set after them.
func (d *Dispatcher) authorize(r *fasthttp.Request, key []byte, address, incarnation, token string, body []byte) {
	switch {
	case len(key) > 0 && incarnation != "":
		r.Header.Set(protocol.HeaderIncarnation, incarnation)
		r.Header.Set(fasthttp.HeaderAuthorization, protocol.SignCallV2(key, time.Now(), address,
			string(r.URI().Path()), string(r.Header.Peek(EpochHeader)), incarnation, body))
	case len(key) > 0:
		r.Header.Set(fasthttp.HeaderAuthorization, protocol.SignCall(key, time.Now(), address,
			string(r.URI().Path()), string(r.Header.Peek(EpochHeader)), body))
	case token != "":
		r.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+token)
	}
}

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
	// Guard, when set, judges every address an HTTP callback (Send) connects to. Executor
	// calls (offers, kills) are judged by Guard.DialExecutor: not held to its allowlist
	// (executors register their own addresses), but never sent to a wildcard address or a
	// range it refuses. Defaults to nil: no check of callbacks, and executors judged by the
	// refused ranges.
	Guard *Guard
	// CallbackSecret, when set, signs every HTTP callback: the header X-Axe-Signature carries
	// "sha256=" and the hex HMAC-SHA256 of the body under this key. Defaults to none.
	CallbackSecret []byte
	// Epoch, when > 0, is sent on every request as the X-Axe-Epoch header: the lease epoch of the
	// primary that dispatches (docs/ha.md, "Fencing"), so a receiver can refuse a deposed one.
	// Defaults to 0 (no header).
	Epoch int64
	// ExecutorTLS configures the HTTPS calls to executors that registered with protocol
	// "https" (offers, run batches, kills): the CAs trusted for their certificates
	// (RootCAs) and the client certificate presented to those that require one. HTTP
	// callbacks do not use it. Defaults to nil: the system's trust store and no client
	// certificate (ExecutorTLSFiles.Load builds one from PEM files).
	ExecutorTLS *tls.Config
	// Gate, when set, is asked just before every request leaves; an error keeps the request
	// from being sent and is its outcome, wrapped in ErrGated. A primary's gate closes when
	// it is no longer sure of its lease, so a worker that was paused between the commit and
	// the send does not dispatch late. Defaults to nil (always open).
	Gate func() error
	// Metrics is the set the dispatcher's series are registered in
	// (axe_dispatch_resends_in_doubt_total, axe_dispatch_run_batches_total,
	// axe_dispatch_batched_runs_total); the engine passes its own. Defaults to a new set of
	// this dispatcher's own, which nothing exposes.
	Metrics *metrics.Set
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
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
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
	// Key, when set, signs the call (protocol.SignCall) for the executor registered at
	// Address: the Authorization header carries the signature, and Token is not sent.
	Key     []byte
	Address string
	// Incarnation, when set with Key, is the incarnation of the executor the call is signed
	// for (protocol.SignCallV2), sent as the X-Axe-Incarnation header. Empty: a version 1
	// signature.
	Incarnation string
	// Token, when set and Key is not, is sent as "Authorization: Bearer <token>".
	Token string
	// Epoch, when > 0, is sent as the X-Axe-Epoch header in place of Config.Epoch: the epoch
	// of the shard the run belongs to, on a node that schedules by shard. Defaults to 0.
	Epoch int64
	// Gate, when set, is asked just before the request leaves, after Config.Gate: the gate
	// of the run's shard. Defaults to nil.
	Gate func() error
	// ResendInDoubt lets Send post the call once more when its connection failed after the
	// request was sent (the task's on_lost: resend): the endpoint sees the same X-Axe-Ticket
	// twice. Executor calls (Post) are always sent once more. Defaults to false.
	ResendInDoubt bool
	// KeepBody, when > 0, keeps the response body whole up to that many bytes in place of
	// its last MaxBodyTail bytes (a workflow step's output); a longer body is kept as its
	// last KeepBody bytes and Outcome.BodyCut is set. Defaults to 0.
	KeepBody int
}

// Outcome is what came back.
type Outcome struct {
	Status   int    // HTTP status; 0 when no response arrived
	Body     []byte // the last MaxBodyTail bytes of the response body
	BodyCut  bool   // the body was longer than Request.KeepBody (when given)
	Err      error  // transport error, ErrTimeout, or nil
	Started  time.Time
	Duration time.Duration
}

// OK reports whether the call succeeded: any 2xx within the deadline.
func (o Outcome) OK() bool { return o.Err == nil && o.Status >= 200 && o.Status < 300 }

// Dispatcher sends requests on a bounded pool. Send never blocks its caller: requests wait in
// an internal queue for a pool worker, so a caller such as the batched writer's completion
// callback can hand work over without stalling.
type Dispatcher struct {
	cfg    Config
	m      *dispatchMetrics
	pool   *pool
	client *fasthttp.Client
	// callbacks carries HTTP-callback runs: the same settings as client, dialling through
	// cfg.Guard. A separate client, so executors are never judged by the callback allowlist.
	callbacks *fasthttp.Client
	// offersOut counts the offers made with OfferFunc not yet answered, which Stop waits for.
	offersOut atomic.Int64

	life startstop.Lifecycle
}

// New creates a Dispatcher. Call Start before Send.
func New(cfg Config) (*Dispatcher, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cannot create dispatcher: %w", err)
	}
	d := &Dispatcher{
		cfg: cfg,
		m:   newDispatchMetrics(cfg.Metrics),
	}
	d.pool = newPool(cfg.PoolSize, cfg.MaxConnsPerHost, d.run, cfg.Logger)
	d.client = newClient(cfg, cfg.Guard.DialExecutor, d.connGate())
	if cfg.ExecutorTLS != nil {
		d.client.TLSConfig = cfg.ExecutorTLS.Clone()
	}
	callbackDial := plainDial
	if cfg.Guard != nil {
		callbackDial = cfg.Guard.dialTimeout
	}
	d.callbacks = newClient(cfg, callbackDial, d.connGate())
	return d, nil
}

// connGate is the gate the connections ask before each request they carry (conn.go):
// Config.Gate, wrapped in ErrGated as do wraps it; nil without one.
func (d *Dispatcher) connGate() func() error {
	if d.cfg.Gate == nil {
		return nil
	}
	return func() error { return d.gate(nil) }
}

func newClient(cfg Config, dial fasthttp.DialFuncWithTimeout, gate func() error) *fasthttp.Client {
	return &fasthttp.Client{
		Name:        "axe",
		DialTimeout: watchedDial(dial, gate),
		// A request refused on an idle connection its peer had closed was never sent: it
		// is tried again on the next idle connection, or a new one (conn.go). Every idle
		// connection to a restarted peer is such a one, hence as many attempts as there
		// can be connections. Nothing else is retried here (post decides).
		RetryIfErr:                retryStale,
		MaxIdemponentCallAttempts: cfg.MaxConnsPerHost + 1,
		MaxConnsPerHost:           cfg.MaxConnsPerHost,
		// With every connection to a host busy, wait for one instead of failing the run
		// at once with ErrNoFreeConns: a burst is to be late, never lost. Each call's own
		// deadline still bounds the wait.
		MaxConnWaitTimeout:            time.Hour,
		MaxIdleConnDuration:           30 * time.Second,
		NoDefaultUserAgentHeader:      false,
		DisableHeaderNamesNormalizing: false,
		// A body past this fails the call rather than fill memory; only its tail is kept.
		MaxResponseBodySize: 1 << 20,
		ReadBufferSize:      8192,
	}
}

// Start starts the pool's workers; what was queued before runs now.
func (d *Dispatcher) Start(ctx context.Context) error {
	err := d.life.StartOnce(func() error {
		d.pool.start()
		return nil
	})
	if errors.Is(err, startstop.ErrStarted) || errors.Is(err, startstop.ErrStopped) {
		return nil // starting twice, or after Stop, does nothing
	}
	return err
}

// Go runs fn on the pool. It never blocks; fn is queued until a worker is free.
func (d *Dispatcher) Go(fn func()) error { return d.pool.submit(job{fn: fn}) }

// run is the pool's work: a job is a function or a callback send.
func (d *Dispatcher) run(j job) {
	if j.fn != nil {
		j.fn()
		return
	}
	j.done(d.post(d.callbacks, j.req, d.cfg.CallbackSecret, j.req.ResendInDoubt))
}

// Send posts an HTTP-callback run on the pool, through the Guard and signed when a secret is
// configured, and calls done with the outcome from the worker. It never blocks. Redirects are
// not followed: a 3xx is the call's answer, and not a 2xx. A call whose connection failed
// after the request was sent is sent once more only when req.ResendInDoubt says so.
func (d *Dispatcher) Send(req *Request, done func(Outcome)) error {
	return d.pool.submit(job{req: req, done: done, host: hostKey(req.URL)})
}

// Post performs req on the calling goroutine, unguarded and unsigned (executor calls). A call
// whose connection failed after the request was sent is sent once more: executors
// de-duplicate by ticket.
func (d *Dispatcher) Post(req *Request) Outcome { return d.post(d.client, req, nil, true) }

func (d *Dispatcher) post(client *fasthttp.Client, req *Request, secret []byte, resend bool) Outcome {
	if err := CheckURLBytes(req.URL); err != nil {
		// Refused at create and update too; this keeps a URL stored before that check, or
		// built from a bad address, from ever splitting its request line.
		return Outcome{Started: time.Now(), Err: err}
	}
	r := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(r)
	defer fasthttp.ReleaseResponse(resp)
	r.SetRequestURI(req.URL)
	r.Header.SetMethod(fasthttp.MethodPost)
	r.Header.SetContentType("application/json")
	r.Header.Set(protocol.HeaderTask, req.Task)
	r.Header.Set(protocol.HeaderTicket, req.Ticket)
	r.Header.Set(protocol.HeaderAttempt, strconv.Itoa(req.Attempt))
	d.setEpoch(r, req.Epoch)
	d.authorize(r, req.Key, req.Address, req.Incarnation, req.Token, req.Body)
	r.SetBodyRaw(req.Body)
	if len(secret) > 0 {
		r.Header.Set(SignatureHeader, Sign(secret, req.Body))
	}
	start := time.Now()
	err := d.do(client, r, resp, req.Deadline, resend, req.Gate)
	out := Outcome{Started: start, Duration: time.Since(start)}
	if err != nil {
		switch {
		case errors.Is(err, ErrGated):
			out.Err = err
		case errors.Is(err, fasthttp.ErrTimeout):
			out.Err = ErrTimeout
		case client == d.client:
			out.Err = d.explainClosed(req.URL, err, req.Deadline)
		default:
			out.Err = err
		}
		return out
	}
	out.Status = resp.StatusCode()
	if req.KeepBody > 0 {
		body := resp.Body()
		if len(body) > req.KeepBody {
			body, out.BodyCut = body[len(body)-req.KeepBody:], true
		}
		out.Body = append([]byte(nil), body...)
		return out
	}
	out.Body = d.tail(resp.Body())
	return out
}

// do asks the gates (Config.Gate and own), then performs r until deadline. A request refused
// on a connection the peer had closed is retried by the client itself (conn.go); one whose
// connection failed after it was sent is sent once more, after asking the gates again, when
// resend is set, and is otherwise an error wrapping ErrInDoubt.
func (d *Dispatcher) do(client *fasthttp.Client, r *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, resend bool, own func() error) error {
	if err := d.gate(own); err != nil {
		return err
	}
	err := client.DoDeadline(r, resp, deadline)
	if err == nil || !inDoubt(err) {
		return err
	}
	if !resend || !time.Now().Before(deadline) {
		return fmt.Errorf("%w: %w", ErrInDoubt, err)
	}
	d.m.resendsInDoubt.Inc()
	d.cfg.Logger.Info("connection failed after the request was sent; sending it once more",
		"url", string(r.URI().FullURI()), "error", err)
	if gerr := d.gate(own); gerr != nil {
		return gerr
	}
	if err := client.DoDeadline(r, resp, deadline); err != nil {
		if inDoubt(err) {
			return fmt.Errorf("%w (sent twice): %w", ErrInDoubt, err)
		}
		return err
	}
	return nil
}

// Running reports the number of busy workers.
func (d *Dispatcher) Running() int { return d.pool.running() }

// Queued reports the number of sends waiting for a worker.
func (d *Dispatcher) Queued() int { return d.pool.queued() }

// Stop stops accepting sends, lets every queued and in-flight send finish (each is bounded by
// its own deadline) or ctx expire, and releases the pool. Idempotent; safe without Start.
func (d *Dispatcher) Stop(ctx context.Context) error {
	return d.life.StopOnce(ctx, func(started bool) error { return d.stop(ctx, started) })
}

func (d *Dispatcher) stop(ctx context.Context, _ bool) error {
	defer d.client.CloseIdleConnections()
	defer d.callbacks.CloseIdleConnections()
	// The offers' answers may go on on the pool (a refused run to the next executor), and the
	// pool's workers may make offers: wait for both, the offers again after the workers.
	if err := d.waitOffers(ctx); err != nil {
		return err
	}
	if err := d.pool.stop(ctx); err != nil {
		return err
	}
	return d.waitOffers(ctx)
}

// waitOffers waits until every offer made with OfferFunc has been answered.
func (d *Dispatcher) waitOffers(ctx context.Context) error {
	for d.offersOut.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("cannot stop the dispatcher: %d run offers unanswered: %w", d.offersOut.Load(), ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}
