package migrate

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the XXL-JOB tests close their database handles (database/sql keeps
// a goroutine per open DB). ants, imported through the agent package, starts its default
// pool's goroutines at init: they are there before the tests and ignored as such.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent())
}
