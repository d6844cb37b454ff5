package cron

import (
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestConcurrentNext shares one Schedule between goroutines. cronexpr's Next
// writes scratch state into its Expression, so without the per-call copy in
// nextWall this fails under -race (and can return wrong days).
func TestConcurrentNext(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	for _, expr := range []string{"0 0 0 L-3 * ?", "0 0 12 ? * 5L", "0 */30 * * * *"} {
		s, err := Parse(expr)
		if err != nil {
			t.Fatal(err)
		}
		// Goroutines start from different months so the days-of-month
		// scratch list differs between them.
		starts := make([]time.Time, 8)
		want := make([][]time.Time, len(starts))
		for i := range starts {
			starts[i] = time.Date(2026, time.Month(1+i), 1, 0, 0, 0, 0, ny)
			want[i] = fires(t, expr, ny, starts[i], 50)
		}
		var wg sync.WaitGroup
		got := make([][]time.Time, len(starts))
		for i := range starts {
			wg.Go(func() {
				after := starts[i]
				for range 50 {
					after = s.Next(after, ny)
					got[i] = append(got[i], after)
				}
			})
		}
		wg.Wait()
		for i := range starts {
			if !slices.EqualFunc(got[i], want[i], time.Time.Equal) {
				t.Fatalf("%q from %s: concurrent Next differs from sequential: %s", expr, starts[i], firstDiff(got[i], want[i]))
			}
		}
	}
}
