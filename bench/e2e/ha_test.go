package e2e

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
)

// haLead is the HA runs' lead: the engine must also take its lease (or all 256 shards)
// before the burst falls due, and on a loaded box (load average 20 on two cores) the
// default 5 s was overrun by 3.2 s. Waiting costs no CPU.
const haLead = 20 * time.Second

// TestRunHA runs a small burst with the engine as the primary of a lease, as `axe serve --ha`
// wires it, and checks that every task was recorded (Run fails otherwise) under an epoch the
// elector took.
func TestRunHA(t *testing.T) {
	cfg := Config{DSN: serverDSN(t), Tasks: -1, Burst: 500, HA: true, Lead: haLead}
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

// TestRunHAShards runs a small burst with the engine as the one node of a sharded cluster,
// as `axe serve --ha` runs by default, and checks that every task was recorded (Run fails
// otherwise) with the node having taken all 256 shards.
func TestRunHAShards(t *testing.T) {
	takes0 := promValue("axe_shard_takes_total")
	cfg := Config{DSN: serverDSN(t), Tasks: -1, Burst: 500, HA: true, HAMode: HAModeShards, Lead: haLead}
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Table())
	if rep.Burst == nil || rep.Burst.Tasks != 500 {
		t.Fatalf("burst phase = %+v, want 500 tasks", rep.Burst)
	}
	if got := promValue("axe_shard_takes_total") - takes0; got < model.ShardCount {
		t.Errorf("the shard loop took %v shards, want every one of %d", got, model.ShardCount)
	}
}
