package wheel

// Entry is one timer. It is intrusive: the links a wheel or a ready queue needs live
// inside it, so adding a timer allocates nothing. The caller owns the memory; an Entry
// can be added again once it has fired and been popped from its ready queue, or after
// a successful Cancel.
//
// When and Key must not change, and the Entry must not be copied, while it is pending
// or queued: the wheel files it by When, the sharded layer picks its shard by Key, and
// both hold its address.
type Entry struct {
	// When is the deadline in Unix milliseconds.
	When int64
	// Key chooses the shard (the engine uses the task id).
	Key uint64
	// Value is the caller's payload; the engine stores its task pointer here.
	Value any

	// next links the entry in a wheel bucket and, once it has fired, in a ready
	// queue. The wheel uses it under the shard lock with plain reads and writes; the
	// ready queue, whose producers and consumer share it, only through loadNext and
	// storeNext. (An atomic.Pointer field made the wheel pay for atomic stores:
	// profiled at a third of Add+Cancel.)
	next *Entry
	// prev is the backward link in a wheel bucket, which makes Cancel O(1).
	prev *Entry
	// list is the bucket (or heap marker) holding the entry; nil when not pending.
	list *list

	// Priority orders due entries in the ready queue: 0 is highest, values above
	// MaxPriority are treated as MaxPriority.
	Priority uint8
	// level is the hierarchical wheel level holding the entry (dueLevel for the
	// list of already-due entries).
	level uint8
	// index is the entry's position in a heap wheel.
	index int32
}

// MaxPriority is the lowest priority (highest number) a ready queue distinguishes.
const MaxPriority = 4

// list is an intrusive doubly linked list of entries. owner tells Cancel whether an
// entry belongs to the wheel it is asked of.
type list struct {
	head, tail *Entry
	n          int
	owner      Wheel
}

// pushBack appends e, keeping the list in insertion order (see the cascade invariant).
func (l *list) pushBack(e *Entry) {
	e.list = l
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

// remove unlinks e, which must be in l.
func (l *list) remove(e *Entry) {
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
	e.list = nil
	l.n--
}
