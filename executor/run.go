package executor

import (
	"bytes"
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
	// Epoch is the lease epoch of the scheduler that dispatched the run (R8.3): on a node of a
	// scale-out cluster, the epoch of its lease of the task's shard, which only that shard's
	// runs are compared with; 0 from a scheduler that runs without --ha.
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

// decodeRun parses and checks a POST /axe/run body strictly (protocol.Decode): one object,
// no field protocol.Run lacks, nothing after it. The error names the field.
func decodeRun(body []byte) (protocol.Run, error) {
	var r protocol.Run
	if err := protocol.Decode(body, &r); err != nil {
		return protocol.Run{}, fmt.Errorf("%w: %w", ErrInvalidRun, err)
	}
	return checkRun(r)
}

// checkRun checks a decoded run as decodeRun does.
func checkRun(r protocol.Run) (protocol.Run, error) {
	bad := func(field, problem string) (protocol.Run, error) {
		return protocol.Run{}, fmt.Errorf("%w: %s: %s", ErrInvalidRun, field, problem)
	}
	for _, f := range []struct{ name, value string }{
		{"ticket", r.Ticket}, {"task", r.Task}, {"handler", r.Handler},
	} {
		if f.value == "" {
			return bad(f.name, "required")
		}
		if len(f.value) > maxNameLen {
			return bad(f.name, fmt.Sprintf("longer than %d bytes", maxNameLen))
		}
	}
	switch {
	case len(r.Group) > maxNameLen:
		return bad("group", fmt.Sprintf("longer than %d bytes", maxNameLen))
	case len(r.Kind) > maxNameLen:
		return bad("kind", fmt.Sprintf("longer than %d bytes", maxNameLen))
	case r.Attempt < 0:
		return bad("attempt", "must not be negative")
	case r.ScheduledAt < 0:
		return bad("scheduled_at", "must not be negative")
	case r.Deadline < 0:
		return bad("deadline", "must not be negative")
	case r.DedupTTLMS < 0 || r.DedupTTLMS > maxDedupTTL.Milliseconds():
		return bad("dedup_ttl_ms", fmt.Sprintf("must be between 0 and %d", maxDedupTTL.Milliseconds()))
	case r.Epoch < 0:
		return bad("epoch", "must not be negative")
	case r.Shard != nil && (*r.Shard < 0 || *r.Shard >= protocol.ShardCount):
		return bad("shard", fmt.Sprintf("must be between 0 and %d, got %d", protocol.ShardCount-1, *r.Shard))
	}
	if bytes.Equal(r.Params, []byte("null")) {
		r.Params = nil
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
