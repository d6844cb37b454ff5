package engine

import (
	"fmt"
	"time"

	"github.com/axe-sched/axe/lib/clock"
)

// WriteStallReady is how long commits may keep failing before the engine reports itself not
// ready: long enough to ride out a deadlock retry or a dropped connection, short enough that
// a load balancer stops sending within a few probes of a database outage or a full disk.
const WriteStallReady = time.Second

// WriteStalled returns an error naming the cause when the writer's commits have kept failing
// for at least WriteStallReady; nil while they land. Transitions submitted meanwhile wait in
// the writer (none is dropped) and no run is dispatched before its transition is durable, so
// a stalled engine fires nothing: it is not ready.
func (e *API) WriteStalled() error {
	s := e.writer.Stalled()
	if s == nil {
		return nil
	}
	// The writer stamps a stall on the real clock, so its age is read on the same clock.
	if d := clock.Since(clock.Real, s.Since); d >= WriteStallReady {
		return fmt.Errorf("cannot commit to the store for %s (%d attempts): %w", d.Round(100*time.Millisecond), s.Attempts, s.Err)
	}
	return nil
}
