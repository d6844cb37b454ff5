package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

// Bulk operations (docs/bulk.md).
const (
	BulkPause  = "pause"
	BulkResume = "resume"
	BulkDelete = "delete"
	BulkRun    = "run"

	// bulkPage is how many tasks a bulk operation reads and works through at a time.
	bulkPage = 500
	// bulkWorkers is how many tasks of a page a bulk run starts at once. (Pause, resume and
	// delete submit a whole page's groups and then wait for them: bulkApply.)
	bulkWorkers = 8
	// bulkBusy is the writer queue fill above which a bulk operation waits between tasks:
	// the firing path comes first.
	bulkBusy = 0.25
	// bulkMaxNames bounds Selector.Names.
	bulkMaxNames = 100000
)

// Bulk runs op (BulkPause, BulkResume, BulkDelete or BulkRun) on every task sel picks and
// returns how many it affected; with dryRun it changes nothing and returns how many it
// would. Each task gets its own action record with sel.Note. The work goes a page at a
// time, and waits while the writer is busy, so a bulk call over 100K tasks never starves
// the firing path.
func (e *API) Bulk(ctx context.Context, op string, sel wire.Selector, dryRun bool, actor string) (n int, err error) {
	if err := e.checkRunning(); err != nil {
		return 0, err
	}
	var (
		// apply is op on a locked task, for a page written at once (bulkApply); listed says
		// whether a task not in memory may be built from its listed row (a version check
		// then guards the write). Run has no apply: it goes a few tasks at a time through do.
		apply  func(ctx context.Context, t *task) error
		listed = true
		do     func(ctx context.Context, name string) error
	)
	switch op {
	case BulkPause:
		apply = func(ctx context.Context, t *task) error {
			return e.pauseLocked(ctx, t, sel.Note, model.PausedByBulk, actor)
		}
	case BulkResume:
		apply = func(ctx context.Context, t *task) error { return e.resumeLocked(ctx, t, sel.Note, actor) }
	case BulkDelete:
		apply = func(ctx context.Context, t *task) error { return e.bulkDeleteLocked(ctx, t, sel.Note, actor) }
		listed = false
	case BulkRun:
		do = func(ctx context.Context, name string) error {
			_, err := e.runNow(ctx, name, nil, sel.Note, actor)
			return err
		}
	default:
		return 0, fieldErr("op", "must be pause, resume, delete or run; got %q", op)
	}
	match, err := compileSelector(&sel)
	if err != nil {
		return 0, err
	}
	moving := 0 // match runs on one goroutine: eachSelected's, page by page
	// A sharded node does its own shards' tasks (the API asks every node, docs/scale-out.md);
	// a task of a shard moving between nodes is counted, and the call told to try again.
	selected := match
	match = func(pt *model.Task) bool {
		if !selected(pt) {
			return false
		}
		ready, mv := e.own.serves(pt.Def.Name)
		if mv {
			moving++
		}
		return ready
	}
	defer func() {
		if err == nil && moving > 0 {
			err = fmt.Errorf("%d selected task(s) are in shards moving between nodes; try again: %w", moving, model.ErrShardNotHeld)
		}
	}()
	err = e.eachSelected(ctx, sel, match, func(page []model.Task) error {
		if dryRun {
			n += len(page)
			return nil
		}
		var k int
		var err error
		if apply != nil {
			k, err = e.bulkApply(ctx, page, match, apply, listed)
		} else {
			k, err = e.bulkPage(ctx, page, do)
		}
		n += k
		return err
	})
	return n, err
}

// compileSelector validates sel and returns the test a stored task must pass.
func compileSelector(sel *wire.Selector) (func(*model.Task) bool, error) {
	if sel.Group == "" && sel.NamePrefix == "" && sel.State == "" && len(sel.Names) == 0 {
		return nil, fieldErr("selector", "is empty: give at least one of group, name_prefix, state, names")
	}
	if len(sel.Names) > bulkMaxNames {
		return nil, fieldErr("names", "at most %d names, got %d", bulkMaxNames, len(sel.Names))
	}
	if len(sel.Note) > 1024 {
		return nil, fieldErr("note", "at most 1024 characters")
	}
	var state model.State
	if sel.State != "" {
		state = model.State(strings.ToUpper(sel.State))
		if !validState(state) {
			return nil, fieldErr("state", "unknown state %q", sel.State)
		}
	}
	return func(t *model.Task) bool {
		return (sel.Group == "" || t.Def.Group == sel.Group) &&
			(sel.NamePrefix == "" || strings.HasPrefix(t.Def.Name, sel.NamePrefix)) &&
			(state == "" || t.Runtime.State == state)
	}, nil
}

