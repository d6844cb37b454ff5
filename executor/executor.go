package executor

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/protocol"
	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/panjf2000/ants/v2"
	"github.com/valyala/fasthttp"
)

// Executor serves runs for one app. Create it with New, register handlers with Handle, then
// Start it; Stop it once.
type Executor struct {
	ln    net.Listener // the HTTP listener, closed by Stop
	cfg   Config
	tls   tlsConfigs
	log   *slog.Logger
	clock Clock
	// dispatchKey verifies the scheduler's signature on every call (nil: no Token, no
	// check); ownAuth is "Bearer <Token>", which GET /axe/beat also takes, for probes.
	dispatchKey, ownAuth []byte
	// incarnation is this Executor's random id (protocol.NewIncarnation), sent with every
	// registration and heartbeat: the scheduler signs its calls for it, and a call signed
	// for another incarnation (captured before a restart) is refused.
	incarnation string
	// sched delivers results; ctl registers and beats. They keep separate connections so a
	// backlog of results in a burst never delays the heartbeat that keeps this executor
	// alive at the scheduler (a starved heartbeat gets every run in flight recorded lost).
	sched *schedulerClient
	ctl   *schedulerClient

	// life serialises Handle, Start and Stop: Handle registers only while the executor is
	// new, and waits for a Start under way.
	life startstop.Lifecycle

	// mu guards the run bookkeeping. It is never held while a handler runs or while the
	// scheduler is called, so /axe/run answers in microseconds even when the scheduler is slow.
	mu        sync.Mutex
	handlers  map[string]HandlerFunc
	running   map[string]*activeRun // by ticket: accepted and not finished (queued or running)
	tasks     map[string]string     // task → ticket of its run here; enforces no re-entry
	inflight  int                   // len(running); bounded by PoolSize+QueueSize
	accepting bool                  // false before Start and once Stop began
	// finished remembers outcomes by ticket. Each entry carries its own expiry (the run's
	// dedup_ttl_ms), which golang-lru's expirable cache cannot express (one TTL per cache),
	// and expirable also starts a cleanup goroutine per cache that can never be stopped; so a
	// size-bounded simplelru with per-entry expiry checked under mu it is.
	finished *simplelru.LRU[string, *outcome]
	queue    chan *activeRun

	// advertise is written by Start under mu before any goroutine that reads it starts, and
	// never again; Addr reads it under mu because it may race with Start.
	advertise string

	// Set by Start, read-only afterwards.
	handlerNames []string
	pool         *ants.Pool
	srv          *fasthttp.Server
	serveDone    chan struct{}
	feederDone   chan struct{}
	runCtx       context.Context // parent of every handler context
	cancelRuns   context.CancelCauseFunc
	sendCtx      context.Context // abandons result re-sends when Stop gives up
	cancelSends  context.CancelFunc
	hbCancel     context.CancelFunc
	hbDone       chan struct{}

	hbInterval atomic.Int64 // effective heartbeat period in nanoseconds

	runWG  sync.WaitGroup // one per accepted run until its outcome is recorded
	sendWG sync.WaitGroup // one per result being delivered

	// outbox holds results waiting for a sender (results.go); outMu guards it, outReady
	// wakes a sender when it gains entries.
	outMu     sync.Mutex
	outbox    []*outcome
	outReady  chan struct{}
	sendersWG sync.WaitGroup

	// epoch is the highest scheduler lease epoch seen on a run or a kill that names no shard,
	// and shardEpochs the highest seen of each shard on those that name one (epoch.go). Both
	// are guarded by mu. shardEpochs holds at most protocol.ShardCount (256) entries: a shard
	// out of range is refused before it is recorded, so its memory is bounded whatever the
	// schedulers send. It is made at the first sharded epoch.
	epoch       int64
	shardEpochs map[int]int64
}

// activeRun is a run accepted by /axe/run and not yet finished.
type activeRun struct {
	run     Run
	handler HandlerFunc
	ttl     time.Duration // how long the outcome is remembered
	ctx     context.Context
	kill    context.CancelCauseFunc
	release context.CancelFunc // frees the deadline timer
}

