package engine

// Runs held back unsent (docs/faults.md, "A stalled database"; docs/scale-out.md).
//
// A run whose fire record committed but whose send the shard's gate held back, because the
// shard's lease renewal was overdue (holdUnsent), provably never left. While the node keeps
// the shard it sends the run itself once the gate opens. So that the shard's next owner can
// tell such a run from one in doubt when the node drops the shard instead, the node records
// it durably, before anything else happens to it:
//
//  1. When the gate first holds a run back, its run row is written again with the held-back
//     mark in its detail (markHeld), fenced by the shard's epoch: it lands only while the
//     shard is still this node's at that epoch, so before any next owner has taken it.
//  2. The node never sends a run it tried to mark until a write taking the mark off has
//     landed, fenced alike (again: before any next owner). A mark whose write failed or
//     whose outcome is unknown is treated as landed.
//  3. A next owner that finds a run still running with the mark (takeOverRun) knows its
//     previous owner never sent it and never will: it takes the mark off and records why
//     in one group fenced by its own epoch, and sends the run under its fire record (same
//     ticket, same attempt) once that group is durable (refireHeld). A run without the mark
//     stays in doubt and is resolved per on_lost, as before.
//
// So every run is sent by at most one owner at a time, and only after the store says no
// other owner may send it: exactly once still.

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// heldMark is the text in a running run's detail that says its owner held it back unsent.
const heldMark = "held back unsent"

// ActRefireHeld records a run its shard's previous owner held back unsent, sent by the next
// owner under its fire record.
const ActRefireHeld = "refire_held"

// errRunGone: the run is no longer in flight here (ended, killed, abandoned with its shard).
var errRunGone = errors.New("run no longer in flight here")

// heldBack reports whether a run row carries the held-back mark.
func heldBack(run model.Run) bool {
	return run.Result == model.ResultRunning && strings.Contains(run.Detail, heldMark)
}

// withHeldMark returns detail with the mark of a run held back by node at epoch.
func withHeldMark(detail, node string, epoch int64) string {
	m := heldMark + " by " + node + " at epoch " + strconv.FormatInt(epoch, 10) + " (its shard's lease renewal was overdue)"
	if detail == "" {
		return m
	}
	return detail + "; " + m
}

// markHeld writes run's row with the held-back mark (held) or without it (the detail run
// had at its fire), fenced by t's epoch, after t's earlier groups; the channel hears how
// the write went. errRunGone when run is no longer in flight here.
func (e *Engine) markHeld(t *task, run model.Run, held bool) <-chan error {
	return e.writeHeld(t, run, held, true)
}

// writeHeld is markHeld; inFlight says run must still be in flight here (else errRunGone).
func (e *Engine) writeHeld(t *task, run model.Run, held, inFlight bool) <-chan error {
	done := make(chan error, 1)
	row := run
	t.mu.Lock()
	if held {
		row.Detail = withHeldMark(run.Detail, e.cfg.NodeID, t.sepoch)
	}
	if inFlight && !e.runs.has(run.Ticket) {
		t.mu.Unlock()
		done <- errRunGone
		return done
	}
	g := &persist.Group{Runs: []model.Run{row}, Done: func(err error) { done <- err }}
	e.commitGroupLocked(t, g, func(err error) { done <- err })
	e.unlock(t)
	return done
}

// droppedRun is a run abandoned with its dropped shard and never sent: its task, its run
// as recorded, and whether its shard's gate held it back before (holdUnsent).
type droppedRun struct {
	t     *task
	run   model.Run
	gated bool
}

// markDropped marks held back the runs fs that Drop abandoned with their shards while
// recorded and never on the wire, or whose records landed after the drop (sendGate)
// (core_shards.go, invariant 4): they provably never left, and this node no longer sends
// them. A run its gate held back was marked then, and is marked again (the same row): that
// mark's write may have failed. Each mark is fenced by its task's epoch and follows the
// task's earlier groups, as markHeld's: it lands only before a next owner takes the shard,
// which then sends the run under its fire record (refireHeld). A mark the fence refused
// found the shard taken already: the next owner takes that run as in doubt, as a run
// without a mark always was. It logs how the marks went.
func (o *shardOwner) markDropped(fs []droppedRun) {
	start := o.now()
	waits := make([]<-chan error, len(fs))
	for i, f := range fs {
		row := f.run
		f.t.mu.Lock()
		row.Executor = downstreamOf(f.t.def) // as recorded: the flight names an executor once offered
		f.t.mu.Unlock()
		waits[i] = o.writeHeld(f.t, row, true, false)
	}
	marked, fresh, taken, failed := 0, 0, 0, 0
	for i, w := range waits {
		switch err := <-w; {
		case err == nil:
			marked++
			if !fs[i].gated {
				fresh++
			}
		case errors.Is(err, model.ErrLeaseLost):
			taken++
		default:
			failed++
		}
	}
	o.m.heldAtDrop.Add(fresh)
	o.log.Warn("runs of dropped shards recorded and never sent: marked held back for their next owner",
		"runs", len(fs), "marked", marked, "not_held_back_before", fresh, "shard_taken_first", taken, "failed", failed,
		"took", o.since(start))
}

