package ratelimit

import (
	"fmt"
	"maps"
	"math"
	"math/big"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// modelBucket is the textbook token bucket in exact rationals: a token count that grows
// by elapsed/interval, capped at the burst. It shares nothing with the fullAt
// arithmetic of the real bucket except the documented interval, ceil(1e9/rate) ns.
type modelBucket struct {
	unlimited bool
	burst     int64
	interval  int64
	tokens    *big.Rat
	at        int64 // fake-clock nanoseconds at which tokens was right
}

func newModelBucket(l Limit, now int64) *modelBucket {
	if l.Rate <= 0 {
		return &modelBucket{unlimited: true}
	}
	m := &modelBucket{burst: int64(max(l.Burst, 1)), interval: int64(math.Ceil(1e9 / l.Rate)), at: now}
	m.tokens = big.NewRat(m.burst, 1)
	return m
}

func (m *modelBucket) advance(now int64) {
	if m.unlimited {
		return
	}
	m.tokens.Add(m.tokens, big.NewRat(now-m.at, m.interval))
	if full := big.NewRat(m.burst, 1); m.tokens.Cmp(full) > 0 {
		m.tokens = full
	}
	m.at = now
}

// check returns 0 if a token is there at now, else the nanoseconds until one is.
func (m *modelBucket) check(now int64) int64 {
	if m.unlimited {
		return 0
	}
	m.advance(now)
	missing := new(big.Rat).Sub(big.NewRat(1, 1), m.tokens)
	if missing.Sign() <= 0 {
		return 0
	}
	return ceilRat(missing.Mul(missing, big.NewRat(m.interval, 1)))
}

func (m *modelBucket) take() {
	if !m.unlimited {
		m.tokens.Sub(m.tokens, big.NewRat(1, 1))
	}
}

// setLimit keeps the tokens, capped at the new burst and rounded down to a whole
// nanosecond of the new interval, as the package doc promises.
func (m *modelBucket) setLimit(l Limit, now int64) {
	m.advance(now)
	next := newModelBucket(l, now)
	if m.unlimited || next.unlimited {
		*m = *next
		return
	}
	if m.tokens.Cmp(next.tokens) < 0 {
		credit := floorRat(new(big.Rat).Mul(m.tokens, big.NewRat(next.interval, 1)))
		next.tokens = big.NewRat(credit, next.interval)
	}
	*m = *next
}

func ceilRat(r *big.Rat) int64 {
	q, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func floorRat(r *big.Rat) int64 {
	return new(big.Int).Quo(r.Num(), r.Denom()).Int64() // r >= 0 here
}

// The draws mix rates whose interval is exact with ones that round, and unlimited.
var (
	rates    = []float64{-1, 0, 0.3, 1, 3, 7, 10, 100, 333.3, 1000, 1e6}
	genLimit = rapid.Custom(func(t *rapid.T) Limit {
		return Limit{Rate: rapid.SampledFrom(rates).Draw(t, "rate"), Burst: rapid.IntRange(0, 6).Draw(t, "burst")}
	})
	genStep = rapid.Int64Range(0, 3_000_000_000)
	modelKs = []string{"a", "b", "c", "d", "e", "f"}
)

func TestBucketMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clk := &fakeClock{}
		lim := genLimit.Draw(t, "limit")
		b := NewBucket(lim, clk)
		m := newModelBucket(lim, 0)
		var lastWait time.Duration
		t.Repeat(map[string]func(*rapid.T){
			"take": func(t *rapid.T) {
				now := clk.Elapsed()
				ok, wait := b.TryTake(clk.Now())
				want := m.check(int64(now))
				if want == 0 {
					m.take()
				}
				if ok != (want == 0) || wait != time.Duration(want) {
					t.Fatalf("at %v: TryTake = (%v, %v), model wants wait %v", now, ok, wait, time.Duration(want))
				}
				lastWait = wait
			},
			"advance": func(t *rapid.T) {
				clk.Advance(time.Duration(genStep.Draw(t, "step")))
			},
			"advance to the edge of the last wait": func(t *rapid.T) {
				if lastWait == 0 {
					t.Skip("nothing was refused")
				}
				clk.Advance(lastWait - time.Duration(rapid.Int64Range(0, 1).Draw(t, "early")))
				lastWait = 0
			},
			"set limit": func(t *rapid.T) {
				lim := genLimit.Draw(t, "limit")
				if err := b.SetLimit(lim, clk.Now()); err != nil {
					t.Fatal(err)
				}
				m.setLimit(lim, int64(clk.Elapsed()))
			},
			"": func(t *rapid.T) {
				if got, want := b.Limit().Unlimited(), m.unlimited; got != want {
					t.Fatalf("Unlimited() = %v, model %v", got, want)
				}
			},
		})
	})
}

