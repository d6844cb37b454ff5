package engine

import (
	"context"
	"testing"
	"time"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// TestShardedNodesShareIncarnationAndDeregistration: an executor registers its incarnation
// with one node of a sharded cluster and deregisters there; the other node, which reads the
// registry from the store, signs for that incarnation, stops routing to the executor once
// it deregistered, keeps it so through its heartbeats (to the first node), and routes to it
// again after it registers again.
func TestShardedNodesShareIncarnationAndDeregistration(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		a, b := startEngine(t, s, sharded), startEngine(t, s, sharded)
		const addr, inc = "127.0.0.1:19100", "0123456789abcdef0123456789abcdef"
		reg := wire.ExecutorRegistration{App: "billing", Address: addr, Handlers: []string{"charge"}, Version: 2, Incarnation: inc}
		if err := a.API().Executors().Register(ctx, reg); err != nil {
			t.Fatal(err)
		}
		candidates := func(e *Engine) int { return len(e.registry.Candidates("billing", "charge", "", "t")) }
		waitFor(t, 10*time.Second, "the other node to read the registration and its incarnation", func() bool {
			x := b.registry.Get("billing", addr)
			return x != nil && x.Incarnation() == inc && candidates(b) == 1
		})
		if err := a.API().Executors().Deregister(ctx, "billing", addr, inc); err != nil {
			t.Fatal(err)
		}
		if candidates(a) != 0 {
			t.Errorf("the node that took the deregistration still routes to the executor")
		}
		waitFor(t, 10*time.Second, "the other node to stop routing to it", func() bool { return candidates(b) == 0 })
		// It drains, heartbeating to the first node: no node routes to it.
		for range 3 {
			if err := a.API().Executors().Heartbeat(ctx, "billing", addr, ""); err != nil {
				t.Fatal(err)
			}
			beat := lastHeartbeat(a, addr)
			waitFor(t, 10*time.Second, "the other node to read the heartbeat", func() bool { return lastHeartbeat(b, addr) >= beat })
			if candidates(a) != 0 || candidates(b) != 0 {
				t.Fatalf("a heartbeat of the draining executor made a node route to it (a %d, b %d)", candidates(a), candidates(b))
			}
		}
		reg.Incarnation = "fedcba9876543210fedcba9876543210"
		if err := a.API().Executors().Register(ctx, reg); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the other node to route to it again, for the new incarnation", func() bool {
			x := b.registry.Get("billing", addr)
			return candidates(b) == 1 && x.Incarnation() == reg.Incarnation
		})
	})
}

// lastHeartbeat is the last heartbeat e's registry holds of the executor at addr.
func lastHeartbeat(e *Engine, addr string) int64 {
	for _, x := range e.registry.Snapshot() {
		if x.Address == addr {
			return x.LastHeartbeat
		}
	}
	return 0
}
