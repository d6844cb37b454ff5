package agent_test

import (
	"testing"
	"time"

	"github.com/axe-sched/axe/executor/agent"
)

// TestStdinIsFedToTheCommand: a handler's stdin reaches the command (cron's % lines), and
// a handler without one reads an empty standard input.
func TestStdinIsFedToTheCommand(t *testing.T) {
	peer := startPeer(t)
	withInput := sh("tr a-z A-Z")
	withInput.Stdin = "first line\nsecond line\n"
	a := startAgent(t, peer, map[string]agent.Command{"in": withInput, "none": sh("wc -c")}, 0)

	dispatch(t, peer, a, run("t-in", "a", "in", time.Minute))
	if cb := callback(t, peer, 1); cb.Status != "success" || cb.Output != "FIRST LINE\nSECOND LINE\n" {
		t.Errorf("with stdin = %+v", cb)
	}
	dispatch(t, peer, a, run("t-none", "b", "none", time.Minute))
	if cb := callback(t, peer, 2); cb.Status != "success" || cb.Output != "0\n" {
		t.Errorf("without stdin = %+v", cb)
	}
}
