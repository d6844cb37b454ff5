package agent_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor/agent"
)

// TestOutputFile: each run gets its own AXE_OUTPUT path; what a command that succeeds
// writes there is its reported output, whole (past output_tail_bytes), instead of its
// printed output; a command that writes nothing keeps its printed tail; a failed command
// reports its printed tail; more than 1 MiB fails the run saying so; and the file is gone
// after the run.
func TestOutputFile(t *testing.T) {
	peer := startPeer(t)
	big := strings.Repeat("x", 8000) // past output_tail_bytes (100)
	a, err := agent.New(agent.Config{
		App: "ops", Listen: "127.0.0.1:0", Schedulers: []string{peer.URL()}, OutputTailBytes: 100, Logger: quiet,
		Handlers: map[string]agent.Command{
			"json":    sh(`echo printed; printf '{"path":"/data/%s","big":"` + big + `"}' "$AXE_TICKET" > "$AXE_OUTPUT"; echo "$AXE_OUTPUT"`),
			"none":    sh(`echo only printed`),
			"failed":  sh(`echo '{"partial":true}' > "$AXE_OUTPUT"; echo disk full >&2; exit 2`),
			"toolong": sh(`head -c 1048577 /dev/zero | tr '\0' 'y' > "$AXE_OUTPUT"`),
			"justmax": sh(`head -c 1048576 /dev/zero | tr '\0' 'z' > "$AXE_OUTPUT"`),
			"where":   sh(`test -f "$AXE_OUTPUT" && test ! -s "$AXE_OUTPUT" && printf %s "$AXE_OUTPUT"`),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	}()

	dispatch(t, peer, a, run("t-json-1", "a", "json", time.Minute))
	cb := callback(t, peer, 1)
	want := `{"path":"/data/t-json-1","big":"` + big + `"}`
	if cb.Status != "success" || cb.Output != want {
		t.Fatalf("json: status %s, output of %d bytes %.80q; want the file's %d bytes", cb.Status, len(cb.Output), cb.Output, len(want))
	}
	dispatch(t, peer, a, run("t-json-2", "a", "json", time.Minute))
	if cb := callback(t, peer, 2); cb.Output != `{"path":"/data/t-json-2","big":"`+big+`"}` {
		t.Errorf("second run's output %.80q: a run must not see another's file", cb.Output)
	}

	dispatch(t, peer, a, run("t-none", "b", "none", time.Minute))
	if cb := callback(t, peer, 3); cb.Status != "success" || cb.Output != "only printed\n" {
		t.Errorf("none: %s %q, want the printed output", cb.Status, cb.Output)
	}

	dispatch(t, peer, a, run("t-failed", "c", "failed", time.Minute))
	if cb := callback(t, peer, 4); cb.Status != "failed" || cb.Output != "disk full\n" || cb.Error != "exit status 2" {
		t.Errorf("failed: %s %q %q, want the printed tail of a failed command", cb.Status, cb.Output, cb.Error)
	}

	dispatch(t, peer, a, run("t-toolong", "d", "toolong", time.Minute))
	if cb := callback(t, peer, 5); cb.Status != "failed" || !strings.Contains(cb.Error, "AXE_OUTPUT file holds 1048577 bytes") || !strings.Contains(cb.Error, "1 MiB") {
		t.Errorf("toolong: %s %q, want a failure naming the file's size and the bound", cb.Status, cb.Error)
	}

	dispatch(t, peer, a, run("t-justmax", "e", "justmax", time.Minute))
	if cb := callback(t, peer, 6); cb.Status != "success" || len(cb.Output) != 1<<20 || strings.Trim(cb.Output, "z") != "" {
		t.Errorf("justmax: %s, output of %d bytes, want 1 MiB of z", cb.Status, len(cb.Output))
	}

	// Each run's AXE_OUTPUT is a fresh empty file of its own, gone once the run ended.
	dispatch(t, peer, a, run("t-where-1", "f", "where", time.Minute))
	first := callback(t, peer, 7)
	dispatch(t, peer, a, run("t-where-2", "f", "where", time.Minute))
	second := callback(t, peer, 8)
	for _, cb := range []struct{ status, path string }{{first.Status, first.Output}, {second.Status, second.Output}} {
		if cb.status != "success" || cb.path == "" {
			t.Fatalf("where: %s %q, want an existing empty file's path", cb.status, cb.path)
		}
		if _, err := os.Stat(cb.path); !os.IsNotExist(err) {
			t.Errorf("%s outlived its run: %v", cb.path, err)
		}
	}
	if first.Output == second.Output {
		t.Errorf("two runs had the same AXE_OUTPUT %s", first.Output)
	}
}
