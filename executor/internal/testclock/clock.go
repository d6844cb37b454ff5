// Package testclock is a manual clock for the executor tests: time moves only when a test calls
// Advance, so heartbeat cadence and re-send backoff are asserted exactly and without sleeping.
// It satisfies executor.Clock. It is test support only and must not be used by production code.
package testclock

import (
	"fmt"
	"sync"
	"time"
)

// Clock is a manual clock. The zero value is not usable; call New.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	changed chan struct{} // closed and replaced whenever waiters change
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// New returns a clock reading now.
func New(now time.Time) *Clock {
	return &Clock{now: now, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the time once Advance has moved the clock d forward.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	c.notifyLocked()
	return ch
}

// Advance moves the clock forward by d and fires every waiter now due. It returns how many
// fired, so a test can assert that nothing was due yet.
func (c *Clock) Advance(d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	fired := 0
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
		fired++
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
	c.notifyLocked()
	return fired
}

// Waiters returns how many After channels have not fired yet.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// WaitForWaiters blocks until at least n After channels are pending, so that a following
// Advance cannot slip in before the code under test started waiting. It fails after timeout,
// a generous bound on real goroutine scheduling.
func (c *Clock) WaitForWaiters(n int, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		have, changed := len(c.waiters), c.changed
		c.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("testclock: %d waiters after %s, want %d", have, timeout, n)
		}
	}
}

func (c *Clock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}
