package engine

import (
	"container/heap"
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/axe-sched/axe/internal/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
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
	g := &rateGate{lim: lim, clk: clk, queues: make(map[string]*entryHeap), wake: make(chan struct{}, 1),
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
func (g *rateGate) offer(key string, ent *wheel.Entry[*task]) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.queues[key]
	if q == nil || q.Len() == 0 {
		// Nothing of this downstream waits: take a token if there is one.
		if ok, _ := g.lim.Take(key); ok {
			return true
		}
	}
	if q == nil {
		q = &entryHeap{}
		g.queues[key] = q
	}
	g.seq++
	heap.Push(q, gated{ent: ent, at: g.clk.Now(), seq: g.seq})
	g.buffered.Add(1)
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return false
}

// drain fires every buffered entry whose downstream has a token, best priority first across
// downstreams, and returns how long until the next one could go (or -1 when none waits).
func (g *rateGate) drain(fire func(*wheel.Entry[*task]), waited func(time.Duration)) time.Duration {
	var ready []*wheel.Entry[*task]
	next := time.Duration(-1)
	g.mu.Lock()
	for {
		keys := make([]string, 0, len(g.queues))
		for k, q := range g.queues {
			if q.Len() == 0 {
				delete(g.queues, k)
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
			ok, wait := g.lim.Take(k)
			if !ok {
				if next < 0 || wait < next {
					next = wait
				}
				continue
			}
			x := heap.Pop(q).(gated)
			g.buffered.Add(-1)
			waited(clock.Since(g.clk, x.at))
			ready = append(ready, x.ent)
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
	for _, ent := range ready {
		fire(ent)
	}
	return next
}

// loop drains the buffers as tokens come.
func (e *Engine) gateLoop(ctx context.Context) {
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

// admit passes a popped entry through the rate gate.
func (e *Engine) admit(ent *wheel.Entry[*task]) {
	if !e.gate.limited.Load() {
		e.fire(ent)
		return
	}
	t := ent.Value
	t.mu.Lock()
	key := downstreamOf(t.def)
	t.mu.Unlock()
	if e.gate.offer(key, ent) {
		e.fire(ent)
		return
	}
	e.m.rateWaits.Inc()
}

// RateLimits is the rate-limit configuration as the API shows and changes it.
type RateLimits struct {
	Global  ratelimit.Limit            `json:"global"`
	Default ratelimit.Limit            `json:"default"`
	PerKey  map[string]ratelimit.Limit `json:"downstreams"`
}

// RateLimits returns the limits in force. Rate 0 means unlimited.
func (e *Engine) RateLimits() RateLimits {
	g := e.gate
	global, per := g.lim.Limits()
	g.mu2.Lock()
	d := g.deflt
	g.mu2.Unlock()
	if per == nil {
		per = map[string]ratelimit.Limit{}
	}
	return RateLimits{Global: global, Default: d, PerKey: per}
}

// SetRateLimit changes a limit at runtime: key "" is the global bucket; otherwise the
// downstream's (an executor app name or a callback host:port). A zero Rate removes the
// downstream's explicit limit (or lifts the global one).
func (e *Engine) SetRateLimit(ctx context.Context, key string, l ratelimit.Limit, actor string) error {
	if !validDownstream(key) {
		return fieldErr("downstream", "must be \"\" (the global bucket), an executor app or a callback host[:port] of at most "+
			"%d bytes of letters, digits, '.', '-', '_', ':', '[', ']' or '%%', got %q", maxDownstreamBytes, protocol.ClipText(key, 64))
	}
	if l.Rate > MaxRateLimit {
		return fieldErr("rate", "must be at most %g per second, got %g", float64(MaxRateLimit), l.Rate)
	}
	if l.Burst > MaxRateBurst {
		return fieldErr("burst", "must be at most %d, got %d", MaxRateBurst, l.Burst)
	}
	if err := l.Validate(); err != nil {
		return fieldErr("rate", "%v", err)
	}
	g := e.gate
	g.mu2.Lock()
	defer func() { g.mu2.Unlock(); g.refresh() }()
	if key == "" {
		if err := g.lim.SetGlobal(l); err != nil {
			return fieldErr("rate", "%v", err)
		}
		g.global = l
	} else {
		_, per := g.lim.Limits()
		_, had := per[key]
		if l.Unlimited() {
			g.lim.Remove(key)
			if had {
				g.perKeyN--
			}
		} else {
			if err := g.lim.Set(key, l); err != nil {
				return fieldErr("rate", "%v", err)
			}
			if !had {
				g.perKeyN++
			}
		}
	}
	select {
	case g.wake <- struct{}{}:
	default:
	}
	act := model.Action{Action: "rate_limit", Actor: actor, At: e.nowMS(),
		Detail: "downstream " + orGlobal(key) + ": " + limitText(l)}
	return e.write(ctx, &persist.Group{Actions: []model.Action{act}})
}

// Bounds of a rate limit set through the API: no downstream of a scheduler takes more, and
// the bucket's arithmetic stays exact well within them.
const (
	MaxRateLimit = 1_000_000 // tokens per second
	MaxRateBurst = 1_000_000
	// maxDownstreamBytes is the longest callback host (a URL's host is at most 253
	// characters of name and a port).
	maxDownstreamBytes = 255
)

// validDownstream reports whether key can name a downstream: "" (the global bucket), or what
// downstreamOf makes of a task, an executor app or a callback URL's host[:port] (an IPv6
// address in brackets, a zone escaped with '%', a name of any script).
func validDownstream(key string) bool {
	if len(key) > maxDownstreamBytes || !utf8.ValidString(key) {
		return false
	}
	for _, r := range key {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), strings.ContainsRune(".-_:[]%", r):
		default:
			return false
		}
	}
	return true
}

func orGlobal(k string) string {
	if k == "" {
		return "(global)"
	}
	return k
}

func limitText(l ratelimit.Limit) string {
	if l.Unlimited() {
		return "unlimited"
	}
	return time.Duration(float64(time.Second)/l.Rate).String() + " per token, burst " + strconv.Itoa(l.Burst)
}
