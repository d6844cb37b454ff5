package daemon

import (
	"fmt"

	"github.com/VictoriaMetrics/metrics"
)

// The daemon writes one /metrics page from the sets it holds; nothing of axe registers in
// the metrics library's default set, so two daemons, engines or stores in one process
// (tests) never share or collide on a series:
//
//   - the daemon's own set, for the life of the process: axe_build_info, the HA series (the
//     elector's, or a single node's axe_ha_primary 1 and axe_lease_epoch 0) and the store's
//     (axe_store_*, the lease store's included);
//   - each engine's set, new with each engine, with its writer's (axe_writer_*) and its
//     dispatcher's (axe_dispatch_*) series: written while that engine serves, which is
//     always on a single node and, under --ha, while the node is the primary of the term
//     the engine was built for. A backup writes its own set only.

// newOwnMetrics is the daemon's own set, with axe_build_info.
func newOwnMetrics(version string) *metrics.Set {
	s := metrics.NewSet()
	s.NewGauge(fmt.Sprintf(`axe_build_info{version=%q}`, version), func() float64 { return 1 })
	return s
}
