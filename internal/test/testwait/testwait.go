// Package testwait is the one polling helper of axe's tests that run against real time: a
// daemon, an executor process, a database. Tests of components with an injected clock
// advance the clock instead (STYLE.md, "Time is injected").
package testwait

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Interval is how often For checks its condition: short against the seconds the waited-for
// work takes under -race on two cores, long enough not to compete with it for CPU.
const Interval = 20 * time.Millisecond

// ScaleEnv names the factor (a whole number from 1 to 10, default 1) every bound of a wait
// is multiplied by. The suite's script sets it on a box other work keeps busy: the bounds
// are sized for a loaded box running the suite alone, and a CPU hog beside it stretches
// what they wait for (a database commit, a daemon's start) several times over. A bound is
// never a measure, so a longer one only makes a failing test take longer to say so.
const ScaleEnv = "AXE_TEST_WAIT_SCALE"

var scale = sync.OnceValue(func() int64 {
	n, err := parseScale(os.Getenv(ScaleEnv))
	if err != nil {
		panic(err)
	}
	return n
})

// parseScale reads ScaleEnv's value: "" is 1.
func parseScale(v string) (int64, error) {
	if v == "" {
		return 1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > 10 {
		return 0, fmt.Errorf("%s=%q: want a whole number from 1 to 10", ScaleEnv, v)
	}
	return n, nil
}

// Scale is the bound d of a wait as ScaleEnv stretches it.
func Scale(d time.Duration) time.Duration { return d * time.Duration(scale()) }

// For calls cond every Interval until it returns true, and fails t (naming what it waited
// for) if that has not happened within timeout (stretched by Scale). cond runs on the
// calling goroutine.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = Scale(timeout)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
			return
		}
		time.Sleep(Interval)
	}
}
