package persist_test

import (
	"context"
	"testing"
	"time"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// A store opened with TxIdleTimeout has the server end a transaction left idle, so the locks
// it holds (an HA primary's shared lock on the lease row) do not outlive a frozen process:
// another session's write to the locked row goes through after about the timeout instead of
// waiting out innodb_lock_wait_timeout.
func TestTxIdleTimeoutReleasesLocks(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLDSN(t)
	ctx := context.Background()
	frozen, err := persist.OpenWith(ctx, dsn, persist.OpenOptions{TxIdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	other, err := persist.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, _, err := other.TakeLease(ctx, "primary", "a", time.Minute); err != nil {
		t.Fatal(err)
	}

	tx, err := persist.DB(frozen).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var epoch int64
	if err := tx.QueryRowContext(ctx, `SELECT epoch FROM lease WHERE name = 'primary' LOCK IN SHARE MODE`).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	// The transaction now sits idle, as a stopped process's would.
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := persist.DB(other).ExecContext(wctx, `UPDATE lease SET holder = 'b' WHERE name = 'primary'`); err != nil {
		t.Fatalf("the write waited %s and failed: %v", time.Since(start), err)
	}
	waited := time.Since(start)
	if waited > 15*time.Second {
		t.Errorf("the write waited %s for the idle transaction's lock", waited)
	}
	t.Logf("the idle transaction's lock was released after %s", waited.Round(10*time.Millisecond))
	// The frozen session is gone; the pool replaces it for the next caller.
	if err := frozen.Ping(ctx); err != nil {
		t.Errorf("the pool did not recover: %v", err)
	}
}
