package ratelimit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sinkTaken keeps the benchmarked takes observable so the compiler cannot drop them.
var sinkTaken atomic.Int64

// taker is what the benchmarks drive: the Limiter, or the one-lock baseline.
type taker interface {
	Take(key string) (bool, time.Duration)
}

// oneLockLimiter is the baseline the sharded map is measured against: the same buckets
// behind a single mutex, with no global bucket.
type oneLockLimiter struct {
	mu      sync.Mutex
	def     Limit
	clock   Clock
	buckets map[string]*state
}

func (o *oneLockLimiter) Take(key string) (bool, time.Duration) {
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.buckets[key]
	if s == nil {
		st := newState(o.def, now)
		s = &st
		o.buckets[key] = s
	}
	next, wait := s.reserve(now)
	if wait > 0 {
		return false, wait
	}
	s.commit(next)
	return true, 0
}

// BenchmarkTake takes tokens from parallel goroutines with the system clock, as the
// dispatcher does. keys=1 is the worst case for any map (one lock, one bucket);
// keys=1000 is many downstreams at once. The per-key rate is high enough that most takes
// succeed, so the measured path is the full take.
func BenchmarkTake(b *testing.B) {
	keyLim := Limit{Rate: 1e7, Burst: 1000}
	for _, keys := range []int{1, 1000} {
		names := make([]string, keys)
		for i := range names {
			names[i] = fmt.Sprintf("executor-%d.example:8080", i)
		}
		impls := []struct {
			name string
			new  func() taker
		}{
			{"sharded", func() taker { return mustNew(b, Config{Default: keyLim}) }},
			{"sharded+global", func() taker {
				return mustNew(b, Config{Default: keyLim, Global: Limit{Rate: 1e8, Burst: 10_000}})
			}},
			{"onelock", func() taker {
				return &oneLockLimiter{def: keyLim, clock: systemClock{}, buckets: map[string]*state{}}
			}},
		}
		for _, impl := range impls {
			b.Run(fmt.Sprintf("impl=%s/keys=%d", impl.name, keys), func(b *testing.B) {
				l := impl.new()
				var goroutine atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					// Each goroutine walks the keys from its own offset, so they spread
					// over the shards the way independent dispatches would.
					i := int(goroutine.Add(1)) * 7919
					taken := int64(0)
					for pb.Next() {
						if ok, _ := l.Take(names[i%keys]); ok {
							taken++
						}
						i++
					}
					sinkTaken.Add(taken)
				})
			})
		}
	}
}

// BenchmarkBucketTryTake is one bucket from one goroutine: the arithmetic and the lock
// without any map.
func BenchmarkBucketTryTake(b *testing.B) {
	bucket := NewBucket(Limit{Rate: 1e7, Burst: 1000}, nil)
	now := time.Now()
	taken := int64(0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		// Step the time by the interval so the bucket keeps refilling, without timing
		// time.Now.
		if ok, _ := bucket.TryTake(now.Add(time.Duration(i) * 100)); ok {
			taken++
		}
	}
	sinkTaken.Add(taken)
}
