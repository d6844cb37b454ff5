package persist

import (
	"slices"
	"strconv"
	"strings"

	"github.com/axe-sched/axe/model"
)

// The timeline of a task: its action records merged with the events its run rows carry.
//
// A periodic fire writes its run row and no action record (design.md, "Write path"): the
// row's dispatched_at and attempt are the dispatch, and a successful end's ended_at and
// result are that end. Timeline turns them back into the `dispatch` (SCHEDULED or
// RETRYING → RUNNING) and `result` (RUNNING → SUCCESS) events the action records used to
// hold, so the audit shows what it showed when each of them was a row of its own. Rows
// written before, which have those action records too, are not shown twice: a run whose
// ticket has a `dispatch` (or `resend`) record gets no derived dispatch, and one with a
// `result` record no derived result. Every other end (a retry, a failure, a timeout, a
// loss, a kill) keeps its action record, because the state it led to is not in the run row.

// Names and actor of the events Timeline derives; they are the engine's action names.
const (
	timelineDispatch = "dispatch"
	timelineResend   = "resend"
	timelineResult   = "result"
	timelineActor    = "scheduler"
)

// Timeline merges a task's action records (newest first, as ListActions returns them) with
// the events derived from its runs (any order) and returns the newest limit events, newest
// first; limit <= 0 means all. A derived event has ID 0. Among events of the same
// millisecond it keeps the order they happened in: a run's dispatch comes before the
// records of the same ticket (a retry, a kill), its success before the ticket-less records
// of that instant (the next cycle's `schedule`), and an earlier run's events before a later
// run's.
func Timeline(acts []model.Action, runs []model.Run, limit int) []model.Action {
	asc := slices.Clone(acts)
	slices.Reverse(asc)
	const hasDispatch, hasResult = 1, 2
	has := make(map[string]uint8)
	for i := range asc {
		switch asc[i].Action {
		case timelineDispatch, timelineResend:
			has[asc[i].Ticket] |= hasDispatch
		case timelineResult:
			has[asc[i].Ticket] |= hasResult
		}
	}
	ordered := slices.Clone(runs)
	slices.SortStableFunc(ordered, func(a, b model.Run) int {
		if a.ScheduledAt != b.ScheduledAt {
			return cmpInt(a.ScheduledAt, b.ScheduledAt)
		}
		return cmpInt(a.DispatchedAt, b.DispatchedAt)
	})
	type derived struct {
		a        model.Action
		pos, run int // insert before asc[pos]; the run's place in time
		sub      int // 0 dispatch, 1 result
	}
	var evs []derived
	// before returns the index of the first record for which after holds, or len(asc).
	before := func(after func(a *model.Action) bool) int {
		for i := range asc {
			if after(&asc[i]) {
				return i
			}
		}
		return len(asc)
	}
	for k := range ordered {
		r := &ordered[k]
		if r.Kind != model.RunScheduled || r.DispatchedAt <= 0 || r.Result == model.ResultSkipped {
			continue
		}
		bits := has[r.Ticket]
		pd := 0
		if bits&hasDispatch == 0 {
			from := model.StateScheduled
			if r.Attempt > 1 {
				from = model.StateRetrying
			}
			pd = before(func(a *model.Action) bool { return a.At > r.DispatchedAt || a.Ticket == r.Ticket })
			evs = append(evs, derived{a: model.Action{
				TaskID: r.TaskID, TaskName: r.TaskName, Ticket: r.Ticket, Action: timelineDispatch,
				From: from, To: model.StateRunning, Actor: timelineActor, At: r.DispatchedAt,
				Detail: "attempt " + strconv.Itoa(r.Attempt) + waitsOf(r.Detail),
			}, pos: pd, run: k})
		}
		if r.Result == model.ResultSuccess && r.EndedAt > 0 && bits&hasResult == 0 {
			pr := before(func(a *model.Action) bool { return a.At > r.EndedAt || (a.At == r.EndedAt && a.Ticket == "") })
			pr = max(pr, pd)
			detail := model.ResultSuccess
			if r.Error != "" {
				detail += ": " + r.Error
			}
			evs = append(evs, derived{a: model.Action{
				TaskID: r.TaskID, TaskName: r.TaskName, Ticket: r.Ticket, Action: timelineResult,
				From: model.StateRunning, To: model.StateSuccess, Actor: timelineActor, At: r.EndedAt, Detail: detail,
			}, pos: pr, run: k, sub: 1})
		}
	}
	slices.SortStableFunc(evs, func(x, y derived) int {
		switch {
		case x.pos != y.pos:
			return cmpInt(int64(x.pos), int64(y.pos))
		case x.a.At != y.a.At:
			return cmpInt(x.a.At, y.a.At)
		case x.run != y.run:
			return cmpInt(int64(x.run), int64(y.run))
		}
		return x.sub - y.sub
	})
	out := make([]model.Action, 0, len(asc)+len(evs))
	j := 0
	for i := 0; i <= len(asc); i++ {
		for j < len(evs) && evs[j].pos == i {
			out = append(out, evs[j].a)
			j++
		}
		if i < len(asc) {
			out = append(out, asc[i])
		}
	}
	slices.Reverse(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// waitsOf is what a run's detail says of its waits before its dispatch (for a concurrency
// slot, for the rate limit: "waited 1.2s for …"), each after "; ", for its dispatch event.
func waitsOf(detail string) string {
	out := ""
	for part := range strings.SplitSeq(detail, "; ") {
		if strings.HasPrefix(part, "waited ") {
			out += "; " + part
		}
	}
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
