package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsBelowEphemeralDistinctAndFree: every port lies in the range below the kernel's
// ephemeral ports (where that range leaves room), none repeats across calls, and each can be
// bound once handed out.
func TestPortsBelowEphemeralDistinctAndFree(t *testing.T) {
	lo, hi, ok := span()
	seen := map[int]bool{}
	for round := 0; round < 5; round++ {
		ps, err := Ports(40)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 40 {
			t.Fatalf("asked 40 ports, got %d", len(ps))
		}
		for _, p := range ps {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			if ok && (p < lo || p > hi) {
				t.Fatalf("port %d outside %d-%d", p, lo, hi)
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Fatalf("port %d handed out but not free: %v", p, err)
			}
			_ = l.Close()
		}
	}
	a := MustAddr(t)
	host, port, err := net.SplitHostPort(a)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("MustAddr gave %q (%v)", a, err)
	}
	if p, _ := strconv.Atoi(port); seen[p] {
		t.Fatalf("MustAddr repeated port %d", p)
	}
}
