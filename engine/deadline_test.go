package engine

import (
	"testing"
	"time"
)

// TestDeadlineEnded: a failure an executor reports is a timeout when the scheduler's clock
// says it arrived at or after the run's deadline less the skew allowance (timeoutGrace, at
// most a tenth of the timeout), or when the executor's own clock says it ended at or after
// the deadline (an executor ahead of the scheduler cancels early by its clock); else, whatever
// its text, a failure.
func TestDeadlineEnded(t *testing.T) {
	t.Parallel()
	sent := time.UnixMilli(1_700_000_000_000)
	long := sent.Add(60 * time.Second) // timeout 60 s: allowance 500 ms
	short := sent.Add(time.Second)     // timeout 1 s: allowance 100 ms
	ms := func(t time.Time) int64 { return t.UnixMilli() }
	for _, c := range []struct {
		name              string
		deadline, arrived time.Time
		executorEnd       int64
		want              bool
	}{
		{"no deadline known (an HTTP callback)", time.Time{}, long.Add(time.Hour), 0, false},
		{"arrives after the deadline", long, long.Add(20 * time.Millisecond), 0, true},
		{"executor 300 ms ahead, arrives before the deadline", long, long.Add(-300 * time.Millisecond), 0, true},
		{"arrives 2 s before the deadline", long, long.Add(-2 * time.Second), 0, false},
		{"executor's clock says it ended at the deadline", long, long.Add(-2 * time.Second), ms(long), true},
		{"executor's clock says it ended before", long, long.Add(-2 * time.Second), ms(long) - 1, false},
		{"short timeout: 300 ms early is a failure", short, short.Add(-300 * time.Millisecond), 0, false},
		{"short timeout: 50 ms early is the deadline's", short, short.Add(-50 * time.Millisecond), 0, true},
	} {
		if got := deadlineEnded(c.deadline, c.arrived, ms(sent), c.executorEnd); got != c.want {
			t.Errorf("%s: deadlineEnded = %v, want %v", c.name, got, c.want)
		}
	}
}