// outcome is a finished run, remembered by ticket so that a repeated dispatch returns it
// instead of running the handler again.
type outcome struct {
	status  string
	errText string
	body    []byte // the marshalled protocol.Result
	expires time.Time
	sending bool // queued or being sent; guarded by Executor.mu
	again   bool // deliver once more after the current delivery ends; guarded by Executor.mu
}

// New checks cfg and returns an Executor that is not yet listening.
func New(cfg Config) (*Executor, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tc, err := loadTLS(cfg)
	if err != nil {
		return nil, err
	}
	finished, err := simplelru.NewLRU[string, *outcome](cfg.DedupSize, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot create the ticket cache: %w", err)
	}
	var key, own []byte
	if cfg.Token != "" {
		key, own = protocol.DispatchKey(cfg.Token), []byte("Bearer "+cfg.Token)
	}
	return &Executor{
		cfg:         cfg,
		dispatchKey: key,
		ownAuth:     own,
		incarnation: protocol.NewIncarnation(),
		tls:         tc,
		log:         cfg.Logger.With("app", cfg.App),
		clock:       cfg.Clock,
		sched:       newSchedulerClient(cfg, tc.scheduler),
		ctl:         newSchedulerClient(cfg, tc.scheduler),
		handlers:    make(map[string]HandlerFunc),
		running:     make(map[string]*activeRun),
		tasks:       make(map[string]string),
		finished:    finished,
	}, nil
}

// Handle registers h as the handler called name. Tasks reach it through callback
// {"type":"executor","app":<App>,"handler":name}. Handle must be called before Start; it
// panics on an empty or over-long name, a nil h, a name registered twice, or a call after
// Start, because each is a programming error that would otherwise surface much later as runs
// failing with "unknown handler".
func (e *Executor) Handle(name string, h HandlerFunc) {
	switch {
	case name == "" || len(name) > maxNameLen:
		panic(fmt.Sprintf("executor: handler name must be 1 to %d bytes, got %q", maxNameLen, name))
	case h == nil:
		panic(fmt.Sprintf("executor: nil handler for %q", name))
	}
	dup := false
	if !e.life.IfNew(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if _, dup = e.handlers[name]; !dup {
			e.handlers[name] = h
		}
	}) {
		panic(fmt.Sprintf("executor: Handle(%q) after Start", name))
	}
	if dup {
		panic(fmt.Sprintf("executor: handler %q registered twice", name))
	}
}

// Addr returns the address advertised to the scheduler (host:port), or "" before Start.
func (e *Executor) Addr() string {
	// mu, not the lifecycle: Addr must answer while Stop drains.
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.advertise
}

// Start listens, registers with the scheduler and starts heartbeats; it returns once all of
// them run. If no scheduler is reachable, Start still succeeds and registration is retried on
// every heartbeat tick, so executors can boot before the scheduler. If a scheduler refuses the
// token or the registration (ErrUnauthorized, ErrRegistrationRejected), Start undoes
// everything and returns the error: that is a configuration mistake, not an outage.
//
// A Start that fails before it listens, or on a port it cannot bind, started nothing and may
// be tried again; any later failure leaves the executor stopped (ErrStopped).
func (e *Executor) Start(ctx context.Context) error {
	err := e.life.StartOnce(func() error { return e.start(ctx) })
	switch {
	case errors.Is(err, startstop.ErrStarted):
		return ErrAlreadyStarted
	case errors.Is(err, startstop.ErrStopped):
		return ErrStopped
	}
	return err
}

