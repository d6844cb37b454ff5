package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// epoch is where fake clocks start; any instant would do.
var epoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a Clock that only moves when told. It is safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return epoch.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *fakeClock) Elapsed() time.Duration  { return time.Duration(c.ns.Load()) }

func mustTake(t *testing.T, ok bool, wait time.Duration) {
	t.Helper()
	if !ok || wait != 0 {
		t.Fatalf("take = (%v, %v), want (true, 0)", ok, wait)
	}
}

func mustRefuse(t *testing.T, ok bool, wait, want time.Duration) {
	t.Helper()
	if ok || wait != want {
		t.Fatalf("take = (%v, %v), want (false, %v)", ok, wait, want)
	}
}

func mustNew(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

func TestBucketBurstThenSteadyRate(t *testing.T) {
	clk := &fakeClock{}
	b := NewBucket(Limit{Rate: 100, Burst: 10}, clk)
	for range 10 {
		ok, wait := b.TryTake(clk.Now())
		mustTake(t, ok, wait)
	}
	ok, wait := b.TryTake(clk.Now())
	mustRefuse(t, ok, wait, 10*time.Millisecond)

	// Taking greedily every millisecond, each token arrives exactly on a multiple of
	// 10 ms, one at a time, and the wait when refused counts down to it.
	taken := 10
	for ms := 1; ms <= 10_000; ms++ {
		clk.Advance(time.Millisecond)
		ok, wait := b.TryTake(clk.Now())
		if ms%10 == 0 {
			mustTake(t, ok, wait)
			taken++
			ok, wait = b.TryTake(clk.Now())
			mustRefuse(t, ok, wait, 10*time.Millisecond)
			continue
		}
		mustRefuse(t, ok, wait, time.Duration(10-ms%10)*time.Millisecond)
	}
	if taken != 1010 {
		t.Fatalf("took %d tokens over 10 s at 100/s burst 10, want 1010", taken)
	}
}

func TestBucketTotalDoesNotDependOnPolling(t *testing.T) {
	// Polling at any step up to the burst window yields exactly burst + rate×elapsed;
	// polling less often than the window loses what overflowed the full bucket.
	for _, tc := range []struct {
		step time.Duration
		want int
	}{
		{time.Millisecond, 1010},
		{7 * time.Millisecond, 1010},
		{8 * time.Millisecond, 1010},
		{100 * time.Millisecond, 1010},
		{200 * time.Millisecond, 10 + 50*10},
	} {
		t.Run(fmt.Sprintf("step=%v", tc.step), func(t *testing.T) {
			clk := &fakeClock{}
			b := NewBucket(Limit{Rate: 100, Burst: 10}, clk)
			taken := 0
			for {
				for {
					if ok, _ := b.TryTake(clk.Now()); !ok {
						break
					}
					taken++
				}
				if clk.Elapsed() >= 10*time.Second {
					break
				}
				clk.Advance(min(tc.step, 10*time.Second-clk.Elapsed()))
			}
			if taken != tc.want {
				t.Fatalf("took %d, want %d", taken, tc.want)
			}
		})
	}
}

func TestBucketWaitIsExact(t *testing.T) {
	for _, tc := range []struct {
		lim      Limit
		interval time.Duration
	}{
		{Limit{Rate: 100, Burst: 3}, 10 * time.Millisecond},
		{Limit{Rate: 3, Burst: 1}, 333_333_334}, // rounded up: never faster than asked
		{Limit{Rate: 0.5, Burst: 2}, 2 * time.Second},
		{Limit{Rate: 1.0 / 60, Burst: 1}, time.Minute},
		{Limit{Rate: 1e6, Burst: 5}, time.Microsecond},
	} {
		t.Run(fmt.Sprintf("rate=%v", tc.lim.Rate), func(t *testing.T) {
			clk := &fakeClock{}
			b := NewBucket(tc.lim, clk)
			for range tc.lim.Burst {
				ok, wait := b.TryTake(clk.Now())
				mustTake(t, ok, wait)
			}
			for range 5 {
				ok, wait := b.TryTake(clk.Now())
				mustRefuse(t, ok, wait, tc.interval)
				clk.Advance(wait - 1)
				ok, wait = b.TryTake(clk.Now())
				mustRefuse(t, ok, wait, 1)
				clk.Advance(1)
				ok, wait = b.TryTake(clk.Now())
				mustTake(t, ok, wait)
			}
		})
	}
}

func TestBucketBurstZeroHoldsOneToken(t *testing.T) {
	clk := &fakeClock{}
	b := NewBucket(Limit{Rate: 10}, clk)
	ok, wait := b.TryTake(clk.Now())
	mustTake(t, ok, wait)
	ok, wait = b.TryTake(clk.Now())
	mustRefuse(t, ok, wait, 100*time.Millisecond)
	clk.Advance(time.Hour)
	ok, wait = b.TryTake(clk.Now())
	mustTake(t, ok, wait)
	ok, wait = b.TryTake(clk.Now())
	mustRefuse(t, ok, wait, 100*time.Millisecond)
}

func TestBucketUnlimited(t *testing.T) {
	for _, lim := range []Limit{{}, {Rate: -5, Burst: -1}, {Rate: 0, Burst: 3}} {
		clk := &fakeClock{}
		b := NewBucket(lim, clk)
		for range 100_000 {
			ok, wait := b.TryTake(clk.Now())
			mustTake(t, ok, wait)
		}
		if !b.Limit().Unlimited() {
			t.Fatalf("%+v: Unlimited() = false", lim)
		}
	}
}

func TestBucketSetLimit(t *testing.T) {
	t.Run("lower burst caps tokens", func(t *testing.T) {
		clk := &fakeClock{}
		b := NewBucket(Limit{Rate: 100, Burst: 10}, clk)
		if err := b.SetLimit(Limit{Rate: 100, Burst: 3}, clk.Now()); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			ok, wait := b.TryTake(clk.Now())
			mustTake(t, ok, wait)
		}
		ok, wait := b.TryTake(clk.Now())
		mustRefuse(t, ok, wait, 10*time.Millisecond)
	})
	t.Run("higher burst grants nothing", func(t *testing.T) {
		clk := &fakeClock{}
		b := NewBucket(Limit{Rate: 100, Burst: 10}, clk)
		for range 4 {
			b.TryTake(clk.Now())
		}
		if err := b.SetLimit(Limit{Rate: 100, Burst: 20}, clk.Now()); err != nil {
			t.Fatal(err)
		}
		for range 6 {
			ok, wait := b.TryTake(clk.Now())
			mustTake(t, ok, wait)
		}
		ok, wait := b.TryTake(clk.Now())
		mustRefuse(t, ok, wait, 10*time.Millisecond)
		// It now fills to the new burst.
		clk.Advance(time.Hour)
		for range 20 {
			ok, wait := b.TryTake(clk.Now())
			mustTake(t, ok, wait)
		}
		ok, _ = b.TryTake(clk.Now())
		if ok {
			t.Fatal("took a 21st token with burst 20")
		}
	})
	t.Run("empty bucket waits at the new rate", func(t *testing.T) {
		clk := &fakeClock{}
		b := NewBucket(Limit{Rate: 100, Burst: 10}, clk)
		for range 10 {
			b.TryTake(clk.Now())
		}
		if err := b.SetLimit(Limit{Rate: 10, Burst: 5}, clk.Now()); err != nil {
			t.Fatal(err)
		}
		ok, wait := b.TryTake(clk.Now())
		mustRefuse(t, ok, wait, 100*time.Millisecond)
	})
	t.Run("fraction of a token is kept", func(t *testing.T) {
		clk := &fakeClock{}
		b := NewBucket(Limit{Rate: 100, Burst: 10}, clk)
		for range 10 {
			b.TryTake(clk.Now())
		}
		clk.Advance(5 * time.Millisecond) // half a token at 100/s
		if err := b.SetLimit(Limit{Rate: 10, Burst: 10}, clk.Now()); err != nil {
			t.Fatal(err)
		}
		ok, wait := b.TryTake(clk.Now())
		mustRefuse(t, ok, wait, 50*time.Millisecond) // the other half at 10/s
	})
	t.Run("through unlimited and back starts full", func(t *testing.T) {
		clk := &fakeClock{}
		b := NewBucket(Limit{Rate: 1, Burst: 2}, clk)
		b.TryTake(clk.Now())
		b.TryTake(clk.Now())
		if err := b.SetLimit(Limit{}, clk.Now()); err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			ok, wait := b.TryTake(clk.Now())
			mustTake(t, ok, wait)
		}
		if err := b.SetLimit(Limit{Rate: 1, Burst: 4}, clk.Now()); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			ok, wait := b.TryTake(clk.Now())
			mustTake(t, ok, wait)
		}
		ok, wait := b.TryTake(clk.Now())
		mustRefuse(t, ok, wait, time.Second)
		if got := b.Limit(); got != (Limit{Rate: 1, Burst: 4}) {
			t.Fatalf("Limit() = %+v", got)
		}
	})
	t.Run("invalid limit is refused and changes nothing", func(t *testing.T) {
		clk := &fakeClock{}
		b := NewBucket(Limit{Rate: 100, Burst: 2}, clk)
		b.TryTake(clk.Now())
		err := b.SetLimit(Limit{Rate: math.NaN()}, clk.Now())
		if !errors.Is(err, ErrInvalidRate) {
			t.Fatalf("SetLimit(NaN) = %v, want ErrInvalidRate", err)
		}
		if got := b.Limit(); got != (Limit{Rate: 100, Burst: 2}) {
			t.Fatalf("Limit() = %+v after refused SetLimit", got)
		}
		ok, wait := b.TryTake(clk.Now())
		mustTake(t, ok, wait)
		ok, wait = b.TryTake(clk.Now())
		mustRefuse(t, ok, wait, 10*time.Millisecond)
	})
}

