// Package startstop is the one lifecycle of axe's services (the engine, the batched writer,
// the dispatcher, the admin server, the executor SDK): Start runs once; Stop runs once and is
// harmless without Start; a second Stop waits for the first. It also runs ordered stop steps,
// logging how long each took, and undoes a Start that failed halfway. It starts no goroutine.
package startstop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/axe-sched/axe/lib/clock"
)

// Sentinel errors of StartOnce.
var (
	// ErrStarted: Start was called on a service already started.
	ErrStarted = errors.New("already started")
	// ErrStopped: Start was called on a service stopped, or whose Start failed; services
	// are not restartable.
	ErrStopped = errors.New("already stopped")
)

const (
	stateNew = iota
	stateStarted
	stateStopped
)

// Lifecycle tracks one service's life. Embed it (or hold it as a field); the zero value is
// a service never started.
type Lifecycle struct {
	mu      sync.Mutex
	state   int
	stopped chan struct{} // closed once the first Stop has finished; made lazily
}

// StartOnce runs start under the lifecycle lock unless the service was started or stopped
// before (ErrStarted, ErrStopped). A failed start leaves the service stopped: start must
// itself stop what it had started (see Undo) before it returns its error. The exception is an
// error marked by NothingStarted, which StartOnce returns unmarked, leaving the service new.
func (l *Lifecycle) StartOnce(start func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case stateStarted:
		return ErrStarted
	case stateStopped:
		return ErrStopped
	}
	if err := start(); err != nil {
		if ns, ok := errors.AsType[nothingStarted](err); ok {
			return ns.err
		}
		l.state = stateStopped
		close(l.stoppedLocked())
		return err
	}
	l.state = stateStarted
	return nil
}

// StopOnce runs stop the first time it is called, telling it whether the service had been
// started; a Stop without Start therefore costs nothing the service does not choose to do.
// A later call waits for the first to finish (or for ctx) and returns nil.
func (l *Lifecycle) StopOnce(ctx context.Context, stop func(started bool) error) error {
	l.mu.Lock()
	ch := l.stoppedLocked()
	if l.state == stateStopped {
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return nil
	}
	started := l.state == stateStarted
	l.state = stateStopped
	l.mu.Unlock()
	defer close(ch)
	return stop(started)
}

// IfNew runs f under the lifecycle lock if the service was neither started nor stopped, and
// reports whether it ran. A service uses it for what may only happen before Start (such as
// registering handlers); a Start under way makes it wait.
func (l *Lifecycle) IfNew(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateNew {
		return false
	}
	f()
	return true
}

// NothingStarted marks the error of a start that failed before it started anything (a
// precondition, a port in use): StartOnce then leaves the service new, so that Start may be
// tried again. A nil err stays nil.
func NothingStarted(err error) error {
	if err == nil {
		return nil
	}
	return nothingStarted{err}
}

type nothingStarted struct{ err error }

func (n nothingStarted) Error() string { return n.err.Error() }
func (n nothingStarted) Unwrap() error { return n.err }

// Started reports whether Start succeeded and Stop has not begun.
func (l *Lifecycle) Started() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == stateStarted
}

func (l *Lifecycle) stoppedLocked() chan struct{} {
	if l.stopped == nil {
		l.stopped = make(chan struct{})
	}
	return l.stopped
}

// Step is one named step of a shutdown.
type Step struct {
	Name string
	Run  func(ctx context.Context) error
}

// Steps runs steps in order under ctx, logging each one's name (after prefix) and how long
// it took on clk (nil: the real clock). A failed step does not stop the ones after it: a
// shutdown goes as far as it can. It returns the steps' errors joined.
func Steps(ctx context.Context, log *slog.Logger, clk clock.Clock, prefix string, steps ...Step) error {
	if clk == nil {
		clk = clock.Real
	}
	var errs []error
	for _, s := range steps {
		t := clk.Now()
		err := s.Run(ctx)
		if log != nil {
			log.Info(prefix+s.Name, "took", clock.Since(clk, t), "error", err)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Reserve returns a context for a step that may wait as long as it is let (a drain of work
// in flight): it ends a quarter of ctx's time left before ctx does, or most before it when
// that is less, so the steps after it keep that time. Without a deadline on ctx it has none.
// Cancel releases it.
func Reserve(ctx context.Context, most time.Duration) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	left := time.Until(deadline)
	return context.WithDeadline(ctx, deadline.Add(-min(left/4, most)))
}

// Undo collects how to stop what a Start has started so far, so that a failure later in the
// Start stops it again, last started first. The zero value is empty.
type Undo struct{ steps []Step }

// Push records how to stop something just started.
func (u *Undo) Push(name string, stop func(ctx context.Context) error) {
	u.steps = append(u.steps, Step{Name: name, Run: stop})
}

// Run stops everything pushed, in reverse order, as Steps does, and empties u.
func (u *Undo) Run(ctx context.Context, log *slog.Logger, clk clock.Clock, prefix string) error {
	rev := make([]Step, len(u.steps))
	for i, s := range u.steps {
		rev[len(u.steps)-1-i] = s
	}
	u.steps = nil
	return Steps(ctx, log, clk, prefix, rev...)
}