// modelLimiter is the Limiter without shards, locks or eviction: every key that was
// ever touched keeps its model bucket forever, and a key never touched has a full
// default one.
type modelLimiter struct {
	def      Limit
	global   *modelBucket
	globalL  Limit
	keys     map[string]*modelBucket
	explicit map[string]Limit
}

func (ml *modelLimiter) bucket(key string, now int64) *modelBucket {
	if b, ok := ml.keys[key]; ok {
		return b
	}
	b := newModelBucket(ml.def, now)
	ml.keys[key] = b
	return b
}

func TestLimiterMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clk := &fakeClock{}
		cfg := Config{
			Global:  genLimit.Draw(t, "global"),
			Default: genLimit.Draw(t, "default"),
			PerKey:  map[string]Limit{},
			Clock:   clk,
			// Tiny bounds make the limiter evict all the time, which the model never
			// does; they must agree anyway.
			MaxKeys: rapid.IntRange(1, 4).Draw(t, "maxKeys"),
		}
		for _, key := range rapid.SliceOfDistinct(rapid.SampledFrom(modelKs), rapid.ID).Draw(t, "perKey") {
			cfg.PerKey[key] = genLimit.Draw(t, "limit")
		}
		l := newLimiter(cfg.WithDefaults(), 1<<rapid.IntRange(0, 2).Draw(t, "shardBits"))
		ml := &modelLimiter{
			def:      cfg.Default,
			global:   newModelBucket(cfg.Global, 0),
			globalL:  cfg.Global,
			keys:     map[string]*modelBucket{},
			explicit: maps.Clone(cfg.PerKey),
		}
		for key, lim := range cfg.PerKey {
			ml.keys[key] = newModelBucket(lim, 0)
		}
		genKey := rapid.SampledFrom(modelKs)

		t.Repeat(map[string]func(*rapid.T){
			"take": func(t *rapid.T) {
				key := genKey.Draw(t, "key")
				now := int64(clk.Elapsed())
				ok, wait := l.Take(key)
				kb := ml.bucket(key, now)
				kw, gw := kb.check(now), ml.global.check(now)
				if kw == 0 && gw == 0 {
					kb.take()
					ml.global.take()
				}
				if want := max(kw, gw); ok != (want == 0) || wait != time.Duration(want) {
					t.Fatalf("at %v: Take(%q) = (%v, %v), model wants wait %v (key %v, global %v)",
						time.Duration(now), key, ok, wait, time.Duration(want), time.Duration(kw), time.Duration(gw))
				}
			},
			"advance": func(t *rapid.T) {
				clk.Advance(time.Duration(genStep.Draw(t, "step")))
			},
			"set": func(t *rapid.T) {
				key, lim := genKey.Draw(t, "key"), genLimit.Draw(t, "limit")
				if err := l.Set(key, lim); err != nil {
					t.Fatal(err)
				}
				now := int64(clk.Elapsed())
				ml.bucket(key, now).setLimit(lim, now)
				ml.explicit[key] = lim
			},
			"remove": func(t *rapid.T) {
				key := genKey.Draw(t, "key")
				l.Remove(key)
				if _, ok := ml.explicit[key]; ok {
					now := int64(clk.Elapsed())
					ml.bucket(key, now).setLimit(ml.def, now)
					delete(ml.explicit, key)
				}
			},
			"set global": func(t *rapid.T) {
				lim := genLimit.Draw(t, "limit")
				if err := l.SetGlobal(lim); err != nil {
					t.Fatal(err)
				}
				ml.global.setLimit(lim, int64(clk.Elapsed()))
				ml.globalL = lim
			},
			"": func(t *rapid.T) {
				global, perKey := l.Limits()
				if global != ml.globalL || fmt.Sprint(perKey) != fmt.Sprint(ml.explicit) {
					t.Fatalf("Limits() = %+v, %v; model %+v, %v", global, perKey, ml.globalL, ml.explicit)
				}
			},
		})
	})
}
