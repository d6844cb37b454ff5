package conformance_test

import (
	"testing"

	"github.com/axe-sched/axe/lib/freeport"
)

// freeAddr is a loopback host:port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.MustAddr(t)
}
