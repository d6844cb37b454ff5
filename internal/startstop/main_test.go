package startstop

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/internal/leaktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Options()...)
}
