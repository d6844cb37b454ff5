package persist

import "github.com/VictoriaMetrics/metrics"

// storeMetrics are a store's series, in OpenOptions.Metrics. They are got or created, so
// that the stores opened with one set (an HA node's store and its lease store) count
// together, as one process.
type storeMetrics struct {
	// batchGuardMisses counts batches run again the reading way after a guarded write
	// missed: a stale copy or a deleted task in the batch. Each such batch costs two
	// transactions.
	batchGuardMisses *metrics.Counter
	// batchRetriesNodeLost and batchRetriesConflict count batches run again on another
	// connection because they failed before their commit was sent (onBatchConn).
	batchRetriesNodeLost *metrics.Counter
	batchRetriesConflict *metrics.Counter
	// nodeSwitches counts connections made to another database node than the previous one.
	nodeSwitches *metrics.Counter
	// nodeRefused counts connection attempts to a node that failed or failed the node check.
	nodeRefused *metrics.Counter
}

func newStoreMetrics(s *metrics.Set) *storeMetrics {
	return &storeMetrics{
		batchGuardMisses:     s.GetOrCreateCounter("axe_store_batch_guard_misses_total"),
		batchRetriesNodeLost: s.GetOrCreateCounter(`axe_store_batch_retries_total{reason="node_lost"}`),
		batchRetriesConflict: s.GetOrCreateCounter(`axe_store_batch_retries_total{reason="conflict"}`),
		nodeSwitches:         s.GetOrCreateCounter("axe_store_db_node_switches_total"),
		nodeRefused:          s.GetOrCreateCounter("axe_store_db_node_refusals_total"),
	}
}
