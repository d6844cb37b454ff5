package workflow

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// misfireGrace is how late a cron fire may be taken up and still count as on time; later
// ones follow the workflow's misfire policy.
const misfireGrace = time.Minute

// fireDue starts the cron (and delay) runs due of the workflows this node schedules. The run and the
// schedule's next fire are written in one transaction, and a run's id is its logical
// time's (timeRunID): a fire taken up twice (a restart, a shard moved) meets the stored run.
func (s *Service) fireDue(ctx context.Context) {
	now := s.clk.Now()
	s.mu.Lock()
	var due []*schedule
	for _, sc := range s.schedules {
		if !sc.paused && sc.next > 0 && sc.next+jitterOf(sc.name, sc.next, sc.jitter) <= now.UnixMilli() && !sc.inFlight {
			sc.inFlight = true
			due = append(due, sc)
		}
	}
	s.mu.Unlock()
	for _, sc := range due {
		err := s.fire(ctx, sc, now)
		s.mu.Lock()
		sc.inFlight = false
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("cannot start a workflow's cron run; trying again", "workflow", sc.name, "error", err)
			}
			delete(s.schedules, sc.name) // read again at the next scan
		}
		s.mu.Unlock()
	}
}

func (s *Service) fire(ctx context.Context, sc *schedule, now time.Time) error {
	if !s.eng.Steps().Owned(sc.name) {
		return nil
	}
	w, err := s.st.GetWorkflow(ctx, sc.name)
	if err != nil {
		return err
	}
	if w.Def.Version != sc.version || w.NextFire != sc.next || w.Def.Paused {
		return errors.New("changed meanwhile")
	}
	// The fire times due: from the stored next fire up to now (each past its jitter).
	var due []int64
	for at := time.UnixMilli(sc.next); !at.IsZero() && len(due) < 100_000; at = sc.after(at) {
		ms := at.UnixMilli()
		if ms+jitterOf(sc.name, ms, sc.jitter) > now.UnixMilli() {
			break
		}
		due = append(due, ms)
	}
	if len(due) == 0 {
		return nil
	}
	nextAt := sc.after(time.UnixMilli(due[len(due)-1]))
	nextMS := int64(0)
	if !nextAt.IsZero() {
		nextMS = nextAt.UnixMilli()
	}
	// Which of them run: within the catch-up window each, oldest first; otherwise the
	// latest, unless it is late and misfire_policy is skip.
	var run, skipped []int64
	if win := int64(w.Def.CatchupWindowSec) * 1000; win > 0 {
		for _, t := range due {
			if now.UnixMilli()-t <= win {
				run = append(run, t)
			} else {
				skipped = append(skipped, t)
			}
		}
	} else {
		last := due[len(due)-1]
		skipped = due[:len(due)-1]
		if now.Sub(time.UnixMilli(last)) > misfireGrace+time.Duration(sc.jitter)*time.Millisecond && w.Def.MisfirePolicy == model.MisfireSkip {
			skipped = due
		} else {
			run = []int64{last}
		}
	}
	b := &persist.Batch{WorkflowPuts: []persist.WorkflowPut{{Def: w.Def, NextFire: nextMS, ExpectVersion: w.Def.Version}}}
	if len(run) > 0 && w.Def.OverlapPolicy == model.OverlapSkip {
		if open := s.openRunOf(sc.name); open != "" {
			skipped, run = append(skipped, run...), nil
			b.Actions = append(b.Actions, s.action(sc.name, "", "workflow_overlap", "scheduler",
				fmt.Sprintf("fire skipped: run %s is in flight (overlap_policy skip)", open)))
		} else if len(run) > 1 {
			skipped, run = append(skipped, run[1:]...), run[:1] // one at a time
		}
	}
	if len(skipped) > 0 {
		b.Actions = append(b.Actions, s.action(sc.name, "", "workflow_misfire", "scheduler",
			fmt.Sprintf("%d fire(s) not run, the latest of %s", len(skipped), time.UnixMilli(skipped[len(skipped)-1]).UTC().Format(time.RFC3339))))
	}
	for _, t := range run {
		b.NewWorkflowRuns = append(b.NewWorkflowRuns, model.WorkflowRun{ID: timeRunID(sc.name, t), Workflow: sc.name, Version: w.Def.Version,
			ScheduledAt: t, Trigger: sc.trigger, Params: w.Def.Params, State: model.WorkflowRunning, CreatedAt: now.UnixMilli()})
	}
	err = s.eng.Steps().ApplyBatch(ctx, sc.name, b)
	for errors.Is(err, persist.ErrWorkflowRunExists) && len(b.NewWorkflowRuns) > 0 {
		// A backfill ran one of these logical times: leave out the ones that have a run.
		var keep []model.WorkflowRun
		for _, r := range b.NewWorkflowRuns {
			if _, _, gerr := s.st.GetWorkflowRun(ctx, r.ID); errors.Is(gerr, persist.ErrWorkflowRunNotFound) {
				keep = append(keep, r)
			}
		}
		if len(keep) == len(b.NewWorkflowRuns) {
			break
		}
		b.NewWorkflowRuns = keep
		err = s.eng.Steps().ApplyBatch(ctx, sc.name, b)
	}
	if err != nil {
		return err
	}
	sc.next = nextMS
	for _, r := range b.NewWorkflowRuns {
		s.m.started[sc.trigger].Inc()
		if err := s.takeUp(ctx, sc.name, r.ID); err != nil {
			s.log.Warn("cannot take up a new workflow run; the next scan will", "run", r.ID, "error", err)
		}
	}
	return nil
}