// refireHeld sends a run its shard's previous owner held back unsent (invariant 3): t is in
// memory with run in flight (takeOverRun added a periodic run, adoptInstance a run-now, a
// backfill run, an allow_all run or a workflow step attempt). The mark comes off and an
// action says why, in one group fenced by this node's epoch; the run is sent once it is
// durable, with a deadline counted from the send, and with the params it was fired with:
// params when given (a workflow step attempt's, made again by its workflow), else a
// run-now's own if it was given some, else the task's.
func (e *Engine) refireHeld(t *task, run model.Run, params json.RawMessage) {
	e.refires.Add(1)
	t.mu.Lock()
	def := t.def
	switch {
	case params != nil:
	case run.Params != "":
		params = json.RawMessage(run.Params)
	default:
		params = def.Params
	}
	now := e.nowMS()
	before, held := run.Detail, ""
	if i := strings.Index(run.Detail, heldMark); i >= 0 {
		before, held = strings.TrimSuffix(run.Detail[:i], "; "), run.Detail[i:]
	}
	clean := run
	clean.Detail = before
	detail := "never sent (" + held + "); sent by " + e.cfg.NodeID + " under its fire record after taking the shard"
	t.pending++
	g := &persist.Group{
		Runs:    []model.Run{clean},
		Actions: []model.Action{e.action(t, run.Ticket, ActRefireHeld, t.rt.State, t.rt.State, ActorScheduler, detail, now)},
		Done:    func(err error) { e.dispatchDurable(t, def, clean, params, err) },
	}
	e.commitGroupLocked(t, g, func(error) {
		t.pending--
		e.runs.take(run.Ticket, nil, nil)
	})
	e.unlock(t)
	e.log.Info("sending a run its shard's previous owner held back unsent", "task", def.Name, "ticket", run.Ticket)
}

// releaseHeld waits for the write of a held-back mark (marking) and, once the gate is open
// again, for the write that takes it off; it reports whether the run may be sent. It gives
// up (false) once the run is no longer in flight here or its shard is lost.
func (e *Engine) releaseHeld(t *task, run model.Run, marking <-chan error) bool {
	if err := <-marking; errors.Is(err, errRunGone) || errors.Is(err, model.ErrLeaseLost) {
		return false
	}
	for {
		err := <-e.markHeld(t, run, false)
		switch {
		case err == nil:
			return true
		case errors.Is(err, errRunGone), errors.Is(err, model.ErrLeaseLost):
			return false
		}
		e.log.Warn("cannot take the held-back mark off a run; trying again", "ticket", run.Ticket, "error", err)
		<-e.cfg.Clock.After(gateRetry)
	}
}

// gateRetry is how often a fire or a send held back by an overdue lease renewal asks the
// gate again.
const gateRetry = 100 * time.Millisecond

// holdUnsent keeps a run that the shard gate kept from being sent (err) because the shard's
// lease renewal is overdue, while the shard is still this node's at the run's epoch: such a
// run provably never left, and failing it would fail work that was never tried (a database
// that stalls for a few seconds, as a Galera view change does). It asks the gate again every
// gateRetry and sends the run (again, with pm) once it opens; it lets go once the run is no
// longer in flight here (the shard dropped and its runs abandoned for the next owner, a
// kill). The run keeps pm, its place in the pace of records to sends, all the while: it is
// recorded and not on the wire, so the pace counts it until it leaves or is let go. It
// reports whether it holds the run; on any other error the caller ends the run as before
// (and gives pm back). A node that is not sharded has no shard gate and holds nothing
// (soleOwner).
func (o *shardOwner) holdUnsent(t *task, run model.Run, err error, pm *permit, again func(*permit)) bool {
	if !errors.Is(err, dispatch.ErrGated) || !errors.Is(err, model.ErrLeaseDeadline) {
		return false
	}
	shard, epoch := t.shard, t.sepoch
	o.m.heldUnsent.Inc()
	if f := o.runs.get(run.Ticket); f != nil {
		f.gated.Store(true)
	}
	// Recorded durably as held back, so that a next owner sends it should this node drop
	// the shard (above); sent here only once the mark is off again.
	marking := o.markHeld(t, run, true)
	go func() {
		for {
			<-o.cfg.Clock.After(gateRetry)
			if !o.runs.has(run.Ticket) {
				pm.release()
				return // abandoned with its shard, or ended another way
			}
			switch err := o.shardGate(shard, epoch, false); {
			case err == nil:
				if o.releaseHeld(t, run, marking) {
					again(pm)
				} else {
					pm.release()
				}
				return
			case !errors.Is(err, model.ErrLeaseDeadline):
				// The shard left this node: DropShards abandons the run (the next owner
				// recovers it from its fire record); nothing more to do here.
				pm.release()
				return
			}
		}
	}()
	return true
}
