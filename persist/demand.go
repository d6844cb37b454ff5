package persist

// Rate demand across the nodes of a sharded cluster (schema step 22, docs/scale-out.md "Rate
// limits across nodes"). Each node writes, every exchange, its recent demand for each
// rate-limited downstream (dispatches a second it took or wanted), and reads every node's
// fresh rows back, so that each gives itself the share of a downstream's rate its demand is
// of the cluster's: a downstream whose fires all fall in one node's shards gets its whole
// rate there, not that node's share of the shards.

import (
	"context"
	"fmt"
	"strings"
)

// DemandStaleMS is how long a row of rate_demand is kept after its node last wrote it: a
// dead node's rows go then (they are not read after the exchange's own TTL anyway).
const DemandStaleMS = 60_000

// DemandStore is what sharing rate limits by demand needs of a store.
type DemandStore interface {
	// ExchangeDemand replaces node's rows with demand (downstream → dispatches a second), at
	// now, deletes rows not written for DemandStaleMS, and returns every node's rows written
	// at or after now − ttlMS, by downstream and node, in one transaction.
	ExchangeDemand(ctx context.Context, node string, demand map[string]float64, now, ttlMS int64) (map[string]map[string]float64, error)
}

var _ DemandStore = (*sqlStore)(nil)

// demandBatch bounds the rows of one INSERT.
const demandBatch = 200

func (s *sqlStore) ExchangeDemand(ctx context.Context, node string, demand map[string]float64, now, ttlMS int64) (map[string]map[string]float64, error) {
	for attempt := 0; ; attempt++ {
		out, err := s.exchangeDemand(ctx, node, demand, now, ttlMS)
		if err == nil || !s.d.isRetryable(err) || attempt >= slotRetries || ctx.Err() != nil {
			return out, err
		}
	}
}

func (s *sqlStore) exchangeDemand(ctx context.Context, node string, demand map[string]float64, now, ttlMS int64) (map[string]map[string]float64, error) {
	tx, err := s.slotTx(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	defer rollback(tx)
	if _, err := tx.ExecContext(ctx, `DELETE FROM rate_demand WHERE node = ?`, node); err != nil {
		return nil, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	keys := make([]string, 0, len(demand))
	for k := range demand {
		keys = append(keys, k)
	}
	for len(keys) > 0 {
		n := min(len(keys), demandBatch)
		args := make([]any, 0, 4*n)
		for _, k := range keys[:n] {
			args = append(args, k, node, demand[k], now)
		}
		q := `INSERT INTO rate_demand (downstream, node, demand, seen_at) VALUES ` +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", n), ", ")
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return nil, fmt.Errorf("cannot exchange rate demand: %w", err)
		}
		keys = keys[n:]
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM rate_demand WHERE seen_at < ?`, now-DemandStaleMS); err != nil {
		return nil, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT downstream, node, demand FROM rate_demand WHERE seen_at >= ?`, now-ttlMS)
	if err != nil {
		return nil, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	out := map[string]map[string]float64{}
	for rows.Next() {
		var k, n string
		var d float64
		if err := rows.Scan(&k, &n, &d); err != nil {
			rows.Close()
			return nil, fmt.Errorf("cannot exchange rate demand: %w", err)
		}
		if out[k] == nil {
			out[k] = map[string]float64{}
		}
		out[k][n] = d
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	return out, nil
}