// start is Start under the lifecycle lock. Whatever it has started when it fails is stopped
// again, last started first.
func (e *Executor) start(ctx context.Context) (err error) {
	var undo startstop.Undo
	defer func() {
		if err == nil {
			return
		}
		if uerr := undo.Run(ctx, e.log, nil, "start failed, undo: "); uerr != nil {
			e.log.Warn("cannot tear down after a failed start", "err", uerr)
		}
	}()
	if err := ctx.Err(); err != nil {
		return startstop.NothingStarted(fmt.Errorf("cannot start executor: %w", err))
	}
	e.mu.Lock()
	e.handlerNames = slices.Sorted(maps.Keys(e.handlers))
	e.mu.Unlock()
	if len(e.handlerNames) == 0 {
		return startstop.NothingStarted(ErrNoHandlers)
	}

	ln, err := net.Listen("tcp", e.cfg.Addr)
	if err != nil {
		return startstop.NothingStarted(fmt.Errorf("cannot listen on %s: %w", e.cfg.Addr, err))
	}
	// The listener is the only thing started so far, and closing it undoes it: a failure up to
	// the serving goroutines still leaves the executor new.
	undo.Push("close listener", func(context.Context) error { _ = ln.Close(); return nil })
	advertise := e.cfg.AdvertiseAddr
	if advertise == "" {
		advertise = ln.Addr().String()
		if err := checkAdvertise(advertise); err != nil {
			return startstop.NothingStarted(fmt.Errorf("%w: AdvertiseAddr: %w", ErrInvalidConfig, err))
		}
	}
	pool, err := ants.NewPool(e.cfg.PoolSize, ants.WithLogger(printfLogger{e.log}))
	if err != nil {
		return startstop.NothingStarted(fmt.Errorf("cannot create the handler pool: %w", err))
	}

	e.mu.Lock()
	e.advertise = advertise
	e.mu.Unlock()
	e.pool = pool
	e.hbInterval.Store(int64(e.cfg.HeartbeatInterval))
	e.runCtx, e.cancelRuns = context.WithCancelCause(context.Background())
	e.sendCtx, e.cancelSends = context.WithCancel(context.Background())
	e.outReady = make(chan struct{}, 1)
	for range e.cfg.ResultSenders {
		e.sendersWG.Add(1)
		go e.sendResults()
	}
	// The queue holds every admitted run, so sending to it under mu never blocks: admission
	// already bounded inflight to PoolSize+QueueSize.
	e.queue = make(chan *activeRun, e.cfg.PoolSize+e.cfg.QueueSize)
	e.mu.Lock()
	e.accepting = true
	e.mu.Unlock()

	e.feederDone = make(chan struct{})
	go e.feed(e.queue)
	e.srv = &fasthttp.Server{
		Handler:            e.serveHTTP,
		Name:               "axe-executor",
		ReadTimeout:        serverReadTimeout,
		WriteTimeout:       serverWriteTimeout,
		IdleTimeout:        serverIdleTimeout,
		MaxRequestBodySize: maxRunsBody, // the largest; each request gets its own (bodyLimit)
		HeaderReceived:     e.requestConfig,
		ErrorHandler:       e.requestError,
		Logger:             printfLogger{e.log},
	}
	e.serveDone = make(chan struct{})
	e.ln = ln
	if e.tls.server != nil {
		// The handshake, and with TLSClientCA the check of the client certificate, happen
		// on each connection's first read, before fasthttp reads a request.
		ln = tls.NewListener(ln, e.tls.server)
	}
	go e.serve(ln)
	// From here on runs can arrive, so undoing is the whole ordered Stop.
	undo.Push("stop executor", e.shutdown)

	registered := true
	if err := e.register(); err != nil {
		if errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrRegistrationRejected) {
			return err
		}
		registered = false
		e.log.Warn("cannot register yet; retrying every heartbeat", "err", err)
	}
	hbCtx, hbCancel := context.WithCancel(context.Background())
	e.hbCancel = hbCancel
	e.hbDone = make(chan struct{})
	go e.heartbeatLoop(hbCtx, registered)

	e.log.Info("executor started", "address", advertise, "protocol", e.tls.scheme(), "listen", ln.Addr().String(),
		"handlers", e.handlerNames, "pool", e.cfg.PoolSize, "queue", e.cfg.QueueSize)
	return nil
}

// Stop shuts the executor down in this order:
//
//  1. /axe/run answers 503 to new runs; /axe/kill and /axe/beat keep working, so an operator
//     can still kill a long run during the drain. The executor deregisters
//     (POST /api/v1/executors/deregister): the scheduler sends it no new run from then on,
//     and still takes the results of the runs it holds. A deregistration that fails is
//     logged, not retried: the 503s route runs elsewhere meanwhile.
//  2. Runs already accepted, running or queued, finish. Their contexts are not cancelled.
//  3. Their results are delivered: Stop waits until the scheduler acknowledged or finally
//     refused each one.
//  4. Heartbeats stop. They run through steps 2 and 3 so that the scheduler does not declare
//     a draining executor lost and dispatch its runs elsewhere.
//  5. The HTTP server and the handler pool shut down.
//
// If ctx expires during step 2 or 3, Stop cancels every handler context (context.Cause is
// ErrShutdown) and abandons results not yet acknowledged (the scheduler times those runs out
// and retries them per the task's policy), then performs steps 4 and 5 without waiting for
// handlers that ignore their context, and returns an error wrapping ctx.Err().
//
// Stop is idempotent and safe without Start. An Executor cannot be started again.
func (e *Executor) Stop(ctx context.Context) error {
	return e.life.StopOnce(ctx, func(started bool) error {
		if !started {
			return nil
		}
		return e.shutdown(ctx)
	})
}

// shutdown performs Stop's steps; see Stop for the order and why. A step that fails does not
// stop the ones after it; the first to give up waiting cancels the runs and abandons the
// results still unsent, and the steps after it no longer wait for either.
func (e *Executor) shutdown(ctx context.Context) error {
	began := time.Now()
	var gaveUp bool
	giveUp := func(err error) error {
		gaveUp = true
		e.cancelRuns(ErrShutdown)
		e.cancelSends()
		e.log.Warn("stop: gave up waiting; cancelled runs and abandoned unsent results", "err", err)
		return err
	}
	err := startstop.Steps(ctx, e.log, nil, "stop: ",
		startstop.Step{Name: "refuse new runs", Run: func(context.Context) error {
			e.mu.Lock()
			e.accepting = false
			pending := e.inflight
			close(e.queue)
			e.mu.Unlock()
			e.log.Info("stop: runs pending", "pending", pending)
			return nil
		}},
		startstop.Step{Name: "deregister", Run: func(context.Context) error {
			e.deregister()
			return nil
		}},
		startstop.Step{Name: "finish runs", Run: func(ctx context.Context) error {
			if err := waitGroup(ctx, &e.runWG); err != nil {
				return giveUp(err)
			}
			return nil
		}},
		startstop.Step{Name: "deliver results", Run: func(ctx context.Context) error {
			if gaveUp {
				return nil
			}
			if err := waitGroup(ctx, &e.sendWG); err != nil {
				return giveUp(err)
			}
			return nil
		}},
		startstop.Step{Name: "stop heartbeats", Run: func(context.Context) error {
			if e.hbCancel != nil {
				e.hbCancel()
				<-e.hbDone
			}
			return nil
		}},
		startstop.Step{Name: "close HTTP server", Run: func(ctx context.Context) error {
			serr := e.srv.ShutdownWithContext(ctx)
			// Shutdown closes only the listeners Serve has registered; a Stop right after
			// Start can come first, and Serve would then accept forever. Closing it here ends
			// Serve either way.
			_ = e.ln.Close()
			<-e.serveDone
			if serr != nil && !gaveUp {
				return fmt.Errorf("cannot shut the HTTP server down: %w", serr)
			}
			return nil
		}},
		startstop.Step{Name: "release pool", Run: func(ctx context.Context) error {
			if !gaveUp {
				<-e.feederDone // the queue is closed and empty, so the feeder is on its way out
			}
			perr := e.pool.ReleaseContext(ctx)
			e.sched.closeIdle()
			e.ctl.closeIdle()
			e.cancelRuns(ErrShutdown) // frees the contexts; every run has finished or was cancelled above
			e.cancelSends()
			if !gaveUp {
				e.sendersWG.Wait() // every result was delivered, so the senders are idle and leave at once
			}
			if perr != nil && !gaveUp {
				return fmt.Errorf("cannot release the handler pool: %w", perr)
			}
			return nil
		}})
	if err != nil {
		return fmt.Errorf("cannot stop gracefully: %w", err)
	}
	e.log.Info("executor stopped", "took", time.Since(began))
	return nil
}

