package clock_test

import (
	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/ratelimit"
	"github.com/axe-sched/axe/wheel"
)

// The clocks declared where they are used (docs/design.md, Time) are subsets of Clock: the
// real clock and the fake one serve each of them.
var (
	_ wheel.Clock     = clock.Real
	_ wheel.Clock     = (*clock.Fake)(nil)
	_ ratelimit.Clock = clock.Real
	_ ratelimit.Clock = (*clock.Fake)(nil)
	_ executor.Clock  = clock.Real
	_ executor.Clock  = (*clock.Fake)(nil)
)
