package wheel

import "sync/atomic"

// Entry is one timer. It is intrusive: the links a wheel or a ready queue needs live
// inside it, so adding a timer allocates nothing. The caller owns the memory; an Entry
// can be added again once it has fired and been popped from its ready queue, or after
// a successful Cancel.
//
// V is the caller's payload type. With a pointer for V (the engine uses its task
// pointer) an Entry is 48 bytes, one size class of the allocator and three quarters of
// a cache line.
//
// When and Key must not change, and the Entry must not be copied, while it is pending
// or queued: the wheel files it by When, the partitioned layer picks its partition by Key, and
// both hold its address.
type Entry[V any] struct {
	// When is the deadline in Unix milliseconds.
	When int64
	// Key chooses the partition (the engine uses the task id).
	Key uint64
	// Value is the caller's payload.
	Value V

	// next links the entry in a wheel bucket and, once it has fired, in a ready
	// queue. The wheel uses it under the partition lock with plain reads and writes; the
	// ready queue, whose producers and consumer share it, only through loadNext and
	// storeNext. (An atomic.Pointer field made the wheel pay for atomic stores:
	// profiled at a third of Add+Cancel.)
	next *Entry[V]
	// prev is the backward link in a wheel bucket, which makes Cancel O(1).
	prev *Entry[V]

	// Priority orders due entries in the ready queue: 0 is highest, values above
	// MaxPriority are treated as MaxPriority.
	Priority uint8
	// level is the hierarchical wheel level holding the entry (dueLevel for the
	// list of already-due entries).
	level uint8
	// owner is the id of the wheel the entry is pending in, 0 when it is not pending.
	// Together with level and pos it locates the entry's list without a pointer to it,
	// which would cost the entry another 8 bytes.
	owner uint16
	// pos is the entry's bucket within its level in a hierarchical wheel, or its
	// index in a heap wheel.
	pos int32
}

// MaxPriority is the lowest priority (highest number) a ready queue distinguishes.
const MaxPriority = 4

// wheelIDs hands out wheel ids. They are 16 bits to fit the entry, so they repeat after
// 65,535 wheels have been created in one process; the id only lets Cancel recognise an
// entry pending in another wheel, a misuse, and the partitioned layer always asks the wheel
// that holds the entry.
var wheelIDs atomic.Uint32

// newWheelID returns the next wheel id, never 0 (which means "not pending").
func newWheelID() uint16 {
	for {
		if id := uint16(wheelIDs.Add(1)); id != 0 {
			return id
		}
	}
}

// list is an intrusive doubly linked list of entries.
type list[V any] struct {
	head, tail *Entry[V]
	n          int
}

// pushBack appends e, keeping the list in insertion order (see the cascade invariant).
// The caller sets e's owner, level and pos.
func (l *list[V]) pushBack(e *Entry[V]) {
	e.prev = l.tail
	e.next = nil
	if l.tail == nil {
		l.head = e
	} else {
		l.tail.next = e
	}
	l.tail = e
	l.n++
}

// remove unlinks e, which must be in l, and marks it not pending.
func (l *list[V]) remove(e *Entry[V]) {
	next := e.next
	if e.prev == nil {
		l.head = next
	} else {
		e.prev.next = next
	}
	if next == nil {
		l.tail = e.prev
	} else {
		next.prev = e.prev
	}
	e.prev = nil
	e.next = nil
	e.owner = 0
	l.n--
}
