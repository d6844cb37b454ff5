package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
)

// flight is one run that has left the engine's hands: decided (its RUNNING transition or its
// run-now row submitted), sent or being sent, and not yet ended.
type flight struct {
	t    *task
	run  model.Run // the run record; Executor names the executor holding it once offered
	slot concSlot  // its slot of the concurrency gate, given back when it is taken

	// On a sharded engine (core_shards.go, Drop): recorded is set (under runsInFlight.mu)
	// once its record is durable and its sending begins, onWire once a request of it passed
	// its shard's gate and may have left. A run recorded and never on the wire when its
	// shard drops provably never left this node. gated is set once its shard's gate held it
	// back (holdUnsent).
	recorded, onWire, gated atomic.Bool

	// The fields below are guarded by runsInFlight.mu.
	exec    *dispatch.Executor // the executor the run is offered to or accepted by, or nil
	waiting bool               // an executor's report may end it (offered, accepted or adopted)
	timer   clock.Timer        // the timeout, once armed
	// deadline is the run's deadline on an executor (the one the run carries), zero until
	// its timeout is armed: a failure reported at or after it is a timeout (deadlineEnded).
	deadline time.Time
}

// runsInFlight owns every run in flight, periodic, run-now and executor runs alike, by ticket.
// A run is added when it leaves (fire, RunNow, start-up recovery) and leaves again only
// through take, which whoever ends it calls: the HTTP outcome, an executor's report, the
// timeout, a kill, a lost executor, a failed write.
//
// Invariants:
//
//  1. A ticket is taken once. take removes the flight under the lock and only the caller
//     that removed it runs the end action; every other take of that ticket returns false.
//     So a timeout and a result (or a kill and a result) cannot both end a run.
//  2. The count Stop drains falls only after the end action returned, so a run's final
//     write is submitted to the writer before Stop goes on to flush it.
//  3. The timeout timer comes from the engine's clock, and it takes the flight it was armed
//     for, not a later flight of the same ticket.
//  4. A flight on an executor adds one to that executor's in-flight count for as long as it is
//     assigned to it.
//  5. A flight holds its concurrency slot (core_concgate.go) until it is taken: the slot is
//     given back once, by the take that removed it, after its end action has returned,
//     so a fire waiting for the slot starts after the run's end was decided (its ended_at
//     stamped), never while the run is in flight.
//
// Lock order: a task's mu may be held when calling any method; runsInFlight.mu is never held
// while calling out (end actions, timers' callbacks).
type runsInFlight struct {
	clk  clock.Clock
	conc *concGate

	mu sync.Mutex
	m  map[string]*flight
	n  int // flights added and not yet taken (end actions still running count)
	// perShard counts n by the shard of each flight's task (core_shards.go).
	perShard [model.ShardCount]int32
	zero     chan struct{} // closed when n drops to 0 while someone waits
	// unrecorded are the tickets abandoned with their shards before their records were
	// durable, with when (ms): a record that lands after is marked held back (recorded).
	unrecorded map[string]int64
}

func (r *runsInFlight) init(clk clock.Clock, conc *concGate) {
	r.clk, r.conc = clk, conc
	r.m = make(map[string]*flight)
	r.unrecorded = make(map[string]int64)
}

// add registers a run that has left, holding slot. A ticket already in flight is refused
// (false, and slot given back): tickets are unique per fire and attempt, so that is a second
// dispatch of one run.
func (r *runsInFlight) add(t *task, run model.Run, slot concSlot) bool {
	r.mu.Lock()
	if _, ok := r.m[run.Ticket]; ok {
		r.mu.Unlock()
		r.conc.release(slot)
		return false
	}
	if slot.held && slot.ticket == "" && r.conc.cl != nil && t != nil {
		slot.ticket, slot.epoch = run.Ticket, t.sepoch // names its rows (core_clusterslots.go)
	}
	r.m[run.Ticket] = &flight{t: t, run: run, slot: slot}
	r.n++
	r.perShard[shardOfTask(t)]++
	r.mu.Unlock()
	return true
}

// shardOfTask is t's shard, 0 for no task (a flight of a unit test).
func shardOfTask(t *task) uint8 {
	if t == nil {
		return 0
	}
	return t.shard
}

