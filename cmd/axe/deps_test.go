package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAxeLinksNoBenchmark: the production binary must not carry the benchmark harness
// (cmd/axe-bench does), which also keeps it buildable where the harness is not (Windows).
func TestAxeLinksNoBenchmark(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/axe-sched/axe/cmd/axe").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps printed only %v", deps)
	}
	for _, d := range deps {
		if d == "github.com/axe-sched/axe/bench" || strings.HasPrefix(d, "github.com/axe-sched/axe/bench/") {
			t.Errorf("cmd/axe depends on %s", d)
		}
	}
}
