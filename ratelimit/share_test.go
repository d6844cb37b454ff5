package ratelimit

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestShareSplitsEveryLimit: limiters whose shares add up to one, each taking every token
// it can, together give out no more than the limit's rate over a span plus one burst each,
// and nearly the rate: the limit is split, not multiplied.
func TestShareSplitsEveryLimit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := float64(rapid.IntRange(1, 500).Draw(t, "rate"))
		burst := rapid.IntRange(0, 50).Draw(t, "burst")
		n := rapid.IntRange(1, 5).Draw(t, "nodes")
		global := rapid.Bool().Draw(t, "global")
		// n contiguous shares of 256 shards, as the shard loop's fair share gives them.
		shares := make([]float64, n)
		for i := range n {
			shares[i] = float64(256/n+btoi(i < 256%n)) / 256
		}
		lim := Limit{Rate: rate, Burst: burst}
		clk := &fakeClock{}
		ls := make([]*Limiter, n)
		for i := range ls {
			cfg := Config{Clock: clk, PerKey: map[string]Limit{"d": lim}}
			if global {
				cfg = Config{Clock: clk, Global: lim}
			}
			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.SetShare(shares[i]); err != nil {
				t.Fatal(err)
			}
			ls[i] = l
		}
		span := 5 * time.Second
		step := 200 * time.Microsecond
		total, bursts := 0, 0
		for _, f := range shares {
			bursts += max(1, int(float64(max(burst, 1))*f))
		}
		for at := time.Duration(0); at <= span; at += step {
			clk.ns.Store(int64(at))
			for _, l := range ls {
				for {
					ok, _ := l.Take("d")
					if !ok {
						break
					}
					total++
				}
			}
		}
		most := int(math.Floor(rate*span.Seconds())) + bursts
		// Taking on a step loses up to a step per token once a bucket of burst one is full
		// (at 500/s, a tenth), so the floor is looser than the ceiling.
		least := int(rate*span.Seconds()*0.85) - n
		if total > most || total < least {
			t.Fatalf("%d limiters with shares %v of %v took %d tokens in %s, want %d..%d", n, shares, lim, total, span, least, most)
		}
		for i, l := range ls {
			if got, _ := l.Limits(); global && got != lim {
				t.Fatalf("limiter %d reports the global limit %v, want it as set: %v", i, got, lim)
			}
		}
	})
}

// TestShareRefusesBadFractions: a share outside (0, 1] is refused and changes nothing.
func TestShareRefusesBadFractions(t *testing.T) {
	l, err := New(Config{Global: Limit{Rate: 10, Burst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []float64{0, -1, 1.5, math.NaN()} {
		if err := l.SetShare(f); err == nil {
			t.Errorf("SetShare(%v) = nil, want an error", f)
		}
	}
	if got := l.Share(); got != 1 {
		t.Errorf("Share after refused changes = %v, want 1", got)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestKeySharesOverrideTheShare: a key given a share of its own (SetKeyShares) gives out that
// share of its limit whatever the Limiter's share; the other keys keep the Limiter's; a key
// left out of the next SetKeyShares is back on the Limiter's; TakenSince counts the tokens
// each key gave since the last call; bad shares are refused and change nothing.
func TestKeySharesOverrideTheShare(t *testing.T) {
	clk := &fakeClock{}
	l, err := New(Config{Clock: clk, PerKey: map[string]Limit{"hot": {Rate: 100, Burst: 1}, "cold": {Rate: 100, Burst: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetShare(1.0 / 4); err != nil {
		t.Fatal(err)
	}
	if err := l.SetKeyShares(map[string]float64{"hot": 0.9}); err != nil {
		t.Fatal(err)
	}
	count := func(key string, span time.Duration) int {
		n := 0
		start := time.Duration(clk.ns.Load())
		for at := start; at < start+span; at += 100 * time.Microsecond {
			clk.ns.Store(int64(at))
			for {
				if ok, _ := l.Take(key); !ok {
					break
				}
				n++
			}
		}
		return n
	}
	if hot := count("hot", 10*time.Second); hot < 880 || hot > 902 {
		t.Errorf("hot with a share of 0.9 of 100/s gave %d tokens in 10 s, want about 900", hot)
	}
	if cold := count("cold", 10*time.Second); cold < 240 || cold > 252 {
		t.Errorf("cold on the Limiter's share of 1/4 gave %d tokens in 10 s, want about 250", cold)
	}
	taken := l.TakenSince()
	if taken["hot"] < 880 || taken["cold"] < 240 || len(l.TakenSince()) != 0 {
		t.Errorf("TakenSince = %v, then not empty", taken)
	}
	if err := l.SetKeyShares(map[string]float64{"hot": 1.5}); err == nil {
		t.Error("a share of 1.5 was taken")
	}
	if err := l.SetKeyShares(nil); err != nil {
		t.Fatal(err)
	}
	if hot := count("hot", 10*time.Second); hot < 240 || hot > 252 {
		t.Errorf("hot back on the Limiter's share gave %d tokens in 10 s, want about 250", hot)
	}
	if !l.Limited("hot") || l.Limited("other") {
		t.Errorf("Limited(hot) = %v, Limited(other) = %v; want true, false", l.Limited("hot"), l.Limited("other"))
	}
}

// TestPatternLimits: a pattern (tenant:*) gives every key with its prefix and no limit of its
// own a bucket of its limit each; the longest pattern wins; a key's own limit wins over any
// pattern; removing the pattern leaves its keys unlimited; Limits lists it.
func TestPatternLimits(t *testing.T) {
	clk := &fakeClock{}
	l, err := New(Config{Clock: clk, PerKey: map[string]Limit{"tenant:*": {Rate: 1, Burst: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Set("tenant:vip:*", Limit{Rate: 1, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	if err := l.Set("tenant:own", Limit{Rate: 1, Burst: 3}); err != nil {
		t.Fatal(err)
	}
	burst := func(key string) int {
		n := 0
		for n < 100 {
			if ok, _ := l.Take(key); !ok {
				break
			}
			n++
		}
		return n
	}
	for key, want := range map[string]int{"tenant:a": 2, "tenant:b": 2, "tenant:vip:x": 5, "tenant:own": 3, "other": 100} {
		if got := burst(key); got != want {
			t.Errorf("%s gave %d tokens at once, want %d", key, got, want)
		}
	}
	_, per := l.Limits()
	if per["tenant:*"] != (Limit{Rate: 1, Burst: 2}) || per["tenant:vip:*"] != (Limit{Rate: 1, Burst: 5}) || per["tenant:a"] != (Limit{}) {
		t.Errorf("Limits lists %v", per)
	}
	if !l.Limited("tenant:zz") || l.Limited("other") {
		t.Errorf("Limited(tenant:zz) = %v, Limited(other) = %v", l.Limited("tenant:zz"), l.Limited("other"))
	}
	l.Remove("tenant:*")
	if got := burst("tenant:a"); got != 100 {
		t.Errorf("tenant:a after its pattern went gave %d tokens, want unlimited", got)
	}
	if got := burst("tenant:vip:y"); got != 5 {
		t.Errorf("tenant:vip:y gave %d, want its own pattern's 5", got)
	}
}
