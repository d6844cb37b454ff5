package ratelimit

import (
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	// MaxKeysDefault bounds how many per-downstream buckets the Limiter keeps. A bucket
	// is a few dozen bytes, so this is a few megabytes at most, and far more downstreams
	// than one axe process calls.
	MaxKeysDefault = 100_000
)

// Config configures a Limiter. The zero value is usable: no limits at all.
type Config struct {
	// Global limits all dispatches together, whatever their downstream. Defaults to
	// unlimited.
	Global Limit
	// Default is the per-downstream limit for keys without an explicit one in PerKey or
	// set through Set. Every such key has its own bucket with this limit. Defaults to
	// unlimited.
	Default Limit
	// PerKey holds explicit per-downstream limits, keyed as the dispatcher keys its
	// downstreams. New copies the map.
	PerKey map[string]Limit
	// Clock tells the time. Defaults to the system clock.
	Clock Clock
	// MaxKeys is a soft bound on the buckets kept for keys. Past it, buckets of keys
	// without an explicit limit are dropped once they are full again, which loses
	// nothing: a key's next take starts a new full bucket. Buckets that are not full and
	// explicit limits are never dropped, since that would hand out extra tokens or forget
	// configuration, so the count can exceed MaxKeys while many keys are busy. Defaults
	// to MaxKeysDefault.
	MaxKeys int
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = MaxKeysDefault
	}
	return c
}

// validate checks a Config after WithDefaults.
func (c Config) validate() error {
	if err := c.Global.Validate(); err != nil {
		return fmt.Errorf("global limit: %w", err)
	}
	if err := c.Default.Validate(); err != nil {
		return fmt.Errorf("default limit: %w", err)
	}
	for key, l := range c.PerKey {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limit for %q: %w", key, err)
		}
	}
	if c.MaxKeys < 0 {
		return fmt.Errorf("%w: %d is negative", ErrInvalidMaxKeys, c.MaxKeys)
	}
	return nil
}

// Limiter holds a bucket per downstream key and the global bucket. It is safe for
// concurrent use.
//
// Lock order: a shard lock, then the global lock; never the other way round, and never
// two shard locks at once.
type Limiter struct {
	clock      Clock
	def        Limit
	defLimited bool

	// share is the fraction of every limit this Limiter gives out (SetShare), as float64
	// bits; changed under shareMu, which SetGlobal, Set and Remove take too, so that a
	// bucket's limit is always its base limit scaled by the share in force.
	share   atomic.Uint64
	shareMu sync.Mutex

	// Keys live in a map cut into shards, each behind its own mutex. Every dispatch
	// goroutine takes a token per request, and most of them are for different
	// downstreams whose buckets are independent; a single map lock would queue them
	// all behind each other. sync.Map would avoid that for the lookup, but the bucket
	// still needs a lock to update, and eviction needs to walk a bounded set of keys;
	// a shard lock covers the lookup, the update and the walk in one.
	seed   maphash.Seed
	shards []shard

	// The global bucket is one lock by nature: every take goes through it while it is
	// limited. globalLimited lets takes skip the lock entirely while it is not, which is
	// the usual setup. It only changes under globalMu.
	globalMu      sync.Mutex
	global        state
	globalBase    Limit // the global limit as set; global.lim is it scaled by the share
	globalLimited atomic.Bool
}

// shard is one slice of the key map.
type shard struct {
	mu      sync.Mutex
	buckets map[string]*entry
	// limit is this shard's share of Config.MaxKeys.
	limit int
	// sweepAt is the size at which the next insert first drops idle buckets. It grows
	// when a sweep frees little, so sweeps cost O(1) per insert on average even when
	// every bucket is busy.
	sweepAt int
}

// entry is one key's bucket.
type entry struct {
	state
	explicit bool  // limit set through Config.PerKey or Set, not Config.Default
	base     Limit // the limit as set; state.lim is it scaled by the share (SetShare)
}

// New returns a Limiter for cfg. The error wraps ErrInvalidRate, ErrInvalidBurst or
// ErrInvalidMaxKeys.
func New(cfg Config) (*Limiter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cannot create rate limiter: %w", err)
	}
	// Four shards per CPU, rounded up to a power of two: with every CPU taking tokens at
	// once, two of them rarely want the same shard, and the mask stays cheap.
	return newLimiter(cfg, 1<<bits.Len(uint(4*runtime.GOMAXPROCS(0)-1))), nil
}

