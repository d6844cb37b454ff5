package persist

import (
	"strings"
	"testing"

	"github.com/axe-sched/axe/model"
)

// TestShortArg checks that the enumerated values come back as themselves without an
// allocation, and that any other value is clipped as before.
func TestShortArg(t *testing.T) {
	// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
	enums := []string{"", model.RunScheduled, model.RunManual, model.RunBackfill,
		model.ResultRunning, model.ResultSuccess, model.ResultFailed, model.ResultTimeout,
		model.ResultKilled, model.ResultLost, model.ResultSkipped,
		string(model.StateWaiting), string(model.StateScheduled), string(model.StateRunning),
		string(model.StateSuccess), string(model.StateFailed), string(model.StateRetrying),
		string(model.StatePaused), string(model.StateKilled)}
	for _, v := range enums {
		if got := shortArg(v); got != any(v) {
			t.Errorf("shortArg(%q) = %v", v, got)
		}
		// A value built at run time, as one read from a row: the same constant comes back.
		v = strings.Clone(v)
		if n := testing.AllocsPerRun(10, func() { _ = shortArg(v) }); n != 0 {
			t.Errorf("shortArg(%q) allocates %v times", v, n)
		}
	}
	long := strings.Repeat("x", shortLen+5)
	if got := shortArg(long); got != any(long[:shortLen]) {
		t.Errorf("shortArg of a long value = %q, want it clipped to %d bytes", got, shortLen)
	}
}

// TestBatchArgs checks that a released list keeps no values and comes back empty.
func TestBatchArgs(t *testing.T) {
	t.Parallel()
	b := batchArgs(4)
	b.args = append(b.args, "a", int64(1000), "b")
	full := b.args[:cap(b.args)]
	b.release()
	for i, v := range full[:3] {
		if v != nil {
			t.Errorf("released list keeps value %d: %v", i, v)
		}
	}
	b = batchArgs(8)
	if len(b.args) != 0 || cap(b.args) < 8 {
		t.Errorf("batchArgs(8) = len %d cap %d", len(b.args), cap(b.args))
	}
	b.release()
}
