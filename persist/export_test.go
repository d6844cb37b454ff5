package persist

import (
	"context"
	"database/sql"
	"fmt"
)

// Hooks into the MySQL batch connection (mysqlconn.go) for the external tests.

// LimitConns bounds s's pool to n connections, so consecutive batches share one.
func LimitConns(s Store, n int) { s.(*sqlStore).db.SetMaxOpenConns(n) }

// BatchStmts returns how many prepared batch statements a pooled connection of s holds, and
// its server-side connection id.
func BatchStmts(ctx context.Context, s Store) (stmts int, connID int64, err error) {
	conn, err := s.(*sqlStore).db.Conn(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&connID); err != nil {
		return 0, 0, err
	}
	err = conn.Raw(func(dc any) error {
		bc, ok := dc.(*batchConn)
		if !ok {
			return fmt.Errorf("pooled connection %T is not a batch connection", dc)
		}
		stmts = len(bc.stmts)
		return nil
	})
	return stmts, connID, err
}

// DB returns s's connection pool, for tests that need a transaction of their own.
func DB(s Store) *sql.DB { return s.(*sqlStore).db }

// OldRunsSelect is the pruner's query of up to limit old runs over every task, with the
// cut-off time as its one argument, for tests that ask the database how it reads it.
func OldRunsSelect(s Store, limit int) string { return s.(*sqlStore).oldRunsSelect(nil, limit) }

// OpenManualRunsSelect is ListRunningManual's query.
func OpenManualRunsSelect(s Store) string {
	st := s.(*sqlStore)
	return st.runSelect + st.d.openManualRuns + st.d.openManualOrder
}

// HoldShardFences checks fences as a batch does, in a transaction it leaves open (holding
// what the check locks) until the returned func is called.
func HoldShardFences(ctx context.Context, s Store, fences []ShardFence) (release func(), err error) {
	st := s.(*sqlStore)
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	if err := st.checkShardFences(ctx, sqlTx{tx}, fences); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return func() { _ = tx.Rollback() }, nil
}