// byShard returns how many runs of each shard are in flight or settling.
func (r *runsInFlight) byShard() [model.ShardCount]int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.perShard
}

// unrecordedFor is how long a ticket abandoned before its record was durable is remembered:
// a record that has not landed by then never will (the writer gives up far sooner).
const unrecordedFor = 10 * time.Minute

// abandon takes every run in flight of the shards of set, running fn with each instead of
// an end: the shards are another node's now, which recovers the runs from the store. A run
// whose record is not yet durable is remembered (recorded). It returns how many it took.
func (r *runsInFlight) abandon(set model.ShardSet, fn func(f *flight)) int {
	r.mu.Lock()
	now := r.clk.Now().UnixMilli()
	for ticket, at := range r.unrecorded {
		if now-at > unrecordedFor.Milliseconds() {
			delete(r.unrecorded, ticket)
		}
	}
	var tickets []string
	for ticket, f := range r.m {
		if set.Has(int(shardOfTask(f.t))) {
			tickets = append(tickets, ticket)
		}
	}
	r.mu.Unlock()
	n := 0
	for _, ticket := range tickets {
		keep := func(f *flight) {
			f.slot.keep = true // its rows in the store are the shard's next owner's
			fn(f)
		}
		of := func(f *flight) bool {
			if !set.Has(int(shardOfTask(f.t))) {
				return false
			}
			if !f.recorded.Load() { // under r.mu, as recorded sets it
				r.unrecorded[ticket] = now
			}
			return true
		}
		if r.take(ticket, of, keep) {
			n++
		}
	}
	return n
}

// taskOf returns the task of the run with ticket, or nil when it is not in flight.
func (r *runsInFlight) taskOf(ticket string) *task {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.m[ticket]; f != nil {
		return f.t
	}
	return nil
}

// ticketsOf returns the tickets of t's runs in flight, of every kind. It looks at every run
// in flight: it serves an operator's kill, not a hot path.
func (r *runsInFlight) ticketsOf(t *task) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for ticket, f := range r.m {
		if f.t == t {
			out = append(out, ticket)
		}
	}
	return out
}

// recorded marks the run of ticket recorded (its record is durable and its sending
// begins) and returns its flight; or, when the run was abandoned with its shard before
// that, nil and dropped: the caller marks it held back, since it never left.
func (r *runsInFlight) recorded(ticket string) (f *flight, dropped bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f = r.m[ticket]; f != nil {
		f.recorded.Store(true)
		return f, false
	}
	if _, dropped = r.unrecorded[ticket]; dropped {
		delete(r.unrecorded, ticket)
	}
	return nil, dropped
}

// get returns the flight of ticket, or nil when it is not in flight.
func (r *runsInFlight) get(ticket string) *flight {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[ticket]
}

// has reports whether ticket is in flight.
func (r *runsInFlight) has(ticket string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[ticket]
	return ok
}

// arm sets the run's timeout: at fireAt, onTimeout ends it unless something else did
// first; runDeadline is the deadline the run carries (flight.deadline). It reports false
// when the run is no longer in flight.
func (r *runsInFlight) arm(ticket string, fireAt, runDeadline time.Time, onTimeout func(f *flight)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.m[ticket]
	if f == nil {
		return false
	}
	f.deadline = runDeadline
	deadline := fireAt
	if f.timer != nil {
		f.timer.Stop()
	}
	f.timer = r.clk.AfterFunc(clock.Until(r.clk, deadline), func() {
		r.take(ticket, func(g *flight) bool { return g == f }, onTimeout)
	})
	return true
}

// assign records that the run is offered to executor x (nil: an executor not in the
// registry, for a run adopted after a restart) and may be ended by an executor's report.
// It reports false when the run is no longer in flight.
func (r *runsInFlight) assign(ticket string, x *dispatch.Executor) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.m[ticket]
	if f == nil {
		return false
	}
	r.unassignLocked(f)
	f.exec, f.waiting = x, true
	if x != nil {
		x.AddInflight(1)
		f.run.Executor = x.Address
	}
	return true
}

