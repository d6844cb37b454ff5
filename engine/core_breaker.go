package engine

import (
	"sync"
	"time"
)

// Circuit breaker defaults.
const (
	BreakerWindowDefault      = 5 * time.Minute
	BreakerMinSamplesDefault  = 10
	BreakerFailureRateDefault = 0.5
	BreakerProbeEveryDefault  = 10
	breakerBuckets            = 10
)

// BreakerConfig configures the per-task circuit breaker.
type BreakerConfig struct {
	// Window is the sliding window of results. Defaults to BreakerWindowDefault.
	Window time.Duration
	// MinSamples is the fewest results in the window before the breaker may open.
	// Defaults to BreakerMinSamplesDefault.
	MinSamples int
	// FailureRate opens the breaker when exceeded (0..1). Defaults to
	// BreakerFailureRateDefault.
	FailureRate float64
	// ProbeEvery: while open, one fire in ProbeEvery is dispatched; the others are skipped
	// and recorded. Defaults to BreakerProbeEveryDefault.
	ProbeEvery int
	// Disabled turns the breaker off.
	Disabled bool
}

// WithDefaults returns c with zero fields set to their defaults.
func (c BreakerConfig) WithDefaults() BreakerConfig {
	if c.Window == 0 {
		c.Window = BreakerWindowDefault
	}
	if c.MinSamples == 0 {
		c.MinSamples = BreakerMinSamplesDefault
	}
	if c.FailureRate == 0 {
		c.FailureRate = BreakerFailureRateDefault
	}
	if c.ProbeEvery == 0 {
		c.ProbeEvery = BreakerProbeEveryDefault
	}
	return c
}

// breaker is one task's sliding window of results, in breakerBuckets buckets of
// Window/breakerBuckets each: recording and evaluating cost O(buckets), and a task that
// stops failing closes as its failures age out.
type breaker struct {
	buckets [breakerBuckets]struct {
		start    int64
		ok, fail int
	}
	open    bool
	skipped int
}

// record adds a result at now and reports whether the breaker changed state.
func (b *breaker) record(cfg BreakerConfig, now int64, ok bool) (changed bool) {
	width := cfg.Window.Milliseconds() / breakerBuckets
	if width < 1 {
		width = 1
	}
	start := now - now%width
	i := (now / width) % breakerBuckets
	bk := &b.buckets[i]
	if bk.start != start {
		bk.start, bk.ok, bk.fail = start, 0, 0
	}
	if ok {
		bk.ok++
	} else {
		bk.fail++
	}
	return b.evaluate(cfg, now)
}

// evaluate opens or closes the breaker from the window as of now.
func (b *breaker) evaluate(cfg BreakerConfig, now int64) (changed bool) {
	okN, failN := b.counts(cfg, now)
	n := okN + failN
	tripped := n >= cfg.MinSamples && float64(failN) > cfg.FailureRate*float64(n)
	switch {
	case !b.open && tripped:
		b.open, b.skipped = true, 0
		return true
	case b.open && !tripped && (n == 0 || float64(failN) <= cfg.FailureRate*float64(n)):
		b.open = false
		return true
	}
	return false
}

func (b *breaker) counts(cfg BreakerConfig, now int64) (okN, failN int) {
	oldest := now - cfg.Window.Milliseconds()
	for _, bk := range b.buckets {
		if bk.start > oldest && bk.start <= now {
			okN += bk.ok
			failN += bk.fail
		}
	}
	return okN, failN
}

// empty reports whether nothing in the window remains (the entry can be dropped).
func (b *breaker) empty(cfg BreakerConfig, now int64) bool {
	okN, failN := b.counts(cfg, now)
	return !b.open && okN+failN == 0
}

// allow reports whether an open breaker lets this fire through (one in ProbeEvery).
func (b *breaker) allow(cfg BreakerConfig) bool {
	if !b.open {
		return true
	}
	b.skipped++
	if b.skipped >= cfg.ProbeEvery {
		b.skipped = 0
		return true
	}
	return false
}

// breakers holds the breakers of tasks with results in their window, by task id. They live
// outside the task objects because a task whose next fire is far away leaves memory between
// fires, and its failures must still count. State is in memory only: a restarted scheduler
// starts with every breaker closed.
type breakers struct {
	mu sync.Mutex
	m  map[int64]*breaker
}

// record adds a result for task id; it reports whether the breaker opened or closed.
func (bs *breakers) record(cfg BreakerConfig, id, now int64, ok bool) (changed, open bool) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b := bs.m[id]
	if b == nil {
		if ok {
			return false, false // successes alone never open a breaker: don't allocate
		}
		if bs.m == nil {
			bs.m = make(map[int64]*breaker)
		}
		b = &breaker{}
		bs.m[id] = b
	}
	changed = b.record(cfg, now, ok)
	open = b.open
	if b.empty(cfg, now) {
		delete(bs.m, id)
	}
	return changed, open
}

// allow reports whether task id's fire may be dispatched; when the breaker is open it may
// also close here, as old failures age out (closed reports that).
func (bs *breakers) allow(cfg BreakerConfig, id, now int64) (ok, closed bool) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b := bs.m[id]
	if b == nil {
		return true, false
	}
	if b.open && b.evaluate(cfg, now) {
		delete(bs.m, id)
		return true, true
	}
	return b.allow(cfg), false
}

func (bs *breakers) forget(id int64) {
	bs.mu.Lock()
	delete(bs.m, id)
	bs.mu.Unlock()
}

func (bs *breakers) openCount() int {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	n := 0
	for _, b := range bs.m {
		if b.open {
			n++
		}
	}
	return n
}
