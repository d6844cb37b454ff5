package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"time"
)

// Errors returned when a limit or a Config is invalid. They come wrapped with the value
// that was refused; test for them with errors.Is.
var (
	// ErrInvalidRate is returned for a rate that is NaN or infinite, or so low that one
	// token would take more than a century to accrue.
	ErrInvalidRate = errors.New("ratelimit: invalid rate")
	// ErrInvalidBurst is returned for a negative burst on a limited bucket, or a burst so
	// large that refilling it at the rate would take more than a century.
	ErrInvalidBurst = errors.New("ratelimit: invalid burst")
	// ErrInvalidMaxKeys is returned by New for a negative Config.MaxKeys.
	ErrInvalidMaxKeys = errors.New("ratelimit: invalid max keys")
)

// maxRefill bounds b×I (see the package doc), so that fullAt arithmetic never overflows
// a time.Duration. No real downstream limit comes near it.
const maxRefill = 100 * 365 * 24 * time.Hour

// Clock tells the time. The Limiter reads it once per call; tests inject a fake one.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// systemClock is the real clock, used when none is given.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Limit is a token bucket's rate and burst.
type Limit struct {
	// Rate is tokens per second. Rate <= 0 means unlimited, and then Burst is ignored.
	Rate float64
	// Burst is how many tokens the bucket holds when full, that is how many takes may go
	// back to back after a quiet spell. A limited bucket with Burst 0 holds one token:
	// with none nothing could ever be dispatched, and axe never drops.
	Burst int
}

// Unlimited reports whether l lets everything through.
func (l Limit) Unlimited() bool { return l.Rate <= 0 && !math.IsNaN(l.Rate) }

// Validate reports whether l can be used: the rate must be a finite number and, for a
// limited bucket, the burst must not be negative and the bucket must refill within a
// century. The error wraps ErrInvalidRate or ErrInvalidBurst.
func (l Limit) Validate() error {
	if math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) {
		return fmt.Errorf("%w: rate %v is not a finite number", ErrInvalidRate, l.Rate)
	}
	if l.Unlimited() {
		return nil
	}
	if l.Burst < 0 {
		return fmt.Errorf("%w: burst %d is negative", ErrInvalidBurst, l.Burst)
	}
	// Compare in float64 before converting, so absurd values cannot overflow int64.
	interval := math.Ceil(1e9 / l.Rate)
	if interval > float64(maxRefill) {
		return fmt.Errorf("%w: %v tokens/s accrues one token in more than %v", ErrInvalidRate, l.Rate, maxRefill)
	}
	if float64(l.burst())*interval > float64(maxRefill) {
		return fmt.Errorf("%w: burst %d at %v tokens/s takes more than %v to refill",
			ErrInvalidBurst, l.Burst, l.Rate, maxRefill)
	}
	return nil
}

// burst is the capacity a limited bucket really has (see Limit.Burst).
func (l Limit) burst() int {
	return max(l.Burst, 1)
}

// state is the arithmetic of one bucket, without a lock: its owner serialises access
// (Bucket with its mutex, Limiter with a shard lock or the global lock). l must be valid.
type state struct {
	lim      Limit
	interval time.Duration // time to accrue one token; 0 means unlimited
	window   time.Duration // burst × interval: how far fullAt may run ahead of now
	fullAt   time.Time     // when the bucket is full again if nobody takes
}

// newState returns a full bucket for the valid limit l.
func newState(l Limit, now time.Time) state {
	s := state{lim: l, fullAt: now}
	if !l.Unlimited() {
		s.interval = time.Duration(math.Ceil(1e9 / l.Rate))
		s.window = time.Duration(l.burst()) * s.interval
	}
	return s
}

// reserve works out what taking one token at now would do without doing it: the new
// fullAt to commit, or, when wait > 0, how long until a token is there. Split from
// commit so the Limiter can check a key bucket and the global bucket before touching
// either.
func (s *state) reserve(now time.Time) (next time.Time, wait time.Duration) {
	if s.interval == 0 {
		return now, 0
	}
	next = s.fullAt
	if next.Before(now) {
		next = now
	}
	next = next.Add(s.interval)
	if over := next.Sub(now) - s.window; over > 0 {
		return next, over
	}
	return next, 0
}

// commit records a take that reserve allowed.
func (s *state) commit(next time.Time) {
	if s.interval != 0 {
		s.fullAt = next
	}
}

// full reports whether the bucket holds its whole burst at now, so that dropping it and
// starting a fresh one later loses nothing.
func (s *state) full(now time.Time) bool {
	return s.interval == 0 || !s.fullAt.After(now)
}

// setLimit changes the limit to the valid l, keeping the tokens accrued so far but no
// more than l's burst. Leaving an unlimited limit counts as having plenty, so the
// bucket starts full. The tokens are kept to the nanosecond of the new interval,
// rounded down, so a change never adds a token.
func (s *state) setLimit(l Limit, now time.Time) {
	old := *s
	*s = newState(l, now)
	if s.interval == 0 || old.interval == 0 {
		return
	}
	// credit is the tokens held now, in nanoseconds of the old interval.
	deficit := min(max(old.fullAt.Sub(now), 0), old.window)
	credit := old.window - deficit
	if credit/old.interval >= time.Duration(s.lim.burst()) {
		return // at least the new burst: full
	}
	// credit < burst×old.interval here, so credit×new.interval/old.interval is below
	// the new window and the 128-bit division cannot overflow.
	hi, lo := bits.Mul64(uint64(credit), uint64(s.interval))
	newCredit, _ := bits.Div64(hi, lo, uint64(old.interval))
	s.fullAt = now.Add(s.window - time.Duration(newCredit))
}

// Bucket is one token bucket. It is safe for concurrent use.
type Bucket struct {
	mu sync.Mutex
	s  state
}

// NewBucket returns a full bucket with limit l. A nil clock means the system clock; it is
// read once, to start the bucket full. NewBucket panics if l is invalid: check
// l.Validate() first when the limit comes from input.
func NewBucket(l Limit, clock Clock) *Bucket {
	if err := l.Validate(); err != nil {
		panic(fmt.Sprintf("ratelimit.NewBucket: %v", err))
	}
	if clock == nil {
		clock = systemClock{}
	}
	return &Bucket{s: newState(l, clock.Now())}
}

// TryTake takes a token at now if one is there and returns ok. Otherwise it takes
// nothing and returns how long until a token will be there, assuming nobody else takes
// it first.
func (b *Bucket) TryTake(now time.Time) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	next, wait := b.s.reserve(now)
	if wait > 0 {
		return false, wait
	}
	b.s.commit(next)
	return true, 0
}

// SetLimit changes the limit at now, keeping the tokens accrued so far capped at the new
// burst. An invalid l is refused with an error wrapping ErrInvalidRate or
// ErrInvalidBurst, and the bucket is left as it was.
func (b *Bucket) SetLimit(l Limit, now time.Time) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("cannot set bucket limit: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s.setLimit(l, now)
	return nil
}

// Limit returns the bucket's current limit, as it was set.
func (b *Bucket) Limit() Limit {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s.lim
}
