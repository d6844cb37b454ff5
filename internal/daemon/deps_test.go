package daemon_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependenciesPointInward: cmd/axe → daemon → admin, engine, …; the HTTP layer must not
// reach back into the wiring that builds it.
func TestDependenciesPointInward(t *testing.T) {
	t.Parallel()
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

// TestLayers holds the folders to what they say: lib/ holds leaf libraries that import
// nothing of axe's but each other; internal/test/ holds test-only packages that no shipped
// package imports; persist sits below the engine and imports only the model and lib/.
func TestLayers(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not on PATH: %v", err)
	}
	const mod = "github.com/axe-sched/axe/"
	out, err := exec.Command(goBin, "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", mod+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, _ := strings.CutPrefix(f[0], mod)
		pkgs++
		for _, imp := range f[1:] {
			dep, ours := strings.CutPrefix(imp, mod)
			if !ours {
				continue
			}
			switch {
			case strings.HasPrefix(pkg, "lib/") && !strings.HasPrefix(dep, "lib/"):
				t.Errorf("leaf library %s imports %s", pkg, dep)
			case !strings.HasPrefix(pkg, "internal/test/") && strings.HasPrefix(dep, "internal/test/"):
				t.Errorf("%s (shipped) imports the test-only %s", pkg, dep)
			case (pkg == "persist" || strings.HasPrefix(pkg, "persist/")) &&
				dep != "model" && !strings.HasPrefix(dep, "lib/") && !strings.HasPrefix(dep, "persist"):
				t.Errorf("persist package %s imports %s, above it", pkg, dep)
			}
		}
	}
	if pkgs < 20 {
		t.Fatalf("go list named %d packages: the module was not listed", pkgs)
	}
}
