package engine

import (
	"context"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// The core's side of the backfills (backfills.go): a backfill run admitted through the
// concurrency and rate limits, sent once its fire record is durable, and recorded when it
// ends.

// admitBackfill takes a concurrency slot for one run of def, as a run-now does, and a token
// of its downstream's rate limit (and the global one), as every fire does. Without either
// it reports !ok, with the wait until the token is due when the rate refused. ticket,
// shard and epoch name the run's slot rows on a sharded cluster (core_clusterslots.go).
func (bf *Backfills) admitBackfill(def *model.TaskDef, ticket string, shard uint8, epoch int64) (slot concSlot, wait time.Duration, ok bool) {
	key, err := model.RenderKey(def.ConcurrencyKey, def.Params)
	if err != nil {
		key = def.ConcurrencyKey // as concKey: counted in the template's own key
	}
	slot, _, _, _, ok = bf.gates.tryAcquireRun(def.Group, key, ticket, shard, epoch)
	if !ok {
		return slot, 0, false
	}
	if bf.gates.gate.limited.Load() {
		if ok, wait := bf.gates.gate.lim.Take(rateKeyOf(def, def.Params)); !ok {
			bf.gates.conc.release(slot)
			return slot, wait, false
		}
	}
	return slot, 0, true
}

// startBackfill sends a backfill run whose fire record is durable.
func (e *Engine) startBackfill(t *task, def *model.TaskDef, run model.Run, slot concSlot) {
	e.runs.add(t, run, slot)
	e.m.triggers.Inc()
	e.send(t, def, run, def.Params)
}

// unstartBackfill gives back what a backfill run whose fire record was not written held.
func (bf *Backfills) unstartBackfill(t *task, slot concSlot) {
	bf.gates.conc.release(slot)
	t.mu.Lock()
	t.flying--
	bf.loader.place(t)
	t.mu.Unlock()
}

// completeBackfill records the end of a backfill run: its run row, as run-now's end does,
// without an action record (the run row is its record) and without the breaker, retries
// or dependents (see the top of this file). The caller has taken the run from e.runs.
func (e *Engine) completeBackfill(t *task, run model.Run, oc outcome) {
	// An outcome without a duration (a lost run) lasted from its dispatch until now.
	run = endedRun(run, oc, e.nowMS())
	e.m.results.result(oc.result).Inc()
	var acts []model.Action
	t.mu.Lock()
	t.runLeft(run.Ticket)
	if oc.killedBy != "" {
		// An operator's kill is on record as every kill is (core_killrun.go).
		e.m.kills.Inc()
		acts = append(acts, e.action(t, run.Ticket, ActKill, "", "", oc.killedBy, joinNote("backfill run killed", oc.killReason), run.EndedAt))
	}
	e.loader.place(t)
	t.mu.Unlock()
	g := &persist.Group{Runs: []model.Run{run}, Actions: acts, Done: func(err error) {
		oc.notify(err)
		e.backfills.set.ended(run.Ticket, run.Result, err)
	}}
	if err := e.submit(context.Background(), g, submitWait); err != nil {
		e.log.Warn("backfill run's result not recorded: writer closed", "ticket", run.Ticket, "error", err)
		oc.notify(err)
		e.backfills.set.ended(run.Ticket, run.Result, err)
	}
}
