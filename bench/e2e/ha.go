package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/ha"
	"github.com/axe-sched/axe/persist"
)

// haWaitDefault bounds taking the lease on a fresh database, which the elector does on its
// first campaign.
const haWaitDefault = 30 * time.Second

// asPrimary makes the phase's engine a primary of `axe serve --ha`, wired as the daemon wires
// one term: an ha.Elector takes and renews the lease in store, ecfg's store is fenced by the
// term's epoch (every write checks the lease row inside its transaction), the writer and the
// dispatcher carry the epoch, and every dispatch passes the elector's gate just before it
// leaves. The returned func stops the elector, releasing the lease; call it after the engine
// stopped.
func asPrimary(ctx context.Context, store persist.Store, ecfg *engine.Config, log *slog.Logger) (func(), error) {
	el, err := ha.New(ha.Config{Store: store, NodeID: "bench", Advertise: "http://127.0.0.1:0", Logger: log,
		Metrics: processMetrics})
	if err != nil {
		return nil, fmt.Errorf("cannot create the lease elector: %w", err)
	}
	if err := el.Start(ctx); err != nil {
		return nil, fmt.Errorf("cannot start the lease elector: %w", err)
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = el.Stop(sctx, true)
	}
	var epoch int64
	wait := time.NewTimer(haWaitDefault)
	defer wait.Stop()
	for epoch == 0 {
		select {
		case ch, ok := <-el.Changes():
			if !ok {
				stop()
				return nil, fmt.Errorf("cannot take the lease: the elector stopped")
			}
			if ch.Primary {
				epoch = ch.Epoch
			}
		case <-wait.C:
			stop()
			return nil, fmt.Errorf("cannot take the lease within %s", haWaitDefault)
		case <-ctx.Done():
			stop()
			return nil, fmt.Errorf("cannot take the lease: %w", ctx.Err())
		}
	}
	// Drain later role changes so the elector never blocks on them; a demotion mid-phase
	// closes the gate, and the phase then fails as incomplete.
	go func() {
		for range el.Changes() {
		}
	}()
	fenced, err := persist.Fenced(store, ha.LeaseNameDefault, epoch, func(err error) { el.Lost(epoch, err) })
	if err != nil {
		stop()
		return nil, fmt.Errorf("cannot fence the store: %w", err)
	}
	ecfg.Store = fenced
	ecfg.Epoch = epoch
	ecfg.Writer.LeaseName = ha.LeaseNameDefault
	ecfg.Writer.Epoch = func() int64 { return epoch }
	ecfg.Dispatch.Epoch = epoch
	ecfg.Dispatch.Gate = func() error { return el.Gate(epoch) }
	return stop, nil
}
