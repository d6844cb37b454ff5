// Package clock is the one time source of axe's core: the engine, its timers and the executor
// SDK read the time and arm timers only through a Clock, so their tests move time with a Fake
// instead of sleeping. It owns no goroutines of its own beyond what package time starts.
package clock

import "time"

// Clock tells the time and arms timers. Real is the system clock; tests use a Fake.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has elapsed.
	After(d time.Duration) <-chan time.Time
	// AfterFunc calls f on its own goroutine once d has elapsed, unless the timer is stopped
	// first.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTimer returns a timer whose channel receives the time once d has elapsed.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a ticker whose channel receives the time every d.
	NewTicker(d time.Duration) Ticker
}

// Timer is a stoppable one-shot timer, as time.Timer.
type Timer interface {
	// C is the channel the time is sent on; nil for a timer made by AfterFunc.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset re-arms the timer to fire d from now; it reports whether the timer was active.
	Reset(d time.Duration) bool
}

// Ticker delivers the time at intervals, as time.Ticker.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock.
var Real Clock = realClock{}

// Since returns how long ago t was on c.
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Until returns how long until t on c.
func Until(c Clock, t time.Time) time.Duration { return t.Sub(c.Now()) }

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}
func (realClock) NewTimer(d time.Duration) Timer   { return realTimer{time.NewTimer(d)} }
func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }
