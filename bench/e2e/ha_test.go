package e2e

import (
	"context"
	"log/slog"
	"testing"
)

// TestRunHA runs a small burst with the engine as the primary of a lease, as `axe serve --ha`
// wires it, and checks that every task was recorded (Run fails otherwise) under an epoch the
// elector took.
func TestRunHA(t *testing.T) {
	cfg := Config{DSN: serverDSN(t), Tasks: -1, Burst: 500, HA: true}
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Table())
	if rep.Burst == nil || rep.Burst.Tasks != 500 {
		t.Fatalf("burst phase = %+v, want 500 tasks", rep.Burst)
	}
	if got := promValue("axe_lease_epoch"); got < 1 {
		t.Errorf("axe_lease_epoch = %v after an HA run, want ≥ 1", got)
	}
}
