package engine

import (
	"fmt"
	"strconv"
	"time"

	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
)

// Overlap policies and the catch-up window as pure decisions (design.md, "Overlap and
// catch-up"). decideNext picks the cron fire that follows the end of a run; decideCatchup
// what becomes of the fires a task missed while no scheduler held it (downtime) or while it
// was paused. Neither reads a lock, a store or a clock; core_transition_test.go and
// core_overlap_test.go hold their tables.
//
// A fire is missed, due and late by the time it was meant to leave: its nominal time plus
// its jitter (core_jitter.go). The catch-up window is one of nominal times.

// BufferAllBound is the most fires buffer_all holds: at the end of a run, the newest
// BufferAllBound fires due since the last fire that ran are kept (the oldest of them runs
// next) and older ones are skipped and recorded.
const BufferAllBound = 100

// MaxCatchupWindowSec is the largest catch-up window, 366 days.
const MaxCatchupWindowSec = 366 * 86400

// ActorOverlap is the actor of a kill made by the cancel_other overlap policy.
const ActorOverlap = "overlap"

// Action names of the overlap and catch-up decisions.
const (
	// ActOverlap records what the overlap policy did with fires due while a run was in
	// flight.
	ActOverlap = "overlap"
	// ActCatchup records what the catch-up window did with fires missed in downtime or a
	// pause.
	ActCatchup = "catchup"
)

// countLimit bounds how many fires a record counts one by one; more are reported as "more
// than countLimit". The decision itself never depends on it (fireSpan.last searches from
// the end).
const countLimit = 100000

// fireSpan is the fires of one task's schedule.
type fireSpan struct {
	sched     cron.Schedule
	loc       *time.Location
	name      string
	jitterSec int
}

// at is when the fire of nominal time n is meant to leave.
func (f fireSpan) at(n int64) int64 { return n + JitterOffset(f.name, n, f.jitterSec) }

// next is the first fire strictly after `after`, or 0.
func (f fireSpan) next(after int64) int64 { return cronAfter(f.sched, f.loc, after) }

// walked is what a walk over consecutive fires found.
type walked struct {
	count       int
	first, last int64 // nominal times of the first and last fire walked (0: none)
	capped      bool  // stopped at countLimit: count is a lower bound
}

// walk goes over the fires after `after` while in(n) holds, counting up to countLimit.
// It returns what it walked and the first fire it did not (0 when the schedule ends, or
// when it stopped at the limit).
func (f fireSpan) walk(after int64, in func(int64) bool) (walked, int64) {
	var w walked
	n := f.next(after)
	for n != 0 && in(n) {
		if w.count == countLimit {
			w.capped = true
			return w, 0
		}
		if w.count == 0 {
			w.first = n
		}
		w.last = n
		w.count++
		n = f.next(n)
	}
	return w, n
}

// dueAfter is the first fire not yet due at now (meant to leave after now), or 0.
func (f fireSpan) dueAfter(now int64) int64 {
	// A fire of nominal time at or before now - jitter has left by now.
	n := f.next(now - int64(f.jitterSec)*1000 - 1)
	for n != 0 && f.at(n) <= now {
		n = f.next(n)
	}
	return n
}

// last returns the newest k fires n > after that are due at now (f.at(n) <= now), oldest
// first. It searches backwards from now over a span that doubles, so a run that overran a
// dense schedule by days costs no more than k fires' worth of steps per doubling.
func (f fireSpan) last(after, now int64, k int) []int64 {
	ring := make([]int64, 0, k)
	for span := int64(1000); ; span *= 2 {
		lo := max(after, now-span)
		ring = ring[:0]
		start := 0 // ring[start] is the oldest once the ring is full
		for n := f.next(lo); n != 0 && f.at(n) <= now; n = f.next(n) {
			if len(ring) < k {
				ring = append(ring, n)
				continue
			}
			ring[start] = n
			start = (start + 1) % k
		}
		if len(ring) >= k || lo == after || now-span < after {
			out := make([]int64, 0, len(ring))
			out = append(out, ring[start:]...)
			return append(out, ring[:start]...)
		}
	}
}

// nextInput is what the cron fire that follows a run's end is decided from.
type nextInput struct {
	Span      fireSpan
	Overlap   string // Def.OverlapPolicy ("" is buffer_one)
	Misfire   string // Def.MisfirePolicy
	Threshold time.Duration
	// CatchupFrom and CatchupUntil: a catch-up is under way (task.catchupUntil > 0): the
	// fires meant to leave up to CatchupUntil are missed ones, each run once, oldest first;
	// those of nominal time before CatchupFrom are older than the window and skipped.
	CatchupFrom, CatchupUntil int64
	Last                      int64 // nominal time of the cron fire whose run ended
	Now                       int64 // ms
}

