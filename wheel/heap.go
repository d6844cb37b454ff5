package wheel

import (
	"container/heap"
	"math"
)

// heapWheel is a binary min-heap by (When, insertion): O(log n) Add and Cancel. It is
// the simple alternative to the hierarchical wheel and its benchmark baseline.
type heapWheel[V any] struct {
	id     uint16 // Entry.owner of the entries pending here
	items  heapItems[V]
	seq    uint64 // insertion counter, breaks ties in When
	now    int64  // high-water mark of Advance, so time never goes backwards
	firing bool
}

// heapItem keeps the sort key next to the pointer so sifting does not chase entries.
type heapItem[V any] struct {
	when int64
	seq  uint64
	e    *Entry[V]
}

type heapItems[V any] []heapItem[V]

func (h heapItems[V]) Len() int { return len(h) }

func (h heapItems[V]) Less(i, j int) bool {
	if h[i].when != h[j].when {
		return h[i].when < h[j].when
	}
	return h[i].seq < h[j].seq
}

func (h heapItems[V]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].e.pos = int32(i)
	h[j].e.pos = int32(j)
}

func (h *heapItems[V]) Push(x any) {
	it := x.(heapItem[V])
	it.e.pos = int32(len(*h))
	*h = append(*h, it)
}

// Pop drops the last item. It returns nil rather than the item because boxing a
// heapItem in an interface would allocate; callers read the entry before popping.
func (h *heapItems[V]) Pop() any {
	old := *h
	old[len(old)-1] = heapItem[V]{}
	*h = old[:len(old)-1]
	return nil
}

// NewHeap returns a Wheel backed by a container/heap min-heap ordered by When, then
// insertion. Its clock starts at the first Advance.
func NewHeap[V any]() Wheel[V] {
	return &heapWheel[V]{id: newWheelID(), now: math.MinInt64}
}

func (h *heapWheel[V]) Add(e *Entry[V]) {
	if h.firing {
		panic("wheel: Add called from a fire callback")
	}
	if e.owner != 0 {
		panic("wheel: Add of an entry that is already pending")
	}
	e.owner = h.id
	// Appending and fixing the last slot is heap.Push without boxing the item.
	h.items = append(h.items, heapItem[V]{when: e.When, seq: h.seq, e: e})
	h.seq++
	e.pos = int32(len(h.items) - 1)
	heap.Fix(&h.items, len(h.items)-1)
}

func (h *heapWheel[V]) Cancel(e *Entry[V]) bool {
	if h.firing {
		panic("wheel: Cancel called from a fire callback")
	}
	if e.owner != h.id {
		return false
	}
	heap.Remove(&h.items, int(e.pos))
	e.owner = 0
	return true
}

func (h *heapWheel[V]) Advance(now int64, fire func(*Entry[V])) {
	if h.firing {
		panic("wheel: Advance called from a fire callback")
	}
	h.firing = true
	defer func() { h.firing = false }()

	h.now = max(now, h.now)
	for len(h.items) > 0 && h.items[0].when <= h.now {
		e := h.items[0].e
		heap.Pop(&h.items)
		e.owner = 0
		fire(e)
	}
}

func (h *heapWheel[V]) Len() int { return len(h.items) }
