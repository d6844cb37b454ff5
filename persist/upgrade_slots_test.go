package persist_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestUpgradeV17KeepsSlots upgrades the v17 fixture (a database without steps 18-20) and
// uses what step 20 adds: a limit stored before the upgrade (its slot_seq added as 0), slots
// claimed up to it, a waiting fire written and read, the slots counted and reconciled.
func TestUpgradeV17KeepsSlots(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, dsn string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := persist.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("cannot open the v17 fixture: %v", err)
		}
		defer s.Close()
		ss := s.(persist.SlotStore)
		if err := s.PutConcurrencyLimit(ctx, model.ConcurrencyLimit{Kind: model.LimitKey, Name: "ledger", Max: 1, UpdatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		sh, err := s.TakeShards(ctx, "n1", []int{9}, time.Minute)
		if err != nil || len(sh) != 1 {
			t.Fatalf("TakeShards = %+v, %v", sh, err)
		}
		ref := persist.SlotRef{Kind: model.LimitKey, Name: "ledger"}
		claims := []persist.SlotClaim{
			{Ticket: "x-1", Shard: 9, Epoch: sh[0].Epoch, Refs: []persist.SlotRef{ref}},
			{Ticket: "x-2", Shard: 9, Epoch: sh[0].Epoch, Refs: []persist.SlotRef{ref}},
		}
		outs, counts, err := ss.TakeSlots(ctx, "n1", nil, claims, 100)
		if err != nil || outs[0] != persist.SlotGranted || outs[1] != persist.SlotFull || counts[ref] != 1 {
			t.Fatalf("TakeSlots on the upgraded store = %v, %v, %v", outs, counts, err)
		}
		if _, err := ss.ReconcileSlots(ctx, []persist.ShardFence{{Shard: 9, Epoch: sh[0].Epoch}}, nil, true, 101); err != nil {
			t.Fatal(err)
		}
		if n, err := ss.CountSlots(ctx); err != nil || n[ref] != 1 {
			t.Fatalf("CountSlots after a reconcile of the claiming epoch = %v, %v; want the slot kept", n, err)
		}
		if err := ss.ReleaseSlots(ctx, []persist.SlotRelease{{Ticket: "x-1", Epoch: sh[0].Epoch}}); err != nil {
			t.Fatal(err)
		}
		if n, err := ss.CountSlots(ctx); err != nil || len(n) != 0 {
			t.Fatalf("CountSlots after the release = %v, %v", n, err)
		}
	}
	t.Run(persist.SchemeSQLite, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "axe.db")
		copyFile(t, fixturePath("v17", "sqlite"), path)
		check(t, "sqlite:"+path)
	})
	t.Run(persist.SchemeMySQL, func(t *testing.T) {
		dsn := persisttest.MySQLDSN(t)
		loadMySQLDump(t, dsn, fixturePath("v17", "mysql.sql"))
		check(t, dsn)
	})
}