// nextPlan is the decision: the next fire and what to record.
type nextPlan struct {
	Next int64  // nominal time of the next fire, 0 when the schedule fires no more
	Note string // appended to the schedule action's "next fire ..." detail
	// Records are the details of ActOverlap and ActCatchup action records, in order.
	Records []planRecord
	Misfire bool // counts in axe_misfires_total
	// CatchupDone: the catch-up is over (or was none); the task's catch-up bounds clear.
	CatchupDone bool
}

type planRecord struct{ action, detail string }

// decideNext decides the cron fire that follows a run whose fire was in.Last, ended at
// in.Now (design.md, "Overlap and catch-up"):
//
//  1. During a catch-up, the next missed fire runs: the oldest fire after Last meant to
//     leave by CatchupUntil, skipping (and recording) those older than the window. When
//     none is left the catch-up is over.
//  2. Otherwise the fires after Last that came due by Now overlapped the run, and the
//     overlap policy decides them: skip goes on to the first fire not yet due; buffer_one
//     and cancel_other run the latest of them now, with its own nominal time; buffer_all
//     runs the oldest of the newest BufferAllBound of them. Every fire passed over is
//     counted in an ActOverlap record. buffer_one keeps the rule of the fires a run
//     overran before overlap policies existed: when its latest fire left more than
//     Threshold ago and misfire_policy is skip, it is skipped too (a misfire).
func decideNext(in nextInput) nextPlan {
	f := in.Span
	p, last, more := catchupNext(in)
	if !more {
		return p
	}
	first := f.next(last)
	if first == 0 || f.at(first) > in.Now {
		p.Next = first
		return p
	}
	policy := in.Overlap
	if policy == "" {
		policy = model.OverlapBufferOne
	}
	switch policy {
	case model.OverlapSkip:
		w, rest := f.walk(last, func(n int64) bool { return f.at(n) <= in.Now })
		if w.capped {
			rest = f.dueAfter(in.Now)
		}
		p.Next = rest
		p.Records = append(p.Records, planRecord{ActOverlap, "skip: " + w.describe(f.loc) + " due while the run was in flight skipped"})
		p.Note = " (overlap: skip)"
	case model.OverlapBufferAll:
		kept := f.last(last, in.Now, BufferAllBound)
		p.Next = kept[0]
		detail := fmt.Sprintf("buffer_all: %d fire(s) due while runs were in flight are buffered (bound %d); the oldest, %s, runs now",
			len(kept), BufferAllBound, stamp(kept[0], f.loc))
		if kept[0] != first {
			w, _ := f.walk(last, func(n int64) bool { return n < kept[0] })
			detail += "; " + w.describe(f.loc) + " beyond the bound skipped"
		}
		p.Records = append(p.Records, planRecord{ActOverlap, detail})
		p.Note = " (overlap: buffer_all)"
	default: // buffer_one, cancel_other
		latest := f.last(last, in.Now, 1)[0]
		late := in.Now-f.at(latest) > in.Threshold.Milliseconds()
		var skipped walked
		if latest != first {
			skipped, _ = f.walk(last, func(n int64) bool { return n < latest })
		}
		if policy == model.OverlapBufferOne && late && in.Misfire == model.MisfireSkip {
			p.Next = f.dueAfter(in.Now)
			p.Misfire = true
			all := skipped
			all.count++
			all.last = latest
			if all.first == 0 {
				all.first = latest
			}
			p.Records = append(p.Records, planRecord{ActOverlap, "buffer_one: " + all.describe(f.loc) +
				" due while the run was in flight skipped: the latest left more than the misfire threshold ago and misfire_policy is skip"})
			p.Note = " (overlap: buffer_one, a misfire under misfire_policy skip)" // the count is the overlap record's
			break
		}
		p.Next = latest
		p.Misfire = policy == model.OverlapBufferOne && late
		detail := policy + ": the latest fire due while the run was in flight, " + stamp(latest, f.loc) + ", runs now"
		if skipped.count > 0 {
			detail += "; " + skipped.describe(f.loc) + " before it skipped"
		}
		p.Records = append(p.Records, planRecord{ActOverlap, detail})
		p.Note = " (overlap: " + policy + ")"
	}
	return p
}

