package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestFiresArePacedToTheSends: with one dispatch worker held by an endpoint that does not
// answer, the fire loop records no more than SendAhead runs beyond the one on the wire; the
// rest wait unrecorded (a crash now would leave in doubt only what may have left). Once the
// endpoint answers, every task runs once. Without the bound every fire would be recorded.
func TestFiresArePacedToTheSends(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		const tasks, ahead = 40, 4
		cs := newCallbackServer(t)
		cs.hang = make(chan struct{})
		e := startEngine(t, s, func(c *Config) {
			c.SendAhead = ahead
			c.Dispatch.PoolSize = 1
		})
		for i := range tasks {
			spec := httpSpec(fmt.Sprintf("paced-%02d", i), cs.URL+"/hook")
			spec.DelayMS = ptr(int64(300))
			mustCreate(t, e, spec)
		}
		recorded := func() int {
			n := 0
			for i := range tasks {
				runs, err := e.API().Runs(context.Background(), fmt.Sprintf("paced-%02d", i), 10)
				if err != nil {
					t.Fatal(err)
				}
				n += len(runs)
			}
			return n
		}
		// The fire loop waits for room, or (without the bound) has recorded every fire.
		waitFor(t, 30*time.Second, "a run on the wire and the fire loop waiting for room", func() bool {
			return len(cs.got("")) == 1 && (e.pace.waits.Load() > 0 || recorded() >= tasks)
		})
		if n := recorded(); n > 1+ahead {
			t.Errorf("%d runs recorded with one on the wire, want at most 1 + %d (SendAhead)", n, ahead)
		}
		if got := e.pace.ahead(); got > ahead {
			t.Errorf("pace holds %d, over its bound %d", got, ahead)
		}
		cs.release()
		waitFor(t, 60*time.Second, "every task run", func() bool { return len(cs.got("")) >= tasks })
		waitSettled(t, e)
		for i := range tasks {
			if n := len(cs.got(fmt.Sprintf("paced-%02d", i))); n != 1 {
				t.Errorf("paced-%02d called %d times, want 1", i, n)
			}
		}
		if n := recorded(); n != tasks {
			t.Errorf("%d runs recorded, want %d", n, tasks)
		}
		if got := e.pace.ahead(); got != 0 {
			t.Errorf("pace holds %d after every run ended, want 0", got)
		}
	})
}

// TestASlowHostDoesNotHoldUpOtherHosts: a node whose sends to one host queue behind its
// connection to it (a host that holds every request, one connection per host) keeps firing
// to another host. The slow host's runs recorded ahead of the wire stop at its share of the
// pace, and the fires to the fast host, due once that share is full, are all recorded and
// received while the slow host still holds its requests; the node's runs recorded and not
// yet on the wire stay within SendAhead all along. Before the pace was per downstream, the
// slow host's runs took every permit and no fire of the node went until it answered.
func TestASlowHostDoesNotHoldUpOtherHosts(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		const slowN, fastN, ahead = 12, 10, 4
		slow, fast := newCallbackServer(t), newCallbackServer(t)
		slow.hang = make(chan struct{})
		e := startEngine(t, s, func(c *Config) {
			c.SendAhead = ahead
			c.Dispatch.MaxConnsPerHost = 1
		})
		for i := range slowN {
			spec := httpSpec(fmt.Sprintf("slow-%02d", i), slow.URL+"/hook")
			spec.DelayMS = ptr(int64(200))
			mustCreate(t, e, spec)
		}
		waitFor(t, 30*time.Second, "a slow run on the wire and the slow host's fires waiting", func() bool {
			return len(slow.got("")) == 1 && e.pace.waits.Load() > 0
		})
		for i := range fastN {
			spec := httpSpec(fmt.Sprintf("fast-%02d", i), fast.URL+"/hook")
			spec.DelayMS = ptr(int64(100))
			mustCreate(t, e, spec)
		}
		waitFor(t, 60*time.Second, "every fire to the fast host received while the slow host holds its requests", func() bool {
			if got := e.pace.ahead(); got > ahead {
				t.Fatalf("pace holds %d, over its bound %d", got, ahead)
			}
			return len(fast.got("")) >= fastN
		})
		if n := len(slow.got("")); n != 1 {
			t.Errorf("the slow host got %d requests on its one connection, want 1", n)
		}
		slowRecorded := 0
		for i := range slowN {
			runs, err := e.API().Runs(context.Background(), fmt.Sprintf("slow-%02d", i), 10)
			if err != nil {
				t.Fatal(err)
			}
			slowRecorded += len(runs)
		}
		if share := e.pace.share; share != 3 || slowRecorded > 1+share {
			t.Errorf("%d runs to the slow host recorded with one on the wire, want at most 1 + %d (its share)", slowRecorded, share)
		}
		slow.release()
		waitFor(t, 60*time.Second, "every task run", func() bool { return len(slow.got("")) >= slowN })
		waitSettled(t, e)
		for i := range slowN {
			if n := len(slow.got(fmt.Sprintf("slow-%02d", i))); n != 1 {
				t.Errorf("slow-%02d called %d times, want 1", i, n)
			}
		}
		for i := range fastN {
			if n := len(fast.got(fmt.Sprintf("fast-%02d", i))); n != 1 {
				t.Errorf("fast-%02d called %d times, want 1", i, n)
			}
		}
		if got := e.pace.ahead(); got != 0 {
			t.Errorf("pace holds %d after every run ended, want 0", got)
		}
	})
}

