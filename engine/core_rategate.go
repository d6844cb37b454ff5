package engine

import (
	"container/heap"
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/ratelimit"
	"github.com/axe-sched/axe/wheel"
)

// rateGate holds fires back to the rate of their downstream: a token bucket per
// downstream (executor app, or callback host) plus a global one. A fire over the rate waits
// in its downstream's buffer, ordered by priority then fire time; nothing is dropped, it is
// only late. While no limit is configured the gate is bypassed entirely.
type rateGate struct {
	lim     *ratelimit.Limiter
	clk     clock.Clock // when a fire entered a buffer
	limited atomic.Bool

	mu       sync.Mutex
	queues   map[string]*entryHeap
	heldBy   map[string]bool // per downstream buffer: whether the global limit held it last
	buffered atomic.Int64
	seq      uint64
	wake     chan struct{}

	mu2     sync.Mutex // guards deflt, global and perKeyN
	deflt   ratelimit.Limit
	global  ratelimit.Limit
	perKeyN int
}

type gated struct {
	ent *wheel.Entry[*task]
	adm admission // the concurrency slot it holds, if any
	at  time.Time // when it entered the buffer
	seq uint64
}

type entryHeap []gated

func (h entryHeap) Len() int { return len(h) }
func (h entryHeap) Less(i, j int) bool {
	a, b := h[i].ent, h[j].ent
	if a.Priority != b.Priority {
		return a.Priority < b.Priority
	}
	if a.When != b.When {
		return a.When < b.When
	}
	return h[i].seq < h[j].seq
}
func (h entryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)   { *h = append(*h, x.(gated)) }
func (h *entryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newRateGate(cfg ratelimit.Config, clk clock.Clock) (*rateGate, error) {
	lim, err := ratelimit.New(cfg)
	if err != nil {
		return nil, err
	}
	g := &rateGate{lim: lim, clk: clk, queues: make(map[string]*entryHeap), heldBy: make(map[string]bool), wake: make(chan struct{}, 1),
		deflt: cfg.Default, global: cfg.Global, perKeyN: len(cfg.PerKey)}
	g.refresh()
	return g, nil
}

func (g *rateGate) refresh() {
	g.mu2.Lock()
	g.limited.Store(!g.deflt.Unlimited() || !g.global.Unlimited() || g.perKeyN > 0)
	g.mu2.Unlock()
}

// offer reports whether ent may fire now; otherwise it is buffered.
func (g *rateGate) offer(key string, ent *wheel.Entry[*task], adm admission) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.queues[key]
	if q == nil || q.Len() == 0 {
		// Nothing of this downstream waits: take a token if there is one.
		ok, _, global := g.lim.TakeBy(key)
		if ok {
			return true
		}
		g.heldBy[key] = global
	}
	if q == nil {
		q = &entryHeap{}
		g.queues[key] = q
	}
	g.seq++
	heap.Push(q, gated{ent: ent, adm: adm, at: g.clk.Now(), seq: g.seq})
	g.buffered.Add(1)
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return false
}

// drain fires every buffered entry whose downstream has a token, best priority first across
// downstreams, and returns how long until the next one could go (or -1 when none waits).
func (g *rateGate) drain(fire func(*wheel.Entry[*task], admission), waited func(time.Duration)) time.Duration {
	var ready []gated
	next := time.Duration(-1)
	g.mu.Lock()
	for {
		keys := make([]string, 0, len(g.queues))
		for k, q := range g.queues {
			if q.Len() == 0 {
				delete(g.queues, k)
				delete(g.heldBy, k)
				continue
			}
			keys = append(keys, k)
		}
		if len(keys) == 0 {
			break
		}
		sort.Slice(keys, func(i, j int) bool {
			a, b := (*g.queues[keys[i]])[0], (*g.queues[keys[j]])[0]
			return entryHeap{a, b}.Less(0, 1)
		})
		progressed := false
		for _, k := range keys {
			q := g.queues[k]
			ok, wait, global := g.lim.TakeBy(k)
			if !ok {
				g.heldBy[k] = global
				if next < 0 || wait < next {
					next = wait
				}
				continue
			}
			x := heap.Pop(q).(gated)
			g.buffered.Add(-1)
			d := clock.Since(g.clk, x.at)
			waited(d)
			// The run's detail says how long it waited and for which limit (the one that
			// held its downstream's buffer last), after a wait for a concurrency slot.
			x.adm.waited = joinWait(x.adm.waited, rateWaitNote(d, k, g.heldBy[k]))
			ready = append(ready, x)
			progressed = true
			break // re-rank: the next head may outrank this downstream's
		}
		if !progressed {
			break
		}
		if len(ready) >= 256 {
			next = 0
			break
		}
	}
	g.mu.Unlock()
	for _, x := range ready {
		fire(x.ent, x.adm)
	}
	return next
}

// rateWaitNote is a run's detail of a wait of d in the rate gate for downstream key's
// limit, or for the global one.
func rateWaitNote(d time.Duration, key string, global bool) string {
	if global {
		return "waited " + d.Round(time.Millisecond).String() + " for the global rate limit"
	}
	return "waited " + d.Round(time.Millisecond).String() + " for rate limit " + key
}

// joinWait appends a wait's note to the notes before it.
func joinWait(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// loop drains the buffers as tokens come.
func (e *gates) gateLoop(ctx context.Context) {
	defer e.loopsWG.Done()
	g := e.gate
	timer := e.cfg.Clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := g.drain(e.fire, func(d time.Duration) { e.m.rateWait.Update(d.Seconds()) })
		if wait < 0 {
			wait = time.Hour
		}
		if wait == 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-g.wake:
			if !timer.Stop() {
				<-timer.C()
			}
		case <-timer.C():
		}
	}
}

// admit passes an entry popped from a ready queue through the rate gate to fire, which asks
// the concurrency gate (core_concgate.go).
func (e *gates) admit(ent *wheel.Entry[*task]) { e.admitRate(ent, admission{}) }

// admitRate passes an entry, with what the concurrency gate gave it, through the rate gate.
func (e *gates) admitRate(ent *wheel.Entry[*task], adm admission) {
	if !e.gate.limited.Load() {
		e.fire(ent, adm)
		return
	}
	t := ent.Value
	t.mu.Lock()
	key := t.rateKey()
	t.mu.Unlock()
	if e.gate.offer(key, ent, adm) {
		e.fire(ent, adm)
		return
	}
	e.m.rateWaits.Inc()
}