// waitGroup waits for wg or ctx, whichever comes first.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// admit decides what /axe/run answers, and queues the run when it is accepted. The returned
// func, if any, must be called after the response is decided (it starts a result re-send).
func (e *Executor) admit(req protocol.Run) (int, any, func()) {
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if status, resp, stale := e.staleEpoch(req.Epoch, req.Shard); stale {
		return status, resp, nil
	}
	if !e.accepting {
		return http.StatusServiceUnavailable, protocol.Error{Error: "executor is stopping"}, nil
	}
	if _, ok := e.running[req.Ticket]; ok {
		return http.StatusAccepted, protocol.Accepted{Accepted: true, Duplicate: true}, nil
	}
	if o := e.lookupFinished(req.Ticket, now); o != nil {
		// The scheduler asks again for a ticket that already finished: it most likely never got
		// the callback, so send it again. If a delivery is under way, that goroutine sends once
		// more after it ends, so the scheduler always gets a callback after its request.
		var resend func()
		if o.sending {
			o.again = true
		} else {
			o.sending = true
			e.sendWG.Add(1)
			resend = func() { e.enqueue(o) }
		}
		return http.StatusOK, protocol.Finished{Duplicate: true, Status: o.status, Error: o.errText}, resend
	}
	h, ok := e.handlers[req.Handler]
	if !ok {
		return http.StatusNotFound, protocol.Error{Error: fmt.Sprintf("unknown handler %q", req.Handler)}, nil
	}
	if other, busy := e.tasks[req.Task]; busy && !req.Parallel {
		return http.StatusConflict, protocol.Error{Error: fmt.Sprintf("task %q is already running here with ticket %q", req.Task, other)}, nil
	}
	if e.inflight >= e.cfg.PoolSize+e.cfg.QueueSize {
		return http.StatusTooManyRequests, protocol.Error{Error: "busy"}, nil
	}

	run := handlerRun(req)
	ctx, kill := context.WithCancelCause(e.runCtx)
	release := context.CancelFunc(func() {})
	if !run.Deadline.IsZero() {
		ctx, release = context.WithDeadline(ctx, run.Deadline)
	}
	ar := &activeRun{
		run: run, handler: h, ttl: dedupTTL(req, e.cfg.DedupTTL),
		ctx: ctx, kill: kill, release: release,
	}
	e.running[req.Ticket] = ar
	if !req.Parallel {
		// A parallel run (allow_all) is no run another must wait for.
		e.tasks[req.Task] = req.Ticket
	}
	e.inflight++
	e.runWG.Add(1)
	e.queue <- ar
	return http.StatusAccepted, protocol.Accepted{Accepted: true}, nil
}

// lookupFinished returns the remembered outcome of ticket, forgetting it once its own TTL has
// passed. Each run carries its own TTL (the task's longest retry span + 5 min), so expiry is
// checked per entry; DedupSize bounds memory. Callers hold mu.
func (e *Executor) lookupFinished(ticket string, now time.Time) *outcome {
	o, ok := e.finished.Peek(ticket)
	if !ok {
		return nil
	}
	if !now.Before(o.expires) {
		e.finished.Remove(ticket)
		return nil
	}
	return o
}

// remember records a finished ticket. It first drops up to two expired entries from the old
// end, so that in the usual case (similar TTLs) memory follows the TTLs and not only DedupSize.
// Callers hold mu.
func (e *Executor) remember(ticket string, o *outcome, now time.Time) {
	for range 2 {
		_, oldest, ok := e.finished.GetOldest()
		if !ok || now.Before(oldest.expires) {
			break
		}
		e.finished.RemoveOldest()
	}
	e.finished.Add(ticket, o)
}

// feed moves admitted runs onto the pool. The pool blocks Submit while all PoolSize workers
// are busy, which is what keeps the queue a queue.
func (e *Executor) feed(queue <-chan *activeRun) {
	defer close(e.feederDone)
	for ar := range queue {
		if err := e.pool.Submit(func() { e.execute(ar) }); err != nil {
			// Only a released pool refuses a blocking Submit, i.e. Stop gave up waiting.
			// Report the run as failed rather than dropping it silently.
			ar.kill(fmt.Errorf("cannot schedule the handler: %w", err))
			e.execute(ar)
		}
	}
}

