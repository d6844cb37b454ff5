package engine

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// Refused results are aggregated: whoever holds an executor token can send results for
// tickets that do not exist as fast as the API takes them, and a record each would fill the
// audit trail and push every real alert off its first page. The first refusal of each
// (executor app, reason, task) in a window is recorded at once, as it is; the others of the
// window are counted and recorded as one summary when the window closes. So one key writes
// at most two records a window, and axe_refused_results_total counts every refusal.

// Reasons a result is refused, the label of axe_refused_results_total.
const (
	refusalUnknownTicket = "unknown_ticket" // no run has the ticket
	refusalNotWaiting    = "not_waiting"    // the run is running but not waiting here
	refusalEnded         = "ended"          // the run already ended another way
)

// Refusal aggregation bounds.
const (
	// RefusalWindowDefault is how long the refusals of one key are folded into one summary.
	RefusalWindowDefault = time.Minute
	// refusalKeysMax bounds the keys a window holds; refusals past it share one key per
	// reason (app "*", no task), so a caller varying the app it names (a token bound to no
	// app) cannot grow the map or the records past it.
	refusalKeysMax = 256
)

// refusalKey is what one window folds: the executor app, the reason and the run's task (0
// for an unknown ticket, whatever task the result names: the caller chooses that name).
type refusalKey struct {
	app, reason string
	taskID      int64
}

// refusalWindow is what a key's window has seen after its first refusal.
type refusalWindow struct {
	start int64 // ms: the first refusal, recorded at once
	more  int   // refusals since, not yet recorded
	last  model.Action
	why   string
}

// refusals holds the open windows. The zero value is ready.
type refusals struct {
	base
	// submit is the core's: it records the refusals' actions (core_submit.go).
	submit func(ctx context.Context, g *persist.Group, mode submitMode) error
	mu     sync.Mutex
	open   map[refusalKey]*refusalWindow
}

// note counts one refusal and reports whether it is the first of its window, to be
// recorded at once; the others wait for flush.
func (r *refusals) note(k refusalKey, act model.Action, why string) (first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		r.open = map[refusalKey]*refusalWindow{}
	}
	w := r.open[k]
	if w == nil && len(r.open) >= refusalKeysMax {
		k = refusalKey{app: "*", reason: k.reason}
		act.TaskID, act.TaskName = 0, ""
		w = r.open[k]
	}
	if w == nil {
		r.open[k] = &refusalWindow{start: act.At}
		return true
	}
	w.more++
	w.last, w.why = act, why
	return false
}

// due takes out the windows opened at or before cutoff (every one when cutoff < 0), and
// returns the summaries of those that counted refusals after their first.
func (r *refusals) due(cutoff int64, now int64) []model.Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []model.Action
	for k, w := range r.open {
		if cutoff >= 0 && w.start > cutoff {
			continue
		}
		delete(r.open, k)
		if w.more == 0 {
			continue
		}
		from := "executor app " + fmt.Sprintf("%q", k.app)
		if k.app == "" {
			from = "executors"
		}
		a := w.last
		a.At = now
		a.Ticket = ""
		if a.TaskID == 0 {
			a.TaskName = "" // the summary of unknown tickets names no task of theirs
		}
		a.Detail = fmt.Sprintf("%d more results from %s refused (%s) in %s after the one recorded; the last: %s",
			w.more, from, k.reason, time.Duration(now-w.start)*time.Millisecond, w.last.Detail)
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Detail < out[j].Detail })
	return out
}

// recordRefusedResult counts a result that was not accepted and, when it is the first of
// its key's window, leaves an action record for it, on the run's task when it is known: an
// executor reporting into the void is worth seeing, and a flood of them is one summary.
func (r *refusals) recordRefusedResult(ctx context.Context, run model.Run, rep Report, reason, why string) {
	r.m.refusedResults(reason).Inc()
	act := model.Action{TaskID: run.TaskID, TaskName: run.TaskName, Ticket: rep.Ticket, Action: ActRefusedResult,
		Actor: "executor:" + rep.Address, At: r.nowMS(), Detail: fmt.Sprintf("%s result from %s refused: %s", rep.Status, rep.Address, why)}
	if !r.note(refusalKey{app: rep.App, reason: reason, taskID: run.TaskID}, act, why) {
		return
	}
	if err := r.submit(ctx, &persist.Group{Actions: []model.Action{act}}, submitWait); err != nil {
		r.log.Warn("cannot record refused result", "ticket", rep.Ticket, "error", err)
	}
}

// flushRefusals records the summaries of the windows older than RefusalWindow; all closes
// every window (at stop).
func (r *refusals) flushRefusals(ctx context.Context, all bool) {
	now := r.nowMS()
	cutoff := now - r.cfg.RefusalWindow.Milliseconds()
	if all {
		cutoff = -1
	}
	acts := r.due(cutoff, now)
	if len(acts) == 0 {
		return
	}
	if err := r.submit(ctx, &persist.Group{Actions: acts}, submitWait); err != nil {
		r.log.Warn("cannot record refused results", "summaries", len(acts), "error", err)
	}
}
