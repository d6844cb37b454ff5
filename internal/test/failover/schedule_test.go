package failover

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The scenarios run side by side, a few at a time: each spends most of its time waiting on
// leases, timeouts and outages, so they overlap well, and a few at a time bound the load
// their daemons put on a shared box. go test's own -parallel admits parallel tests in an
// order it does not promise (with Go 1.26, roughly the reverse of the source order), and the
// longest scenario, started last, ran alone for minutes at the end. The suite admits its
// scenarios itself: the longest first, the rest in the order they asked.

// envParallel sets how many scenarios run at once (default defaultParallel); an explicit
// -parallel sets it too.
const envParallel = "AXE_FAILOVER_PARALLEL"

const defaultParallel = 2

// gatherFor is how long the first admission waits for the other scenarios to ask: go test
// releases every parallel test at once, and the longest must be among the first admitted.
const gatherFor = 2 * time.Second

// longestFirst ranks the scenarios by how long each takes (seconds on a loaded two-core box
// in brackets); the ones not named come after, in the order they asked.
var longestFirst = []string{
	"TestGaleraFailover",            // (225: a Galera cluster's start, then its scenarios one by one)
	"TestShardsConcurrencyLimit",    // (250-330)
	"TestSoak",                      // (100: AXE_SOAK_DURATION)
	"TestShardsWorkflowKill",        // (47)
	"TestShardsKill",                // (46)
	"TestShardsPartition",           // (45)
	"TestShardsRollingRestart",      // (38)
	"TestFailoverPartition",         // (36)
	"TestShardsKillInDoubt",         // (34)
	"TestShardsSIGSTOP",             // (28)
	"TestShardsJoinLeave",           // (28)
	"TestFailoverKill",              // (27)
	"TestFaultDatabaseOutage",       // (27)
	"TestFaultKillDuringCommit",     // (25)
	"TestFailoverSIGSTOP",           // (22)
	"TestShardsHeldBackThenDropped", // (20)
}

// scenarios admits the package's scenarios; TestMain sizes it.
var scenarios = &admission{free: defaultParallel}

// setParallel gives the scenarios the number of slots -parallel or AXE_FAILOVER_PARALLEL
// asks for, and lifts go test's own bound so that it does not pick the order. It runs in
// TestMain, before m.Run reads the flag.
func setParallel() error {
	flag.Parse()
	n := defaultParallel
	if v := os.Getenv(envParallel); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 {
			return fmt.Errorf("%s=%q: want a positive number", envParallel, v)
		}
		n = p
	}
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			if p, err := strconv.Atoi(f.Value.String()); err == nil && p >= 1 {
				n = p
			}
		}
	})
	scenarios.free = n
	return flag.Set("test.parallel", "1000")
}

// scenario marks t, a top-level scenario, parallel and waits for its turn.
func scenario(t *testing.T) {
	t.Helper()
	t.Parallel()
	takeSlot(t)
}

// takeSlot waits for t's turn; its slot is given back after every other cleanup of t (the
// cluster's processes stopped). A subtest ranks as its top-level test.
func takeSlot(t *testing.T) {
	t.Helper()
	asked := time.Now()
	scenarios.acquire(t.Name())
	// The test's reported time includes this wait; the log tells the scenario's own time.
	t.Logf("admitted after waiting %s for a slot", time.Since(asked).Round(time.Millisecond))
	t.Cleanup(scenarios.release)
}

// admission is a counting semaphore that admits the highest ranked waiter first.
type admission struct {
	mu       sync.Mutex
	free     int
	waiting  []*waiter
	gathered bool // the first gatherFor has passed
	timer    *time.Timer
	seq      int
}

type waiter struct {
	rank, seq int
	ready     chan struct{}
}

func (a *admission) acquire(name string) {
	top, _, _ := strings.Cut(name, "/")
	rank := slices.Index(longestFirst, top)
	if rank < 0 {
		rank = len(longestFirst)
	}
	w := &waiter{rank: rank, ready: make(chan struct{})}
	a.mu.Lock()
	a.seq++
	w.seq = a.seq
	a.waiting = append(a.waiting, w)
	if a.gathered {
		a.admit()
	} else if a.timer == nil {
		a.timer = time.AfterFunc(gatherFor, func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.gathered = true
			a.admit()
		})
	}
	a.mu.Unlock()
	<-w.ready
}

func (a *admission) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.free++
	a.admit()
}

// admit lets waiters in while slots are free, the best ranked (then the earliest) first.
// The caller holds a.mu.
func (a *admission) admit() {
	for a.free > 0 && len(a.waiting) > 0 {
		best := 0
		for i, w := range a.waiting {
			if b := a.waiting[best]; w.rank < b.rank || (w.rank == b.rank && w.seq < b.seq) {
				best = i
			}
		}
		w := a.waiting[best]
		a.waiting = slices.Delete(a.waiting, best, best+1)
		a.free--
		close(w.ready)
	}
}