// after is the schedule's fire after at; zero for none (a delay fires once).
func (sc *schedule) after(at time.Time) time.Time {
	if sc.sched == nil {
		return time.Time{}
	}
	return sc.sched.Next(at, sc.loc)
}

// openRunOf returns the id of a run of workflow this node drives, "" for none.
func (s *Service) openRunOf(workflow string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, rs := range s.runs {
		if rs.workflow == workflow {
			return id
		}
	}
	return ""
}

// jitterOf is a cron fire's delay: a deterministic offset in [0, jitter) ms derived from the
// workflow's name and the fire's nominal time, so every node and restart delays it alike.
func jitterOf(name string, at, jitter int64) int64 {
	if jitter <= 0 {
		return 0
	}
	h := sha256.Sum256([]byte(name + "\x00" + strconv.FormatInt(at, 10)))
	return int64(binary.BigEndian.Uint64(h[:8]) % uint64(jitter))
}

// Backfill bounds.
const (
	BackfillRunsMax     = 10_000
	BackfillParallelMax = 64
)

// A backfill runs a workflow for every cron fire time in [from, to), at most parallel runs
// at once. It is stored (model.WorkflowBackfill, one row per workflow): its cursor steps in
// the transaction that inserts the run it starts, fenced by the workflow's shard, so exactly
// one node pumps it, the one that schedules the workflow, and after a restart or a failover
// the next one goes on from the cursor. A run's id is its logical time's (timeRunID): a time
// that has a run already (the schedule's, an earlier backfill's) is skipped, not run twice.

// BackfillStatus is what a backfill did.
type BackfillStatus struct {
	Workflow string `json:"workflow"`
	Times    int    `json:"times"`
	Started  int    `json:"started"`
	Skipped  int    `json:"skipped"` // logical times that had a run already
	Running  int    `json:"running"`
	Done     bool   `json:"done"`
}

// Backfill starts runs of a cron workflow for each of its fire times in [from, to).
func (s *Service) Backfill(ctx context.Context, name string, from, to time.Time, parallel int, actor string) (*BackfillStatus, error) {
	if err := s.owned(name); err != nil {
		return nil, err
	}
	w, err := s.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if w.Def.Trigger != model.TriggerCron {
		return nil, &FieldError{Field: "trigger", Msg: fmt.Sprintf("workflow %q has no cron schedule to backfill", name)}
	}
	if !to.After(from) {
		return nil, &FieldError{Field: "to", Msg: "must be after from"}
	}
	if to.After(s.clk.Now()) {
		return nil, &FieldError{Field: "to", Msg: "must not be in the future: the schedule runs those itself"}
	}
	if parallel == 0 {
		parallel = 1
	}
	if parallel < 1 || parallel > BackfillParallelMax {
		return nil, &FieldError{Field: "parallel", Msg: fmt.Sprintf("must be 1-%d, got %d", BackfillParallelMax, parallel)}
	}
	sc, loc, err := backfillSchedule(w.Def.Cron, w.Def.Timezone)
	if err != nil {
		return nil, err
	}
	first := backfillNext(sc, loc, from.UnixMilli()-1, to.UnixMilli())
	total := 0
	for at := first; at != 0; at = backfillNext(sc, loc, at, to.UnixMilli()) {
		if total == BackfillRunsMax {
			return nil, &FieldError{Field: "to", Msg: fmt.Sprintf("the range holds more than %d fire times", BackfillRunsMax)}
		}
		total++
	}
	now := s.clk.Now().UnixMilli()
	bf := model.WorkflowBackfill{Workflow: name, From: from.UnixMilli(), To: to.UnixMilli(), Parallel: parallel, Cron: w.Def.Cron,
		Timezone: w.Def.Timezone, Total: total, Next: first, State: model.BackfillRunning, Actor: actor, CreatedAt: now, UpdatedAt: now}
	if first == 0 {
		bf.State, bf.EndedAt = model.BackfillDone, now
	}
	act := s.action(name, "", ActBackfill, actor, fmt.Sprintf("%d fire times from %s to %s, %d at once", total,
		from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), parallel))
	b := &persist.Batch{WorkflowBackfills: []persist.WorkflowBackfillPut{{Backfill: bf, Create: true}}, Actions: []model.Action{act}}
	if err := s.eng.Steps().ApplyBatch(ctx, name, b); err != nil {
		if errors.Is(err, persist.ErrWorkflowBackfillRunning) {
			return nil, fmt.Errorf("workflow %q has a backfill in progress: %w", name, ErrConflict)
		}
		return nil, err
	}
	out := &BackfillStatus{Workflow: name, Times: total, Done: bf.State != model.BackfillRunning}
	if bf.State == model.BackfillRunning {
		pumped := bf // the pump's own copy: it steps its cursor
		s.mu.Lock()
		s.backfills[name] = &pumped
		s.mu.Unlock()
		s.poke()
	}
	return out, nil
}

