package engine

import (
	"fmt"
	"time"

	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
)

// The end of a periodic run as a pure decision (design.md, "State machine", The end of a
// run). decideEnd takes what the task, the run and its outcome were, and the time, and
// returns what the end changes: the run row, the task's next runtime and action records,
// whether a retry or a next fire is armed and when, a pause on failure, the alerts and the
// counters. It reads no lock, no store and no clock and calls nothing with effects, so
// every rule is tested by a table of named cases (core_transition_test.go). The engine's side
// (complete, killLocked in core_complete.go) copies the input out of the task under t.mu, applies
// the decision to the task and commits it; nothing else about a run's end is decided there.

// endInput is everything the end of a periodic run is decided from. It is copied out of the
// task while t.mu is held; decideEnd reads nothing else.
type endInput struct {
	ID    int64
	Def   *model.TaskDef // as during the run: a pause asked for meanwhile is Def.Paused
	Sched cron.Schedule  // nil unless the trigger is cron
	Loc   *time.Location
	RT    model.Runtime // the runtime while the run was in flight (RUNNING)
	// RetryOf is the fire time of the cron fire whose retries are under way, or 0
	// (task.retryOf).
	RetryOf int64
	Deleted bool // the task was deleted during the run
	// Upstream: other tasks depend on this one, and a success releases them. Only read for
	// a success.
	Upstream bool

	Run     model.Run // the run as it was dispatched
	Outcome outcome   // how it ended; not read for a kill
	// Kill: an operator (KilledBy) killed the run.
	Kill     bool
	KilledBy string
	// KillReason is the operator's reason for the kill, or "".
	KillReason string
	Now        int64 // ms

	RetryBackoffCap  time.Duration // Config.RetryBackoffCap
	MisfireThreshold time.Duration // Config.MisfireThreshold
	// CatchupFrom and CatchupUntil are the bounds of the catch-up under way (task.catchupFrom,
	// task.catchupUntil), or 0 (core_overlap.go).
	CatchupFrom, CatchupUntil int64
}

// breakerFeed is what a run's end tells the task's circuit breaker.
type breakerFeed int

const (
	feedNone breakerFeed = iota // killed, lost or skipped: says nothing about the task's health
	feedOK
	feedFail
)

// breakerFeedOf is the breaker's reading of a result.
func breakerFeedOf(result string) breakerFeed {
	switch result {
	case model.ResultSuccess:
		return feedOK
	case model.ResultFailed, model.ResultTimeout:
		return feedFail
	}
	return feedNone
}

// endDecision is what the end of a periodic run changes. The engine applies it as it is.
type endDecision struct {
	Run  model.Run      // the run row as it ended
	RT   model.Runtime  // the task's runtime from now on; the commit sets its Version
	Acts []model.Action // the action records, in order
	// RetryOf replaces task.retryOf.
	RetryOf int64
	// RetryDelay is the backoff before the retry when RT is RETRYING: the retry fires at
	// RT.NextTriggerTime.
	RetryDelay time.Duration
	// PausedDef is the task's definition paused by pause_after_failures, or nil: it replaces
	// the task's definition and is written with the end, and RT is PAUSED with its note.
	PausedDef *model.TaskDef
	// PausedOnFailure: once the end is durable, raise the paused_on_failure alert.
	PausedOnFailure bool
	// FinalFailure is the final_failure alert's message, or "": the last attempt failed.
	FinalFailure string
	// ReleaseDownstream: once the end is durable, release the tasks that depend on this one.
	ReleaseDownstream bool
	Breaker           breakerFeed
	// Counters: axe_results_total by Run.Result always, and these when set.
	Timeout, Retried, Misfire, Killed bool
	// Refused lists the moves the state machine refused (checkTransition); the engine logs
	// them. The end's other changes stand.
	Refused []error
	// CatchupDone: the catch-up under way, if any, is over; the task's bounds clear.
	CatchupDone bool
}

// armAt is the due time the decision arms in the wheel (a retry or the next cron fire), or
// 0 when the task rests. For a jittered cron fire it is the nominal time; place arms the
// entry later by the fire's jitter (core_jitter.go).
func (d endDecision) armAt() int64 {
	if armable(d.RT.State) {
		return d.RT.NextTriggerTime
	}
	return 0
}

