package wheel

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Sentinel errors.
var (
	// ErrInvalidConfig is returned by New when a Config field is out of range.
	ErrInvalidConfig = errors.New("invalid wheel config")
)

const (
	// TickDefault is the default tick, well below a second.
	TickDefault = 10 * time.Millisecond
	// SlotsDefault is the default number of buckets per level: with 10 ms ticks level 0
	// spans 5.12 s and level 1 about 43 minutes, so the 5-minute window fits in two levels.
	SlotsDefault = 512
)

// Clock tells the time. Tests inject a fake one and call AdvanceTo themselves.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Config configures a Sharded wheel.
type Config[V any] struct {
	// Partitions is the number of independent wheels. Defaults to runtime.GOMAXPROCS(0):
	// one partition per core keeps producers adding timers and the tick driver advancing
	// them from contending on the same mutex, while more partitions than cores would only
	// add per-tick work.
	Partitions int
	// Tick is the wheel resolution and the driver's period; a whole number of
	// milliseconds. Defaults to TickDefault.
	Tick time.Duration
	// Slots is the number of buckets per level, a power of two. Defaults to SlotsDefault.
	Slots int
	// Clock supplies the time the driver advances to and the wheels' start time.
	// Defaults to the real clock.
	Clock Clock
	// NewWheel builds one partition's wheel from the tick in milliseconds and the start
	// time in Unix milliseconds. Defaults to NewHierarchical with Slots.
	NewWheel func(tickMS int64, start int64) Wheel[V]
}

// WithDefaults returns c with every zero field set to its default.
func (c Config[V]) WithDefaults() Config[V] {
	if c.Partitions == 0 {
		c.Partitions = runtime.GOMAXPROCS(0)
	}
	if c.Tick == 0 {
		c.Tick = TickDefault
	}
	if c.Slots == 0 {
		c.Slots = SlotsDefault
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.NewWheel == nil {
		slots := c.Slots
		c.NewWheel = func(tickMS, start int64) Wheel[V] { return NewHierarchical[V](tickMS, slots, start) }
	}
	return c
}

func (c Config[V]) validate() error {
	if c.Partitions < 1 {
		return fmt.Errorf("%w: partitions must be at least 1, got %d", ErrInvalidConfig, c.Partitions)
	}
	if c.Tick < time.Millisecond || c.Tick%time.Millisecond != 0 {
		return fmt.Errorf("%w: tick must be a positive whole number of milliseconds, got %s", ErrInvalidConfig, c.Tick)
	}
	if c.Slots < 2 || c.Slots&(c.Slots-1) != 0 {
		return fmt.Errorf("%w: slots must be a power of two >= 2, got %d", ErrInvalidConfig, c.Slots)
	}
	return nil
}

// Sharded is the timer service the engine uses, split into Config.Partitions partitions:
// independent wheels, each behind its own mutex and paired with its own ReadyQueue. An
// entry's partition is Key modulo Partitions(), so Add, Cancel and the advance of one
// partition never wait on another. The partitions only spread lock contention over the
// cores; they have nothing to do with the ownership shards that split tasks among nodes
// (model.ShardCount).
type Sharded[V any] struct {
	cfg        Config[V]
	partitions []*partition[V]
}

type partition[V any] struct {
	mu    sync.Mutex
	wheel Wheel[V]
	ready *ReadyQueue[V]
	fire  func(*Entry[V]) // bound once so AdvanceTo does not allocate a closure per tick
	fired int             // entries pushed by the current advance; guarded by mu
}

// New returns a stopped Sharded wheel whose clocks start at cfg.Clock.Now().
func New[V any](cfg Config[V]) (*Sharded[V], error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cannot create partitioned wheel: %w", err)
	}
	tickMS := cfg.Tick.Milliseconds()
	start := cfg.Clock.Now().UnixMilli()
	s := &Sharded[V]{cfg: cfg, partitions: make([]*partition[V], cfg.Partitions)}
	for i := range s.partitions {
		sh := &partition[V]{wheel: cfg.NewWheel(tickMS, start), ready: NewReadyQueue[V]()}
		sh.fire = func(e *Entry[V]) {
			sh.ready.push(e)
			sh.fired++
		}
		s.partitions[i] = sh
	}
	return s, nil
}

// Drive advances every partition to Clock.Now() each Tick until ctx ends, then returns.
// Pending entries stay in the wheels and queued ones in the ready queues; nothing fires
// until the next Drive or AdvanceTo. The wheel has no lifecycle of its own: its owner runs
// Drive on a goroutine of its own lifecycle and ends it with ctx (the engine runs it as one
// of its loops, so its Start and Stop are the wheel's too).
func (s *Sharded[V]) Drive(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.Tick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			s.AdvanceTo(s.cfg.Clock.Now())
		}
	}
}

func (s *Sharded[V]) partitionOf(e *Entry[V]) *partition[V] {
	return s.partitions[e.Key%uint64(len(s.partitions))]
}

// Add schedules e in the partition chosen by e.Key. An entry already due reaches the
// partition's ready queue at the next advance. e must not be pending or queued.
func (s *Sharded[V]) Add(e *Entry[V]) {
	sh := s.partitionOf(e)
	sh.mu.Lock()
	sh.wheel.Add(e)
	sh.mu.Unlock()
}

// Cancel removes e from its wheel and reports whether it was pending there; it
// returns false once e has moved to the ready queue.
func (s *Sharded[V]) Cancel(e *Entry[V]) bool {
	sh := s.partitionOf(e)
	sh.mu.Lock()
	ok := sh.wheel.Cancel(e)
	sh.mu.Unlock()
	return ok
}

// Len is the number of entries pending in the wheels, not counting ready queues.
func (s *Sharded[V]) Len() int {
	n := 0
	for _, sh := range s.partitions {
		sh.mu.Lock()
		n += sh.wheel.Len()
		sh.mu.Unlock()
	}
	return n
}

// PartitionLen is the number of entries pending in partition i's wheel.
func (s *Sharded[V]) PartitionLen(i int) int {
	sh := s.partitions[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.wheel.Len()
}

// Partitions is the number of partitions.
func (s *Sharded[V]) Partitions() int { return len(s.partitions) }

// Ready returns the ready queue of partition i, 0 <= i < Partitions().
func (s *Sharded[V]) Ready(i int) *ReadyQueue[V] { return s.partitions[i].ready }

// AdvanceTo moves every entry with When <= now into its partition's ready queue, in
// When order, and signals each queue that received entries. Partitions are advanced one
// after another, each under its own lock only.
func (s *Sharded[V]) AdvanceTo(now time.Time) {
	ms := now.UnixMilli()
	for _, sh := range s.partitions {
		sh.mu.Lock()
		sh.fired = 0
		sh.wheel.Advance(ms, sh.fire)
		fired := sh.fired
		sh.mu.Unlock()
		if fired > 0 {
			sh.ready.notify()
		}
	}
}