// backfillSchedule reads a backfill's schedule.
func backfillSchedule(spec, zone string) (cron.Schedule, *time.Location, error) {
	sc, err := cron.Parse(spec)
	if err != nil {
		return nil, nil, err
	}
	loc, _ := time.LoadLocation(zone)
	if loc == nil {
		loc = time.UTC
	}
	return sc, loc, nil
}

// backfillNext is the schedule's first fire time after after and before to, 0 for none.
func backfillNext(sc cron.Schedule, loc *time.Location, after, to int64) int64 {
	n := sc.Next(time.UnixMilli(after), loc)
	if n.IsZero() || n.UnixMilli() >= to {
		return 0
	}
	return n.UnixMilli()
}

// BackfillStatus returns the workflow's latest backfill as stored, with its runs still
// running; ErrNotFound when it has none.
func (s *Service) BackfillStatus(ctx context.Context, name string) (*BackfillStatus, error) {
	bf, err := s.st.GetWorkflowBackfill(ctx, name)
	if errors.Is(err, persist.ErrWorkflowBackfillNotFound) {
		return nil, fmt.Errorf("workflow %q has no backfill: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	running, err := s.st.CountOpenWorkflowRuns(ctx, name, triggerBackfill)
	if err != nil {
		return nil, err
	}
	return &BackfillStatus{Workflow: name, Times: bf.Total, Started: bf.Started, Skipped: bf.Skipped, Running: running,
		Done: bf.State != model.BackfillRunning && running == 0}, nil
}

// triggerBackfill is the trigger of the runs a backfill starts.
const triggerBackfill = "backfill"

// loadBackfills keeps the running backfills of the workflows this node schedules, as
// stored (a scan).
func (s *Service) loadBackfills(ctx context.Context) error {
	list, err := s.st.RunningWorkflowBackfills(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]*model.WorkflowBackfill, len(list))
	for i := range list {
		if s.eng.Steps().Owned(list[i].Workflow) {
			m[list[i].Workflow] = &list[i]
		}
	}
	s.mu.Lock()
	s.backfills = m
	s.mu.Unlock()
	return nil
}

// pumpBackfills starts each backfill's next runs while it has fewer than its parallelism
// in flight: one transaction per run, the run inserted and the cursor stepped together.
func (s *Service) pumpBackfills(ctx context.Context) {
	s.mu.Lock()
	list := make([]*model.WorkflowBackfill, 0, len(s.backfills))
	for _, b := range s.backfills {
		list = append(list, b)
	}
	s.mu.Unlock()
	for _, b := range list {
		if err := s.pump(ctx, b); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("cannot start a backfill run; the backfill is read again at the next scan", "workflow", b.Workflow, "error", err)
			}
			s.mu.Lock()
			if s.backfills[b.Workflow] == b {
				delete(s.backfills, b.Workflow)
			}
			s.mu.Unlock()
		}
	}
}

