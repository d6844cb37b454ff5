// Package testwait is the one polling helper of axe's tests that run against real time: a
// daemon, an executor process, a database. Tests of components with an injected clock
// advance the clock instead (STYLE.md, "Time is injected").
package testwait

import (
	"testing"
	"time"
)

// Interval is how often For checks its condition: short against the seconds the waited-for
// work takes under -race on two cores, long enough not to compete with it for CPU.
const Interval = 20 * time.Millisecond

// For calls cond every Interval until it returns true, and fails t (naming what it waited
// for) if that has not happened within timeout. cond runs on the calling goroutine.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
			return
		}
		time.Sleep(Interval)
	}
}
