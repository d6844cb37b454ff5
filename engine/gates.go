package engine

import (
	"sync"

	"github.com/axe-sched/axe/wheel"
)

// gates is the service that admits fires: the rate gate (core_rategate.go), the concurrency
// gate (core_concgate.go) and, on a sharded engine, the concurrency slots across nodes
// (core_clusterslots.go), with their loops and the limits' gauges. The core asks it to admit
// an entry popped from a ready queue (admit), to give a fire its slot (offerFire), a run that
// does not wait its slot (tryAcquireRun), and to write or reconcile the stored slots of runs
// it takes over (holdRows, reconcileShards); it answers by firing what it admitted (fire).
type gates struct {
	base
	// fire is the core's: fire an entry the gates admitted, with what they gave it (core_fire.go).
	fire func(ent *wheel.Entry[*task], adm admission)
	gate *rateGate
	conc *concGate
	// runs are the core's runs in flight, whose slots the slot loop keeps in the store.
	runs *runsInFlight
	// loopsWG is the core's: the gates' loops end before the engine's Stop goes on.
	loopsWG *sync.WaitGroup
	// acrossNodes: other nodes start runs under the same limits (a sharded cluster, told by
	// the ownership model at New), so the runs under a limit are counted in the store
	// (core_clusterslots.go), not by this node alone.
	acrossNodes bool
}
