package clock

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/internal/test/leaktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Options()...)
}