// execute runs one handler and records its outcome.
func (e *Executor) execute(ar *activeRun) {
	defer e.runWG.Done()
	started := e.clock.Now()
	var res Result
	var err error
	if ar.ctx.Err() != nil {
		// Killed, past its deadline or cancelled by Stop while still queued.
		err = fmt.Errorf("handler not started: %w", context.Cause(ar.ctx))
	} else {
		res, err = e.call(ar)
	}
	ended := e.clock.Now()
	ar.release()
	ar.kill(nil)
	e.finish(ar, res, err, started, ended)
}

// call invokes the handler, turning a panic into an error so that one bad run cannot take the
// executor down.
func (e *Executor) call(ar *activeRun) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("handler panicked", "ticket", ar.run.Ticket, "task", ar.run.Task,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res, err = Result{}, fmt.Errorf("%w: %v", ErrHandlerPanic, p)
		}
	}()
	return ar.handler(ar.ctx, ar.run)
}

// finish records the outcome of a run, frees its slot and starts delivering its result.
func (e *Executor) finish(ar *activeRun, res Result, herr error, started, ended time.Time) {
	// The output is made valid UTF-8 before it is cut, so that what the scheduler decodes is
	// what was measured: JSON would spell each invalid byte as a three-byte U+FFFD.
	output := tail(strings.ToValidUTF8(res.Output, "\uFFFD"), e.cfg.OutputLimit)
	cb := protocol.Result{
		Ticket:     ar.run.Ticket,
		Task:       ar.run.Task,
		App:        e.cfg.App,
		Address:    e.advertise,
		Status:     protocol.StatusSuccess,
		Output:     output,
		ExitCode:   res.ExitCode,
		StartedAt:  started.UnixMilli(),
		EndedAt:    ended.UnixMilli(),
		DurationMS: ended.Sub(started).Milliseconds(),
	}
	if herr != nil {
		cb.Status = protocol.StatusFailed
		cb.Error = protocol.ClipError(strings.ToValidUTF8(herr.Error(), "\uFFFD"))
		if cb.Error == "" {
			cb.Error = "handler failed"
		}
	}
	body, err := json.Marshal(cb)
	if err != nil { // only strings and integers: cannot happen, but never lose the result
		body = fmt.Appendf(nil, `{"ticket":%q,"task":%q,"app":%q,"address":%q,"status":"failed","error":"cannot encode result"}`,
			cb.Ticket, cb.Task, cb.App, cb.Address)
	}
	o := &outcome{status: cb.Status, errText: cb.Error, body: body, expires: ended.Add(ar.ttl), sending: true}

	e.mu.Lock()
	delete(e.running, ar.run.Ticket)
	if e.tasks[ar.run.Task] == ar.run.Ticket {
		delete(e.tasks, ar.run.Task)
	}
	e.inflight--
	e.remember(ar.run.Ticket, o, ended)
	e.sendWG.Add(1)
	e.mu.Unlock()

	e.log.Info("run finished", "ticket", cb.Ticket, "task", cb.Task, "attempt", ar.run.Attempt,
		"status", cb.Status, "error", cb.Error, "duration_ms", cb.DurationMS)
	e.enqueue(o)
}

// endDelivery ends a delivery unless a repeated dispatch asked for one more in the meantime;
// it reports whether the delivery goroutine may exit.
func (e *Executor) endDelivery(o *outcome) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if o.again && e.sendCtx.Err() == nil {
		o.again = false
		return false
	}
	o.sending = false
	o.again = false
	return true
}

// register announces this executor; the scheduler keys it by (app, address), so registering
// again after a restart or a 404 heartbeat updates the same row.
func (e *Executor) register() error {
	body, err := json.Marshal(protocol.Register{
		App: e.cfg.App, Address: e.advertise, Protocol: e.tls.scheme(), Handlers: e.handlerNames,
		Auth: e.authScheme(), Version: protocol.Version, Incarnation: e.incarnation,
	})
	if err != nil {
		return fmt.Errorf("cannot encode the registration: %w", err)
	}
	status, resp, err := e.ctl.post(protocol.PathRegister, body)
	switch {
	case err != nil:
		return fmt.Errorf("cannot register: %w", err)
	case status == http.StatusOK:
		interval := e.cfg.HeartbeatInterval
		var r protocol.RegisterAnswer
		if json.Unmarshal(resp, &r) == nil && r.HeartbeatIntervalMS > 0 {
			interval = min(interval, time.Duration(r.HeartbeatIntervalMS)*time.Millisecond)
		}
		e.hbInterval.Store(int64(interval))
		e.log.Info("registered", "address", e.advertise, "heartbeat", interval)
		return nil
	case isAuthStatus(status):
		return fmt.Errorf("cannot register: %w: %w", ErrUnauthorized, statusError(protocol.PathRegister, status, resp))
	case status == http.StatusBadRequest:
		return fmt.Errorf("cannot register: %w: %w", ErrRegistrationRejected, statusError(protocol.PathRegister, status, resp))
	default:
		return fmt.Errorf("cannot register: %w", statusError(protocol.PathRegister, status, resp))
	}
}

