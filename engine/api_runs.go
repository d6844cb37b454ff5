package engine

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// This file holds the console's listings across tasks and through a task's whole history:
// runs of every task, pages of a task's runs and timeline, bounded counts, the nodes, and
// the per-minute statistics kept in the store. None of them changes a task.

// ErrNoBrowser is returned when the store cannot serve the console's listings.
var ErrNoBrowser = errors.New("the store cannot list runs across tasks")

// isFailure reports the results that count as failures in the charts and the "failed
// within" filter: a run that failed, timed out or was lost (a kill is an operator's act).
func isFailure(result string) bool {
	return result == model.ResultFailed || result == model.ResultTimeout || result == model.ResultLost
}

func (e *base) browser() (persist.Browser, error) {
	b, ok := e.store.(persist.Browser)
	if !ok {
		return nil, ErrNoBrowser
	}
	return b, nil
}

// CountTasks counts the tasks f matches by their durable state, up to bound+1 (see
// persist.Browser.CountMatching).
func (e *API) CountTasks(ctx context.Context, f persist.TaskFilter, bound int) (int64, error) {
	b, err := e.browser()
	if err != nil {
		return 0, err
	}
	return b.CountMatching(ctx, f, bound)
}

// OpenBreakerIDs returns the ids of the tasks whose circuit breaker is open, ascending.
func (e *API) OpenBreakerIDs() []int64 {
	e.brk.mu.Lock()
	ids := make([]int64, 0, len(e.brk.m))
	for id, b := range e.brk.m {
		if b != nil && b.open {
			ids = append(ids, id)
		}
	}
	e.brk.mu.Unlock()
	slices.Sort(ids)
	return ids
}

// RunsPage returns a page of runs across tasks, or of the task named by name when it is
// not "" (f.TaskID is then set from it).
func (e *API) RunsPage(ctx context.Context, name string, f persist.RunFilter) (persist.RunPage, error) {
	b, err := e.browser()
	if err != nil {
		return persist.RunPage{}, err
	}
	if name != "" {
		if f.TaskID, err = e.lookup(ctx, name); err != nil {
			return persist.RunPage{}, err
		}
	}
	page, err := b.ListRunsPage(ctx, f)
	for i := range page.Runs {
		e.runs.showHolder(&page.Runs[i])
	}
	return page, err
}

// CountRuns counts what RunsPage would list, up to bound+1 (persist.Browser.CountRuns).
func (e *API) CountRuns(ctx context.Context, name string, f persist.RunFilter, bound int) (int64, error) {
	b, err := e.browser()
	if err != nil {
		return 0, err
	}
	if name != "" {
		if f.TaskID, err = e.lookup(ctx, name); err != nil {
			return 0, err
		}
	}
	return b.CountRuns(ctx, f, bound)
}

// TimelinePage is one page of a task's timeline.
type TimelinePage struct {
	Actions []model.Action
	// Before, when not 0, is the cursor of the next page: every event older than the
	// page's is before it.
	Before int64
}

// derivedKinds are the events persist.Timeline derives from run rows.
var derivedKinds = []string{ActDispatch, ActResult}

// ActionsPage returns up to limit events of the task's timeline (Actions) that happened
// before before (0: from the newest), of the kinds in kinds (none: all). A page ends on a
// millisecond boundary, so the next page, of the events before Before, repeats and skips
// nothing even where several events share a millisecond.
func (e *API) ActionsPage(ctx context.Context, name string, before int64, kinds []string, limit int) (TimelinePage, error) {
	b, err := e.browser()
	if err != nil {
		return TimelinePage{}, err
	}
	id, err := e.lookup(ctx, name)
	if err != nil {
		return TimelinePage{}, err
	}
	// One more than the page, to know whether another follows.
	acts, err := b.ListActionsPage(ctx, persist.ActionFilter{TaskID: id, BeforeAt: before, Actions: kinds, Limit: limit + 1})
	if err != nil {
		return TimelinePage{}, err
	}
	var runs []model.Run
	if len(kinds) == 0 || slices.ContainsFunc(kinds, func(k string) bool { return slices.Contains(derivedKinds, k) }) {
		// A run's events come at or after its scheduled time: the runs scheduled before
		// the cursor hold every derived event before it. Twice the page covers runs that
		// ended after newer runs were scheduled.
		page, err := b.ListRunsPage(ctx, persist.RunFilter{TaskID: id, To: before, Limit: 2*limit + 1})
		if err != nil {
			return TimelinePage{}, err
		}
		runs = page.Runs
	}
	all := persist.Timeline(acts, runs, 0)
	out := all[:0]
	for _, a := range all {
		if (before == 0 || a.At < before) && (len(kinds) == 0 || slices.Contains(kinds, a.Action)) {
			out = append(out, a)
		}
	}
	if len(out) <= limit {
		return TimelinePage{Actions: out}, nil
	}
	// More follow. End the page before the millisecond its last event shares with the
	// next one, unless that millisecond is all of the page.
	cut := out[limit-1].At
	n := limit
	for n > 0 && out[n-1].At == cut {
		n--
	}
	if n == 0 {
		for n < len(out) && out[n].At == cut {
			n++
		}
		return TimelinePage{Actions: out[:n], Before: cut}, nil
	}
	return TimelinePage{Actions: out[:n], Before: cut + 1}, nil
}

// MinuteTotals are the engine's running totals with the fires' lateness, for the minute
// recorder.
type MinuteTotals struct {
	Counts
	LateSumMS int64
	LateCount int64
}

// lateSum, lateCount name the lateness histogram's totals in the metrics text.
var (
	lateSum   = []byte("axe_fire_lateness_seconds_sum ")
	lateCount = []byte("axe_fire_lateness_seconds_count ")
)

// MinuteTotals reads Totals and the lateness histogram's sum and count. The histogram
// keeps them privately; its exposition text is read, once per sample, off the firing path.
func (e *API) MinuteTotals() MinuteTotals {
	t := MinuteTotals{Counts: e.Totals()}
	var buf bytes.Buffer
	e.m.set.WritePrometheus(&buf)
	for _, line := range bytes.Split(buf.Bytes(), []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, lateSum); ok {
			if f, err := strconv.ParseFloat(string(v), 64); err == nil {
				t.LateSumMS = int64(f * 1000)
			}
		} else if v, ok := bytes.CutPrefix(line, lateCount); ok {
			if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
				t.LateCount = n
			}
		}
	}
	return t
}

// SaveMinutes adds rows to the store's minute statistics and drops the minutes before
// dropBefore.
func (e *API) SaveMinutes(ctx context.Context, rows []persist.MinuteStat, dropBefore int64) error {
	b, err := e.browser()
	if err != nil {
		return err
	}
	return b.AddMinuteStats(ctx, rows, dropBefore)
}

// StoredMinutes returns the store's minute statistics in [from, to), summed over nodes.
func (e *API) StoredMinutes(ctx context.Context, from, to int64) ([]persist.MinuteStat, error) {
	b, err := e.browser()
	if err != nil {
		return nil, err
	}
	return b.MinuteStats(ctx, from, to)
}
