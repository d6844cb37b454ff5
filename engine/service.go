package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/persist"
)

// The services are the parts of the engine around the firing core, each a type of its own in
// the file named for it: the loader (loader.go), retention (retention.go), alerts (alerts.go),
// the executor registry (executors.go), backfills (backfills.go), dependents
// (dependents.go) and recovery (recovery.go). Each sees the core through a narrow interface
// declared beside it, and the shared parts every service reads (base), never the whole
// engine. The periodic ones run a loop under a lifecycle of their own (lib/startstop):
// the engine starts them once the core runs and stops them first when it stops.

// service is one service's lifecycle as the engine drives it.
type service interface {
	start() error
	stop(ctx context.Context) error
}

// base is what a service shares with the core: the store, the clock, the log, the metrics,
// the configuration and the ownership model.
type base struct {
	cfg   *Config
	store persist.Store
	clk   Clock
	log   *slog.Logger
	m     *engineMetrics
	own   ownership // what this node owns (ownership.go)
}

func (b *base) now() time.Time                                        { return b.clk.Now() }
func (b *base) nowMS() int64                                          { return b.clk.Now().UnixMilli() }
func (b *base) since(t time.Time) time.Duration                       { return clock.Since(b.clk, t) }
func (b *base) every(ctx context.Context, d time.Duration, fn func()) { every(ctx, b.clk, d, fn) }

// every calls fn every d, on clk, until ctx ends: the body of the periodic loops.
func every(ctx context.Context, clk Clock, d time.Duration, fn func()) {
	t := clk.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			fn()
		}
	}
}

// loop is one service's goroutine under its own lifecycle: start runs it until stop.
type loop struct {
	life   startstop.Lifecycle
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs run in a goroutine of its own until stop cancels its context.
func (l *loop) start(run func(ctx context.Context)) error {
	return l.life.StartOnce(func() error {
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go func() {
			defer close(l.done)
			run(ctx)
		}()
		return nil
	})
}

// stop ends the loop and waits for it: a pass under way sees its context end.
func (l *loop) stop(ctx context.Context) error {
	return l.life.StopOnce(ctx, func(started bool) error {
		if started {
			l.cancel()
			<-l.done
		}
		return nil
	})
}
