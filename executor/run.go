package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/axe-sched/axe/protocol"
)

// HandlerFunc executes one run. The context carries the run's deadline and is cancelled when
// the run is killed (context.Cause is ErrKilled) or when Stop gives up waiting (ErrShutdown).
// A nil error reports success; a non-nil error reports failure with err.Error() as the error
// text. A panic is recovered and reported as a failure wrapping ErrHandlerPanic.
type HandlerFunc func(ctx context.Context, run Run) (Result, error)

// Run is one dispatch of a task to this executor.
type Run struct {
	// Ticket identifies this run globally. It is the handler's idempotency key: the scheduler
	// may deliver the same ticket more than once (a lost response, a failover), and although
	// the SDK runs a repeated ticket only once while it remembers it, side effects that must
	// happen at most once should also be keyed by Ticket in the handler's own store.
	Ticket string
	// Task is the name of the task this run belongs to.
	Task string
	// Handler is the name the handler was registered under.
	Handler string
	// Attempt is the attempt number the scheduler assigned (retries increase it).
	Attempt int
	// ScheduledAt is the time the run was due; zero if the scheduler did not say.
	ScheduledAt time.Time
	// Deadline is when the scheduler stops waiting for the result; zero if none. The handler's
	// context carries the same deadline.
	Deadline time.Time
	// Params is the task's opaque params JSON; nil when the task has none.
	Params json.RawMessage
	// Epoch is the lease epoch of the scheduler that dispatched the run (docs/ha.md, "Fencing"): on
	// a node of a scale-out cluster, the epoch of its lease of the task's shard, which only that
	// shard's runs are compared with; 0 from a scheduler that runs without --ha.
	Epoch int64
}

// Result is what a handler reports besides its error.
type Result struct {
	// Output is free text shown with the run (a summary, or the tail of a log). Only the last
	// Config.OutputLimit bytes are reported.
	Output string
	// ExitCode is reported as exit_code when non-nil; command-running executors set it.
	ExitCode *int
}

// decodeRun parses and checks a POST /axe/run body (protocol.DecodeRun): one object, read
// tolerantly (a field this SDK does not know is skipped, so a scheduler that adds one never
// breaks it), with repeated keys, invalid UTF-8, wrong types, missing required fields and
// trailing data refused. The error names the field.
func decodeRun(body []byte) (protocol.Run, error) {
	r, err := protocol.DecodeRun(body)
	if err != nil {
		return protocol.Run{}, fmt.Errorf("%w: %w", ErrInvalidRun, err)
	}
	return checkRun(r)
}

// checkRun holds a run protocol.DecodeRun took to this SDK's own bound: dedup_ttl_ms at most
// 30 days. An absent handler is a handler of no name, answered 404 as any unknown one.
func checkRun(r protocol.Run) (protocol.Run, error) {
	if r.DedupTTLMS > maxDedupTTL.Milliseconds() {
		return protocol.Run{}, fmt.Errorf("%w: dedup_ttl_ms: must be between 0 and %d", ErrInvalidRun, maxDedupTTL.Milliseconds())
	}
	return r, nil
}

// handlerRun converts the wire form into the handler's view.
func handlerRun(r protocol.Run) Run {
	run := Run{
		Ticket:  r.Ticket,
		Task:    r.Task,
		Handler: r.Handler,
		Attempt: r.Attempt,
		Params:  r.Params,
		Epoch:   r.Epoch,
	}
	if r.ScheduledAt > 0 {
		run.ScheduledAt = time.UnixMilli(r.ScheduledAt)
	}
	if r.Deadline > 0 {
		run.Deadline = time.UnixMilli(r.Deadline)
	}
	return run
}

// dedupTTL is how long run r's ticket is remembered after it finishes.
func dedupTTL(r protocol.Run, fallback time.Duration) time.Duration {
	if r.DedupTTLMS > 0 {
		return time.Duration(r.DedupTTLMS) * time.Millisecond
	}
	return fallback
}
