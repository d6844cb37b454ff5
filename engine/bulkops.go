package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/axe-sched/axe/persist"
)

// Bulk operations (docs/bulk.md).
const (
	BulkPause  = "pause"
	BulkResume = "resume"
	BulkDelete = "delete"
	BulkRun    = "run"

	// bulkPage is how many tasks a bulk operation reads and works through at a time.
	bulkPage = 500
	// bulkWorkers is how many tasks of a page are operated on at once: each one is a group
	// of the batched writer, so a few in flight fill its batches without crowding out the
	// groups of the firing path.
	bulkWorkers = 8
	// bulkBusy is the writer queue fill above which a bulk operation waits between tasks:
	// the firing path comes first.
	bulkBusy = 0.25
	// bulkMaxNames bounds Selector.Names.
	bulkMaxNames = 100000
)

// Selector picks the tasks of a bulk operation. Its criteria combine with AND; at least one
// must be given.
type Selector struct {
	Group      string   `json:"group"`
	NamePrefix string   `json:"name_prefix"`
	State      string   `json:"state"`
	Names      []string `json:"names"`
	// Note goes into each task's action record.
	Note string `json:"note"`
}

// Bulk runs op (BulkPause, BulkResume, BulkDelete or BulkRun) on every task sel picks and
// returns how many it affected; with dryRun it changes nothing and returns how many it
// would. Each task gets its own action record with sel.Note. The work goes a page at a
// time, a few tasks at once, and waits while the writer is busy, so a bulk call over 100K
// tasks never starves the firing path.
func (e *Engine) Bulk(ctx context.Context, op string, sel Selector, dryRun bool, actor string) (int, error) {
	if err := e.checkRunning(); err != nil {
		return 0, err
	}
	var do func(ctx context.Context, name string) error
	switch op {
	case BulkPause:
		do = func(ctx context.Context, name string) error {
			_, err := e.Pause(ctx, name, sel.Note, actor)
			return err
		}
	case BulkResume:
		do = func(ctx context.Context, name string) error {
			_, err := e.Resume(ctx, name, sel.Note, actor)
			return err
		}
	case BulkDelete:
		do = func(ctx context.Context, name string) error { return e.deleteTask(ctx, name, sel.Note, actor) }
	case BulkRun:
		do = func(ctx context.Context, name string) error {
			_, err := e.runNow(ctx, name, nil, sel.Note, actor)
			return err
		}
	default:
		return 0, fieldErr("op", "must be pause, resume, delete or run; got %q", op)
	}
	match, err := sel.compile()
	if err != nil {
		return 0, err
	}
	n := 0
	err = e.eachSelected(ctx, sel, match, func(page []persist.Task) error {
		if dryRun {
			n += len(page)
			return nil
		}
		k, err := e.bulkPage(ctx, page, do)
		n += k
		return err
	})
	return n, err
}

// compile validates sel and returns the test a stored task must pass.
func (sel *Selector) compile() (func(*persist.Task) bool, error) {
	if sel.Group == "" && sel.NamePrefix == "" && sel.State == "" && len(sel.Names) == 0 {
		return nil, fieldErr("selector", "is empty: give at least one of group, name_prefix, state, names")
	}
	if len(sel.Names) > bulkMaxNames {
		return nil, fieldErr("names", "at most %d names, got %d", bulkMaxNames, len(sel.Names))
	}
	if len(sel.Note) > 1024 {
		return nil, fieldErr("note", "at most 1024 characters")
	}
	var state persist.State
	if sel.State != "" {
		state = persist.State(strings.ToUpper(sel.State))
		if !validState(state) {
			return nil, fieldErr("state", "unknown state %q", sel.State)
		}
	}
	return func(t *persist.Task) bool {
		return (sel.Group == "" || t.Def.Group == sel.Group) &&
			(sel.NamePrefix == "" || strings.HasPrefix(t.Def.Name, sel.NamePrefix)) &&
			(state == "" || t.Runtime.State == state)
	}, nil
}

func validState(s persist.State) bool {
	switch s {
	case persist.StateWaiting, persist.StateScheduled, persist.StateRunning, persist.StateSuccess,
		persist.StateFailed, persist.StateRetrying, persist.StatePaused, persist.StateKilled:
		return true
	}
	return false
}

// eachSelected hands the selected tasks to fn a page at a time, with the in-memory runtime
// overlaid (the state filter applies to what the API shows).
func (e *Engine) eachSelected(ctx context.Context, sel Selector, match func(*persist.Task) bool, fn func([]persist.Task) error) error {
	if len(sel.Names) > 0 {
		page := make([]persist.Task, 0, bulkPage)
		seen := make(map[string]bool, len(sel.Names))
		for _, name := range sel.Names {
			if seen[name] {
				continue
			}
			seen[name] = true
			pt, err := e.store.GetTask(ctx, name)
			if errors.Is(err, persist.ErrTaskNotFound) {
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
func (e *Engine) bulkPage(ctx context.Context, page []persist.Task, do func(context.Context, string) error) (int, error) {
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
			case errors.Is(err, persist.ErrTaskNotFound):
			case firstErr == nil:
				firstErr = fmt.Errorf("cannot operate on task %q: %w", name, err)
			}
		}(page[i].Def.Name)
	}
	wg.Wait()
	return n, firstErr
}
