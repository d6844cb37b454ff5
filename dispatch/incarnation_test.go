package dispatch

import "testing"

// A deregistered executor is offered no run until it registers again; a deregistration
// naming another incarnation changes nothing; a registration wakes whoever waits for it.
func TestDeregisterStopsRoutingUntilARegistration(t *testing.T) {
	r := registry3(t)
	x := r.Get("app", "10.0.0.2:1")
	x.SetIncarnation("incarnation-0000000001")
	if got := r.Deregister("app", "10.0.0.2:1", "incarnation-0000000009"); got != nil || x.Left() {
		t.Fatalf("a deregistration of another incarnation took effect")
	}
	if got := r.Deregister("app", "10.0.0.2:1", "incarnation-0000000001"); got != x || !x.Left() {
		t.Fatalf("the deregistration of the registered incarnation did not take effect")
	}
	if r.Deregister("app", "10.0.0.2:1", "") != x || r.Deregister("app", "nowhere:1", "") != nil {
		t.Errorf("Deregister is not idempotent, or found an executor that never registered")
	}
	for range 10 {
		for _, c := range r.Candidates("app", "h", RouteRoundRobin, "task") {
			if c == x {
				t.Fatalf("a deregistered executor is a candidate")
			}
		}
	}
	if n := len(r.Candidates("app", "h", RouteLeastBusy, "task")); n != 2 {
		t.Errorf("%d candidates, want the 2 others", n)
	}
	if snap := r.Snapshot(); !snap[1].Left || snap[0].Left {
		t.Errorf("snapshot %+v: want only 10.0.0.2:1 left", snap)
	}

	wait := x.Registered()
	select {
	case <-wait:
		t.Fatal("woken before a registration")
	default:
	}
	x.SetIncarnation("incarnation-0000000002")
	select {
	case <-wait:
	default:
		t.Fatal("a registration did not wake the waiter")
	}
	if x.Left() || x.Incarnation() != "incarnation-0000000002" || len(r.Candidates("app", "h", RouteRoundRobin, "task")) != 3 {
		t.Errorf("after registering again: left %v, incarnation %q", x.Left(), x.Incarnation())
	}
	// What another node recorded in the store: the incarnation and the deregistration.
	wait = x.Registered()
	x.RestoreIncarnation("incarnation-0000000003", true, LocalGeneration())
	select {
	case <-wait:
	default:
		t.Fatal("a restored new incarnation did not wake the waiter")
	}
	if !x.Left() || x.Incarnation() != "incarnation-0000000003" {
		t.Errorf("restored: left %v, incarnation %q", x.Left(), x.Incarnation())
	}
}

// TestRestoreReadBeforeALocalChangeChangesNothing: a store row read before this node's own
// deregistration (or registration) of the executor is restored after it, as a scale-out
// refresh may: it neither clears the deregistration nor undoes the registration. A row read
// after them is applied.
func TestRestoreReadBeforeALocalChangeChangesNothing(t *testing.T) {
	r := NewRegistry()
	x, _, _ := r.Register("app", "127.0.0.1:9001", "", []string{"h"}, 1)
	x.SetIncarnation("incarnation-0000000001")
	read := LocalGeneration() // a refresh reads the row: alive, incarnation 1
	if r.Deregister("app", "127.0.0.1:9001", "incarnation-0000000001") == nil {
		t.Fatal("the deregistration found no executor")
	}
	x.RestoreIncarnation("incarnation-0000000001", false, read)
	if !x.Left() || len(r.Candidates("app", "h", RouteRoundRobin, "task")) != 0 {
		t.Errorf("a row read before the deregistration undid it: left %v", x.Left())
	}
	read = LocalGeneration() // the row as read now says left
	x.SetIncarnation("incarnation-0000000002")
	x.RestoreIncarnation("incarnation-0000000001", true, read)
	if x.Left() || x.Incarnation() != "incarnation-0000000002" {
		t.Errorf("a row read before the registration undid it: left %v, incarnation %q", x.Left(), x.Incarnation())
	}
	// Read after both: what another node recorded since is taken.
	x.RestoreIncarnation("incarnation-0000000003", true, LocalGeneration())
	if !x.Left() || x.Incarnation() != "incarnation-0000000003" {
		t.Errorf("a row read after the local changes was not applied: left %v, incarnation %q", x.Left(), x.Incarnation())
	}
}