// newLimiter builds a Limiter for a valid cfg with n shards, n a power of two. Tests pick
// n to make eviction deterministic.
func newLimiter(cfg Config, n int) *Limiter {
	l := &Limiter{
		clock:      cfg.Clock,
		def:        cfg.Default,
		defLimited: !cfg.Default.Unlimited(),
		seed:       maphash.MakeSeed(),
		shards:     make([]shard, n),
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.buckets = make(map[string]*entry)
		sh.limit = max(1, (cfg.MaxKeys+n-1)/n)
		sh.sweepAt = sh.limit
	}
	now := l.clock.Now()
	l.share.Store(math.Float64bits(1))
	l.global = newState(cfg.Global, now)
	l.globalBase = cfg.Global
	l.globalLimited.Store(!cfg.Global.Unlimited())
	for key, lim := range cfg.PerKey {
		sh := l.shardFor(key)
		sh.buckets[key] = &entry{state: newState(lim, now), explicit: true, base: lim}
	}
	return l
}

// scaled is l with its rate and burst multiplied by the share in force: the part of l this
// Limiter gives out. An unlimited l stays unlimited; a limited one keeps a burst of at least
// one and a rate that still refills within the bounds Validate sets.
func (l *Limiter) scaled(lim Limit) Limit {
	f := math.Float64frombits(l.share.Load())
	if lim.Unlimited() || f == 1 {
		return lim
	}
	out := Limit{Rate: lim.Rate * f, Burst: int(float64(lim.burst()) * f)}
	if minRate := 1e9 / float64(maxRefill); out.Rate < minRate {
		out.Rate = minRate
	}
	if out.Validate() != nil {
		out.Burst = 0
	}
	return out
}

// SetShare makes this Limiter give out the fraction f (0 < f <= 1) of every limit, global,
// default and per key: each bucket's rate is f times its limit's, and its burst f times
// its burst, rounded down but at least one. Processes that dispatch to the same downstreams
// and whose shares add up to at most one together stay within the limits (but for the
// bursts of one token each that rounding may add): axe's nodes each take the share of the
// shards they schedule (docs/scale-out.md). Tokens accrued are kept, capped at the new
// bursts, as for a change of limit. Limits reports the limits as set, not scaled.
func (l *Limiter) SetShare(f float64) error {
	if math.IsNaN(f) || f <= 0 || f > 1 {
		return fmt.Errorf("%w: share %v is not in (0, 1]", ErrInvalidRate, f)
	}
	l.shareMu.Lock()
	defer l.shareMu.Unlock()
	l.share.Store(math.Float64bits(f))
	now := l.clock.Now()
	l.globalMu.Lock()
	l.global.setLimit(l.scaled(l.globalBase), now)
	l.globalMu.Unlock()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for _, e := range sh.buckets {
			e.setLimit(l.scaled(e.base), now)
		}
		sh.mu.Unlock()
	}
	return nil
}

// Share returns the fraction of every limit this Limiter gives out (SetShare); 1 unless set.
func (l *Limiter) Share() float64 { return math.Float64frombits(l.share.Load()) }

// Take asks for one token from key's bucket and one from the global bucket, atomically:
// either both are taken and ok is true, or neither is and wait is how long until both
// could be, assuming nobody else takes them first. A refusal by one bucket never
// consumes a token of the other.
func (l *Limiter) Take(key string) (ok bool, wait time.Duration) {
	ok, wait, _ = l.TakeBy(key)
	return ok, wait
}

// TakeBy is Take that also says, on a refusal, whether the global bucket held it back
// (global true) or key's own (false). When both are short, the one with the longer wait
// is named.
func (l *Limiter) TakeBy(key string) (ok bool, wait time.Duration, global bool) {
	now := l.clock.Now()
	sh := l.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()

	e := sh.buckets[key]
	if e == nil && l.defLimited {
		e = &entry{state: newState(l.scaled(l.def), now), base: l.def}
		sh.insert(key, e, now)
	}
	var keyNext time.Time
	var keyWait time.Duration
	if e != nil {
		keyNext, keyWait = e.reserve(now)
	}

	if !l.globalLimited.Load() {
		if keyWait > 0 {
			return false, keyWait, false
		}
		if e != nil {
			e.commit(keyNext)
		}
		return true, 0, false
	}

	l.globalMu.Lock()
	defer l.globalMu.Unlock()
	globalNext, globalWait := l.global.reserve(now)
	if keyWait > 0 || globalWait > 0 {
		return false, max(keyWait, globalWait), globalWait > keyWait
	}
	l.global.commit(globalNext)
	if e != nil {
		e.commit(keyNext)
	}
	return true, 0, false
}

