package engine

import (
	"context"
	"fmt"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wire"
)

// groupLeftMax bounds GroupResult.LeftPaused: a group of 20,000 tasks paused one by one
// answers with their count and the first of them, not a body of megabytes.
const groupLeftMax = 100

// GroupResult is what a group's pause or resume did on this node.
type GroupResult struct {
	// Changed counts the tasks paused (a pause) or resumed (a resume).
	Changed int
	// AlreadyPaused counts, for a pause, the tasks that were paused already (by their own
	// pause, another group's, a bulk pause or pause-after-failures); they keep their origin
	// and note.
	AlreadyPaused int
	// LeftPaused names, for a resume, paused tasks of the group that this group's pause did
	// not pause (at most groupLeftMax of them); LeftPausedCount counts them all. A resume
	// leaves them paused, with their notes.
	LeftPaused      []wire.PausedTask
	LeftPausedCount int
}

// pausedByText says who paused a task, for records and answers.
func pausedByText(by string) string {
	switch {
	case by == model.PausedByTask:
		return "its own pause"
	case by == model.PausedByCreate:
		return "its creation paused"
	case by == model.PausedByBulk:
		return "a bulk pause"
	case by == model.PausedByFailures:
		return "pause_after_failures"
	case len(by) > len(model.PausedByGroupPrefix) && by[:len(model.PausedByGroupPrefix)] == model.PausedByGroupPrefix:
		return "group " + by[len(model.PausedByGroupPrefix):] + "'s pause"
	default:
		return "a pause from before pause origins were kept"
	}
}

// PauseGroup pauses every task of group that is not paused yet, as the group's pause: each
// task records its origin (model.PausedByGroup), so that the group's resume resumes it and
// no other. A task paused already keeps its origin and note and is counted in
// AlreadyPaused. note goes into each task's action record and onto the task.
//
// On a node that schedules by shard it does the tasks of the shards it schedules (the API
// asks every node and adds up the answers, docs/scale-out.md); a task of a shard moving
// between nodes is left for a call made again, and the error says how many (model.ErrShardNotHeld),
// with what was done counted in the result.
func (e *API) PauseGroup(ctx context.Context, group, note, actor string) (GroupResult, error) {
	var res GroupResult
	by := model.PausedByGroup(group)
	listed := func(pt *model.Task) bool {
		if pt.Def.Group != group {
			return false
		}
		if pt.Def.Paused {
			res.AlreadyPaused++
			return false
		}
		return true
	}
	locked := func(pt *model.Task) bool { return pt.Def.Group == group && !pt.Def.Paused }
	apply := func(ctx context.Context, t *task) error { return e.pauseLocked(ctx, t, note, by, actor) }
	n, err := e.groupApply(ctx, group, note, listed, locked, apply)
	res.Changed = n
	return res, err
}

// ResumeGroup resumes the tasks of group that the group's pause paused, and those created
// paused (an import leaves its tasks paused until their group is resumed, docs/migrating.md).
// Paused tasks of the group paused by anything else (their own pause, another group's, a bulk
// pause, pause-after-failures, or a pause from before origins were kept) stay paused with
// their notes and are named in LeftPaused. note goes into each resumed task's action record. On a
// node that schedules by shard it works as PauseGroup does.
func (e *API) ResumeGroup(ctx context.Context, group, note, actor string) (GroupResult, error) {
	var res GroupResult
	by := model.PausedByGroup(group)
	mine := func(pt *model.Task) bool {
		return pt.Runtime.PausedBy == by || pt.Runtime.PausedBy == model.PausedByCreate
	}
	ours := func(pt *model.Task) bool {
		return pt.Def.Group == group && pt.Def.Paused && mine(pt)
	}
	listed := func(pt *model.Task) bool {
		if pt.Def.Group != group || !pt.Def.Paused {
			return false
		}
		if mine(pt) {
			return true
		}
		res.LeftPausedCount++
		if len(res.LeftPaused) < groupLeftMax {
			res.LeftPaused = append(res.LeftPaused, wire.PausedTask{Name: pt.Def.Name, PausedBy: pt.Runtime.PausedBy, Note: pt.Runtime.Note})
		}
		return false
	}
	apply := func(ctx context.Context, t *task) error { return e.resumeLocked(ctx, t, note, actor) }
	n, err := e.groupApply(ctx, group, note, listed, ours, apply)
	res.Changed = n
	return res, err
}

// groupApply lists group's tasks a page at a time, keeps those listed picks among the
// shards this node schedules, and applies apply to each under its lock when locked still
// holds (bulkApply). It returns how many it applied to.
func (e *API) groupApply(ctx context.Context, group, note string, listed, locked func(*model.Task) bool,
	apply func(context.Context, *task) error) (n int, err error) {
	if err := e.checkRunning(); err != nil {
		return 0, err
	}
	if group == "" {
		return 0, fieldErr("group", "is required")
	}
	if len(note) > 1024 {
		return 0, fieldErr("note", "at most 1024 characters")
	}
	moving := 0
	match := func(pt *model.Task) bool {
		switch ready, mv := e.own.serves(pt.Def.Name); {
		case ready:
			return listed(pt)
		case mv && locked(pt):
			moving++
		}
		return false
	}
	here := e.ownShards(locked)
	err = e.eachSelected(ctx, wire.Selector{Group: group}, match, func(page []model.Task) error {
		k, err := e.bulkApply(ctx, page, here, apply, true)
		n += k
		return err
	})
	if err == nil && moving > 0 {
		err = fmt.Errorf("%d task(s) of group %q are in shards moving between nodes and were not done; try again: %w",
			moving, group, model.ErrShardNotHeld)
	}
	return n, err
}

// ownShards narrows match, on a node that schedules by shard, to the tasks of the shards
// this node schedules. Without shards it is match.
func (e *API) ownShards(match func(*model.Task) bool) func(*model.Task) bool {
	return func(pt *model.Task) bool {
		ready, _ := e.own.serves(pt.Def.Name)
		return ready && match(pt)
	}
}
