// Package executor is the Go SDK for axe executors: a process that registers with the axe
// scheduler, receives runs over HTTP or HTTPS, executes them with Go handlers and reports each result
// back. The wire protocol it speaks is written down in docs/protocol.md.
//
// The package owns the executor side of that protocol only: its HTTP server (/axe/run,
// /axe/kill, /axe/beat), the bounded handler pool, ticket de-duplication, re-entry rejection,
// registration, heartbeats, the re-sending of results until the scheduler acknowledges
// them, following the primary among several schedulers, and refusing runs and kills of a
// scheduler epoch older than the highest seen (a deposed primary's; in scale-out mode, each
// shard judged alone, that of a node which lost the run's shard). It speaks protocol
// version 2: it skips fields of a run it does not know, registers a random incarnation per
// Executor (per process start), refuses a call signed for any other incarnation (one captured
// before a restart), and deregisters when it stops. It must not make
// scheduling decisions (when to run, whether to retry, whether a run
// timed out): those belong to the scheduler, and the SDK only reports what happened.
//
// A typical executor:
//
//	exe, err := executor.New(executor.Config{
//		App:           "billing",
//		Addr:          "0.0.0.0:9100",
//		AdvertiseAddr: "billing-1.internal:9100",
//		Schedulers:    []string{"http://axe-a:7070", "http://axe-b:7070"},
//		// Beyond loopback a token is required. Token is what the executor presents to the
//		// scheduler (an executor-scope token, best bound to this app); the scheduler signs
//		// every run and kill with a key derived from it, and the executor runs nothing
//		// else. The scheduler never sends the executor a token.
//		Token: os.Getenv("AXE_EXECUTOR_TOKEN"),
//		// Optional: serve HTTPS, and accept only callers with a client certificate of the
//		// CA (the scheduler's --executor-cert). The scheduler then dials https://.
//		TLSCert:     "/etc/axe/billing-1.pem",
//		TLSKey:      "/etc/axe/billing-1-key.pem",
//		TLSClientCA: "/etc/axe/ca.pem",
//	})
//	exe.Handle("invoice", func(ctx context.Context, run executor.Run) (executor.Result, error) {
//		// run.Ticket is the idempotency key of this run.
//		return executor.Result{Output: "done"}, nil
//	})
//	err = exe.Start(ctx)
//	defer exe.Stop(ctx)
package executor

import "errors"

// Sentinel errors. Everything else the package returns wraps one of these or is wrapped as
// "cannot …: %w".
var (
	// ErrInvalidConfig is wrapped by New when a Config field is invalid; the message names the
	// field.
	ErrInvalidConfig = errors.New("executor: invalid config")
	// ErrNoHandlers is returned by Start when no handler was registered with Handle.
	ErrNoHandlers = errors.New("executor: no handlers registered")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("executor: already started")
	// ErrStopped is returned by Start after Stop, or after a Start that failed once it had
	// started serving (a refused registration): an Executor is used once.
	ErrStopped = errors.New("executor: stopped")
	// ErrUnauthorized is returned by Start when the scheduler refused the configured token
	// (HTTP 401 or 403). It is a configuration error, so Start fails instead of retrying.
	ErrUnauthorized = errors.New("executor: scheduler refused the token")
	// ErrRegistrationRejected is returned by Start when the scheduler answered the registration
	// with 400: the registration itself is malformed and retrying cannot help.
	ErrRegistrationRejected = errors.New("executor: scheduler rejected the registration")
	// ErrNoScheduler is wrapped when no configured scheduler address answered (connection
	// errors or 503 from every one).
	ErrNoScheduler = errors.New("executor: no scheduler reachable")
	// ErrKilled is the cause of a handler context cancelled by POST /axe/kill; handlers can
	// tell a kill from a deadline with context.Cause(ctx).
	ErrKilled = errors.New("executor: run killed")
	// ErrShutdown is the cause of a handler context cancelled because Stop's context expired
	// before the handler returned.
	ErrShutdown = errors.New("executor: executor shut down")
	// ErrHandlerPanic is wrapped into the error of a run whose handler panicked.
	ErrHandlerPanic = errors.New("executor: handler panicked")
	// ErrInvalidRun is wrapped when a POST /axe/run body cannot be decoded or misses a field.
	ErrInvalidRun = errors.New("executor: invalid run")

	// errNotRegistered is returned by a heartbeat the scheduler answered with 404: it does not
	// know this executor (it restarted, or failed over), so the executor registers again.
	errNotRegistered = errors.New("executor: scheduler does not know this executor")
)