func validState(s model.State) bool {
	switch s {
	case model.StateWaiting, model.StateScheduled, model.StateRunning, model.StateSuccess,
		model.StateFailed, model.StateRetrying, model.StatePaused, model.StateKilled:
		return true
	}
	return false
}

// eachSelected hands the selected tasks to fn a page at a time, with the in-memory runtime
// overlaid (the state filter applies to what the API shows).
func (e *API) eachSelected(ctx context.Context, sel wire.Selector, match func(*model.Task) bool, fn func([]model.Task) error) error {
	if len(sel.Names) > 0 {
		page := make([]model.Task, 0, bulkPage)
		seen := make(map[string]bool, len(sel.Names))
		for _, name := range sel.Names {
			if seen[name] {
				continue
			}
			seen[name] = true
			pt, err := e.store.GetTask(ctx, name)
			if errors.Is(err, model.ErrTaskNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			e.overlay(pt)
			if match(pt) {
				page = append(page, *pt)
			}
			if len(page) == bulkPage {
				if err := fn(page); err != nil {
					return err
				}
				page = page[:0]
			}
		}
		if len(page) > 0 {
			return fn(page)
		}
		return nil
	}
	f := persist.TaskFilter{Group: sel.Group, NamePrefix: sel.NamePrefix, Limit: bulkPage}
	for {
		list, err := e.store.ListTasks(ctx, f)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return nil
		}
		f.AfterID = list[len(list)-1].Def.ID
		page := list[:0]
		for i := range list {
			e.overlay(&list[i])
			if match(&list[i]) {
				page = append(page, list[i])
			}
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
		if len(list) < bulkPage {
			return nil
		}
	}
}

// bulkPage runs do on each task of page, bulkWorkers at a time, each start waiting while
// the writer is busy. A task deleted meanwhile is not counted; the first other error stops
// the operation once the tasks in flight finish.
func (e *API) bulkPage(ctx context.Context, page []model.Task, do func(context.Context, string) error) (int, error) {
	var (
		mu       sync.Mutex
		n        int
		firstErr error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, bulkWorkers)
	for i := range page {
		for e.writer.Busy() > bulkBusy {
			select {
			case <-ctx.Done():
				wg.Wait()
				return n, ctx.Err()
			case <-e.cfg.Clock.After(5 * time.Millisecond):
			}
		}
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(name string) {
			defer func() { <-sem; wg.Done() }()
			err := do(ctx, name)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				n++
			case errors.Is(err, model.ErrTaskNotFound):
			case firstErr == nil:
				firstErr = fmt.Errorf("cannot operate on task %q: %w", name, err)
			}
		}(page[i].Def.Name)
	}
	wg.Wait()
	return n, firstErr
}

// bulkSink is how a page of a bulk operation is written at once: commit with wait, given a
// context carrying a sink, submits its group without waiting for it and reports the outcome
// to done (on a completion goroutine, core_submit.go; done must not block).
type bulkSink struct {
	submitted bool // a group was submitted; done will be called exactly once
	done      func(err error)
}

type bulkSinkKey struct{}

func withBulkSink(ctx context.Context, s *bulkSink) context.Context {
	return context.WithValue(ctx, bulkSinkKey{}, s)
}

func bulkSinkOf(ctx context.Context) *bulkSink {
	s, _ := ctx.Value(bulkSinkKey{}).(*bulkSink)
	return s
}

// bulkMaxTries bounds how often a task whose write conflicted is tried again, one at a time.
const bulkMaxTries = 3

