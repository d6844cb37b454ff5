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
