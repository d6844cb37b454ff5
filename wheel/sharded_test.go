package wheel

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	cfg := Config[any]{}.WithDefaults()
	if cfg.Partitions != runtime.GOMAXPROCS(0) || cfg.Tick != TickDefault || cfg.Slots != SlotsDefault ||
		cfg.Clock == nil || cfg.NewWheel == nil {
		t.Fatalf("WithDefaults left %+v", cfg)
	}
	if _, ok := cfg.NewWheel(10, 0).(*hierarchical[any]); !ok {
		t.Fatal("default NewWheel does not build a hierarchical wheel")
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	for name, cfg := range map[string]Config[any]{
		"negative partitions": {Partitions: -1},
		"sub-ms tick":         {Tick: time.Microsecond},
		"fractional tick":     {Tick: 1500 * time.Microsecond},
		"non-power slots":     {Slots: 100},
		"single slot":         {Slots: 1},
		"negative tick":       {Tick: -time.Millisecond},
		"negative slots":      {Slots: -8},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New error = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestShardedRoutesByKey(t *testing.T) {
	clock := newFakeClock(1_000)
	s, err := New(Config[any]{Partitions: 3, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	e := &Entry[any]{When: 1_050, Key: 7}
	s.Add(e)
	clock.Set(1_050)
	s.AdvanceTo(clock.Now())
	for i := range s.Partitions() {
		got := s.Ready(i).Pop()
		if want := i == 1; (got == e) != want {
			t.Fatalf("partition %d popped %v; key 7 belongs to partition 1 of 3", i, got)
		}
	}
}

func TestShardedCancelAfterFire(t *testing.T) {
	clock := newFakeClock(0)
	s, err := New(Config[any]{Partitions: 1, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	e := &Entry[any]{When: 100}
	s.Add(e)
	s.AdvanceTo(time.UnixMilli(100))
	if s.Cancel(e) {
		t.Fatal("Cancel succeeded for an entry already in the ready queue")
	}
	if s.Len() != 0 || s.Ready(0).Len() != 1 {
		t.Fatalf("Len = %d, ready Len = %d; want 0 and 1", s.Len(), s.Ready(0).Len())
	}
	if got := s.Ready(0).Pop(); got != e {
		t.Fatalf("Pop = %v, want the fired entry", got)
	}
	// A fired and popped entry can be scheduled again.
	e.When = 200
	s.Add(e)
	if s.Len() != 1 || !s.Cancel(e) || s.Len() != 0 {
		t.Fatal("re-added entry was not pending, or Cancel failed")
	}
}

func TestShardedDueEntryWaitsForAdvance(t *testing.T) {
	clock := newFakeClock(5_000)
	s, err := New(Config[any]{Partitions: 1, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	e := &Entry[any]{When: 4_000}
	s.Add(e)
	if s.Ready(0).Pop() != nil {
		t.Fatal("a due entry reached the ready queue before any advance")
	}
	s.AdvanceTo(clock.Now())
	if got := s.Ready(0).Pop(); got != e {
		t.Fatalf("after advancing Pop = %v, want the overdue entry", got)
	}
}

func TestShardedUsesConfiguredWheel(t *testing.T) {
	var gotTick, gotStart int64
	s, err := New(Config[any]{
		Partitions: 2,
		Tick:       20 * time.Millisecond,
		Clock:      newFakeClock(7_000),
		NewWheel: func(tickMS, start int64) Wheel[any] {
			gotTick, gotStart = tickMS, start
			return NewHeap[any]()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if gotTick != 20 || gotStart != 7_000 {
		t.Fatalf("NewWheel got tick %d start %d, want 20 and 7000", gotTick, gotStart)
	}
	e := &Entry[any]{When: 7_010, Key: 1}
	s.Add(e)
	s.AdvanceTo(time.UnixMilli(7_010))
	if got := s.Ready(1).Pop(); got != e {
		t.Fatalf("heap-backed partition popped %v, want the entry", got)
	}
}

// Drive ticks until its context ends and returns; a second Drive picks up where the first
// stopped.
func TestShardedDrive(t *testing.T) {
	clock := newFakeClock(10_000)
	s, err := New(Config[any]{Partitions: 1, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); s.Drive(ctx) }()
		// The fake clock already reads past the deadline, so the driver's next tick
		// must move the entry into the ready queue and signal.
		e := &Entry[any]{When: clock.Now().UnixMilli() - 1}
		s.Add(e)
		select {
		case <-s.Ready(0).Signal():
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the driver never advanced the wheel", round)
		}
		if got := s.Ready(0).Pop(); got != e {
			t.Fatalf("round %d: Pop = %v, want the entry", round, got)
		}
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Drive did not return after its context ended", round)
		}
		// Stopped: an entry already due stays pending until something advances the wheel.
		late := &Entry[any]{When: clock.Now().UnixMilli() - 1}
		s.Add(late)
		time.Sleep(3 * s.cfg.Tick)
		if got := s.Ready(0).Pop(); got != nil {
			t.Fatalf("round %d: a stopped wheel fired %v", round, got)
		}
		if !s.Cancel(late) {
			t.Fatalf("round %d: the entry added after Drive returned is not pending", round)
		}
	}
}

func TestShardedDriveCancelled(t *testing.T) {
	s, err := New(Config[any]{Partitions: 1, Clock: newFakeClock(0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() { defer close(done); s.Drive(ctx) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Drive with a cancelled context did not return")
	}
}
