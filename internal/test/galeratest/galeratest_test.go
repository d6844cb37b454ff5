package galeratest_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/axe-sched/axe/internal/test/galeratest"
	"github.com/axe-sched/axe/internal/test/leaktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Options()...)
}

// testTimeout bounds each step: a node that never rejoins fails the test instead of hanging.
const testTimeout = 3 * time.Minute

// errWsrepNotReady is the error number of a statement refused by a node outside the primary
// component ("WSREP has not yet prepared node for application use").
const errWsrepNotReady = 1047

// TestCluster checks the harness against the cluster it starts: a row written through one
// node is read through the others; the cluster keeps committing with a node killed, frozen
// or isolated; a killed node restarted and a frozen node resumed rejoin and catch up; an
// isolated node refuses statements until it rejoins.
func TestCluster(t *testing.T) {
	c := galeratest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dbs := make([]*sql.DB, galeratest.Size)
	for i := range dbs {
		db, err := c.Node(i).DB()
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		dbs[i] = db
	}
	mustExec(t, ctx, dbs[0], "CREATE DATABASE h")
	mustExec(t, ctx, dbs[0], "CREATE TABLE h.t (id INT PRIMARY KEY, v VARCHAR(20))")
	mustExec(t, ctx, dbs[0], "INSERT INTO h.t VALUES (1, 'one')")
	for i := range dbs {
		wantRow(t, ctx, dbs[i], 1, "one")
	}

	t.Run("kill and restart", func(t *testing.T) {
		n := c.Node(2)
		n.Kill()
		if n.Running() {
			t.Fatal("the killed node still runs")
		}
		if err := c.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
		mustExec(t, ctx, dbs[0], "INSERT INTO h.t VALUES (2, 'two')")
		began := time.Now()
		if err := n.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("a killed node rejoined and synced in %s", time.Since(began).Round(time.Millisecond))
		wantRow(t, ctx, dbs[2], 2, "two")
	})

	t.Run("pause and resume", func(t *testing.T) {
		n := c.Node(1)
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		// The other two evict it and go on as a primary component of two.
		if err := c.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("the other two went on without a frozen node after %s", time.Since(began).Round(time.Millisecond))
		mustExec(t, ctx, dbs[0], "INSERT INTO h.t VALUES (3, 'three')")
		if err := n.Resume(); err != nil {
			t.Fatal(err)
		}
		began = time.Now()
		if err := c.Heal(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("a frozen node resumed and synced in %s", time.Since(began).Round(time.Millisecond))
		wantRow(t, ctx, dbs[1], 3, "three")
	})

	t.Run("isolate", func(t *testing.T) {
		n := c.Node(0)
		if err := n.Isolate(ctx, true); err != nil {
			t.Fatal(err)
		}
		// The node leaves the primary component: it refuses statements, the others go on.
		var err error
		for {
			_, err = dbs[0].ExecContext(ctx, "INSERT INTO h.t VALUES (4, 'four')")
			var me *mysql.MySQLError
			if errors.As(err, &me) && me.Number == errWsrepNotReady {
				break
			}
			if err == nil {
				// Committed before the isolation took effect: write another row next time.
				mustExec(t, ctx, dbs[1], "DELETE FROM h.t WHERE id = 4")
			}
			if ctx.Err() != nil {
				t.Fatalf("the isolated node still takes writes: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		st, err := n.Status(ctx, "wsrep_cluster_status")
		if err != nil || st["wsrep_cluster_status"] == "Primary" {
			t.Fatalf("isolated node's component: %v, %v; want non-Primary", st, err)
		}
		mustExec(t, ctx, dbs[1], "INSERT INTO h.t VALUES (5, 'five')")
		if err := c.Heal(ctx); err != nil {
			t.Fatal(err)
		}
		wantRow(t, ctx, dbs[0], 5, "five")
	})
}

func mustExec(t *testing.T, ctx context.Context, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.ExecContext(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// wantRow reads row id through db, waiting for the node to have applied every write the
// cluster committed before the read (wsrep_sync_wait).
// A connection the node closed under it (on a loaded box a node can leave the cluster for a
// moment and rejoin, closing its sessions) is opened again, until ctx ends.
func wantRow(t *testing.T, ctx context.Context, db *sql.DB, id int, want string) {
	t.Helper()
	read := func() (string, error) {
		conn, err := db.Conn(ctx)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SET SESSION wsrep_sync_wait = 1"); err != nil {
			return "", err
		}
		var got string
		err = conn.QueryRowContext(ctx, fmt.Sprintf("SELECT v FROM h.t WHERE id = %d", id)).Scan(&got)
		return got, err
	}
	for {
		got, err := read()
		if (errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn)) && ctx.Err() == nil {
			t.Logf("row %d: %v; reading again", id, err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if err != nil || got != want {
			t.Fatalf("row %d = %q, %v; want %q", id, got, err, want)
		}
		return
	}
}
