package persist_test

import (
	"context"
	"strings"
	"testing"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestConformance runs the conformance suite against both stores. (TestMain, with its leak
// check, lives in writer_test.go: a package has one.)
func TestConformance(t *testing.T) {
	t.Run(persist.SchemeSQLite, func(t *testing.T) {
		persisttest.RunConformance(t, func(t *testing.T) persist.Store { return persisttest.SQLite(t) })
	})
	t.Run(persist.SchemeMySQL, func(t *testing.T) {
		persisttest.MySQL(t) // skips (or fails) the whole half when no server is configured
		persisttest.RunConformance(t, func(t *testing.T) persist.Store { return persisttest.MySQL(t) })
	})
}

func TestOpenRejectsBadDSNs(t *testing.T) {
	ctx := context.Background()
	for _, dsn := range []string{
		"",
		"axe.db",
		"postgres:host=x",
		"sqlite:",
		"mysql:root:secret@tcp(127.0.0.1:3306)/", // no database name
	} {
		s, err := persist.Open(ctx, dsn)
		if err == nil {
			_ = s.Close()
			t.Fatalf("Open(%q) succeeded", dsn)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Fatalf("Open(%q) error leaks the password: %v", dsn, err)
		}
	}
}

// TestSQLiteReopen checks that what one store committed is there for the next process.
func TestSQLiteReopen(t *testing.T) {
	ctx := context.Background()
	dsn := "sqlite:" + t.TempDir() + "/axe.db"
	s, err := persist.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	def := &persist.TaskDef{Name: "kept", Group: "default", Trigger: persist.TriggerManual}
	rt := &persist.Runtime{State: persist.StateWaiting, Version: 1}
	if err := s.CreateTask(ctx, def, rt); err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	tr := persist.Transition{ExpectVersion: 1, Runtime: *rt}
	tr.Runtime.State = persist.StateScheduled
	if err := s.ApplyBatch(ctx, &persist.Batch{Transitions: []persist.Transition{tr}}); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s, err = persist.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	got, err := s.GetTask(ctx, "kept")
	if err != nil {
		t.Fatalf("GetTask after reopen: %v", err)
	}
	if got.Runtime.State != persist.StateScheduled || got.Runtime.Version != 2 {
		t.Fatalf("runtime after reopen: %+v", got.Runtime)
	}
}
