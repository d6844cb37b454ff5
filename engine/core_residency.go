package engine

import (
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wheel"
)

// residency is how a task is held in memory: its entry in the wheel, the writes and runs
// that keep it there, and the marks that end its stay. It is embedded in task and guarded by
// task.mu. place is the one decision over it (arm, disarm, evict, read back); evict the one
// way out of memory.
//
// A copy in memory is in one of these states:
//
//	armed     ent != nil: the wheel fires it (its next fire is below the horizon, or it is a
//	          cancel_other run's next fire)
//	held      ent == nil and pending > 0 or flying > 0: a write or a run keeps it
//	stale     a write of it did not apply (conflict, lease lost, duplicate fire): never armed
//	          again; evicted and read back from the store once no write is pending and no
//	          run whose end writes the runtime is in flight (writesRuntime)
//	evicted   out of the task map: whoever still holds the pointer looks the task up again
//
// deleted marks a copy whose rows are gone: it is never armed, and leaves as soon as nothing
// holds it.
type residency struct {
	ent *wheel.Entry[*task] // armed entry, or nil
	// entDue is the nominal due time ent fires for: ent.When less the fire's jitter
	// (core_jitter.go). The fire's ticket and run carry entDue, never ent.When.
	entDue  int64
	pending int // writes decided (in the outbox or the writer) and not yet done
	// periodic is the ticket of the periodic run in flight (e.runs), or "".
	periodic string
	// parallel holds the tickets of the allow_all runs in flight (core_parallel.go), which
	// run beside one another outside the periodic state machine; nil until the first.
	parallel map[string]struct{}
	// flying counts this task's runs in e.runs, periodic, allow_all, run-now and backfill:
	// the task stays in memory while any is in flight.
	flying  int
	evicted bool // removed from the task map; a holder must look the task up again
	deleted bool
	stale   bool // a write did not apply: read back from the store once nothing holds it
}

// held reports whether a write or a run keeps the copy in memory whatever its next fire.
func (r *residency) held() bool { return r.pending > 0 || r.flying > 0 }

// writesRuntime reports whether a run in flight will write the task's runtime when it ends:
// the periodic run and allow_all runs. A stale copy waits for them before it is read back,
// so the copy read back is not older than their ends. Run-now and backfill runs write only
// their run rows and do not hold a stale copy.
func (r *residency) writesRuntime() bool { return r.periodic != "" || len(r.parallel) > 0 }

// runLeft notes that the run with ticket left e.runs.
func (r *residency) runLeft(ticket string) {
	r.flying--
	if r.periodic == ticket {
		r.periodic = ""
	}
	delete(r.parallel, ticket)
}

// place decides where t stands in memory after anything changed it (invariants 2 and 3):
//
//   - evicted: nothing; the copy in the map, if any, is someone else's.
//   - stale: disarmed; evicted and read back from the store (reload, on its own goroutine)
//     once no write is pending and no run that writes the runtime is in flight.
//   - armable with its next fire below the horizon: armed for that fire.
//   - a cancel_other run in flight: armed for the fire that cancels it.
//   - otherwise disarmed, and evicted unless held.
//
// Caller holds t.mu.
func (l *Loader) place(t *task) {
	if t.evicted {
		return
	}
	if t.stale {
		l.disarm(t)
		if t.pending == 0 && !t.writesRuntime() {
			l.evict(t)
			if !t.deleted && l.own.current(t) {
				// Read back while its shard is still this node's at its epoch; one of a
				// shard gone (its write refused at the fence) is its new owner's.
				go l.core.reload(t.id)
			}
		}
		return
	}
	want := !t.deleted && armable(t.rt.State) && t.rt.NextTriggerTime > 0
	if want {
		l.horizonMu.RLock()
		want = t.rt.NextTriggerTime < l.horizon
		l.horizonMu.RUnlock()
	}
	if want {
		// The window is one of nominal times; the entry fires at the nominal time plus the
		// fire's jitter (core_jitter.go), which may lie beyond the horizon.
		due := t.rt.NextTriggerTime
		l.armAt(t, due, due+t.jitterOf(t.rt.State, due))
		return
	}
	if due, ok := t.cancelDue(); ok {
		// cancel_other: the task's next fire is armed while its run is in flight, to kill
		// that run when the fire comes due (fire, cancelOther). The task is in memory while
		// the run is (flying), so the horizon does not bound this entry.
		l.armAt(t, due, t.fireAt(due))
		return
	}
	l.disarm(t)
	if !t.held() {
		l.evict(t)
	}
}

// evict takes t out of memory: out of the wheel and the task map. Caller holds t.mu.
func (l *Loader) evict(t *task) {
	l.disarm(t)
	t.evicted = true
	l.evictions.Add(1)
	l.tasks.remove(t)
}

// placeHeld places the copy of task id in memory, if there is one, when the window reaches
// the task: that copy is the newest, and one kept in memory unarmed, because its next fire
// lay beyond the horizon while a run kept it there (run-now, backfill, allow_all), is armed
// now rather than at that run's end.
func (l *Loader) placeHeld(id int64) {
	t := l.tasks.get(id)
	if t == nil {
		return
	}
	t.mu.Lock()
	l.place(t) // does nothing to an evicted copy
	l.core.unlock(t)
}

// cancelDue is the fire whose coming due kills t's periodic run in flight under cancel_other,
// and whether there is one: the first cron fire after the fire the run belongs to. A run of a
// fire a catch-up runs is never cancelled: the catch-up runs each missed fire once, and the
// fires due meanwhile are decided when it is over (decideNext). Caller holds t.mu.
func (t *task) cancelDue() (int64, bool) {
	if t.deleted || t.rt.State != model.StateRunning || t.periodic == "" || t.sched == nil ||
		t.def.Trigger != model.TriggerCron || t.def.OverlapPolicy != model.OverlapCancelOther || t.def.Paused {
		return 0, false
	}
	base := t.rt.NextTriggerTime // the due of the fire in flight
	if t.retryOf > 0 && t.retryOf < base {
		base = t.retryOf
	}
	if t.catchupUntil > 0 && t.fireAt(base) <= t.catchupUntil {
		return 0, false
	}
	due := t.nextCron(base)
	return due, due != 0
}

// armAt arms t's entry for the fire of nominal time due, leaving at at; an entry armed for
// exactly that already stays. Caller holds t.mu.
func (l *Loader) armAt(t *task, due, at int64) {
	if t.ent != nil && t.ent.When == at && t.entDue == due {
		return
	}
	l.disarm(t)
	t.ent = &wheel.Entry[*task]{When: at, Key: uint64(t.id), Priority: uint8(t.def.Priority), Value: t}
	t.entDue = due
	l.wheel.Add(t.ent)
}

// disarm takes t's entry out of the wheel. An entry already moved to a ready queue cannot be
// cancelled; fire recognises it as stale because t.ent no longer points at it.
func (l *Loader) disarm(t *task) {
	if t.ent != nil {
		l.conc.forget(t.id, t.ent) // an entry waiting for a concurrency slot waits no more
		l.wheel.Cancel(t.ent)
		t.ent = nil
	}
}

// advanceHorizon moves the horizon to to, and returns the old one, unless it is there
// already (the loader's, loader.go).
func (l *Loader) advanceHorizon(to int64) (from int64, moved bool) {
	l.horizonMu.Lock()
	defer l.horizonMu.Unlock()
	from = l.horizon
	if to <= from {
		return from, false
	}
	l.horizon = to
	return from, true
}

// inMemory tells whether the task id is held in full.
func (l *Loader) inMemory(id int64) bool { return l.tasks.get(id) != nil }