// showHolder shows, on a run record read from the store while it is in flight here, the
// executor that holds it: the stored row names the app until the run ends, the flight the
// executor's address once one was offered the run. A run in flight on another node keeps
// what the store says.
func (r *runsInFlight) showHolder(run *model.Run) {
	if run.Result != model.ResultRunning {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.m[run.Ticket]; f != nil && f.exec != nil {
		run.Executor = f.exec.Address
	}
}

// unassign takes the run back from executor x after it refused the run. It reports false when
// the run is no longer in flight (a report or a kill raced the refusal).
func (r *runsInFlight) unassign(ticket string, x *dispatch.Executor) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.m[ticket]
	if f == nil {
		return false
	}
	if f.exec == x {
		r.unassignLocked(f)
	}
	return true
}

func (r *runsInFlight) unassignLocked(f *flight) {
	if f.exec != nil {
		f.exec.AddInflight(-1)
	}
	f.exec, f.waiting = nil, false
}

// take takes the run with ticket, when it is in flight and when (nil: always) accepts it,
// stops its timeout and runs fn with it: this caller alone ends the run (invariant 1). It
// reports whether it did.
func (r *runsInFlight) take(ticket string, when func(f *flight) bool, fn func(f *flight)) bool {
	r.mu.Lock()
	f := r.m[ticket]
	if f == nil || (when != nil && !when(f)) {
		r.mu.Unlock()
		return false
	}
	delete(r.m, ticket)
	if f.timer != nil {
		f.timer.Stop()
	}
	r.unassignLocked(f)
	r.mu.Unlock()
	defer r.done(shardOfTask(f.t))
	if fn != nil {
		fn(f)
	}
	r.conc.release(f.slot) // after fn: the end it records is stamped before a waiter starts
	return true
}

func (r *runsInFlight) done(shard uint8) {
	r.mu.Lock()
	r.n--
	r.perShard[shard]--
	if r.n == 0 && r.zero != nil {
		close(r.zero)
		r.zero = nil
	}
	r.mu.Unlock()
}

// waitingReport accepts a flight an executor's report may end.
func waitingReport(f *flight) bool { return f.waiting }

// runOwner is whose a run in flight is: the executor holding it (app and address), else
// its task (to read the callback app from), and the name of the run's task.
type runOwner struct {
	app, addr string
	task      string
	t         *task
	held      bool // false: the run is not in flight here, and the other fields are empty
}

// ownerOf tells whose run ticket is while it is in flight here.
func (r *runsInFlight) ownerOf(ticket string) runOwner {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.m[ticket]
	if f == nil {
		return runOwner{}
	}
	o := runOwner{task: f.run.TaskName, held: true}
	if f.exec != nil {
		o.app, o.addr = f.exec.App, f.exec.Address
		return o
	}
	o.t = f.t
	return o
}

// executorOf returns the executor holding ticket, or nil when none does.
func (r *runsInFlight) executorOf(ticket string) *dispatch.Executor {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.m[ticket]; f != nil {
		return f.exec
	}
	return nil
}

// executorAndTask returns the executor holding ticket and the run's task, or nils when the
// run is not on an executor here.
func (r *runsInFlight) executorAndTask(ticket string) (*dispatch.Executor, *task) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.m[ticket]; f != nil && f.exec != nil {
		return f.exec, f.t
	}
	return nil, nil
}

// on returns the tickets in flight on executor x.
func (r *runsInFlight) on(x *dispatch.Executor) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for t, f := range r.m {
		if f.exec == x {
			out = append(out, t)
		}
	}
	return out
}

// list returns the runs in flight, unordered.
func (r *runsInFlight) list() []model.Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]model.Run, 0, len(r.m))
	for _, f := range r.m {
		out = append(out, f.run)
	}
	return out
}

// count returns how many runs are in flight or settling.
func (r *runsInFlight) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// wait returns when no run is in flight or ctx is done, leaving no goroutine behind.
func (r *runsInFlight) wait(ctx context.Context) error {
	r.mu.Lock()
	if r.n == 0 {
		r.mu.Unlock()
		return nil
	}
	if r.zero == nil {
		r.zero = make(chan struct{})
	}
	ch := r.zero
	r.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RunsInFlight lists the runs this engine has sent and not yet ended: periodic, run-now and
// executor runs, including those adopted from the store at start.
func (e *API) RunsInFlight() []model.Run { return e.runs.list() }

// RunsSettling counts the runs in flight here and those whose end is decided but whose
// end's write is not yet submitted to the writer: 0 once every run's last write is queued.
func (e *API) RunsSettling() int { return e.runs.count() }
