package testwait

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	For(t, 10*time.Second, "the third call", func() bool { return calls.Add(1) == 3 })
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message and ends the goroutine, as
// the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestForFailsAfterTheTimeout(t *testing.T) {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		For(r, 50*time.Millisecond, "a condition that never holds", func() bool { return false })
	}()
	<-done
	if !strings.Contains(r.msg, "a condition that never holds") || !strings.Contains(r.msg, "50ms") {
		t.Fatalf("Fatalf message %q does not name what was waited for and the timeout", r.msg)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("gave up after %s, before the 50ms timeout", waited)
	}
}

func TestParseScale(t *testing.T) {
	for v, want := range map[string]int64{"": 1, "1": 1, "3": 3, "10": 10} {
		if n, err := parseScale(v); err != nil || n != want {
			t.Errorf("parseScale(%q) = %d, %v; want %d", v, n, err, want)
		}
	}
	for _, v := range []string{"0", "11", "-2", "2.5", "x", " 3"} {
		if n, err := parseScale(v); err == nil || !strings.Contains(err.Error(), ScaleEnv) {
			t.Errorf("parseScale(%q) = %d, %v; want an error naming %s", v, n, err, ScaleEnv)
		}
	}
}
