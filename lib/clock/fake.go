package clock

import (
	"fmt"
	"sync"
	"time"
)

// Fake is a manual clock for tests: time moves only when a test calls Advance, so cadences,
// backoffs, timeouts and windows are asserted exactly and without sleeping. It satisfies
// Clock. It is test support and must not be used by production code. The zero value is not
// usable; call NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeTimer
	changed chan struct{} // closed and replaced whenever waiters change
}

// NewFake returns a fake clock reading now.
func NewFake(now time.Time) *Fake {
	return &Fake{now: now, changed: make(chan struct{})}
}

// fakeTimer is every kind of waiter: an After channel, a Timer, an AfterFunc or a Ticker.
type fakeTimer struct {
	c      *Fake
	at     time.Time
	ch     chan time.Time // nil for AfterFunc
	fn     func()         // AfterFunc only
	period time.Duration  // tickers only
}

// Now returns the clock's time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the time once Advance has moved the clock d forward.
func (c *Fake) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// NewTimer returns a timer that fires once Advance has moved the clock d forward.
func (c *Fake) NewTimer(d time.Duration) Timer {
	return c.add(&fakeTimer{c: c, ch: make(chan time.Time, 1)}, d)
}

// AfterFunc calls f on its own goroutine once Advance has moved the clock d forward.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	return c.add(&fakeTimer{c: c, fn: f}, d)
}

// NewTicker returns a ticker that fires each time Advance crosses a multiple of d. Like a
// time.Ticker it drops ticks a slow reader misses.
func (c *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker interval")
	}
	return fakeTicker{c.add(&fakeTimer{c: c, ch: make(chan time.Time, 1), period: d}, d)}
}

type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.ch }
func (k fakeTicker) Stop()               { k.t.Stop() }

func (c *Fake) add(t *fakeTimer, d time.Duration) *fakeTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t.at = c.now.Add(d)
	if d <= 0 && t.period == 0 {
		t.fire(c.now)
		return t
	}
	c.waiters = append(c.waiters, t)
	c.notifyLocked()
	return t
}

// fire delivers one expiry. Caller holds c.mu.
func (t *fakeTimer) fire(now time.Time) {
	if t.fn != nil {
		go t.fn()
		return
	}
	select {
	case t.ch <- now:
	default: // a ticker whose reader is behind
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removeLocked(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	active := c.removeLocked(t)
	t.at = c.now.Add(d)
	if d <= 0 {
		t.fire(c.now)
		return active
	}
	c.waiters = append(c.waiters, t)
	c.notifyLocked()
	return active
}

func (c *Fake) removeLocked(t *fakeTimer) bool {
	for i, w := range c.waiters {
		if w == t {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			c.notifyLocked()
			return true
		}
	}
	return false
}

// Advance moves the clock forward by d and fires every waiter now due, earliest first. It
// returns how many fired, so a test can assert that nothing was due yet.
func (c *Fake) Advance(d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	fired := 0
	kept := c.waiters[:0]
	var rearm []*fakeTimer
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.fire(c.now)
		fired++
		if w.period > 0 {
			for !w.at.After(c.now) {
				w.at = w.at.Add(w.period)
			}
			rearm = append(rearm, w)
		}
	}
	clear(c.waiters[len(kept):])
	c.waiters = append(kept, rearm...)
	c.notifyLocked()
	return fired
}

// Waiters returns how many timers, tickers and After channels are armed.
func (c *Fake) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// WaitForWaiters blocks until at least n waiters are armed, so that a following Advance
// cannot slip in before the code under test started waiting. It fails after timeout, a
// generous bound on real goroutine scheduling.
func (c *Fake) WaitForWaiters(n int, timeout time.Duration) error {
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
			return fmt.Errorf("clock: %d waiters after %s, want %d", have, timeout, n)
		}
	}
}

func (c *Fake) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}