// decideEnd decides the end of a periodic run (see the top of this file).
func decideEnd(in endInput) endDecision {
	if in.Kill {
		return decideKill(in)
	}
	now, oc, def := in.Now, in.Outcome, in.Def
	run := endedRun(in.Run, oc, now)
	d := endDecision{Breaker: breakerFeedOf(oc.result)}

	nrt := in.RT
	nrt.LastEndTime = now
	nrt.LastExecutor = run.Executor
	nrt.CurrentTicket = ""
	nrt.NextTriggerTime = 0 // the due of the run that ended (fire); the next cycle sets its own
	// In the row written anyway: the console's "last result" and "failed within" filters.
	nrt.LastResult = oc.result
	if isFailure(oc.result) {
		nrt.LastFailureAt = now
	}
	finalFailure := false // the last attempt failed: alert (a lost run is not the task's fault)
	// The next cycle follows the cron fire this run belongs to: a retry's own scheduled time
	// is later, and fires between the two must be counted as missed, not dropped unrecorded.
	lastSched := lastSchedOf(in)
	detail := oc.result
	if oc.errText != "" {
		detail += ": " + oc.errText
	}
	switch {
	case oc.result == model.ResultSuccess:
		nrt.State = model.StateSuccess
		nrt.SuccessCount++
		nrt.Attempt = 0
		nrt.ConsecutiveFailures = 0
		// No `result` action record: the run row carries the end (ended_at, result), and
		// the timeline derives the RUNNING→SUCCESS event from it (persist.Timeline). Every
		// other end keeps its action record, whose target state the run row cannot tell.
		d.nextCycle(in, &nrt, lastSched)
	case oc.result != model.ResultLost && run.Attempt <= def.RetryCount && !def.Paused:
		// (A pause stops retries too: they are future triggers.)
		d.Timeout = oc.result == model.ResultTimeout
		delay := retryDelay(time.Duration(def.RetryIntervalSec)*time.Second, run.Attempt, in.RetryBackoffCap)
		nrt.State = model.StateRetrying
		nrt.Attempt = run.Attempt + 1
		d.RetryOf = lastSched
		d.RetryDelay = delay
		nrt.NextTriggerTime = now + delay.Milliseconds()
		d.Acts = append(d.Acts, in.action(run.Ticket, ActRetry, model.StateRunning, model.StateRetrying, ActorScheduler,
			fmt.Sprintf("%s; attempt %d in %s", detail, nrt.Attempt, delay)))
		d.Retried = true
	default:
		d.Timeout = oc.result == model.ResultTimeout
		nrt.State = model.StateFailed
		nrt.FailureCount++
		nrt.Attempt = 0
		name := ActResult
		switch oc.result {
		case model.ResultLost:
			name = ActLost
		case model.ResultTimeout:
			name = ActTimeout // a timeout is an action of its own in the audit log
			finalFailure = true
		default:
			finalFailure = true
		}
		d.Acts = append(d.Acts, in.action(run.Ticket, name, model.StateRunning, model.StateFailed, ActorScheduler, detail))
		if finalFailure {
			nrt.ConsecutiveFailures++
			d.pauseOnFailure(in, &nrt)
		}
		if d.PausedDef == nil {
			d.nextCycle(in, &nrt, lastSched)
		}
	}
	if finalFailure {
		d.FinalFailure = fmt.Sprintf("%s failed after %d attempt(s): %s", def.Name, run.Attempt, detail)
	}
	d.ReleaseDownstream = oc.result == model.ResultSuccess && in.Upstream
	d.PausedOnFailure = d.PausedDef != nil
	d.Run, d.RT = run, nrt
	return d
}

// fireInput is everything a periodic fire is decided from once the gates (breaker,
// concurrency slot) let it through, copied out of the task under t.mu.
type fireInput struct {
	ID     int64
	Def    *model.TaskDef
	RT     model.Runtime // SCHEDULED or RETRYING: the state the fire is made from
	Sched  int64         // the fire's nominal time (ms), which its ticket and run row name
	Now    int64         // ms
	Detail string        // the run row's detail (task.fireDetail)
}

