package persist_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestFencedStore checks that every write of a fenced store checks the epoch in its own
// transaction: after a takeover each one fails with ErrLeaseLost, writes nothing and calls
// onLost (docs/ha.md, "Fencing").
func TestFencedStore(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, testFencedStore)
}

// TestFencedStoreGaleraFence is TestFencedStore on one MariaDB with the fence a Galera node
// gets (an update of the fence row, persist/galera.go), forced on a server without wsrep:
// the same writes are refused the same way. On a real cluster the conformance suite and
// TestGalera run it.
func TestFencedStoreGaleraFence(t *testing.T) {
	t.Parallel()
	s := persisttest.MySQL(t)
	persist.SetGalera(s, true)
	testFencedStore(t, s)
}

func testFencedStore(t *testing.T, s persist.Store) {
	ctx := testCtx(t)
	const lease = "scheduler"
	l, ok, err := s.TakeLease(ctx, lease, "a", time.Minute)
	if err != nil || !ok {
		t.Fatalf("TakeLease: %+v, %v, %v", l, ok, err)
	}
	var lost []error
	f, err := persist.Fenced(s, lease, l.Epoch, func(err error) { lost = append(lost, err) })
	if err != nil {
		t.Fatal(err)
	}
	k := newTask(t, f, "kept")
	ex := &model.Executor{App: "app", Address: "127.0.0.1:1", Protocol: "http", Handlers: []string{"h"}, Status: "alive"}
	if err := f.UpsertExecutor(ctx, ex); err != nil {
		t.Fatalf("UpsertExecutor under the current epoch: %v", err)
	}
	if err := f.ApplyBatch(ctx, batchOf(k.next())); err != nil {
		t.Fatalf("ApplyBatch under the current epoch: %v", err)
	}
	if len(lost) != 0 {
		t.Fatalf("onLost called under the current epoch: %v", lost)
	}

	// Another node takes over.
	if err := s.ReleaseLease(ctx, lease, "a", l.Epoch); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.TakeLease(ctx, lease, "b", time.Minute); err != nil || !ok {
		t.Fatalf("takeover: %v, %v", ok, err)
	}
	before, err := s.GetTask(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	def := before.Def
	def.Group = "changed"
	writes := map[string]func() error{
		"CreateTask": func() error {
			_, err := createTask(ctx, f, "new")
			return err
		},
		"UpdateTaskDef":     func() error { return f.UpdateTaskDef(ctx, &def) },
		"DeleteTask":        func() error { return f.DeleteTask(ctx, def.ID) },
		"UpsertExecutor":    func() error { return f.UpsertExecutor(ctx, ex) },
		"Heartbeat":         func() error { return f.Heartbeat(ctx, ex.App, ex.Address, 5) },
		"SetExecutorStatus": func() error { return f.SetExecutorStatus(ctx, ex.App, ex.Address, "lost") },
		"ApplyBatch":        func() error { return f.ApplyBatch(ctx, batchOf(k.next())) },
	}
	for name, write := range writes {
		n := len(lost)
		if err := write(); !errors.Is(err, model.ErrLeaseLost) {
			t.Errorf("%s after takeover = %v, want ErrLeaseLost", name, err)
		}
		if len(lost) != n+1 {
			t.Errorf("%s after takeover: onLost called %d times, want once", name, len(lost)-n)
		}
	}
	after, err := s.GetTask(ctx, "kept")
	if err != nil || after.Def.Group != before.Def.Group || after.Runtime.Version != before.Runtime.Version {
		t.Errorf("kept after fenced writes = %+v, %v; want it unchanged", after, err)
	}
	if _, err := s.GetTask(ctx, "new"); !errors.Is(err, model.ErrTaskNotFound) {
		t.Errorf("a fenced CreateTask left a task: %v", err)
	}
	list, err := s.ListExecutors(ctx)
	if err != nil || len(list) != 1 || list[0].Status != "alive" || list[0].LastHeartbeat != 0 {
		t.Errorf("executors after fenced writes = %+v, %v", list, err)
	}
}

// batchOf is the batch of one group.
func batchOf(g *persist.Group) *persist.Batch {
	return &persist.Batch{Transitions: g.Transitions, Runs: g.Runs, Actions: g.Actions, Fires: g.Fires}
}

// TestLeaseIgnoresSessionTimeZones opens two stores on one MariaDB database whose sessions
// keep clocks twelve hours apart (time_zone +05:00 and -07:00): the nodes must still agree
// on who holds the lease and how long ago a node was seen, because every statement uses
// the database's UTC clock and no node passes a time.
func TestLeaseIgnoresSessionTimeZones(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLDSN(t)
	open := func(zone string) persist.Store {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		s, err := persist.Open(testCtx(t), dsn+sep+"time_zone="+url.QueryEscape("'"+zone+"'"))
		if err != nil {
			t.Fatalf("Open at %s: %v", zone, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	east, west := open("+05:00"), open("-07:00")
	ctx := testCtx(t)
	l, ok, err := east.TakeLease(ctx, "scheduler", "east", time.Minute)
	if err != nil || !ok {
		t.Fatalf("TakeLease(east) = %+v, %v, %v", l, ok, err)
	}
	got, ok, err := west.TakeLease(ctx, "scheduler", "west", time.Minute)
	if err != nil || ok || got.Holder != "east" || !got.Held || got.Remaining < 50*time.Second || got.Remaining > time.Minute {
		t.Fatalf("TakeLease(west) while east holds = %+v, %v, %v; want refused with about a minute left", got, ok, err)
	}
	if err := east.RenewLease(ctx, "scheduler", "east", l.Epoch, time.Minute); err != nil {
		t.Fatalf("RenewLease(east): %v", err)
	}
	if _, err := east.ClaimNode(ctx, persist.Node{ID: "east", Advertise: "http://e", Role: persist.RolePrimary, Instance: "i"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	nodes, err := west.ListNodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].Age < -time.Second || nodes[0].Age > 30*time.Second {
		t.Fatalf("west's view of east = %+v, %v; want seen just now", nodes, err)
	}
	if _, err := west.ClaimNode(ctx, persist.Node{ID: "east", Advertise: "http://w", Role: persist.RoleBackup, Instance: "j"}, time.Minute); !errors.Is(err, persist.ErrNodeIDTaken) {
		t.Fatalf("west claiming east's live id = %v, want ErrNodeIDTaken", err)
	}
}
