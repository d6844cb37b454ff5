package daemon_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependenciesPointInward: cmd/axe → daemon → admin, engine, …; the HTTP layer must not
// reach back into the wiring that builds it.
func TestDependenciesPointInward(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not on PATH: %v", err)
	}
	const daemonPkg = "github.com/axe-sched/axe/internal/daemon"
	for _, pkg := range []string{"admin", "engine", "persist", "dispatch", "ha"} {
		out, err := exec.Command(goBin, "list", "-deps", "github.com/axe-sched/axe/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, d := range strings.Fields(string(out)) {
			if d == daemonPkg {
				t.Errorf("%s imports %s", pkg, daemonPkg)
			}
		}
	}
}
