package dispatch

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestRegisterBounded: a new executor over the app's bound takes the place of the
// longest-lost idle one, and is refused when every one is alive or busy; a known address
// always registers again; the token's bound counts its executors across apps; Remove and
// DropAbsent take executors out.
func TestRegisterBounded(t *testing.T) {
	r := NewRegistry()
	key := []byte("key-of-one-token")
	b := Bounds{PerApp: 3, PerKey: 4}
	reg := func(app, addr string, now int64) ([]*Executor, error) {
		_, _, _, ev, err := r.RegisterBounded(app, addr, "http", []string{"h"}, now, key, b)
		return ev, err
	}
	for i := 1; i <= 3; i++ {
		if _, err := reg("a", fmt.Sprintf("h:%d", i), int64(i)); err != nil {
			t.Fatalf("register h:%d: %v", i, err)
		}
	}
	if _, err := reg("a", "h:4", 10); !errors.Is(err, ErrTooManyExecutors) || !strings.Contains(err.Error(), "max-executors-per-app") {
		t.Fatalf("a 4th live executor: %v, want ErrTooManyExecutors naming the bound", err)
	}
	if _, err := reg("a", "h:2", 11); err != nil {
		t.Fatalf("a known address at the bound: %v", err)
	}
	// h:1 and h:3 fall silent; h:1 is busy with a run: h:3 makes room.
	r.Reap(5)
	r.Get("a", "h:1").AddInflight(1)
	ev, err := reg("a", "h:4", 12)
	if err != nil || len(ev) != 1 || ev[0].Address != "h:3" || r.Get("a", "h:3") != nil {
		t.Fatalf("register over the bound with a lost idle one: evicted %v, %v; want h:3 evicted", ev, err)
	}
	if _, err := reg("a", "h:5", 13); !errors.Is(err, ErrTooManyExecutors) {
		t.Fatalf("over the bound with only a busy lost one: %v, want refused", err)
	}
	// The token's bound, across apps: 3 in a, the 4th in b, the 5th refused.
	if _, err := reg("b", "h:1", 14); err != nil {
		t.Fatalf("register in b: %v", err)
	}
	if _, err := reg("b", "h:2", 15); !errors.Is(err, ErrTooManyExecutors) || !strings.Contains(err.Error(), "max-executors-per-token") {
		t.Fatalf("the token's 5th: %v, want refused naming the token bound", err)
	}
	// Another token is not counted with this one.
	if _, _, _, _, err := r.RegisterBounded("b", "h:2", "http", []string{"h"}, 16, []byte("another"), b); err != nil {
		t.Fatalf("another token's executor: %v", err)
	}
	if x := r.Remove("b", "h:2"); x == nil || r.Get("b", "h:2") != nil {
		t.Fatalf("Remove: %v", x)
	}
	// DropAbsent: only lost, idle executors the store lacks.
	r.Get("a", "h:1").AddInflight(-1)
	r.Reap(100)
	dropped := r.DropAbsent(func(app, addr string) bool { return app == "a" && addr == "h:2" })
	if len(dropped) != 3 || r.Get("a", "h:2") == nil || r.Get("a", "h:1") != nil || r.Get("b", "h:1") != nil {
		t.Fatalf("DropAbsent dropped %d; registry %+v", len(dropped), r.Snapshot())
	}
}