func TestNewBucketPanicsOnInvalidLimit(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewBucket with burst -1 did not panic")
		}
	}()
	NewBucket(Limit{Rate: 1, Burst: -1}, &fakeClock{})
}

func TestLimitValidate(t *testing.T) {
	for _, tc := range []struct {
		lim  Limit
		want error
	}{
		{Limit{}, nil},
		{Limit{Rate: -1, Burst: -7}, nil}, // unlimited: burst ignored
		{Limit{Rate: 100, Burst: 0}, nil},
		{Limit{Rate: 1e12, Burst: 1}, nil},
		{Limit{Rate: 1e-9, Burst: 1}, nil}, // ~32 years a token
		{Limit{Rate: math.NaN(), Burst: 1}, ErrInvalidRate},
		{Limit{Rate: math.Inf(1), Burst: 1}, ErrInvalidRate},
		{Limit{Rate: math.Inf(-1), Burst: 1}, ErrInvalidRate},
		{Limit{Rate: 1e-12, Burst: 1}, ErrInvalidRate}, // a token per ~31,700 years
		{Limit{Rate: 5, Burst: -1}, ErrInvalidBurst},
		{Limit{Rate: 1, Burst: math.MaxInt}, ErrInvalidBurst},
	} {
		err := tc.lim.Validate()
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%+v.Validate() = %v, want %v", tc.lim, err, tc.want)
		}
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  Config
		want error
	}{
		"global NaN":       {Config{Global: Limit{Rate: math.NaN()}}, ErrInvalidRate},
		"default Inf":      {Config{Default: Limit{Rate: math.Inf(1)}}, ErrInvalidRate},
		"per key burst":    {Config{PerKey: map[string]Limit{"app": {Rate: 1, Burst: -2}}}, ErrInvalidBurst},
		"negative maxkeys": {Config{MaxKeys: -1}, ErrInvalidMaxKeys},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := New(tc.cfg)
			if !errors.Is(err, tc.want) || l != nil {
				t.Fatalf("New = %v, %v; want nil, %v", l, err, tc.want)
			}
		})
	}
}

func TestConfigWithDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	if c.MaxKeys != MaxKeysDefault || c.Clock == nil || !c.Global.Unlimited() || !c.Default.Unlimited() {
		t.Fatalf("WithDefaults() = %+v", c)
	}
	clk := &fakeClock{}
	c = Config{MaxKeys: 7, Clock: clk}.WithDefaults()
	if c.MaxKeys != 7 || c.Clock != clk {
		t.Fatalf("WithDefaults() overrode set fields: %+v", c)
	}
}

func TestLimiterZeroConfigIsUnlimited(t *testing.T) {
	l := mustNew(t, Config{})
	for i := range 10_000 {
		ok, wait := l.Take(fmt.Sprint("host-", i%7))
		mustTake(t, ok, wait)
	}
	global, perKey := l.Limits()
	if !global.Unlimited() || len(perKey) != 0 {
		t.Fatalf("Limits() = %+v, %v", global, perKey)
	}
}

func TestLimiterKeyRefusalKeepsGlobalToken(t *testing.T) {
	clk := &fakeClock{}
	l := mustNew(t, Config{
		Global: Limit{Rate: 10, Burst: 2},
		PerKey: map[string]Limit{"a": {Rate: 10, Burst: 1}},
		Clock:  clk,
	})
	ok, wait := l.Take("a")
	mustTake(t, ok, wait)
	ok, wait = l.Take("a") // refused by a, global still has one
	mustRefuse(t, ok, wait, 100*time.Millisecond)
	ok, wait = l.Take("b") // unlimited key gets the global token a did not use
	mustTake(t, ok, wait)
	ok, wait = l.Take("b")
	mustRefuse(t, ok, wait, 100*time.Millisecond)
}

