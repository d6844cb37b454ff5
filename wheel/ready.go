package wheel

import (
	"sync/atomic"
	"unsafe"
)

// ReadyQueue holds one partition's due entries until the dispatcher takes them:
// priority 0 first, and within a priority in the order entries arrived, which
// is fire-time order because the wheel fires in When order. Each priority level is an
// intrusive multi-producer single-consumer queue linked through Entry.next, so a push
// is one atomic swap and one store, with no lock and no allocation.
//
// Push may be called from any goroutine; Pop only from one consumer at a time.
// Create it with NewReadyQueue.
type ReadyQueue[V any] struct {
	levels [MaxPriority + 1]mpscQueue[V]
	n      atomic.Int64
	// byLevel counts each level's entries for the depth-by-priority metric; like n it may
	// over-count briefly while a push is in flight.
	byLevel [MaxPriority + 1]atomic.Int64
	signal  chan struct{}
}

// NewReadyQueue returns an empty ReadyQueue.
func NewReadyQueue[V any]() *ReadyQueue[V] {
	q := &ReadyQueue[V]{signal: make(chan struct{}, 1)}
	for i := range q.levels {
		q.levels[i].init()
	}
	return q
}

// Push appends e at its priority level and wakes the consumer.
func (q *ReadyQueue[V]) Push(e *Entry[V]) {
	q.push(e)
	q.notify()
}

// push appends without waking anyone; Sharded pushes a whole tick's worth and
// notifies once, which saves a channel operation per entry.
func (q *ReadyQueue[V]) push(e *Entry[V]) {
	q.n.Add(1) // before linking, so Len may over-count briefly but never goes negative
	p := min(e.Priority, MaxPriority)
	q.byLevel[p].Add(1)
	q.levels[p].push(e)
}

// notify makes a receive on Signal succeed, without blocking when one is already pending.
func (q *ReadyQueue[V]) notify() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// Pop removes and returns the oldest entry of the highest non-empty priority, or nil
// when the queue is empty. An entry whose Push has not yet returned may be missed;
// that Push signals when it completes.
func (q *ReadyQueue[V]) Pop() *Entry[V] {
	for i := range q.levels {
		if e := q.levels[i].pop(); e != nil {
			q.n.Add(-1)
			q.byLevel[i].Add(-1)
			return e
		}
	}
	return nil
}

// LevelLen is the number of queued entries of priority p (clamped to 0..MaxPriority).
func (q *ReadyQueue[V]) LevelLen(p int) int {
	return int(max(q.byLevel[min(max(p, 0), MaxPriority)].Load(), 0))
}

// Len is the number of queued entries; it is approximate while pushes are in flight.
func (q *ReadyQueue[V]) Len() int { return int(max(q.n.Load(), 0)) }

// Signal receives after a Push when the consumer may be waiting. The consumer pops
// until Pop returns nil and then waits on Signal; a spurious wake-up is possible, a
// lost one is not, because every push signals after it has linked its entry.
func (q *ReadyQueue[V]) Signal() <-chan struct{} { return q.signal }

// mpscQueue is an intrusive multi-producer single-consumer queue with a stub node.
// Producers swap themselves into head and then link the previous head to themselves;
// between those two steps the chain is briefly broken, which the consumer sees as empty.
type mpscQueue[V any] struct {
	head atomic.Pointer[Entry[V]] // most recently pushed; shared by producers
	_    [56]byte                 // keeps producers' head and the consumer's tail on different cache lines
	tail *Entry[V]                // oldest not yet popped; consumer only
	stub Entry[V]
}

func (m *mpscQueue[V]) init() {
	m.head.Store(&m.stub)
	m.tail = &m.stub
}

func (m *mpscQueue[V]) push(e *Entry[V]) {
	storeNext(e, nil)
	prev := m.head.Swap(e)
	storeNext(prev, e)
}

func (m *mpscQueue[V]) pop() *Entry[V] {
	tail := m.tail
	next := loadNext(tail)
	if tail == &m.stub {
		if next == nil {
			return nil
		}
		m.tail = next
		tail = next
		next = loadNext(next)
	}
	if next != nil {
		m.tail = next
		return tail
	}
	if tail != m.head.Load() {
		return nil // a producer has swapped head but not linked yet
	}
	// tail is the only entry: put the stub behind it so it can be taken out.
	m.push(&m.stub)
	if next = loadNext(tail); next != nil {
		m.tail = next
		return tail
	}
	return nil
}

// loadNext and storeNext access Entry.next atomically. The conversion is the
// documented unsafe.Pointer pattern: a *Entry field has the layout of an
// unsafe.Pointer.
func loadNext[V any](e *Entry[V]) *Entry[V] {
	return (*Entry[V])(atomic.LoadPointer((*unsafe.Pointer)(unsafe.Pointer(&e.next))))
}

func storeNext[V any](e, next *Entry[V]) {
	atomic.StorePointer((*unsafe.Pointer)(unsafe.Pointer(&e.next)), unsafe.Pointer(next))
}
