package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// recoveryCore is what recovery asks of the core to take over the runs it finds
// (core_recover.go): to hold a task, record, end or re-send a run as the core does.
type recoveryCore interface {
	acquire(ctx context.Context, id int64, o acquireOpts) (*task, error)
	unlock(t *task)
	write(ctx context.Context, g *persist.Group) error
	commitGroupLocked(t *task, g *persist.Group, dropped func(error))
	action(t *task, ticket, name string, from, to model.State, actor, detail string, at int64) model.Action
	dispatchDurable(t *task, def *model.TaskDef, run model.Run, params json.RawMessage, err error)
	sendAs(t *task, def *model.TaskDef, run model.Run, wireTicket string)
	armExecTimeout(ticket string, deadline time.Time, addr string)
	endRun(t *task, run model.Run, oc outcome)
	// refireHeld sends a run its previous owner held back unsent (core_heldback.go).
	// params nil: the run's own, else its task's.
	refireHeld(t *task, run model.Run, params json.RawMessage)
	submit(ctx context.Context, g *persist.Group, mode submitMode) error
}

// Recovery is the recovery of what a previous process (or the previous owner of a shard)
// left: at Start (atStart) and when shards are gained (shards), the runs left in flight
// are taken over or resolved, the window loaded with the misfire policies, the dependents
// released and the backfills resumed, each step through the service that owns it. It has
// no loop: it runs before the core dispatches.
type Recovery struct {
	base
	core      recoveryCore
	gates     *gates // reconciles the slots the earlier owners' runs hold (core_clusterslots.go)
	runs      *runsInFlight
	executors *Executors
	loader    *Loader
	deps      *Dependents
	backfills *Backfills
	steps     *Steps // makes a held-back step attempt's call again (adoptInstance)
}

// inFlight resolves runs a previous process left running. Their outcome is unknown:
// an HTTP callback's connection died with the process. They are recorded as "lost" and the
// task goes on to its next cycle; they are never re-sent, because they may have executed
// (unless the task says on_lost: resend). Executor runs are adopted and wait for the result
// the executor re-sends.
//
// A periodic run in flight is found two ways. Its fire record is the durable RUNNING marker:
// a run row still `running` whose task's runtime still holds the SCHEDULED or RETRYING state
// the fire was made from (ListOpenFires). A runtime that says RUNNING (written by a pause or
// a re-send during the run, or by an older build at every fire) names its run itself.
func (r *Recovery) inFlight(ctx context.Context) error {
	type inFlight struct {
		t   *task
		run model.Run
	}
	var found []inFlight
	err := r.store.LoadByState(ctx, []model.State{model.StateRunning}, func(pt *model.Task) error {
		t, err := newTask(pt)
		if err != nil {
			r.log.Error("cannot recover task", "task", pt.Def.Name, "error", err)
			return nil
		}
		found = append(found, inFlight{t: t})
		return nil
	})
	if err != nil {
		return err
	}
	for i := range found {
		t := found[i].t
		run, err := r.store.GetRun(ctx, t.rt.CurrentTicket)
		if err != nil {
			if !errors.Is(err, model.ErrRunNotFound) {
				return err
			}
			run = &model.Run{
				Ticket: t.rt.CurrentTicket, TaskID: t.id, TaskName: t.def.Name, Kind: model.RunScheduled,
				Attempt: t.rt.Attempt, ScheduledAt: t.rt.LastTriggerTime, DispatchedAt: t.rt.LastTriggerTime,
			}
		}
		found[i].run = *run
	}
	open, err := r.store.ListOpenFires(ctx, r.nowMS()+openFireMargin.Milliseconds())
	if err != nil {
		return err
	}
	runOf := make(map[int64]model.Run, len(open))
	ids := make([]int64, 0, len(open))
	for _, r := range open {
		runOf[r.TaskID] = r
		ids = append(ids, r.TaskID)
	}
	err = r.store.LoadByIDs(ctx, ids, func(pt *model.Task) error {
		t, err := newTask(pt)
		if err != nil {
			r.log.Error("cannot recover task", "task", pt.Def.Name, "error", err)
			return nil
		}
		run := runOf[t.id]
		if !t.adoptOpenFire(run) {
			return nil // moved on since ListOpenFires read it: not this run's task any more
		}
		found = append(found, inFlight{t: t, run: run})
		return nil
	})
	if err != nil {
		return err
	}
	recovered := 0
	for _, f := range found {
		if r.takeOverRun(f.t, f.run) {
			recovered++
		}
	}
	if recovered > 0 {
		r.log.Warn("recovered periodic runs left in flight by the previous process or owner of their shards", "runs", recovered)
	}
	return r.manualRuns(ctx)
}

