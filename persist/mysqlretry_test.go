package persist_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestMySQLBatchRunsAgainWhenItsConnectionDiesBeforeCommit kills the server connection of a
// batch in the middle of its transaction, before the commit: the server rolled it back, so
// the store runs it again on another connection and the caller sees it succeed, once.
func TestMySQLBatchRunsAgainWhenItsConnectionDiesBeforeCommit(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := persisttest.MySQLDSN(t)
	s, err := persist.OpenWith(ctx, dsn, persist.OpenOptions{Metrics: testMetrics(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	persist.LimitConns(s, 1)
	k := newTask(t, s, "retried")
	want := k.rt.Version + 1
	retries := counterValue(t, `axe_store_batch_retries_total{reason="node_lost"}`)

	gate := newBatchGate(ctx)
	done := make(chan error, 1)
	go func() { done <- s.ApplyBatch(gate, batchOf(k.next())) }()
	select {
	case <-gate.paused:
	case err := <-done:
		t.Fatalf("the batch ended before its writes: %v", err)
	}
	// The store's one connection is the batch's: find it and have the server drop it.
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
	if err != nil {
		t.Fatal(err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admin := sql.OpenDB(connector)
	defer admin.Close()
	var id int64
	if err := admin.QueryRowContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST
		WHERE DB = DATABASE() AND ID <> CONNECTION_ID()`).Scan(&id); err != nil {
		t.Fatalf("cannot find the batch's connection: %v", err)
	}
	killConn(t, dsn, id)
	close(gate.resume)
	if err := <-done; err != nil {
		t.Fatalf("ApplyBatch whose connection was killed before its commit = %v, want it run again and done", err)
	}
	if got := counterValue(t, `axe_store_batch_retries_total{reason="node_lost"}`); got != retries+1 {
		t.Errorf("axe_store_batch_retries_total{reason=\"node_lost\"} moved by %d, want 1", got-retries)
	}
	got, err := s.GetTask(context.Background(), k.name)
	if err != nil || got.Runtime.Version != want {
		t.Fatalf("task after the batch = %+v, %v; want version %d (applied once)", got.Runtime, err, want)
	}
	checkRun(t, s, k.rt.CurrentTicket, true)
}