// fireDecision is what a periodic fire changes: the fire record and the task's runtime in
// memory. Refused: the state machine refuses the move, and nothing fires.
type fireDecision struct {
	Run     model.Run
	RT      model.Runtime
	Refused error
}

// decideFire decides a periodic fire. The fire writes one row: its run, with result `running`,
// inserted as the fire record (docs/ha.md, "The fire record"). That row is the durable RUNNING
// marker. The runtime row keeps the state, the due time, the attempt and the version the fire was
// made from until the run's end is written, which moves it on with one compare-and-swap from that
// version; the run row carries the dispatch (dispatched_at, attempt) that a `dispatch` action
// record used to repeat, and the timeline derives that event from it (persist.Timeline). Recovery
// finds such a run through ListOpenFires (core_recover.go). In memory the task is RUNNING at once,
// at the same version: nothing was written to the runtime. See design.md, "Write path" and "Crash
// recovery". NextTriggerTime keeps the due time of the fire in flight, which is also how the open
// run is found; only SCHEDULED and RETRYING tasks are armed or loaded, so the due in memory is
// never fired again, and the run's end sets the field (decideEnd).
func decideFire(in fireInput) fireDecision {
	if err := checkTransition(in.RT.State, model.StateRunning); err != nil {
		return fireDecision{Refused: err}
	}
	attempt := 1
	if in.RT.State == model.StateRetrying {
		attempt = in.RT.Attempt
	}
	ticket := scheduledTicket(in.ID, in.Sched, attempt)
	nrt := in.RT
	nrt.State = model.StateRunning
	nrt.CurrentTicket = ticket
	nrt.Attempt = attempt
	nrt.LastTriggerTime = in.Now
	run := model.Run{
		Ticket: ticket, TaskID: in.ID, TaskName: in.Def.Name, Kind: model.RunScheduled, Attempt: attempt,
		ScheduledAt: in.Sched, DispatchedAt: in.Now, Result: model.ResultRunning,
		Executor: downstreamOf(in.Def), Detail: in.Detail,
	}
	return fireDecision{Run: run, RT: nrt}
}

// endedRun is run ended at now as oc says: its end, result, error, output, executor and
// duration (oc's, else from its dispatch to now).
func endedRun(run model.Run, oc outcome, now int64) model.Run {
	run.EndedAt = now
	run.Result = oc.result
	run.Error = oc.errText
	run.Output = oc.output
	if oc.executor != "" {
		run.Executor = oc.executor
	}
	run.DurationMS = oc.duration.Milliseconds()
	if oc.duration == 0 {
		run.DurationMS = now - run.DispatchedAt
	}
	return run
}

// decideKill decides the end of a run killed by in.KilledBy: the run is KILLED and the task
// goes on to WAITING, then to its next cron fire, or rests PAUSED when a pause was asked
// for during the run. A kill is an operator's act: it neither counts as a failure nor
// resets the count, feeds no breaker and leaves retryOf as it was.
func decideKill(in endInput) endDecision {
	now := in.Now
	run := in.Run
	run.EndedAt = now
	run.Result = model.ResultKilled
	run.Error = killText(in.KilledBy, in.KillReason)
	run.DurationMS = now - run.DispatchedAt
	d := endDecision{RetryOf: in.RetryOf, Killed: true}
	nrt := in.RT
	nrt.LastEndTime = now
	nrt.LastResult = model.ResultKilled
	nrt.CurrentTicket = ""
	nrt.NextTriggerTime = 0 // the due of the killed run (see fire)
	nrt.Attempt = 0
	nrt.State = model.StateWaiting
	d.Acts = []model.Action{
		in.action(run.Ticket, ActKill, model.StateRunning, model.StateKilled, in.KilledBy, in.KillReason),
		in.action(run.Ticket, ActSchedule, model.StateKilled, model.StateWaiting, ActorScheduler, ""),
	}
	switch {
	case in.Def.Paused:
		nrt.State = model.StatePaused
		d.Acts[1].To = model.StatePaused
		d.Acts[1].Action = ActPause
		d.Acts[1].Detail = "pause requested during the run takes effect"
	case in.Def.Trigger == model.TriggerCron:
		p := d.plan(in, run.ScheduledAt, model.StateWaiting)
		if p.Next != 0 {
			nrt.State = model.StateScheduled
			nrt.NextTriggerTime = p.Next
			d.Acts = append(d.Acts, in.action("", ActSchedule, model.StateWaiting, model.StateScheduled, ActorScheduler,
				"next fire "+time.UnixMilli(p.Next).In(in.Loc).Format(time.RFC3339)+p.Note))
		}
	}
	d.Run, d.RT = run, nrt
	return d
}