// manualRuns does for run-now instances what inFlight does for periodic runs.
func (r *Recovery) manualRuns(ctx context.Context) error {
	runs, err := r.store.ListRunningManual(ctx, 100000)
	if err != nil {
		return err
	}
	for _, run := range runs {
		if err := r.adoptInstance(ctx, run, nil); err != nil {
			return err
		}
	}
	return r.recoverParallelRuns(ctx)
}

// atStart runs the recovery of Start in order, logging each step with how long it
// took and, under HA (Config.Epoch > 0), recording it as an action:
//
//  1. reload the executor registry from the store, so results and dispatches find every
//     executor at once;
//  2. resolve the runs left RUNNING: an SDK executor's run is waited for under its own
//     deadline (past it, it takes the timeout's retry/fail path at once); an HTTP run, whose
//     answer went to the process that sent it, follows its task's on_lost;
//  3. load the window from the store, applying the misfire policy to every fire that came
//     due while no primary dispatched (each misfire is an action of its task);
//  4. release dependency tasks whose upstreams succeeded meanwhile.
//
// Runs left RUNNING are resolved before the window is loaded so that their tasks' next
// fires are decided (and misfires among them handled) by the same rules.
func (r *Recovery) atStart(ctx context.Context, now, horizon int64) error {
	var detail string
	steps := []struct {
		name string
		fn   func() error
	}{
		{"reload the executor registry", func() error {
			if err := r.executors.restore(ctx, false); err != nil {
				return fmt.Errorf("cannot restore executors: %w", err)
			}
			detail = strconv.Itoa(len(r.executors.reg.Snapshot())) + " executor(s)"
			return nil
		}},
		{"resolve runs left running", func() error {
			before := r.runs.count()
			if err := r.inFlight(ctx); err != nil {
				return fmt.Errorf("cannot recover in-flight runs: %w", err)
			}
			detail = strconv.Itoa(r.runs.count()-before) + " run(s) still awaited; the others resolved"
			return nil
		}},
		{"load the window and apply misfire policies", func() error {
			misfires := r.m.misfires.Get()
			n, err := r.loader.loadRange(ctx, 1, horizon, now) // every past fire too: misfires
			if err != nil {
				return fmt.Errorf("cannot load the first window: %w", err)
			}
			detail = fmt.Sprintf("%d task(s) due within %s; %d misfire(s) handled by policy", n, r.cfg.Window, r.m.misfires.Get()-misfires)
			return nil
		}},
		{"release dependents", func() error {
			if err := r.deps.load(ctx); err != nil {
				return fmt.Errorf("cannot load dependencies: %w", err)
			}
			detail = ""
			return nil
		}},
	}
	start := r.clk.Now()
	for i, st := range steps {
		t := r.clk.Now()
		detail = ""
		err := st.fn()
		took := r.since(t)
		r.log.Info("start: "+st.name, "step", i+1, "took", took, "detail", detail, "epoch", r.cfg.Epoch, "error", err)
		if err != nil {
			return err
		}
		if r.cfg.Epoch > 0 {
			r.systemAction(ActPromotion, fmt.Sprintf("epoch %d, step %d: %s took %s; %s", r.cfg.Epoch, i+1, st.name, took.Round(time.Microsecond), detail))
		}
	}
	r.log.Info("start: recovery done; dispatching", "took", r.since(start), "epoch", r.cfg.Epoch)
	return nil
}

