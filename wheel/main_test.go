package wheel

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a Clock that only moves when a test sets it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock(ms int64) *fakeClock { return &fakeClock{now: time.UnixMilli(ms)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(ms int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = time.UnixMilli(ms)
}