// catchupNext is the part of decideNext and decideParallel that a catch-up under way
// decides: the next missed fire after in.Last meant to leave by CatchupUntil, skipping (and
// recording) those older than the window. When it has decided the next fire it reports
// more false; otherwise the catch-up is over (or was none), p.CatchupDone is set and the
// caller decides the fire after last.
func catchupNext(in nextInput) (p nextPlan, last int64, more bool) {
	f := in.Span
	last = in.Last
	if in.CatchupUntil > 0 {
		n := f.next(last)
		if n != 0 && n < in.CatchupFrom {
			w, rest := f.walk(last, func(n int64) bool { return n < in.CatchupFrom })
			if w.capped {
				rest = f.next(in.CatchupFrom - 1)
			}
			p.Records = append(p.Records, planRecord{ActCatchup, "catch-up: " + w.describe(f.loc) + " older than the window skipped"})
			n = rest
		}
		if n != 0 && f.at(n) <= in.CatchupUntil {
			p.Next = n
			p.Note = " (catch-up: a missed fire, run now)"
			return p, last, false
		}
		p.CatchupDone = true
		if n == 0 {
			return p, last, false
		}
		last = n - 1 // every fire before n was run or skipped by the catch-up
	}
	p.CatchupDone = true
	return p, last, true
}

// decideParallel decides the cron fire that follows fire in.Last of an allow_all task, made
// at in.Now: under allow_all a fire does not wait for the runs in flight, so the next fire
// is decided when this one leaves, not when its run ends. During a catch-up it is the next
// missed fire, as decideNext decides it (each missed fire in the window then leaves at once,
// oldest first, and runs beside the others). Otherwise it is simply the schedule's next
// fire, even one already due: a fire the scheduler itself was late for (a busy process,
// seconds) still runs, with its own time, because under allow_all no run ever makes a
// fire wait. Fires missed while no scheduler held the task are decided when it is taken up
// again (decideCatchup, misfire), never here.
func decideParallel(in nextInput) nextPlan {
	p, last, more := catchupNext(in)
	if more {
		p.Next = in.Span.next(last)
	}
	return p
}

// catchupInput is what becomes of a task's missed fires is decided from, when a scheduler
// takes it up after downtime or a resume.
type catchupInput struct {
	Span      fireSpan
	WindowSec int
	Due       int64 // the first missed fire: the runtime's next_trigger_time
	Now       int64
}

// catchupPlan is the decision: the fire to arm, and the catch-up's bounds while fires are
// left to catch up (0 when none).
type catchupPlan struct {
	Next                      int64
	CatchupFrom, CatchupUntil int64
	Detail                    string // the ActCatchup record
}

// decideCatchup decides the fires missed since Due at Now under a catch-up window: those
// of nominal time within WindowSec before Now run one after another, oldest first, each
// with its own time (the first is armed now, each next one at the end of the run before,
// decideNext); older ones are skipped and counted. Only the next fire is ever computed, so
// a window of a day on an every-second schedule holds no more in memory than one of a
// minute.
func decideCatchup(in catchupInput) catchupPlan {
	f := in.Span
	from := in.Now - int64(in.WindowSec)*1000
	var p catchupPlan
	n := in.Due
	detail := "catch-up window " + strconv.Itoa(in.WindowSec) + " s"
	if n < from {
		w, rest := f.walk(n-1, func(n int64) bool { return n < from })
		if w.capped {
			rest = f.next(from - 1)
		}
		detail += ": " + w.describe(f.loc) + " older than the window skipped"
		n = rest
	}
	p.Next = n
	if n == 0 || f.at(n) > in.Now {
		if p.Next == in.Due {
			detail += ": no fire missed"
		}
		p.Detail = detail
		return p
	}
	p.CatchupFrom, p.CatchupUntil = from, in.Now
	w, _ := f.walk(n-1, func(n int64) bool { return f.at(n) <= in.Now })
	sep := ": "
	if n != in.Due {
		sep = "; "
	}
	p.Detail = detail + sep + w.describe(f.loc) + " missed within it run one after another, oldest first, each with its own time"
	return p
}

// describe is "N fire(s) (FIRST to LAST)".
func (w walked) describe(loc *time.Location) string {
	s := w.countText() + " fire(s)"
	switch {
	case w.count == 0:
	case w.count == 1 && !w.capped:
		s += " (" + stamp(w.first, loc) + ")"
	case w.capped:
		s += " (from " + stamp(w.first, loc) + ")"
	default:
		s += " (" + stamp(w.first, loc) + " to " + stamp(w.last, loc) + ")"
	}
	return s
}

func (w walked) countText() string {
	if w.capped {
		return "more than " + strconv.Itoa(countLimit)
	}
	return strconv.Itoa(w.count)
}

func stamp(ms int64, loc *time.Location) string {
	return time.UnixMilli(ms).In(loc).Format(time.RFC3339)
}