func (s *Service) pump(ctx context.Context, b *model.WorkflowBackfill) error {
	if !s.eng.Steps().Owned(b.Workflow) {
		return nil
	}
	if s.openBackfillRuns(b.Workflow) >= b.Parallel {
		return nil
	}
	w, err := s.st.GetWorkflow(ctx, b.Workflow)
	if err != nil {
		return err
	}
	sc, loc, err := backfillSchedule(b.Cron, b.Timezone)
	if err != nil {
		return err
	}
	for b.State == model.BackfillRunning && s.openBackfillRuns(b.Workflow) < b.Parallel {
		at := b.Next
		now := s.clk.Now().UnixMilli()
		nb := *b
		nb.Next, nb.UpdatedAt = backfillNext(sc, loc, at, b.To), now
		if nb.Next == 0 {
			nb.State, nb.EndedAt = model.BackfillDone, now
		}
		id := timeRunID(b.Workflow, at)
		run := model.WorkflowRun{ID: id, Workflow: b.Workflow, Version: w.Def.Version, ScheduledAt: at, Trigger: triggerBackfill,
			Params: w.Def.Params, State: model.WorkflowRunning, CreatedAt: now}
		started := nb
		started.Started++
		batch := &persist.Batch{NewWorkflowRuns: []model.WorkflowRun{run},
			WorkflowBackfills: []persist.WorkflowBackfillPut{{Backfill: started, ExpectNext: at}},
			Actions: []model.Action{s.action(b.Workflow, id, "workflow_backfill_run", b.Actor,
				triggerBackfill+" run of "+time.UnixMilli(at).UTC().Format(time.RFC3339))}}
		err := s.eng.Steps().ApplyBatch(ctx, b.Workflow, batch)
		if errors.Is(err, persist.ErrWorkflowRunExists) {
			skipped := nb
			skipped.Skipped++
			err = s.eng.Steps().ApplyBatch(ctx, b.Workflow, &persist.Batch{
				WorkflowBackfills: []persist.WorkflowBackfillPut{{Backfill: skipped, ExpectNext: at}}})
			if err != nil {
				return err
			}
			*b = skipped
			continue
		}
		if err != nil {
			return err
		}
		*b = started
		s.m.started[triggerBackfill].Inc()
		if err := s.takeUp(ctx, b.Workflow, id); err != nil {
			s.log.Warn("cannot take up a new workflow run; the next scan will", "run", id, "error", err)
		}
	}
	if b.State != model.BackfillRunning {
		s.mu.Lock()
		if s.backfills[b.Workflow] == b {
			delete(s.backfills, b.Workflow)
		}
		s.mu.Unlock()
	}
	return nil
}

// openBackfillRuns counts the backfill runs of workflow this node drives.
func (s *Service) openBackfillRuns(workflow string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, rs := range s.runs {
		if rs.workflow == workflow && rs.trigger == triggerBackfill {
			n++
		}
	}
	return n
}

// followLook bounds how many of an upstream workflow's newest runs a scan looks at.
const followLook = 20

// follow starts a run of w (trigger workflow) for each newly succeeded run of the workflow
// it follows, with that run's logical time. A run already started for that time (by this
// node before, or another) is met by its id (timeRunID); only runs that ended after w was
// created count, and those that ended while w was paused are passed over for good.
func (s *Service) follow(ctx context.Context, w model.Workflow) {
	ups, err := s.st.ListWorkflowRuns(ctx, w.Def.After, 0, followLook)
	if err != nil {
		s.log.Warn("cannot read the runs of a followed workflow", "workflow", w.Def.Name, "after", w.Def.After, "error", err)
		return
	}
	for i := len(ups) - 1; i >= 0; i-- {
		up := ups[i]
		if up.State != model.WorkflowSucceeded || up.EndedAt < w.Def.CreatedAt {
			continue
		}
		key := w.Def.Name + "\x00" + up.ID
		s.mu.Lock()
		seen := s.followed[key]
		if !seen {
			s.followed[key] = true
			if len(s.followed) > 100_000 {
				clear(s.followed) // a bound; a run met again is refused by its id
			}
		}
		s.mu.Unlock()
		if seen || w.Def.Paused {
			continue
		}
		id := timeRunID(w.Def.Name, up.ScheduledAt)
		_, err := s.create(ctx, &w, id, up.ScheduledAt, model.TriggerWorkflow, nil, "scheduler", ActRunNow)
		if err != nil && !errors.Is(err, persist.ErrWorkflowRunExists) {
			s.mu.Lock()
			delete(s.followed, key) // tried again at the next scan
			s.mu.Unlock()
			s.log.Warn("cannot start a run after the followed workflow's", "workflow", w.Def.Name, "after", up.ID, "error", err)
		}
	}
}

// pauseAfterFailures pauses a workflow whose last PauseAfterFailures runs ended failed.
func (s *Service) pauseAfterFailures(ctx context.Context, name string) {
	w, err := s.st.GetWorkflow(ctx, name)
	if err != nil || w.Def.PauseAfterFailures == 0 || w.Def.Paused {
		return
	}
	runs, err := s.st.ListWorkflowRuns(ctx, name, 0, w.Def.PauseAfterFailures+5)
	if err != nil {
		return
	}
	n := 0
	for _, r := range runs {
		if r.State == model.WorkflowRunning {
			continue
		}
		if r.State != model.WorkflowFailed {
			break
		}
		n++
	}
	if n < w.Def.PauseAfterFailures {
		return
	}
	if _, err := s.SetPaused(ctx, name, true, fmt.Sprintf("paused after %d failed runs in a row (pause_after_failures)", n), "scheduler"); err != nil {
		s.log.Warn("cannot pause a workflow after its failures", "workflow", name, "error", err)
	}
}
