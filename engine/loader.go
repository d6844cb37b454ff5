package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
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

// loaderCore is what the loader asks of the core.
type loaderCore interface {
	// adopt puts a task read from the store into memory (applying the misfire policy at
	// now > 0).
	adopt(t *task, now int64)
	// reload reads task id back from the store once the residency evicted a stale copy.
	reload(id int64)
	// unlock releases t.mu after a change the residency placed (core_submit.go).
	unlock(t *task)
}

// Loader is the window loader (design.md, "Window and cold entries"): it moves the horizon
// forward every LoadInterval and loads the slice it uncovered, tasks due soon in full and
// the rest as cold entries of the wheel, which its promoter reads in full PromoteLead
// before they are due.
type Loader struct {
	base
	core  loaderCore
	wheel *wheel.Sharded[*task]
	promo promoter

	// The residency (core_residency.go): the tasks in memory, armed in the wheel while their
	// next fire is below the horizon.
	tasks     *taskMap
	conc      *concGate // an entry disarmed waits for a slot no more
	horizonMu sync.RWMutex
	horizon   int64 // ms; tasks due before it are in memory
	// unloaded is the start (ms) of the slices whose load failed, 0 when none did: the
	// horizon moved past them, so the next slice loads them too (loader goroutine only).
	unloaded int64
	// evictions counts tasks evicted from memory (GetTask reads a row again when one was
	// evicted while it read).
	evictions atomic.Int64
	loads     loop
	promotes  loop
}

func (l *Loader) start() error {
	if err := l.loads.start(l.run); err != nil {
		return err
	}
	return l.promotes.start(l.promoteLoop)
}

func (l *Loader) stop(ctx context.Context) error {
	return errors.Join(l.loads.stop(ctx), l.promotes.stop(ctx))
}

// run moves the window forward every LoadInterval (design.md, "Window and cold entries").
func (l *Loader) run(ctx context.Context) {
	l.every(ctx, l.cfg.LoadInterval, func() {
		if err := l.loadSlice(ctx); err != nil && ctx.Err() == nil {
			l.log.Error("cannot load the next window slice; loading it with the next one", "error", err)
		}
	})
}

// loadSlice uncovers [old horizon, now+Window) and loads it, with the slices whose load
// failed before: a slice the horizon passed and nothing loaded would never fire.
func (l *Loader) loadSlice(ctx context.Context) error {
	now := l.nowMS()
	to := now + l.cfg.Window.Milliseconds()
	from, moved := l.advanceHorizon(to)
	if l.unloaded > 0 {
		from, to, moved = min(from, l.unloaded), max(to, l.Horizon().UnixMilli()), true
	}
	if !moved {
		return nil
	}
	t := l.clk.Now()
	// The shards held now: one gained after the horizon moved loads up to it itself.
	n, err := l.loadRange(l.own.scheduling(ctx), from, to, now)
	l.m.loadDuration.Update(l.since(t).Seconds())
	if err != nil {
		// What it loaded before the error is in memory; loading it again adopts nothing.
		l.unloaded = from
		return err
	}
	l.unloaded = 0
	l.log.Debug("window slice loaded", "tasks", n, "took", l.since(t))
	return nil
}

// loadRange loads the tasks due in [from, to): in full those due within PromoteLead of
// now (and every past fire, for the misfire policy), as cold references the rest.
func (l *Loader) loadRange(ctx context.Context, from, to, now int64) (int, error) {
	n := 0
	hot := min(to, now+l.cfg.PromoteLead.Milliseconds())
	if from < hot {
		var err error
		if n, err = l.loadFull(ctx, from, hot, now); err != nil {
			return n, err
		}
	}
	if hot < to {
		m := 0
		err := l.store.LoadDueRefs(ctx, max(from, hot), to, armableStates, func(r persist.DueRef) error {
			m++
			if !l.inMemory(r.TaskID) {
				l.armCold(r.TaskID, r.NextTriggerTime)
			} else {
				l.placeHeld(r.TaskID)
			}
			return nil
		})
		l.m.loaded.Add(m)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// loadFull loads the tasks due in [from, to) in full.
func (l *Loader) loadFull(ctx context.Context, from, to, now int64) (int, error) {
	n := 0
	err := l.store.LoadDue(ctx, from, to, armableStates, func(pt *model.Task) error {
		n++
		t, err := newTask(pt)
		if err != nil {
			// A definition that no longer parses (e.g. an unknown zone after a tzdata
			// change) must not stop the loader: log it and leave the row as it is.
			l.log.Error("cannot load task", "task", pt.Def.Name, "error", err)
			return nil
		}
		l.core.adopt(t, now)
		return nil
	})
	l.m.loaded.Add(n)
	return n, err
}

// armCold puts a cold entry for the task id due at due.
func (l *Loader) armCold(id, due int64) {
	l.promo.queued.Add(1)
	l.wheel.Add(&wheel.Entry[*task]{When: due - l.cfg.PromoteLead.Milliseconds(), Key: uint64(id)}) // no Value: cold
}

// promoteLoop reads the tasks of fired cold entries until ctx ends. A failed read is
// retried with backoff: the ids stay queued, and the tasks stay durable in the store.
func (l *Loader) promoteLoop(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-l.clk.After(backoff):
			}
		}
		ids := l.promo.take()
		if len(ids) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-l.promo.signal:
				continue
			}
		}
		if err := l.promote(ctx, ids); err != nil {
			if ctx.Err() != nil {
				return
			}
			l.promo.putBack(ids)
			backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
			l.log.Error("cannot read tasks due soon; retrying", "tasks", len(ids), "error", err, "retry_in", backoff)
			continue
		}
		backoff = 0
	}
}

// promote reads the tasks ids from the store and adopts those not already in memory.
func (l *Loader) promote(ctx context.Context, ids []int64) error {
	// Skip tasks already in memory before reading them.
	keep := ids[:0:0]
	for _, id := range ids {
		if !l.inMemory(id) {
			keep = append(keep, id)
		}
	}
	if len(keep) > 0 {
		err := l.store.LoadByIDs(ctx, keep, func(pt *model.Task) error {
			t, err := newTask(pt)
			if err != nil {
				l.log.Error("cannot load task", "task", pt.Def.Name, "error", err)
				return nil
			}
			// A task in the window fires, late if need be: the misfire policy is for fires
			// that passed while no scheduler held them (adopt applies it for now > 0).
			l.core.adopt(t, 0)
			return nil
		})
		if err != nil {
			return err
		}
	}
	l.promo.queued.Add(-int64(len(ids)))
	l.m.promoted.Add(len(ids))
	return nil
}