// systemAction records a task-less action without waiting.
func (r *Recovery) systemAction(name, detail string) {
	act := model.Action{Action: name, Actor: ActorScheduler + ":" + r.cfg.NodeID, At: r.nowMS(), Detail: detail}
	if err := r.core.submit(context.Background(), &persist.Group{Actions: []model.Action{act}}, submitWait); err != nil {
		r.log.Warn("cannot record action", "action", name, "error", err)
	}
}

// shards is atStart for the shards of set, with ctx carrying their filter.
func (r *Recovery) shards(ctx context.Context, set model.ShardSet, fences []persist.ShardFence) error {
	now := r.nowMS()
	h := r.loader.Horizon().UnixMilli()
	steps := []struct {
		name string
		fn   func() error
	}{
		{"resolve runs left running", func() error { return r.inFlight(ctx) }},
		// The slots the earlier owners' runs hold in the store: those of the runs adopted stay
		// (core_clusterslots.go), the rest go back.
		{"reconcile concurrency slots", func() error { return r.gates.reconcileShards(ctx, fences) }},
		{"load the window and apply misfire policies", func() error {
			_, err := r.loader.loadRange(ctx, 1, h, now)
			return err
		}},
		{"release dependents", func() error { return r.deps.load(ctx) }},
		{"resume backfills", func() error { return r.backfills.recover(ctx) }},
	}
	for i, st := range steps {
		t := r.clk.Now()
		err := st.fn()
		r.log.Info("shards taken: "+st.name, "shards", set.String(), "step", i+1, "took", r.since(t), "error", err)
		if err != nil {
			return err
		}
	}
	return nil
}

// recoverParallelRuns adopts the runs of allow_all tasks that a previous process left in
// flight (ListOpenParallelRuns), as run-now instances are adopted; a run recovered already as
// a periodic one is skipped.
func (r *Recovery) recoverParallelRuns(ctx context.Context) error {
	runs, err := r.store.ListOpenParallelRuns(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, run := range runs {
		if r.runs.has(run.Ticket) {
			continue
		}
		if err := r.adoptInstance(ctx, run, nil); err != nil {
			return err
		}
		n++
	}
	if n > 0 {
		r.log.Warn("recovered allow_all runs left in flight by the previous process", "runs", n)
	}
	return nil
}

// recordLateResult records an executor's result for a run already marked lost (its
// executor was reaped, or the scheduler failed over while it ran): the run row takes the
// result, keeping in its detail when and why it was marked lost, and an action says so.
// The task's state is not changed: it moved on when the run was marked lost.
func (r *Recovery) recordLateResult(ctx context.Context, run model.Run, rep Report) error {
	now := r.nowMS()
	lostAt, lostWhy := run.EndedAt, run.Error
	run.Result = rep.Status
	run.Error = rep.Error
	run.Output = tail(rep.Output, maxOutput)
	if rep.Address != "" {
		run.Executor = rep.Address
	}
	run.EndedAt = now
	if rep.EndedAt > 0 {
		run.EndedAt = rep.EndedAt
	}
	run.DurationMS = rep.DurationMS
	note := "marked lost at " + time.UnixMilli(lostAt).UTC().Format(time.RFC3339Nano) + " (" + lostWhy + "); this result arrived later"
	if run.Detail != "" {
		note = run.Detail + "; " + note
	}
	run.Detail = note
	act := model.Action{TaskID: run.TaskID, TaskName: run.TaskName, Ticket: run.Ticket, Action: ActLateResult,
		Actor: "executor:" + rep.Address, At: now,
		Detail: rep.Status + " result for a run marked lost: recorded; the task had moved on and is not changed"}
	r.m.results.result("late").Inc()
	if err := r.core.write(ctx, &persist.Group{Runs: []model.Run{run}, Actions: []model.Action{act}}); err != nil {
		return fmt.Errorf("cannot record the late result of %s: %w", run.Ticket, err)
	}
	r.log.Info("late result recorded for a run marked lost", "task", run.TaskName, "ticket", run.Ticket, "result", rep.Status)
	return nil
}
