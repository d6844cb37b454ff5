package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wheel"
)

// Cold references.
//
// A window of a million tasks is mostly tasks that will not fire for minutes. Holding each
// as a full in-memory task (definition, runtime, schedule; ~700 B) would take most of a
// gigabyte, so the loader holds a task that is due later than PromoteLead from now as a
// bare wheel entry instead: Key is the task id, When is the due time minus PromoteLead, and
// Value is nil. Nothing else of it is in memory; it costs the 48 B of the entry.
//
// When a cold entry fires, PromoteLead before the task is due, the consumer hands its id
// to the promoter, which reads the tasks from the store in batches (one statement per
// thousand ids) and adopts them exactly as the window loader does: the store row is the
// truth, a task already in memory wins, and a stale copy is caught by the version CAS of
// its first write. A cold entry is therefore never cancelled: an edit, pause or delete of
// the task in the meantime is what the promoter reads. A task touched before its
// promotion (an API call, a run-now) becomes a full in-memory task through acquire and
// are placed as usual, and its cold entry then finds it in memory and is dropped.

// PromoteLeadDefault is how long before its fire a cold task is read in full.
const PromoteLeadDefault = 10 * time.Second

// promoter collects the ids of cold entries that fired and reads them in batches.
type promoter struct {
	mu     sync.Mutex
	ids    []int64
	signal chan struct{}
	queued atomic.Int64 // cold entries armed and not yet promoted or dropped
}

// promoteBatch is the most ids one promotion reads.
const promoteBatch = 4096

func (p *promoter) init() { p.signal = make(chan struct{}, 1) }

func (p *promoter) push(id int64) {
	p.mu.Lock()
	p.ids = append(p.ids, id)
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// take removes and returns up to promoteBatch ids, oldest first. A burst can queue
// hundreds of thousands: the rest is resliced, not copied down.
func (p *promoter) take() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ids) <= promoteBatch {
		out := p.ids
		p.ids = nil
		return out
	}
	out := slices.Clone(p.ids[:promoteBatch])
	p.ids = p.ids[promoteBatch:]
	return out
}

// putBack returns ids a failed promotion did not read to the front of the queue.
func (p *promoter) putBack(ids []int64) {
	p.mu.Lock()
	p.ids = append(ids, p.ids...)
	p.mu.Unlock()
}

// armCold puts a cold entry for the task id due at due.
func (e *Engine) armCold(id, due int64) {
	e.promo.queued.Add(1)
	e.wheel.Add(&wheel.Entry[*task]{When: due - e.cfg.PromoteLead.Milliseconds(), Key: uint64(id)}) // no Value: cold
}

// promoteLoop reads the tasks of fired cold entries until ctx ends. A failed read is
// retried with backoff: the ids stay queued, and the tasks stay durable in the store.
func (e *Engine) promoteLoop(ctx context.Context) {
	defer e.loopsWG.Done()
	backoff := time.Duration(0)
	for {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-e.cfg.Clock.After(backoff):
			}
		}
		ids := e.promo.take()
		if len(ids) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-e.promo.signal:
				continue
			}
		}
		if err := e.promote(ctx, ids); err != nil {
			if ctx.Err() != nil {
				return
			}
			e.promo.putBack(ids)
			backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
			e.log.Error("cannot read tasks due soon; retrying", "tasks", len(ids), "error", err, "retry_in", backoff)
			continue
		}
		backoff = 0
	}
}

// promote reads the tasks ids from the store and adopts those not already in memory.
func (e *Engine) promote(ctx context.Context, ids []int64) error {
	// Skip tasks already in memory before reading them.
	keep := ids[:0:0]
	for _, id := range ids {
		if e.tasks.get(id) == nil {
			keep = append(keep, id)
		}
	}
	if len(keep) > 0 {
		err := e.store.LoadByIDs(ctx, keep, func(pt *model.Task) error {
			t, err := newTask(pt)
			if err != nil {
				e.log.Error("cannot load task", "task", pt.Def.Name, "error", err)
				return nil
			}
			// A task in the window fires, late if need be: the misfire policy is for fires
			// that passed while no scheduler held them (adopt applies it for now > 0).
			e.adopt(t, 0)
			return nil
		})
		if err != nil {
			return err
		}
	}
	e.promo.queued.Add(-int64(len(ids)))
	e.m.promoted.Add(len(ids))
	return nil
}