// nextCycle moves a task that just finished a run (SUCCESS or FAILED in nrt) to where it
// waits next: SCHEDULED with the next cron fire, PAUSED when a pause was requested during the
// run, WAITING for dependency tasks; one-shot tasks rest where they are.
func (d *endDecision) nextCycle(in endInput, nrt *model.Runtime, lastSched int64) {
	from := nrt.State
	to := from
	detail := ""
	switch {
	case in.Def.Paused:
		to = model.StatePaused
		nrt.NextTriggerTime = in.pausedNext(lastSched)
		detail = "pause requested during the run takes effect"
	case in.Def.Trigger == model.TriggerCron:
		p := d.plan(in, lastSched, from)
		if p.Next == 0 {
			detail = "the cron expression fires no more"
			break
		}
		to = model.StateScheduled
		nrt.NextTriggerTime = p.Next
		detail = "next fire " + time.UnixMilli(p.Next).In(in.Loc).Format(time.RFC3339) + p.Note
	case in.Def.Trigger == model.TriggerDependency:
		to = model.StateWaiting
		detail = "waiting for upstreams"
	default:
		return
	}
	if to == from {
		return
	}
	if err := checkTransition(from, to); err != nil {
		d.Refused = append(d.Refused, fmt.Errorf("next cycle: %w", err))
		return
	}
	nrt.State = to
	name := ActSchedule
	if to == model.StatePaused {
		name = ActPause
	}
	d.Acts = append(d.Acts, in.action("", name, from, to, ActorScheduler, detail))
}

// pauseOnFailure pauses the task when the failure that ended its run (already counted in
// nrt) reaches its pause_after_failures (core_pausefail.go): nrt goes from FAILED to PAUSED with a
// note, a pause action is added and d.PausedDef is the paused definition. It changes nothing
// when the task has no bound, is below it, is paused already (a pause asked for during the
// run takes effect through nextCycle), or was deleted during the run (only its run and
// action records land).
func (d *endDecision) pauseOnFailure(in endInput, nrt *model.Runtime) {
	n := in.Def.PauseAfterFailures
	if n <= 0 || nrt.ConsecutiveFailures < n || in.Def.Paused || in.Deleted {
		return
	}
	if err := checkTransition(nrt.State, model.StatePaused); err != nil {
		d.Refused = append(d.Refused, fmt.Errorf("pause on failure: %w", err))
		return
	}
	def := *in.Def
	def.Paused = true
	def.UpdatedAt = in.Now
	note := pausedOnFailureNote(nrt.ConsecutiveFailures, n)
	from := nrt.State
	nrt.State = model.StatePaused
	nrt.Note = note
	nrt.PausedBy = model.PausedByFailures
	nrt.NextTriggerTime = in.pausedNext(lastSchedOf(in)) // as a pause during the run leaves it (nextCycle)
	d.Acts = append(d.Acts, in.action("", ActPause, from, model.StatePaused, ActorScheduler, note))
	d.PausedDef = &def
}

// plan decides the cron fire after last (decideNext) and adds its overlap and catch-up
// records, made in state st, to d.
func (d *endDecision) plan(in endInput, last int64, st model.State) nextPlan {
	p := decideNext(nextInput{
		Span:    fireSpan{sched: in.Sched, loc: in.Loc, name: in.Def.Name, jitterSec: in.Def.JitterSec},
		Overlap: in.Def.OverlapPolicy, Misfire: in.Def.MisfirePolicy, Threshold: in.MisfireThreshold,
		CatchupFrom: in.CatchupFrom, CatchupUntil: in.CatchupUntil, Last: last, Now: in.Now,
	})
	d.Misfire = d.Misfire || p.Misfire
	d.CatchupDone = p.CatchupDone
	for _, r := range p.Records {
		d.Acts = append(d.Acts, in.action(in.Run.Ticket, r.action, st, st, ActorScheduler, r.detail))
	}
	return p
}