func TestLimiterGlobalRefusalKeepsKeyToken(t *testing.T) {
	clk := &fakeClock{}
	l := mustNew(t, Config{
		Global: Limit{Rate: 10, Burst: 1},
		PerKey: map[string]Limit{"slow": {Rate: 1, Burst: 1}},
		Clock:  clk,
	})
	ok, wait := l.Take("other")
	mustTake(t, ok, wait)
	ok, wait = l.Take("slow") // refused by global only
	mustRefuse(t, ok, wait, 100*time.Millisecond)
	clk.Advance(100 * time.Millisecond)
	// slow refills in 1 s, so this only passes if the refusal left its token alone.
	ok, wait = l.Take("slow")
	mustTake(t, ok, wait)
	// Now both are empty; the wait is the longer of the two.
	ok, wait = l.Take("slow")
	mustRefuse(t, ok, wait, time.Second)
	ok, wait = l.Take("other")
	mustRefuse(t, ok, wait, 100*time.Millisecond)
}

func TestLimiterDefaultIsPerKey(t *testing.T) {
	clk := &fakeClock{}
	l := mustNew(t, Config{Default: Limit{Rate: 10, Burst: 2}, Clock: clk})
	for _, key := range []string{"a", "b", "c"} {
		for range 2 {
			ok, wait := l.Take(key)
			mustTake(t, ok, wait)
		}
		ok, wait := l.Take(key)
		mustRefuse(t, ok, wait, 100*time.Millisecond)
	}
	clk.Advance(100 * time.Millisecond)
	for _, key := range []string{"a", "b", "c"} {
		ok, wait := l.Take(key)
		mustTake(t, ok, wait)
	}
}

