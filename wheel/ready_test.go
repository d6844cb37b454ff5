package wheel

import (
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestReadyQueueMatchesModel checks priority order and FIFO within a priority against
// one slice per priority, under random interleavings of pushes and pops.
func TestReadyQueueMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		q := NewReadyQueue[any]()
		var model [MaxPriority + 1][]*Entry[any]
		size := 0
		t.Repeat(map[string]func(*rapid.T){
			"push": func(t *rapid.T) {
				e := &Entry[any]{Priority: rapid.Uint8Range(0, MaxPriority+3).Draw(t, "priority")}
				q.Push(e)
				p := min(e.Priority, MaxPriority)
				model[p] = append(model[p], e)
				size++
			},
			"pop": func(t *rapid.T) {
				var want *Entry[any]
				for p := range model {
					if len(model[p]) > 0 {
						want, model[p] = model[p][0], model[p][1:]
						size--
						break
					}
				}
				if got := q.Pop(); got != want {
					t.Fatalf("Pop = %p (priority %v), want %p", got, got, want)
				}
			},
			"": func(t *rapid.T) {
				if q.Len() != size {
					t.Fatalf("Len = %d, want %d", q.Len(), size)
				}
			},
		})
	})
}

func TestReadyQueueSignalsAfterPush(t *testing.T) {
	q := NewReadyQueue[any]()
	select {
	case <-q.Signal():
		t.Fatal("an empty queue signalled")
	default:
	}
	q.Push(&Entry[any]{})
	q.Push(&Entry[any]{})
	select {
	case <-q.Signal():
	default:
		t.Fatal("no signal after Push")
	}
}

// TestReadyQueueConcurrentProducers pushes from several goroutines while one consumer
// pops, waiting on Signal when it runs dry: every entry must come out exactly once, and
// one producer's entries of one priority in the order it pushed them.
func TestReadyQueueConcurrentProducers(t *testing.T) {
	const producers, perProducer = 4, 5000
	type tag struct{ producer, seq int }

	q := NewReadyQueue[any]()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perProducer {
				q.Push(&Entry[any]{Priority: uint8((i * 7) % (MaxPriority + 1)), Value: tag{p, i}})
			}
		}()
	}

	seen := make(map[tag]bool, producers*perProducer)
	var last [producers][MaxPriority + 1]int
	for p := range last {
		for pr := range last[p] {
			last[p][pr] = -1
		}
	}
	timeout := time.After(30 * time.Second)
	for len(seen) < producers*perProducer {
		e := q.Pop()
		if e == nil {
			select {
			case <-q.Signal():
				continue
			case <-timeout:
				t.Fatalf("popped %d of %d entries before timing out", len(seen), producers*perProducer)
			}
		}
		tg := e.Value.(tag)
		if seen[tg] {
			t.Fatalf("entry %v popped twice", tg)
		}
		seen[tg] = true
		if prev := last[tg.producer][e.Priority]; tg.seq <= prev {
			t.Fatalf("producer %d priority %d: popped %d after %d", tg.producer, e.Priority, tg.seq, prev)
		}
		last[tg.producer][e.Priority] = tg.seq
	}
	wg.Wait()
	if e := q.Pop(); e != nil || q.Len() != 0 {
		t.Fatalf("queue not empty after popping everything: %v, Len %d", e, q.Len())
	}
}