// bulkApply runs apply on every task of page and then waits for all their writes. Each
// task is its own writer group (its transition, definition change and action record, with
// the version it was changed from), as a single API call writes it: the writer packs the
// page's groups into a few commits, a conflict fails only its own task's group, and each
// task stays in its own lane. The page is submitted without waiting on each task, and each
// submit first waits while the writer is busy.
//
// A task is checked against the selector again once locked: one that no longer matches (it
// fired or was edited since it was listed) is skipped. With listed, a task not in memory
// is built from its listed row instead of being read again; a stale row carries a stale
// version, so that task's write conflicts and the task is done again from the store
// (bulkRetry). Without listed (delete, whose group has no version to check) such a task is
// read afresh. A task deleted meanwhile is not counted.
func (e *API) bulkApply(ctx context.Context, page []model.Task, match func(*model.Task) bool, apply func(context.Context, *task) error, listed bool) (int, error) {
	type result struct {
		id   int64
		name string
		err  error
	}
	results := make(chan result, len(page)) // one per submitted group: done never blocks
	var (
		n, inflight int
		firstErr    error
		retry       []int64
	)
	for i := range page {
		if err := e.waitNotBusy(ctx); err != nil {
			firstErr = err
			break
		}
		var (
			t   *task
			err error
		)
		if listed {
			t, err = e.acquire(ctx, page[i].Def.ID, acquireOpts{api: true, row: &page[i]})
		} else {
			t, err = e.acquire(ctx, page[i].Def.ID, acquireOpts{api: true})
		}
		if errors.Is(err, model.ErrTaskNotFound) {
			continue
		}
		if err != nil {
			firstErr = fmt.Errorf("cannot operate on task %q: %w", page[i].Def.Name, err)
			break
		}
		if !match(snapshot(t)) {
			e.release(t) // it changed since it was listed (it fired, was edited): skipped
			continue
		}
		id, name := t.id, t.def.Name
		sink := &bulkSink{done: func(err error) { results <- result{id, name, err} }}
		err = apply(withBulkSink(ctx, sink), t)
		e.release(t)
		if err != nil {
			firstErr = fmt.Errorf("cannot operate on task %q: %w", name, err)
			break
		}
		if sink.submitted {
			inflight++
		} else {
			n++ // nothing to write (pausing a paused task): done
		}
	}
	for ; inflight > 0; inflight-- {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			return n, ctx.Err()
		}
		var ce *persist.ConflictError
		switch {
		case r.err == nil:
			n++
		case errors.As(r.err, &ce):
			retry = append(retry, r.id)
		case errors.Is(r.err, model.ErrTaskNotFound):
		case firstErr == nil:
			firstErr = fmt.Errorf("cannot operate on task %q: %w", r.name, r.err)
		}
	}
	if firstErr != nil {
		return n, firstErr
	}
	for _, id := range retry {
		ok, err := e.bulkRetry(ctx, id, match, apply)
		switch {
		case err == nil:
			if ok {
				n++
			}
		case errors.Is(err, model.ErrTaskNotFound):
		default:
			return n, fmt.Errorf("cannot operate on task %d: %w", id, err)
		}
	}
	return n, nil
}

// bulkRetry does a task whose bulk write conflicted again, as a single API call would: read
// afresh, checked against the selector, written and waited for; again while it conflicts.
// ok is false when it no longer matches.
func (e *API) bulkRetry(ctx context.Context, id int64, match func(*model.Task) bool, apply func(context.Context, *task) error) (ok bool, err error) {
	for try := 0; try < bulkMaxTries; try++ {
		if err = e.waitNotBusy(ctx); err != nil {
			return false, err
		}
		t, err := e.acquire(ctx, id, acquireOpts{api: true})
		if err != nil {
			return false, err
		}
		if !match(snapshot(t)) {
			e.release(t)
			return false, nil
		}
		err = apply(ctx, t) // no sink: it waits for its write
		e.release(t)
		var ce *persist.ConflictError
		if !errors.As(err, &ce) {
			return err == nil, err
		}
	}
	return false, err
}

// bulkDeleteLocked is deleteTask's write for bulkApply: the definition, runtime, edges and
// action record in one group, submitted without waiting when ctx carries a sink. Caller
// holds t.mu.
func (e *API) bulkDeleteLocked(ctx context.Context, t *task, note, actor string) error {
	sink := bulkSinkOf(ctx)
	act := e.action(t, "", ActDelete, t.rt.State, "", actor, note, e.nowMS())
	// Marked deleted first, as deleteTask does, so that no fire is decided meanwhile.
	t.deleted = true
	e.loader.disarm(t)
	e.brk.forget(t.id)
	g := &persist.Group{Deletes: []int64{t.id}, Actions: []model.Action{act}}
	if sink == nil { // written and waited for, as deleteTask does
		t.mu.Unlock()
		err := e.write(ctx, g)
		t.mu.Lock()
		return err
	}
	// Queued, and submitted when bulkApply releases the task.
	g.Done = sink.done
	e.commitGroupLocked(t, g, sink.done)
	sink.submitted = true
	return nil
}

// waitNotBusy waits while the writer's queue is over bulkBusy full: the firing path first.
func (e *API) waitNotBusy(ctx context.Context) error {
	for e.writer.Busy() > bulkBusy {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.cfg.Clock.After(5 * time.Millisecond):
		}
	}
	return nil
}
