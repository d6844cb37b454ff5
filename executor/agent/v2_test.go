package agent_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor/agent"
	"github.com/axe-sched/axe/protocol"
)

// An agent built against today's protocol takes a run from a scheduler that sends a field
// it does not know, at the top level and inside a batch, and runs its command; a run that
// repeats a key is still refused. Stopping, the agent deregisters with its incarnation.
func TestAgentSkipsFieldsItDoesNotKnow(t *testing.T) {
	peer := startPeer(t)
	a := startAgent(t, peer, map[string]agent.Command{"ok": sh("echo fine")}, 0)

	body := []byte(`{"ticket":"t-1","task":"a","handler":"ok","attempt":1,"deadline":0,` +
		`"priority_class":"gold","trace":{"id":"abc","spans":[1,2]}}`)
	resp, err := peer.Post(a.Addr(), protocol.PathRun, body, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusAccepted {
		t.Fatalf("a run with fields the agent does not know: %d %s, want 202", resp.Status, resp.Body)
	}
	if cb := callback(t, peer, 1); cb.Ticket != "t-1" || cb.Status != "success" || cb.Output != "fine\n" {
		t.Errorf("result %+v, want t-1 success", cb)
	}

	batch := []byte(`{"runs":[{"ticket":"t-2","task":"b","handler":"ok","attempt":1,"deadline":0,"new":true}],"sent_by":"axe 9"}`)
	resp, err = peer.Post(a.Addr(), protocol.PathRuns, batch, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var ans protocol.RunBatchAnswer
	if err := resp.Decode(&ans); err != nil || resp.Status != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].Code != http.StatusAccepted {
		t.Fatalf("a batch with fields the agent does not know: %d %s (%v)", resp.Status, resp.Body, err)
	}
	if cb := callback(t, peer, 2); cb.Ticket != "t-2" || cb.Status != "success" {
		t.Errorf("result %+v, want t-2 success", cb)
	}

	repeated := []byte(`{"ticket":"t-3","task":"c","handler":"ok","attempt":1,"deadline":0,"trace":{"id":1,"id":2}}`)
	if resp, err := peer.Post(a.Addr(), protocol.PathRun, repeated, "", nil); err != nil || resp.Status != http.StatusBadRequest {
		t.Errorf("a run repeating a key in an unknown field: %d %s (%v), want 400", resp.Status, resp.Body, err)
	}

	stopAgent(t, a)
	regs, deregs := peer.Registrations(), peer.Deregistrations()
	if len(regs) == 0 || regs[0].Version != protocol.Version || !protocol.ValidIncarnation(regs[0].Incarnation) {
		t.Fatalf("registrations %+v: want version %d with an incarnation", regs, protocol.Version)
	}
	if len(deregs) != 1 || deregs[0].Incarnation != regs[0].Incarnation || deregs[0].Address != a.Addr() {
		t.Errorf("deregistrations %+v, want one of the registered incarnation", deregs)
	}
}

// stopAgent stops a gracefully (Stop may be called again at cleanup).
func stopAgent(t *testing.T, a *agent.Agent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}