func TestLimiterSetRemoveLimits(t *testing.T) {
	clk := &fakeClock{}
	l := mustNew(t, Config{
		Default: Limit{Rate: 10, Burst: 3},
		PerKey:  map[string]Limit{"cfg": {Rate: 1, Burst: 1}},
		Clock:   clk,
	})

	// Set keeps accrued tokens: a has used 2 of 3, so a burst of 5 leaves it 1.
	l.Take("a")
	l.Take("a")
	if err := l.Set("a", Limit{Rate: 100, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	ok, wait := l.Take("a")
	mustTake(t, ok, wait)
	ok, wait = l.Take("a")
	mustRefuse(t, ok, wait, 10*time.Millisecond)

	// Set on a key never seen starts from a full default bucket (3 tokens), capped at
	// the new burst, not from the new burst.
	if err := l.Set("fresh", Limit{Rate: 100, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		ok, wait := l.Take("fresh")
		mustTake(t, ok, wait)
	}
	ok, wait = l.Take("fresh")
	mustRefuse(t, ok, wait, 10*time.Millisecond)

	global, perKey := l.Limits()
	want := map[string]Limit{"cfg": {Rate: 1, Burst: 1}, "a": {Rate: 100, Burst: 5}, "fresh": {Rate: 100, Burst: 5}}
	if !global.Unlimited() || fmt.Sprint(perKey) != fmt.Sprint(want) {
		t.Fatalf("Limits() = %+v, %v; want unlimited, %v", global, perKey, want)
	}
	perKey["cfg"] = Limit{} // the snapshot is the caller's
	if _, again := l.Limits(); again["cfg"] != (Limit{Rate: 1, Burst: 1}) {
		t.Fatalf("mutating the snapshot changed the limiter: %v", again)
	}

	// Remove goes back to Default, keeping tokens capped at its burst.
	clk.Advance(time.Second) // a is full at 100/s: 5 tokens
	l.Remove("a")
	for range 3 {
		ok, wait := l.Take("a")
		mustTake(t, ok, wait)
	}
	ok, wait = l.Take("a")
	mustRefuse(t, ok, wait, 100*time.Millisecond)
	l.Remove("a")     // no explicit limit any more: nothing happens
	l.Remove("ghost") // never seen
	if _, perKey := l.Limits(); len(perKey) != 2 || perKey["a"] != (Limit{}) {
		t.Fatalf("after Remove, Limits() = %v", perKey)
	}

	// An invalid limit is refused and changes nothing.
	if err := l.Set("cfg", Limit{Rate: 1, Burst: -1}); !errors.Is(err, ErrInvalidBurst) {
		t.Fatalf("Set(burst -1) = %v, want ErrInvalidBurst", err)
	}
	if _, perKey := l.Limits(); perKey["cfg"] != (Limit{Rate: 1, Burst: 1}) {
		t.Fatalf("refused Set changed cfg: %v", perKey)
	}
}

func TestLimiterRemoveWithUnlimitedDefault(t *testing.T) {
	clk := &fakeClock{}
	l := mustNew(t, Config{PerKey: map[string]Limit{"a": {Rate: 1, Burst: 1}}, Clock: clk})
	l.Take("a")
	ok, _ := l.Take("a")
	if ok {
		t.Fatal("a took twice with burst 1")
	}
	l.Remove("a")
	for range 100 {
		ok, wait := l.Take("a")
		mustTake(t, ok, wait)
	}
	if _, perKey := l.Limits(); len(perKey) != 0 {
		t.Fatalf("Limits() = %v after Remove", perKey)
	}
}

func TestLimiterSetGlobal(t *testing.T) {
	clk := &fakeClock{}
	l := mustNew(t, Config{Clock: clk})
	for range 50 {
		ok, wait := l.Take("a")
		mustTake(t, ok, wait)
	}
	if err := l.SetGlobal(Limit{Rate: 10, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	l.Take("a")
	l.Take("b")
	ok, wait := l.Take("c")
	mustRefuse(t, ok, wait, 100*time.Millisecond)
	if err := l.SetGlobal(Limit{Rate: math.Inf(1)}); !errors.Is(err, ErrInvalidRate) {
		t.Fatalf("SetGlobal(Inf) = %v, want ErrInvalidRate", err)
	}
	if g, _ := l.Limits(); g != (Limit{Rate: 10, Burst: 2}) {
		t.Fatalf("global = %+v after refused SetGlobal", g)
	}
	// Halving the rate of an empty bucket doubles the wait.
	if err := l.SetGlobal(Limit{Rate: 5, Burst: 2}); err != nil {
		t.Fatal(err)
	}
	ok, wait = l.Take("c")
	mustRefuse(t, ok, wait, 200*time.Millisecond)
	if err := l.SetGlobal(Limit{}); err != nil {
		t.Fatal(err)
	}
	ok, wait = l.Take("c")
	mustTake(t, ok, wait)
}

// keyCount counts the buckets a Limiter holds.
func keyCount(l *Limiter) int {
	n := 0
	for i := range l.shards {
		l.shards[i].mu.Lock()
		n += len(l.shards[i].buckets)
		l.shards[i].mu.Unlock()
	}
	return n
}

func TestLimiterEvictsOnlyFullDefaultBuckets(t *testing.T) {
	clk := &fakeClock{}
	cfg := Config{Default: Limit{Rate: 1, Burst: 1}, MaxKeys: 100, Clock: clk}
	l := newLimiter(cfg.WithDefaults(), 1)
	if err := l.Set("explicit", Limit{Rate: 1, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	l.Take("explicit")
	for i := range 150 {
		l.Take(fmt.Sprint("old-", i))
	}
	// Nothing was full, so nothing went: the bound is soft rather than lose tokens.
	if n := keyCount(l); n != 151 {
		t.Fatalf("holding %d buckets, want 151", n)
	}

	clk.Advance(time.Second) // every bucket so far is full again
	l.Take("busy")
	clk.Advance(500 * time.Millisecond)
	for i := range 100 {
		l.Take(fmt.Sprint("new-", i))
	}
	// The shard swept when it reached 200 buckets, twice what its last sweep left: the
	// full default buckets went; the explicit one, busy and the new ones stayed.
	if n := keyCount(l); n != 1+1+100 {
		t.Fatalf("holding %d buckets, want 102", n)
	}
	ok, wait := l.Take("busy")
	mustRefuse(t, ok, wait, 500*time.Millisecond)
	ok, wait = l.Take("explicit")
	mustTake(t, ok, wait)
	if _, perKey := l.Limits(); perKey["explicit"] != (Limit{Rate: 1, Burst: 1}) {
		t.Fatalf("explicit limit lost: %v", perKey)
	}
	// An evicted key starts again from a full bucket, as if it had been kept.
	ok, wait = l.Take("old-7")
	mustTake(t, ok, wait)
	ok, wait = l.Take("old-7")
	mustRefuse(t, ok, wait, time.Second)
}

func TestLimiterKeyCountStaysBounded(t *testing.T) {
	clk := &fakeClock{}
	const maxKeys = 64
	l := mustNew(t, Config{Default: Limit{Rate: 1000, Burst: 1}, MaxKeys: maxKeys, Clock: clk})
	for i := range 20_000 {
		clk.Advance(time.Millisecond) // the previous key is full again
		ok, wait := l.Take(fmt.Sprint("host-", i))
		mustTake(t, ok, wait)
	}
	// Each shard holds at most its share, rounded up.
	if n := keyCount(l); n > maxKeys+len(l.shards) {
		t.Fatalf("holding %d buckets with MaxKeys %d over %d shards", n, maxKeys, len(l.shards))
	}
}

func TestLimiterConcurrentWavesExact(t *testing.T) {
	// Every wave, the clock stands still while all goroutines take until refused. The
	// global bucket (200/s, burst 20) binds, since four keys (100/s, burst 10 each) can
	// never all be empty at once, so over 1 s exactly 20 + 200 tokens go.
	clk := &fakeClock{}
	keyLim := Limit{Rate: 100, Burst: 10}
	l := mustNew(t, Config{
		Global:  Limit{Rate: 200, Burst: 20},
		Default: keyLim,
		Clock:   clk,
	})
	keys := []string{"a", "b", "c", "d"}
	var perKey [4]atomic.Int64
	var badWait atomic.Int64
	for wave := 0; wave <= 100; wave++ {
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				k := g % len(keys)
				for {
					ok, wait := l.Take(keys[k])
					if !ok {
						if wait <= 0 || wait > 10*time.Millisecond {
							badWait.Add(1)
						}
						return
					}
					perKey[k].Add(1)
				}
			})
		}
		wg.Wait()
		clk.Advance(10 * time.Millisecond)
	}
	total := int64(0)
	for k := range perKey {
		n := perKey[k].Load()
		if n > 10+100 {
			t.Errorf("key %s took %d, over burst+rate×elapsed = 110", keys[k], n)
		}
		total += n
	}
	if total != 220 {
		t.Fatalf("took %d in total, want exactly 220", total)
	}
	if n := badWait.Load(); n != 0 {
		t.Fatalf("%d refusals had a wait outside (0, 10ms]", n)
	}
}

func TestLimiterConcurrentNeverOverTakes(t *testing.T) {
	// Takers move the fake clock 2µs before each take, so time and demand advance
	// together and the limits bind: about 250 attempts per token the global bucket
	// refills. An admin goroutine meanwhile changes, removes and takes from its own key,
	// and shards evict (MaxKeys 2). No key and not the total may ever go over
	// burst + rate×elapsed.
	clk := &fakeClock{}
	global := Limit{Rate: 2000, Burst: 50}
	keyLims := map[string]Limit{
		"a": {Rate: 100, Burst: 5}, // binds before the global does
		"b": {Rate: 700, Burst: 20},
		"c": {Rate: 700, Burst: 20},
		"d": {Rate: 700, Burst: 20},
		"e": {Rate: 700, Burst: 20},
	}
	l := mustNew(t, Config{
		Global:  global,
		Default: Limit{Rate: 700, Burst: 20},
		PerKey:  map[string]Limit{"a": keyLims["a"]},
		Clock:   clk,
		MaxKeys: 2,
	})
	keys := []string{"a", "b", "c", "d", "e"}
	var perKey [5]atomic.Int64
	var adminTaken atomic.Int64
	stop := make(chan struct{})
	var admin sync.WaitGroup
	admin.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				_ = l.Set("admin", Limit{Rate: float64(1 + i%50), Burst: i % 7})
			} else {
				l.Remove("admin")
			}
			if ok, _ := l.Take("admin"); ok {
				adminTaken.Add(1)
			}
			l.Limits()
		}
	})
	var takers sync.WaitGroup
	for g := range 6 {
		takers.Go(func() {
			for i := range 20_000 {
				clk.Advance(2 * time.Microsecond)
				k := (g + i) % len(keys)
				if ok, _ := l.Take(keys[k]); ok {
					perKey[k].Add(1)
				}
			}
		})
	}
	takers.Wait()
	close(stop)
	admin.Wait()

	elapsed := clk.Elapsed().Seconds()
	total := adminTaken.Load()
	for k, key := range keys {
		n := perKey[k].Load()
		lim := keyLims[key]
		if bound := float64(lim.Burst) + lim.Rate*elapsed; float64(n) > bound {
			t.Errorf("key %s took %d in %.4fs, over %.1f", key, n, elapsed, bound)
		}
		total += n
	}
	bound := float64(global.Burst) + global.Rate*elapsed
	if float64(total) > bound {
		t.Errorf("took %d in %.4fs, over the global %.1f", total, elapsed, bound)
	}
	// With hundreds of attempts per refill the global bucket is all but saturated; far
	// fewer takes would mean refusals that should not have happened.
	if float64(total) < 0.9*global.Rate*elapsed {
		t.Errorf("took only %d in %.4fs, want near the global %.1f", total, elapsed, bound)
	}
	t.Logf("took %d (admin %d, a %d) in %.4fs of fake time; global bound %.1f",
		total, adminTaken.Load(), perKey[0].Load(), elapsed, bound)
}

func TestParseLimit(t *testing.T) {
	for in, want := range map[string]Limit{
		"": {}, "0": {Rate: 0, Burst: 1}, "100": {Rate: 100, Burst: 100}, "100:10": {Rate: 100, Burst: 10},
		"0.5": {Rate: 0.5, Burst: 1}, " 20:1 ": {Rate: 20, Burst: 1},
	} {
		got, err := ParseLimit(in)
		if err != nil || got != want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"x", "10:y", "-5", "10:-1", "NaN"} {
		if _, err := ParseLimit(bad); err == nil {
			t.Errorf("ParseLimit(%q) accepted", bad)
		}
	}
}
