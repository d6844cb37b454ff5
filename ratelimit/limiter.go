package ratelimit

import (
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"math/bits"
	"runtime"
	"strings"
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

	// pats are the pattern limits (a key ending in '*': every key with that prefix and no
	// limit of its own has a bucket of that limit), by prefix; replaced whole under shareMu.
	pats atomic.Pointer[map[string]Limit]

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
	// share, when not 0, is this key's own share (SetKeyShares), in place of the Limiter's.
	share float64
	// taken counts the tokens taken since the last TakenSince.
	taken uint64
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
	pats := map[string]Limit{}
	for key, lim := range cfg.PerKey {
		if prefix, ok := strings.CutSuffix(key, "*"); ok {
			pats[prefix] = lim
			continue
		}
		sh := l.shardFor(key)
		sh.buckets[key] = &entry{state: newState(lim, now), explicit: true, base: lim}
	}
	l.pats.Store(&pats)
	return l
}

// scaled is l with its rate and burst multiplied by the share in force: the part of l this
// Limiter gives out. An unlimited l stays unlimited; a limited one keeps a burst of at least
// one and a rate that still refills within the bounds Validate sets.
func (l *Limiter) scaled(lim Limit) Limit {
	return l.scaledBy(lim, math.Float64frombits(l.share.Load()))
}

// scaledFor is scaled by e's own share when it has one.
func (l *Limiter) scaledFor(e *entry, lim Limit) Limit {
	if e.share > 0 {
		return l.scaledBy(lim, e.share)
	}
	return l.scaled(lim)
}

func (l *Limiter) scaledBy(lim Limit, f float64) Limit {
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
			e.setLimit(l.scaledFor(e, e.base), now)
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
	if e == nil {
		if lim, ok := l.patternFor(key); ok {
			e = &entry{state: newState(l.scaled(lim), now), base: lim}
			sh.insert(key, e, now)
		} else if l.defLimited {
			e = &entry{state: newState(l.scaled(l.def), now), base: l.def}
			sh.insert(key, e, now)
		}
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
			e.taken++
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
		e.taken++
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
	if prefix, ok := strings.CutSuffix(key, "*"); ok {
		l.setPattern(prefix, lim, true)
		return nil
	}
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
	e.setLimit(l.scaledFor(e, lim), now)
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
	if prefix, ok := strings.CutSuffix(key, "*"); ok {
		l.setPattern(prefix, Limit{}, false)
		return
	}
	now := l.clock.Now()
	sh := l.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.buckets[key]
	if e == nil || !e.explicit {
		return
	}
	lim, ok := l.patternFor(key)
	if !ok {
		lim = l.def
	}
	if lim.Unlimited() {
		delete(sh.buckets, key)
		return
	}
	e.setLimit(l.scaledFor(e, lim), now)
	e.base = lim
	e.explicit = false
}

// patternFor returns the limit of the longest pattern whose prefix key starts with.
func (l *Limiter) patternFor(key string) (Limit, bool) {
	pats := l.pats.Load()
	if pats == nil || len(*pats) == 0 {
		return Limit{}, false
	}
	best, found := "", false
	for p := range *pats {
		if strings.HasPrefix(key, p) && (!found || len(p) > len(best)) {
			best, found = p, true
		}
	}
	return (*pats)[best], found
}

// setPattern sets (on) or removes the pattern limit of prefix, and gives every bucket
// without a limit of its own the limit that is now its: its pattern's or Default, keeping
// the tokens it has accrued capped at the new burst; a bucket left unlimited goes. Caller
// holds shareMu.
func (l *Limiter) setPattern(prefix string, lim Limit, on bool) {
	old := l.pats.Load()
	pats := map[string]Limit{}
	if old != nil {
		maps.Copy(pats, *old)
	}
	if on {
		pats[prefix] = lim
	} else {
		delete(pats, prefix)
	}
	l.pats.Store(&pats)
	now := l.clock.Now()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, e := range sh.buckets {
			if e.explicit {
				continue
			}
			nl, ok := l.patternFor(k)
			if !ok {
				nl = l.def
			}
			if nl.Unlimited() {
				delete(sh.buckets, k)
				continue
			}
			if nl != e.base {
				e.setLimit(l.scaledFor(e, nl), now)
				e.base = nl
			}
		}
		sh.mu.Unlock()
	}
}

// SetKeyShares gives each key of shares its own share of its limit (0 < f <= 1), in place of
// the Limiter's (SetShare), and every other key the Limiter's share again. A key without a
// bucket gets one if it is limited (an explicit limit or Default); an unlimited key stays
// unlimited. A bucket dropped for being idle (MaxKeys) loses its share with it: its next
// bucket has the Limiter's until the next SetKeyShares. Shares out of range are refused
// with an error wrapping ErrInvalidRate, and nothing changes.
func (l *Limiter) SetKeyShares(shares map[string]float64) error {
	for k, f := range shares {
		if math.IsNaN(f) || f <= 0 || f > 1 {
			return fmt.Errorf("%w: share %v of %q is not in (0, 1]", ErrInvalidRate, f, k)
		}
	}
	l.shareMu.Lock()
	defer l.shareMu.Unlock()
	now := l.clock.Now()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, e := range sh.buckets {
			if _, ok := shares[k]; !ok && e.share != 0 {
				e.share = 0
				e.setLimit(l.scaled(e.base), now)
			}
		}
		sh.mu.Unlock()
	}
	for k, f := range shares {
		sh := l.shardFor(k)
		sh.mu.Lock()
		e := sh.buckets[k]
		if e == nil {
			if lim, ok := l.patternFor(k); ok {
				e = &entry{state: newState(l.scaledBy(lim, f), now), base: lim}
				sh.insert(k, e, now)
			} else if l.defLimited {
				e = &entry{state: newState(l.scaledBy(l.def, f), now), base: l.def}
				sh.insert(k, e, now)
			}
		}
		if e != nil && e.share != f {
			e.share = f
			e.setLimit(l.scaledBy(e.base, f), now)
		}
		sh.mu.Unlock()
	}
	return nil
}

// TakenSince returns, for every key whose bucket gave tokens since the last call, how many,
// and counts again from zero. Only limited keys have buckets.
func (l *Limiter) TakenSince() map[string]uint64 {
	out := map[string]uint64{}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, e := range sh.buckets {
			if e.taken > 0 {
				out[k] = e.taken
				e.taken = 0
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// Limited reports whether key has a limit of its own or the default one.
func (l *Limiter) Limited(key string) bool {
	if l.defLimited {
		return true
	}
	if _, ok := l.patternFor(key); ok {
		return true
	}
	sh := l.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.buckets[key]
	return e != nil && !e.base.Unlimited()
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
	if pats := l.pats.Load(); pats != nil {
		for p, lim := range *pats {
			perKey[p+"*"] = lim
		}
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