// deregisterTimeout bounds the deregistration Stop makes: the scheduler answers at once,
// and a Stop must not wait on an unreachable one (its 503s route runs elsewhere anyway).
const deregisterTimeout = 5 * time.Second

// deregister tells the scheduler that this executor takes no new run (protocol.Deregister);
// failures are logged only. It uses a client of its own so that its time is bounded without
// touching the heartbeats'.
func (e *Executor) deregister() {
	body, err := json.Marshal(protocol.Deregister{App: e.cfg.App, Address: e.advertise, Incarnation: e.incarnation})
	if err != nil {
		e.log.Warn("stop: cannot encode the deregistration", "err", err)
		return
	}
	done := make(chan struct{})
	var (
		status int
		resp   []byte
	)
	go func() {
		defer close(done)
		status, resp, err = e.ctl.post(protocol.PathDeregister, body)
	}()
	// A timer of real time, not of the injected clock: it bounds a network call.
	timer := time.NewTimer(deregisterTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		e.log.Warn("stop: the deregistration did not answer in time; going on", "timeout", deregisterTimeout)
		return
	}
	switch {
	case err != nil:
		e.log.Warn("stop: cannot deregister", "err", err)
	case status != http.StatusOK:
		e.log.Warn("stop: cannot deregister", "err", statusError(protocol.PathDeregister, status, resp))
	default:
		e.log.Info("stop: deregistered; the scheduler sends no new run")
	}
}

// heartbeat reports liveness and load; errNotRegistered means register again.
func (e *Executor) heartbeat() error {
	e.mu.Lock()
	running := e.inflight
	e.mu.Unlock()
	body, err := json.Marshal(protocol.Heartbeat{App: e.cfg.App, Address: e.advertise, Running: running,
		Incarnation: e.incarnation})
	if err != nil {
		return fmt.Errorf("cannot encode the heartbeat: %w", err)
	}
	status, resp, err := e.ctl.post(protocol.PathHeartbeat, body)
	switch {
	case err != nil:
		return fmt.Errorf("cannot send heartbeat: %w", err)
	case status == http.StatusOK:
		return nil
	case status == http.StatusNotFound:
		return errNotRegistered
	default:
		return fmt.Errorf("cannot send heartbeat: %w", statusError(protocol.PathHeartbeat, status, resp))
	}
}

// heartbeatLoop beats every interval until ctx ends, registering whenever the scheduler does
// not know this executor (it restarted, failed over, or was unreachable at Start).
func (e *Executor) heartbeatLoop(ctx context.Context, registered bool) {
	defer close(e.hbDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.clock.After(time.Duration(e.hbInterval.Load())):
		}
		if registered {
			err := e.heartbeat()
			if err == nil {
				continue
			}
			if !errors.Is(err, errNotRegistered) {
				e.log.Warn("heartbeat failed", "err", err)
				continue
			}
			e.log.Info("scheduler does not know this executor; registering again")
		}
		if err := e.register(); err != nil {
			registered = false
			e.log.Warn("cannot register", "err", err)
			continue
		}
		registered = true
	}
}

// tail keeps the last limit bytes of s, starting at a rune boundary.
func tail(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	i := len(s) - limit
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// printfLogger adapts slog to the Printf loggers of fasthttp and ants.
type printfLogger struct{ log *slog.Logger }

func (l printfLogger) Printf(format string, args ...any) {
	l.log.Warn(fmt.Sprintf(format, args...))
}
