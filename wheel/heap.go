package wheel

import (
	"container/heap"
	"math"
)

// heapWheel is a binary min-heap by (When, insertion): O(log n) Add and Cancel. It is
// the simple alternative to the hierarchical wheel and its benchmark baseline.
type heapWheel struct {
	items  heapItems
	seq    uint64 // insertion counter, breaks ties in When
	now    int64  // high-water mark of Advance, so time never goes backwards
	home   list   // marker: entries in this heap point here, which lets Cancel check ownership
	firing bool
}

// heapItem keeps the sort key next to the pointer so sifting does not chase entries.
type heapItem struct {
	when int64
	seq  uint64
	e    *Entry
}

type heapItems []heapItem

func (h heapItems) Len() int { return len(h) }

func (h heapItems) Less(i, j int) bool {
	if h[i].when != h[j].when {
		return h[i].when < h[j].when
	}
	return h[i].seq < h[j].seq
}

func (h heapItems) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].e.index = int32(i)
	h[j].e.index = int32(j)
}

func (h *heapItems) Push(x any) {
	it := x.(heapItem)
	it.e.index = int32(len(*h))
	*h = append(*h, it)
}

// Pop drops the last item. It returns nil rather than the item because boxing a
// heapItem in an interface would allocate; callers read the entry before popping.
func (h *heapItems) Pop() any {
	old := *h
	old[len(old)-1] = heapItem{}
	*h = old[:len(old)-1]
	return nil
}

// NewHeap returns a Wheel backed by a container/heap min-heap ordered by When, then
// insertion. Its clock starts at the first Advance.
func NewHeap() Wheel {
	h := &heapWheel{now: math.MinInt64}
	h.home.owner = h
	return h
}

func (h *heapWheel) Add(e *Entry) {
	if h.firing {
		panic("wheel: Add called from a fire callback")
	}
	if e.list != nil {
		panic("wheel: Add of an entry that is already pending")
	}
	e.list = &h.home
	// Appending and fixing the last slot is heap.Push without boxing the item.
	h.items = append(h.items, heapItem{when: e.When, seq: h.seq, e: e})
	h.seq++
	e.index = int32(len(h.items) - 1)
	heap.Fix(&h.items, len(h.items)-1)
}

func (h *heapWheel) Cancel(e *Entry) bool {
	if h.firing {
		panic("wheel: Cancel called from a fire callback")
	}
	if e.list != &h.home {
		return false
	}
	heap.Remove(&h.items, int(e.index))
	e.list = nil
	return true
}

func (h *heapWheel) Advance(now int64, fire func(*Entry)) {
	if h.firing {
		panic("wheel: Advance called from a fire callback")
	}
	h.firing = true
	defer func() { h.firing = false }()

	h.now = max(now, h.now)
	for len(h.items) > 0 && h.items[0].when <= h.now {
		e := h.items[0].e
		heap.Pop(&h.items)
		e.list = nil
		fire(e)
	}
}

func (h *heapWheel) Len() int { return len(h.items) }