// SetGlobal changes the global limit, keeping the tokens accrued so far capped at the
// new burst. An invalid lim is refused with an error wrapping ErrInvalidRate or
// ErrInvalidBurst, and nothing changes.
func (l *Limiter) SetGlobal(lim Limit) error {
	if err := lim.Validate(); err != nil {
		return fmt.Errorf("cannot set global limit: %w", err)
	}
	l.shareMu.Lock()
	defer l.shareMu.Unlock()
	now := l.clock.Now()
	l.globalMu.Lock()
	defer l.globalMu.Unlock()
	l.globalBase = lim
	l.global.setLimit(l.scaled(lim), now)
	l.globalLimited.Store(!lim.Unlimited())
	return nil
}

// Set gives key an explicit limit, replacing Default or an earlier Set. The key keeps
// the tokens it has accrued, capped at the new burst. An invalid lim is refused with an
// error wrapping ErrInvalidRate or ErrInvalidBurst, and nothing changes.
func (l *Limiter) Set(key string, lim Limit) error {
	if err := lim.Validate(); err != nil {
		return fmt.Errorf("cannot set limit for %q: %w", key, err)
	}
	l.shareMu.Lock()
	defer l.shareMu.Unlock()
	now := l.clock.Now()
	sh := l.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.buckets[key]
	if e == nil {
		// A key without a bucket has a full one with the default limit; start from
		// that, so Set never grants more than the key already had.
		e = &entry{state: newState(l.scaled(l.def), now), base: l.def}
		sh.insert(key, e, now)
	}
	e.setLimit(l.scaled(lim), now)
	e.base = lim
	e.explicit = true
	return nil
}

// Remove drops key's explicit limit, so it is back to Default, keeping the tokens it has
// accrued capped at the default burst. Removing a key without an explicit limit does
// nothing.
func (l *Limiter) Remove(key string) {
	l.shareMu.Lock()
	defer l.shareMu.Unlock()
	now := l.clock.Now()
	sh := l.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.buckets[key]
	if e == nil || !e.explicit {
		return
	}
	if !l.defLimited {
		delete(sh.buckets, key)
		return
	}
	e.setLimit(l.scaled(l.def), now)
	e.base = l.def
	e.explicit = false
}

// Limits returns the global limit and the explicit per-key limits, as set. The map is a
// copy the caller owns. Keys under Default are not listed.
func (l *Limiter) Limits() (global Limit, perKey map[string]Limit) {
	l.globalMu.Lock()
	global = l.globalBase
	l.globalMu.Unlock()

	perKey = make(map[string]Limit)
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for key, e := range sh.buckets {
			if e.explicit {
				perKey[key] = e.base
			}
		}
		sh.mu.Unlock()
	}
	return global, perKey
}

// shardFor returns the shard that holds key.
func (l *Limiter) shardFor(key string) *shard {
	return &l.shards[maphash.String(l.seed, key)&uint64(len(l.shards)-1)]
}

// insert adds key's new bucket, first dropping idle buckets if the shard is at its
// bound. sh.mu must be held.
func (sh *shard) insert(key string, e *entry, now time.Time) {
	if len(sh.buckets) >= sh.sweepAt {
		sh.sweep(now)
	}
	sh.buckets[key] = e
}

// sweep drops the buckets that can be recreated without loss: default-limit buckets that
// are full at now. sh.mu must be held.
func (sh *shard) sweep(now time.Time) {
	maps.DeleteFunc(sh.buckets, func(_ string, e *entry) bool {
		return !e.explicit && e.full(now)
	})
	// When most buckets are busy the shard grows past its bound rather than lose
	// tokens; wait for it to double before walking it again.
	sh.sweepAt = max(sh.limit, 2*len(sh.buckets))
}
