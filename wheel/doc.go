// Package wheel owns axe's in-memory timers: the per-partition timing wheels that hold
// every trigger due inside the loading window (docs/design.md, "Window and cold entries") and
// the per-partition ready queues that due entries move into, ordered by priority (0 first)
// then fire time.
//
// It knows nothing about tasks, state machines, storage or dispatch: an Entry carries
// an opaque Value, and the engine decides what firing means. It must not import other
// axe packages, and it never reads the wall clock except through the injected Clock.
//
// # Level layout
//
// Time is cut into ticks of tickMS milliseconds; tick t covers [t*tick, (t+1)*tick).
// With S = 2^b slots, a bucket of level L spans S^L ticks and a block of level L spans
// S^(L+1) ticks, which is one bucket of level L+1. Blocks are aligned to absolute tick
// numbers. Relative to the current tick c, Add files a deadline in tick t at
//
//	L = (index of the highest bit where t and c differ) / b   (L = 0 when t == c)
//
// that is, in the lowest level whose current block contains t. Each level keeps 2S
// buckets, indexed by (t >> (b*L)) mod 2S: S for its current block and S for the next
// one, which only ever receives entries moved down from level L+1. Levels beyond the
// existing ones are created on demand for far deadlines, so a wheel holding the next
// five minutes stays two levels deep while one deadline years away adds overflow
// levels for itself.
//
// # Cascade invariant
//
// Entries move down, never up, and always from the head of a bucket to the tail of
// another. When the current tick enters a new block of level L, the level-(L+1) bucket
// covering that block is moved into level L in full, highest level first. Between
// boundaries, every tick each level also moves a share of the bucket covering its next
// block (what is left divided by the ticks left), so a boundary finds almost nothing
// to move even when a million deadlines share one second. Hence:
//
//   - level-0 bucket c holds exactly the pending entries due in tick c, and an entry
//     above level 0 is never due before the next bucket boundary of its level, which
//     is where Advance stops to move it (so Advance can skip empty stretches);
//   - every bucket list is in insertion order, because a bucket receives entries only
//     from Add (in call order) or from the head of one source list, and Add targets a
//     bucket only once its block is current, after the boundary has emptied the
//     source. Sorting an expired bucket stably by When therefore fires entries in
//     (When, insertion) order.
//
// Entries whose deadline has already passed when they are added wait in a separate
// due list and fire on the next Advance, before everything else.
package wheel
