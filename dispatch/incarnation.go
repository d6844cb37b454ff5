package dispatch

import (
	"sync"
	"sync/atomic"
)

// Protocol version 2 state of a registered executor: its incarnation, which every signed
// call to it names (protocol.SignCallV2), and whether it deregistered.

// registration lets a dispatch wait for an executor to register again: a call refused as
// signed for another incarnation means the executor restarted, and its new process registers
// at once.
type registration struct {
	mu sync.Mutex
	ch chan struct{} // closed and replaced at each SetIncarnation
}

// changed returns a channel closed at the executor's next registration.
func (r *registration) changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
}

// notify wakes whoever waits on changed.
func (r *registration) notify() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch != nil {
		close(r.ch)
		r.ch = nil
	}
}

// localGen counts the registrations and deregistrations this process took (LocalGeneration).
var localGen atomic.Int64

// LocalGeneration is read before reading executor rows from the store: a row read then
// and restored (RestoreIncarnation) does not undo a registration or deregistration this
// node took after that read, whose own store write may have come after the read.
func LocalGeneration() int64 { return localGen.Load() }

// SetIncarnation records the incarnation the executor registered ("" for an executor of
// protocol version 1) and that it takes runs again (a registration ends a deregistration).
// It wakes the dispatches waiting on Registered.
func (x *Executor) SetIncarnation(incarnation string) {
	x.incarnation.Store(&incarnation)
	x.left.Store(false)
	x.localAt.Store(localGen.Add(1))
	x.reg.notify()
}

// RestoreIncarnation records the incarnation and the deregistration a store row holds for
// the executor, as another node recorded them (a promotion, a scale-out refresh). readAt is
// the LocalGeneration read before the row was: a row read before this node's own latest
// registration or deregistration of the executor is older than what the node holds, and
// changes nothing (a refresh that read the row as alive just before a deregistration here
// made this node route to the deregistered executor again until its next refresh).
func (x *Executor) RestoreIncarnation(incarnation string, left bool, readAt int64) {
	if x.localAt.Load() > readAt {
		return
	}
	if x.Incarnation() != incarnation {
		x.incarnation.Store(&incarnation)
		x.reg.notify()
	}
	x.left.Store(left)
}

// Incarnation is the incarnation the executor registered, "" for none.
func (x *Executor) Incarnation() string {
	if p := x.incarnation.Load(); p != nil {
		return *p
	}
	return ""
}

// Registered returns a channel closed when the executor registers again (SetIncarnation).
func (x *Executor) Registered() <-chan struct{} { return x.reg.changed() }

// Left reports whether the executor deregistered: it gets no new run (Candidates).
func (x *Executor) Left() bool { return x.left.Load() }

// Deregister marks the executor (app, addr) as gone: Candidates no longer offer it, while
// the runs it holds go on and their results are taken. With incarnation set, only the
// registration of that incarnation ends: a late call of a process that was replaced does not
// end its successor's. It returns the executor it marked, nil when none was (unknown, or of
// another incarnation); it is idempotent.
func (r *Registry) Deregister(app, addr, incarnation string) *Executor {
	x := r.Get(app, addr)
	if x == nil || (incarnation != "" && x.Incarnation() != incarnation) {
		return nil
	}
	x.left.Store(true)
	x.localAt.Store(localGen.Add(1))
	return x
}
