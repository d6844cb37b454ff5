// Package wheel owns axe's in-memory timers: the per-shard timing wheels that hold
// every trigger due inside the loading window (SPEC R3.3, R3.4) and the per-shard ready
// queues that due entries move into, ordered by priority then fire time (R4.1).
//
// It knows nothing about tasks, state machines, storage or dispatch: an Entry carries
// an opaque Value, and the engine decides what firing means. It must not import other
// axe packages, and it never reads the wall clock except through the injected Clock.
//
// # Level layout
//
// Time is cut into ticks of TickMS milliseconds; tick t covers [t*tick, (t+1)*tick).
// A hierarchical wheel has levels of S = 2^b buckets. A bucket of level L spans S^L
// ticks, so level L as a whole spans S^(L+1) ticks, which is exactly one bucket of
// level L+1. Levels are aligned to absolute tick numbers: an entry whose deadline
// falls in tick t is kept, relative to the current tick c, at level
//
//	L = (index of the highest bit where t and c differ) / b   (L = 0 when t == c)
//
// in bucket (t >> (b*L)) & (S-1). Put differently, level L holds entries that share
// c's level-(L+1) bucket but not its level-L bucket. Levels beyond the existing ones
// are created on demand when a far deadline needs them, so a wheel holding only the
// next five minutes stays two levels deep while one holding a deadline years away
// grows an overflow level for it.
//
// # Cascade invariant
//
// When the current tick reaches a multiple of S^L, the level-L bucket that starts
// there is emptied and its entries are placed again relative to the new tick; they
// land in lower levels, never back in level L. Levels are cascaded from the highest
// down. Every deadline then sits in the lowest level that can hold it, so level-0
// bucket c holds exactly the entries due in tick c and nothing due earlier is left
// anywhere. Because a bucket only receives entries (by cascade or by Add) after the
// current tick has entered its parent bucket, and a cascade keeps list order, each
// bucket list stays in insertion order; sorting an expired bucket stably by When
// therefore fires entries in (When, insertion) order.
//
// Entries whose deadline has already passed when they are added wait in a separate
// due list and fire on the next Advance, before everything else.
package wheel