// pausedNext is the due time a cron task paused at the end of a run keeps for its resume:
// the first fire after the end, or during a catch-up the next missed fire, so that resume's
// catch-up (or misfire policy) decides the fires the catch-up had not run yet.
func (in *endInput) pausedNext(lastSched int64) int64 {
	if in.CatchupUntil > 0 && in.Sched != nil {
		if n := cronAfter(in.Sched, in.Loc, lastSched); n != 0 && n+JitterOffset(in.Def.Name, n, in.Def.JitterSec) <= in.CatchupUntil {
			return n
		}
	}
	return cronAfter(in.Sched, in.Loc, in.Now)
}

// lastSchedOf is the cron fire the run that ended belongs to: a retry's own scheduled time is
// later than the fire whose retries it is.
func lastSchedOf(in endInput) int64 {
	if in.Run.Attempt > 1 && in.RetryOf > 0 && in.RetryOf < in.Run.ScheduledAt {
		return in.RetryOf
	}
	return in.Run.ScheduledAt
}

// action is an action record of the task at in.Now.
func (in *endInput) action(ticket, name string, from, to model.State, actor, detail string) model.Action {
	return model.Action{
		TaskID: in.ID, TaskName: in.Def.Name, Ticket: ticket, Action: name,
		From: from, To: to, Actor: actor, At: in.Now, Detail: detail,
	}
}

// cronAfter returns the first fire of sched strictly after `after` (ms) in loc, or 0 when
// none (or sched is nil).
func cronAfter(sched cron.Schedule, loc *time.Location, after int64) int64 {
	if sched == nil {
		return 0
	}
	n := sched.Next(time.UnixMilli(after), loc)
	if n.IsZero() {
		return 0
	}
	return n.UnixMilli()
}

// fireAfter returns the cron fire that follows lastSched given the time now, a note for the
// action record, and whether the fire misfired. Fires missed while the run overran (or while
// no scheduler ran) are coalesced: at most one of them fires. A fire later than threshold
// follows the task's misfire policy (design.md, "Window and cold entries"): fire_once fires
// the latest missed one now, skip goes on to the first fire after now.
//
// The times returned are nominal. A fire is missed, and late, by the time it was meant to
// leave: its nominal time plus the jitter of the task named name with bound jitterSec
// (design.md, Jitter). Jitter is below the schedule's smallest gap, so those times are in
// the order of the nominal ones.
func fireAfter(sched cron.Schedule, loc *time.Location, policy string, threshold time.Duration, name string, jitterSec int, lastSched, now int64) (int64, string, bool) {
	at := func(n int64) int64 { return n + JitterOffset(name, n, jitterSec) }
	n := cronAfter(sched, loc, lastSched)
	if n == 0 || at(n) > now {
		return n, "", false
	}
	missed := 0
	after := int64(-1) // the first fire after the missed ones, when the loop found it
	for i := 0; i < 100000; i++ {
		m := cronAfter(sched, loc, n)
		if m == 0 || at(m) > now {
			after = m
			break
		}
		n = m
		missed++
	}
	if now-at(n) <= threshold.Milliseconds() {
		if missed == 0 {
			return n, "", false
		}
		return n, fmt.Sprintf(" (%d earlier fire(s) missed while running, coalesced)", missed), false
	}
	if policy == model.MisfireSkip {
		if after < 0 {
			after = cronAfter(sched, loc, now)
		}
		return after, fmt.Sprintf(" (misfire: %d fire(s) skipped)", missed+1), true
	}
	return n, fmt.Sprintf(" (misfire: fire_once, %d fire(s) coalesced into one)", missed+1), true
}

// retryDelay is the retry backoff: the interval for retries 1 and 2, then doubling from the
// third, capped at max(capD, interval).
func retryDelay(interval time.Duration, retry int, capD time.Duration) time.Duration {
	if retry <= 2 {
		return interval
	}
	if capD < interval {
		capD = interval
	}
	d := interval
	for i := 2; i < retry; i++ {
		d *= 2
		if d >= capD || d <= 0 {
			return capD
		}
	}
	return d
}
