package persist_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// connBatchTasks is enough tasks that every table's rows take prepared statements of
// several sizes (256 + 32 + 8) and a text remainder (4 rows).
const connBatchTasks = 300

// TestMySQLBatchConn covers what ApplyBatch does on the MySQL driver connection
// (mysqlconn.go): the multi-row statements are prepared once per connection; the path works
// with the driver's interpolateParams off; a batch cancelled part way changes nothing and its
// connection stays usable; a pooled connection the server dropped is replaced.
func TestMySQLBatchConn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("prepared once per connection", func(t *testing.T) {
		s := persisttest.MySQL(t)
		persist.LimitConns(s, 1)
		ids := createBatchTasks(t, s)
		applyStep(t, s, ids, 1, model.StateRunning)
		prepared, conn, err := persist.BatchStmts(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if prepared == 0 {
			t.Fatalf("after a batch of %d tasks the connection holds no prepared statement", connBatchTasks)
		}
		applyStep(t, s, ids, 2, model.StateSuccess)
		again, sameConn, err := persist.BatchStmts(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if sameConn != conn || again != prepared {
			t.Fatalf("a second batch of the same shape on connection %d: %d prepared statements on connection %d, want %d",
				conn, again, sameConn, prepared)
		}
		wantStep(t, s, ids, 3, model.StateSuccess)
	})

	t.Run("interpolateParams off", func(t *testing.T) {
		dsn := persisttest.MySQLDSN(t)
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		s, err := persist.Open(ctx, dsn+sep+"interpolateParams=false")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ids := createBatchTasks(t, s)
		lease, ok, err := s.TakeLease(ctx, "batch", "me", time.Minute)
		if err != nil || !ok {
			t.Fatalf("TakeLease = %+v, %v, %v", lease, ok, err)
		}
		// The epoch check reads the lease, and a stale transition makes the batch read
		// every version: both are queries with arguments, which the driver prepares here.
		b := stepBatch(ids, 1, model.StateRunning)
		b.LeaseName, b.Epoch = "batch", lease.Epoch
		b.Transitions[7].ExpectVersion = 5
		var ce *persist.ConflictError
		if err := s.ApplyBatch(ctx, b); !errors.As(err, &ce) || len(ce.Indexes) != 1 || ce.Indexes[0] != 7 {
			t.Fatalf("ApplyBatch(stale at 7) = %v, want a conflict at index 7", err)
		}
		wantStep(t, s, ids, 1, model.StateScheduled)
		b = stepBatch(ids, 1, model.StateRunning)
		b.LeaseName, b.Epoch = "batch", lease.Epoch
		if err := s.ApplyBatch(ctx, b); err != nil {
			t.Fatalf("ApplyBatch: %v", err)
		}
		wantStep(t, s, ids, 2, model.StateRunning)
		b = stepBatch(ids, 2, model.StateSuccess)
		b.LeaseName, b.Epoch = "batch", lease.Epoch+1
		if err := s.ApplyBatch(ctx, b); !errors.Is(err, model.ErrLeaseLost) {
			t.Fatalf("ApplyBatch(wrong epoch) = %v, want ErrLeaseLost", err)
		}
		wantStep(t, s, ids, 2, model.StateRunning)
	})

	t.Run("cancelled part way", func(t *testing.T) {
		s := persisttest.MySQL(t)
		persist.LimitConns(s, 1)
		ids := createBatchTasks(t, s)
		_, conn, err := persist.BatchStmts(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		// The driver checks the context before the begin and before every statement.
		cut := &errAfter{Context: ctx}
		cut.left.Store(3)
		if err := s.ApplyBatch(cut, stepBatch(ids, 1, model.StateRunning)); !errors.Is(err, context.Canceled) {
			t.Fatalf("ApplyBatch(cancelled part way) = %v, want context.Canceled", err)
		}
		wantStep(t, s, ids, 1, model.StateScheduled)
		applyStep(t, s, ids, 1, model.StateRunning)
		wantStep(t, s, ids, 2, model.StateRunning)
		if _, same, err := persist.BatchStmts(ctx, s); err != nil || same != conn {
			t.Fatalf("after the rolled-back batch the pool holds connection %d (%v), want %d still", same, err, conn)
		}
	})

	t.Run("connection dropped by the server", func(t *testing.T) {
		dsn := persisttest.MySQLDSN(t)
		s, err := persist.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		persist.LimitConns(s, 1)
		ids := createBatchTasks(t, s)
		applyStep(t, s, ids, 1, model.StateRunning)
		_, conn, err := persist.BatchStmts(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		killConn(t, dsn, conn)
		applyStep(t, s, ids, 2, model.StateSuccess)
		_, next, err := persist.BatchStmts(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if next == conn {
			t.Fatalf("the batch after KILL %d ran on the same connection", conn)
		}
		wantStep(t, s, ids, 3, model.StateSuccess)
	})
}

func createBatchTasks(t *testing.T, s persist.Store) []int64 {
	t.Helper()
	ids := make([]int64, 0, connBatchTasks)
	for i := range connBatchTasks {
		def := &model.TaskDef{Name: fmt.Sprintf("c-%d", i), Group: "default", Trigger: model.TriggerDelay,
			DelayMS: 1000, Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/x"}}
		if err := s.CreateTask(context.Background(), def, &model.Runtime{State: model.StateScheduled, NextTriggerTime: 100, Version: 1}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, def.ID)
	}
	return ids
}

// stepBatch moves every task in ids from version to version+1 in state, with a run row and
// an action record each.
func stepBatch(ids []int64, version int64, state model.State) *persist.Batch {
	b := &persist.Batch{}
	for _, id := range ids {
		ticket := fmt.Sprintf("t-%d", id)
		b.Transitions = append(b.Transitions, persist.Transition{ExpectVersion: version,
			Runtime: model.Runtime{TaskID: id, State: state, CurrentTicket: ticket, Attempt: 1, NextTriggerTime: 100, Version: version}})
		b.Runs = append(b.Runs, model.Run{Ticket: ticket, TaskID: id, TaskName: "c", Kind: "delay", Attempt: 1,
			ScheduledAt: 100, Result: string(state)})
		b.Actions = append(b.Actions, model.Action{TaskID: id, TaskName: "c", Ticket: ticket, Action: "step",
			To: state, Actor: "test", At: version})
	}
	return b
}

func applyStep(t *testing.T, s persist.Store, ids []int64, version int64, state model.State) {
	t.Helper()
	if err := s.ApplyBatch(context.Background(), stepBatch(ids, version, state)); err != nil {
		t.Fatalf("ApplyBatch(%s at version %d): %v", state, version, err)
	}
}

// wantStep checks the first, a middle and the last task: runtime state and version, and,
// past version 1, the run row and the newest action the step wrote.
func wantStep(t *testing.T, s persist.Store, ids []int64, version int64, state model.State) {
	t.Helper()
	ctx := context.Background()
	for _, id := range []int64{ids[0], ids[len(ids)/2], ids[len(ids)-1]} {
		task, err := s.GetTaskByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if task.Runtime.State != state || task.Runtime.Version != version {
			t.Fatalf("task %d: %s at version %d, want %s at %d", id, task.Runtime.State, task.Runtime.Version, state, version)
		}
		actions, err := s.ListActions(ctx, id, 10)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(actions)) != version-1 {
			t.Fatalf("task %d has %d actions at version %d, want %d", id, len(actions), version, version-1)
		}
		run, err := s.GetRun(ctx, fmt.Sprintf("t-%d", id))
		if version == 1 {
			if !errors.Is(err, model.ErrRunNotFound) {
				t.Fatalf("task %d at version 1: GetRun = %+v, %v, want ErrRunNotFound", id, run, err)
			}
			continue
		}
		if err != nil || run.Result != string(state) || actions[0].To != state {
			t.Fatalf("task %d: run %+v (%v), newest action %+v; want both %s", id, run, err, actions[0], state)
		}
	}
}

// killConn makes the server drop connection id, as a restart would.
func killConn(t *testing.T, dsn string, id int64) {
	t.Helper()
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
	if err != nil {
		t.Fatal(err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), fmt.Sprintf("KILL %d", id)); err != nil {
		t.Fatalf("KILL %d: %v", id, err)
	}
}

// errAfter is a context whose Err turns to context.Canceled after left calls (its Done
// never closes), so a batch stops part way through.
type errAfter struct {
	context.Context
	left atomic.Int32
}

func (c *errAfter) Err() error {
	if c.left.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}
