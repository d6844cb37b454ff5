package engine

import (
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestRetryChainCountsFiresFromTheOriginalFire: a cron fire whose retry falls due after the
// next regular fire. When the chain ends, the next cycle counts from the original fire, so
// the regular fire it spanned is run once (coalesced, as for an overrunning run) instead of
// being dropped without a record because the retry's run carries its own, later, time.
func TestRetryChainCountsFiresFromTheOriginalFire(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	cs := newCallbackServer(t)
	cs.status = func(c call) int {
		if c.attempt == 1 {
			return 500
		}
		return 200
	}
	clk := clock.NewFake(time.Now())
	cs.clk = clk
	e := startEngine(t, s, withFakeClock(clk))
	spec := httpSpec("spanned", cs.URL)
	spec.Cron = "*/2 * * * * *"
	spec.Timezone = "UTC"
	spec.RetryCount = ptr(1)
	spec.RetryIntervalSec = ptr(3)
	mustCreate(t, e, spec)

	// The first fire F fails, its retry runs at about F+3 s and succeeds; F+2 s falls inside.
	waitAdvancing(t, clk, 100*time.Millisecond, 30*time.Second, "a retry and the fire after it", func() bool {
		calls := cs.got("spanned")
		for i, c := range calls {
			if c.attempt == 2 && i+1 < len(calls) {
				return true
			}
		}
		return false
	})
	calls := cs.got("spanned")
	var first int64
	for _, c := range calls {
		if c.attempt == 1 {
			first = c.body.ScheduledAt
			break
		}
	}
	spannedFire := first + 2000
	ran := 0
	for _, c := range calls {
		if c.body.ScheduledAt == spannedFire && c.attempt == 1 {
			ran++
		}
	}
	if ran != 1 {
		var got []int64
		for _, c := range calls {
			got = append(got, c.body.ScheduledAt)
		}
		t.Errorf("the fire at F+2 s, spanned by F's retry, ran %d times, want once (coalesced); fires sent: %v", ran, got)
	}
}