// TestPaceSharesPerDownstream: the pace's own rules, without an engine. With a bound of 4
// one downstream holds at most 3 permits; its next fire is parked, not refused and not
// waiting, and gets the permit its downstream gives back next, directly (the node's count
// stays); another downstream finds the fourth permit; every permit given back, the pace is
// empty and keeps no downstream.
func TestPaceSharesPerDownstream(t *testing.T) {
	t.Parallel()
	var p sendPace
	p.init(4)
	to := func(url string) *task {
		return &task{def: &model.TaskDef{Callback: model.Callback{Type: model.CallbackHTTP, URL: url}}}
	}
	a, b := to("http://slow.example:8080/hook"), to("http://fast.example:8080/hook")
	stop := make(chan struct{})
	got := make(chan *permit, 8)
	fire := func(pm *permit) { got <- pm }
	var held []*permit
	for range 3 {
		p.admit(a, 2, stop, fire)
		held = append(held, <-got)
	}
	p.admit(a, 2, stop, fire) // over a's share: parked
	select {
	case pm := <-got:
		t.Fatalf("a fourth fire to one downstream got a permit (%v), want it parked", pm)
	default:
	}
	p.admit(b, 2, stop, fire) // another downstream: the fourth permit, at once
	pb := <-got
	if pb == nil || pb.host != "fast.example:8080" || p.ahead() != 4 {
		t.Fatalf("the other downstream's permit = %+v, ahead %d; want one for fast.example:8080, 4 ahead", pb, p.ahead())
	}
	held[0].release()
	parked := <-got // fired by the pace's runner with a's permit
	if parked == nil || parked.host != "slow.example:8080" || p.ahead() != 4 {
		t.Fatalf("the parked fire's permit = %+v, ahead %d; want a's, still 4 ahead", parked, p.ahead())
	}
	held[0].release() // idempotent
	// Parked fires go by priority, as the ready queue pops them: one of priority 0 parked
	// after one of priority 2 gets the next permit a gives back.
	var order []string
	var mu sync.Mutex
	tagged := func(tag string) func(*permit) {
		return func(pm *permit) {
			mu.Lock()
			order = append(order, tag)
			mu.Unlock()
			got <- pm
		}
	}
	p.admit(a, 2, stop, tagged("low"))
	p.admit(a, 0, stop, tagged("high"))
	held[1].release()
	first := <-got
	mu.Lock()
	if len(order) != 1 || order[0] != "high" || first == nil {
		t.Fatalf("fired after a's release: %v (permit %v), want the priority-0 fire with a permit", order, first)
	}
	mu.Unlock()
	// The engine stopping hands what is still parked nil: it finds the engine stopped.
	close(stop)
	if pm := <-got; pm != nil {
		t.Fatalf("a fire parked at stop got %+v, want nil", pm)
	}
	p.admit(a, 2, stop, fire) // once stopped nothing is parked
	if pm := <-got; pm != nil {
		t.Fatalf("a fire admitted after stop got %+v, want nil at once", pm)
	}
	for _, pm := range append(held[2:], pb, parked, first) {
		pm.release()
	}
	if p.ahead() != 0 || len(p.hosts) != 0 {
		t.Errorf("after every release: ahead %d, downstreams kept %d; want 0 and 0", p.ahead(), len(p.hosts))
	}
}
