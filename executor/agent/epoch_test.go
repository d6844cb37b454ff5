package agent_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor/agent"
)

// TestStaleEpochRunIsRefused checks that axe agent, like the SDK it runs on, refuses a run
// of a scheduler epoch below the highest it has seen, and so never runs the command for a
// deposed primary.
func TestStaleEpochRunIsRefused(t *testing.T) {
	peer := startPeer(t)
	a := startAgent(t, peer, map[string]agent.Command{"ok": sh("echo ran")}, 0)

	current := run("t-new", "a", "ok", time.Minute)
	current.Epoch = 4
	dispatch(t, peer, a, current)
	if cb := callback(t, peer, 1); cb.Ticket != "t-new" || cb.Status != "success" {
		t.Fatalf("result at epoch 4 = %+v", cb)
	}

	stale := run("t-old", "b", "ok", time.Minute)
	stale.Epoch = 3
	resp, err := peer.Dispatch(a.Addr(), stale)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(resp.Body, &body)
	if resp.Status != http.StatusConflict || body.Error != "stale epoch 3 < 4" {
		t.Fatalf("stale run = %d %s, want 409 stale epoch 3 < 4", resp.Status, resp.Body)
	}

	// A later run at the current epoch still runs, and the refused one never reported.
	next := run("t-next", "c", "ok", time.Minute)
	next.Epoch = 4
	dispatch(t, peer, a, next)
	cbs, err := peer.WaitCallbacks(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, cb := range cbs {
		if cb.Ticket == "t-old" {
			t.Errorf("the stale run reported a result: %+v", cb)
		}
	}
	if cbs[1].Ticket != "t-next" {
		t.Errorf("second result = %+v, want t-next", cbs[1])
	}
}
