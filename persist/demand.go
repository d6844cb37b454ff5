package persist

// Rate demand across the nodes of a sharded cluster (schema step 22, docs/scale-out.md "Rate
// limits across nodes"). Each node writes, every exchange, its recent demand for each
// rate-limited downstream (dispatches a second it took or wanted), and reads every node's
// fresh rows back, so that each gives itself the share of a downstream's rate its demand is
// of the cluster's: a downstream whose fires all fall in one node's shards gets its whole
// rate there, not that node's share of the shards.

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// DemandStaleMS is how long a row of rate_demand is kept after its node last wrote it: a
// dead node's rows go then (they are not read after the exchange's own TTL anyway).
const DemandStaleMS = 60_000

// DemandStore is what sharing rate limits by demand needs of a store.
type DemandStore interface {
	// ExchangeDemand is one exchange of node's, serialized with every other node's: in one
	// transaction it takes the exchange's lock (a row every exchange writes first), takes
	// the time (now), deletes rows not written for DemandStaleMS, reads every node's rows
	// written at or after the time less ttlMS, by downstream and node (node's own among
	// them), and replaces node's rows with what decide returns, written at that time. decide
	// runs inside the transaction, after the read: what it returns is written before any
	// other node's exchange reads. It is called again when the transaction is tried again,
	// and its last answer is written only if the exchange returns no error. It returns the
	// time the committed rows carry.
	ExchangeDemand(ctx context.Context, node string, ttlMS int64, now func() int64,
		decide func(rows map[string]map[string]float64) map[string]float64) (int64, error)
}

var _ DemandStore = (*sqlStore)(nil)

// demandBatch bounds the rows of one INSERT.
const demandBatch = 200

// demandLock is the downstream of the row every exchange writes first, which runs the
// exchanges one at a time: an exclusive row lock on one server, a write set that
// certification orders on Galera (a second exchange meeting it is refused and tried again),
// and SQLite writes one transaction at a time anyway. No key is named so (keys hold no
// spaces); its node is "", and it is never read or deleted as stale.
const demandLock = " exchange"

// errDemandLockMade: the lock row was missing and has been made; the exchange runs again.
var errDemandLockMade = errors.New("the rate demand exchange's lock row was made")

func (s *sqlStore) ExchangeDemand(ctx context.Context, node string, ttlMS int64, now func() int64,
	decide func(rows map[string]map[string]float64) map[string]float64) (int64, error) {
	for attempt := 0; ; attempt++ {
		at, err := s.exchangeDemand(ctx, node, ttlMS, now, decide)
		if errors.Is(err, errDemandLockMade) && attempt < slotRetries {
			continue
		}
		if err == nil || !s.d.isRetryable(err) || attempt >= slotRetries || ctx.Err() != nil {
			return at, err
		}
		slotBackoff(ctx, attempt)
	}
}

func (s *sqlStore) exchangeDemand(ctx context.Context, node string, ttlMS int64, now func() int64,
	decide func(rows map[string]map[string]float64) map[string]float64) (int64, error) {
	tx, err := s.slotTx(ctx)
	if err != nil {
		return 0, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	defer rollback(tx)
	// demand flips between 0 and 1, so the row changes at every exchange.
	res, err := tx.ExecContext(ctx, `UPDATE rate_demand SET demand = 1 - demand WHERE downstream = ? AND node = ''`, demandLock)
	if err != nil {
		return 0, fmt.Errorf("cannot lock the rate demand exchange: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		rollback(tx)
		_, err := s.db.ExecContext(ctx, `INSERT INTO rate_demand (downstream, node, demand, seen_at) VALUES (?, '', 0, 0)`, demandLock)
		if err != nil && !s.d.isUniqueViolation(err) {
			return 0, fmt.Errorf("cannot make the rate demand exchange's lock: %w", err)
		}
		return 0, errDemandLockMade
	}
	at := now()
	if _, err := tx.ExecContext(ctx, `DELETE FROM rate_demand WHERE seen_at < ? AND downstream <> ?`, at-DemandStaleMS, demandLock); err != nil {
		return 0, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT downstream, node, demand FROM rate_demand WHERE seen_at >= ? AND downstream <> ?`, at-ttlMS, demandLock)
	if err != nil {
		return 0, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	read := map[string]map[string]float64{}
	for rows.Next() {
		var k, n string
		var d float64
		if err := rows.Scan(&k, &n, &d); err != nil {
			rows.Close()
			return 0, fmt.Errorf("cannot exchange rate demand: %w", err)
		}
		if read[k] == nil {
			read[k] = map[string]float64{}
		}
		read[k][n] = d
	}
	if err := rows.Close(); err != nil {
		return 0, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	demand := decide(read)
	if _, err := tx.ExecContext(ctx, `DELETE FROM rate_demand WHERE node = ?`, node); err != nil {
		return 0, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	keys := make([]string, 0, len(demand))
	for k := range demand {
		if k != demandLock {
			keys = append(keys, k)
		}
	}
	for len(keys) > 0 {
		n := min(len(keys), demandBatch)
		args := make([]any, 0, 4*n)
		for _, k := range keys[:n] {
			args = append(args, k, node, demand[k], at)
		}
		q := `INSERT INTO rate_demand (downstream, node, demand, seen_at) VALUES ` +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", n), ", ")
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return 0, fmt.Errorf("cannot exchange rate demand: %w", err)
		}
		keys = keys[n:]
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("cannot exchange rate demand: %w", err)
	}
	return at, nil
}
