package workflows

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/axe-sched/axe/persist/persisttest"
)

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestRunSmall runs every phase tiny: the handoff, diamond and fan-out phases on SQLite, and
// with a MySQL server (AXE_TEST_MYSQL_DSN) the cpu phase on 1 and 3 sharded nodes. Run fails
// when a run did not succeed or a request did not arrive; the test also checks that each
// result measured both of its sides and that no step or task reached the sink twice.
func TestRunSmall(t *testing.T) {
	cfg := Config{
		Store:       StoreSQLite,
		Phases:      []string{PhaseHandoff, PhaseDiamond, PhaseFanOut},
		HandoffRuns: 20, DiamondRuns: 10, FanOutItems: 30, CPURuns: 10,
		ProfileDir: t.TempDir(), ProfileSeconds: 1,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		// AXE_BENCH_WF_BIN names an axe binary to run instead of building this tree's.
		Bin: os.Getenv("AXE_BENCH_WF_BIN"),
	}
	if dsn := os.Getenv(persisttest.EnvMySQLDSN); dsn != "" {
		cfg.MySQL = dsn
		cfg.Phases = append(cfg.Phases, PhaseCPU)
	} else if os.Getenv(persisttest.EnvRequireMySQL) == "1" {
		t.Fatalf("%s is unset but %s=1", persisttest.EnvMySQLDSN, persisttest.EnvRequireMySQL)
	}
	rep, err := Run(context.Background(), cfg)
	t.Log("\n" + rep.Table())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{PhaseHandoff: 2, PhaseDiamond: 1, PhaseFanOut: 2, PhaseCPU: 2}
	got := map[string]int{}
	for _, r := range rep.Results {
		got[r.Phase]++
		if r.Workflow <= 0 || r.Base <= 0 || r.Ratio <= 0 {
			t.Errorf("%s/%s %s: workflow %v, baseline %v, ratio %v: want both sides measured", r.Phase, r.Store, r.Metric, r.Workflow, r.Base, r.Ratio)
		}
		if r.Detail != "" && !strings.Contains(r.Detail, "duplicate tickets 0") {
			t.Errorf("%s/%s: %s: want no duplicate tickets", r.Phase, r.Store, r.Detail)
		}
	}
	for _, p := range cfg.Phases {
		if got[p] != want[p] {
			t.Errorf("phase %s: %d results, want %d", p, got[p], want[p])
		}
	}
	entries, _ := os.ReadDir(cfg.ProfileDir)
	if len(entries) == 0 {
		t.Error("no daemon profile was written")
	}
}

func TestRunRefusesUnknownPhase(t *testing.T) {
	if _, err := Run(context.Background(), Config{Phases: []string{"nope"}, Bin: "/nonexistent"}); err == nil || !strings.Contains(err.Error(), `unknown phase "nope"`) {
		t.Fatalf("Run with an unknown phase: err = %v", err)
	}
}
