package dispatch

import (
	"fmt"
	"testing"
)

func registry3(t *testing.T) *Registry {
	r := NewRegistry()
	for _, a := range []string{"10.0.0.3:1", "10.0.0.1:1", "10.0.0.2:1"} {
		r.Register("app", a, "http", []string{"h"}, 1000)
	}
	r.Register("app", "10.0.0.9:1", "http", []string{"other"}, 1000)
	return r
}

func TestRoundRobinIsEven(t *testing.T) {
	r := registry3(t)
	count := map[string]int{}
	for i := 0; i < 300; i++ {
		c := r.Candidates("app", "h", RouteRoundRobin, "task")
		if len(c) != 3 {
			t.Fatalf("candidates = %d, want 3 (the executor without handler h is excluded)", len(c))
		}
		count[c[0].Address]++
	}
	for a, n := range count {
		if n != 100 {
			t.Errorf("%s got %d of 300", a, n)
		}
	}
}

func TestRegisterIsIdempotentAndReapKeepsRow(t *testing.T) {
	r := registry3(t)
	_, created, _ := r.Register("app", "10.0.0.1:1", "http", []string{"h", "h2"}, 2000)
	if created {
		t.Fatal("re-registration created a second entry")
	}
	if n := len(r.Snapshot()); n != 4 {
		t.Fatalf("snapshot has %d executors, want 4", n)
	}
	lost := r.Reap(1500) // every executor but 10.0.0.1:1 last beat at 1000
	if len(lost) != 3 {
		t.Fatalf("reaped %d, want 3", len(lost))
	}
	if c := r.Candidates("app", "h", "", "k"); len(c) != 1 || c[0].Address != "10.0.0.1:1" {
		t.Fatalf("lost executors still offered: %v", c)
	}
	revived, err := r.Heartbeat("app", "10.0.0.2:1", 3000)
	if err != nil || !revived {
		t.Fatalf("heartbeat of a lost executor = %v, %v; want revived", revived, err)
	}
	if _, err := r.Heartbeat("app", "10.9.9.9:1", 3000); err != ErrUnknownExecutor {
		t.Errorf("heartbeat of an unknown executor = %v", err)
	}
	if n := len(r.Snapshot()); n != 4 {
		t.Errorf("lost executors were deleted: %d left", n)
	}
}

// TestSeenKeepsAliveButDoesNotRevive: a result counts as a sign of life for an alive
// executor, not for a lost one.
func TestSeenKeepsAliveButDoesNotRevive(t *testing.T) {
	r := registry3(t) // all last beat at 1000
	c := r.Candidates("app", "h", RouteFailover, "k")
	busy, gone := c[0], c[1]
	if lost := r.Reap(1500); len(lost) != 4 {
		t.Fatalf("reaped %d, want all 4", len(lost))
	}
	r.Seen(gone, 3000) // lost: stays lost
	if _, err := r.Heartbeat("app", busy.Address, 2000); err != nil {
		t.Fatal(err)
	}
	r.Seen(busy, 5000) // alive: its silence now counts from 5000
	lost := r.Reap(4000)
	if len(lost) != 0 {
		t.Fatalf("reaped %v although one was seen at 5000 and the rest were already lost", lost)
	}
	cands := r.Candidates("app", "h", "", "k")
	if len(cands) != 1 || cands[0] != busy {
		t.Fatalf("candidates after Seen = %v, want only the busy one", cands)
	}
}

func TestConsistentHashSticksAndMovesLittle(t *testing.T) {
	r := registry3(t)
	first := map[string]string{}
	for i := 0; i < 200; i++ {
		k := fmt.Sprintf("task-%d", i)
		a := r.Candidates("app", "h", RouteConsistentHash, k)[0].Address
		if b := r.Candidates("app", "h", RouteConsistentHash, k)[0].Address; a != b {
			t.Fatalf("%s moved from %s to %s with no change", k, a, b)
		}
		first[k] = a
	}
	r.Register("app", "10.0.0.4:1", "http", []string{"h"}, 1000)
	moved := 0
	for k, a := range first {
		b := r.Candidates("app", "h", RouteConsistentHash, k)[0].Address
		if b != a {
			moved++
			if b != "10.0.0.4:1" {
				t.Errorf("%s moved between old executors (%s→%s)", k, a, b)
			}
		}
	}
	if moved == 0 || moved > 100 {
		t.Errorf("%d of 200 tasks moved to the new executor, want about a quarter", moved)
	}
}

func TestLeastBusyAndFailoverOrder(t *testing.T) {
	r := registry3(t)
	c := r.Candidates("app", "h", RouteFailover, "")
	if c[0].Address != "10.0.0.1:1" || c[1].Address != "10.0.0.2:1" || c[2].Address != "10.0.0.3:1" {
		t.Fatalf("failover order = %s,%s,%s", c[0].Address, c[1].Address, c[2].Address)
	}
	c[0].AddInflight(5)
	c[1].AddInflight(1)
	lb := r.Candidates("app", "h", RouteLeastBusy, "")
	if lb[0].Address != "10.0.0.3:1" || lb[2].Address != "10.0.0.1:1" {
		t.Errorf("least busy order = %s,%s,%s", lb[0].Address, lb[1].Address, lb[2].Address)
	}
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		seen[r.Candidates("app", "h", RouteRandom, "")[0].Address] = true
	}
	if len(seen) != 3 {
		t.Errorf("random picked only %v", seen)
	}
}
