package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientLinksNoStorage: the client must stay usable from a program that carries neither
// SQL driver nor the scheduler, so its import graph may hold only the standard library and
// axe's leaf packages: model, and wire (the API's shapes) with the ratelimit it names.
func TestClientLinksNoStorage(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/axe-sched/axe/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps printed nothing")
	}
	forbidden := []string{
		"github.com/go-sql-driver/mysql",
		"modernc.org/sqlite",
		"github.com/axe-sched/axe/persist",
		"github.com/axe-sched/axe/engine",
		"github.com/axe-sched/axe/admin",
		"github.com/axe-sched/axe/dispatch",
	}
	var ours []string
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("client depends on %s", d)
			}
		}
		switch {
		case strings.HasPrefix(d, "github.com/axe-sched/axe/"):
			ours = append(ours, d)
		case strings.Contains(strings.SplitN(d, "/", 2)[0], "."):
			t.Errorf("client depends on the third-party package %s", d)
		}
	}
	if want := "github.com/axe-sched/axe/model"; !contains(ours, want) {
		t.Errorf("client's own dependencies %v lack %s: the test would not see a regression", ours, want)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
