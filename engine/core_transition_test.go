package engine

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
)

// The end of a periodic run, rule by rule: every row is one named case of decideEnd
// (core_transition.go), the table the engine's complete and Kill apply.

var (
	e0   = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC).UnixMilli() // a fire of the hourly base task
	eSec = int64(1000)
	eHr  = 3600 * eSec
)

// endRow is one case: changes to the base input, and what the decision must say.
type endRow struct {
	name string
	def  func(*model.TaskDef)
	in   func(*endInput)
	oc   outcome
	want endWant
}

// endWant is the decision a row expects, field by field. Zero fields are checked too.
type endWant struct {
	state      model.State
	attempt    int
	next       int64 // RT.NextTriggerTime
	arm        int64 // armAt: the retry or fire armed in the wheel, 0 when the task rests
	retryDelay time.Duration
	retryOf    int64
	acts       []string // "action FROM>TO", in order
	detail     string   // a substring of the last action's detail, when set
	// overlap is a substring of the overlap or catch-up action's detail, when set.
	overlap string
	actor   string // the first action's actor, when set

	result      string // Run.Result
	runError    string
	durationMS  int64
	executor    string
	consecutive int
	successes   int64
	failures    int64
	failureAt   bool // LastFailureAt set to now

	pausedDef    bool
	note         string // RT.Note
	finalFailure string // a substring of the alert's message, "" for no alert
	release      bool
	breaker      breakerFeed

	timeout, retried, misfire, killed bool
}

// baseEnd is an hourly cron task, two retries 10 s apart, whose first attempt of the fire at
// e0 was dispatched at e0 and ends 30 s later.
func baseEnd(tb testing.TB, row endRow) endInput {
	tb.Helper()
	def := model.TaskDef{
		ID: 7, Name: "nightly", Group: "g", Trigger: model.TriggerCron, Cron: "0 * * * *", Timezone: "UTC",
		RetryCount: 2, RetryIntervalSec: 10, MisfirePolicy: model.MisfireFireOnce, UpdatedAt: e0 - eHr,
	}
	if row.def != nil {
		row.def(&def)
	}
	t, err := newTask(&model.Task{Def: def})
	if err != nil {
		tb.Fatal(err)
	}
	rt := model.Runtime{
		TaskID: 7, State: model.StateRunning, CurrentTicket: scheduledTicket(7, e0, 1), Attempt: 1,
		NextTriggerTime: e0, LastTriggerTime: e0, Version: 12, SuccessCount: 5, FailureCount: 3,
		ConsecutiveFailures: 2, LastExecutor: "old:1",
	}
	in := endInput{
		ID: t.id, Def: t.def, Sched: t.sched, Loc: t.loc, RT: rt,
		Run: model.Run{
			Ticket: rt.CurrentTicket, TaskID: 7, TaskName: def.Name, Kind: model.RunScheduled, Attempt: 1,
			ScheduledAt: e0, DispatchedAt: e0, Result: model.ResultRunning, Executor: "host:80",
		},
		Outcome:         row.oc,
		Now:             e0 + 30*eSec,
		RetryBackoffCap: time.Hour, MisfireThreshold: time.Minute,
	}
	if row.in != nil {
		row.in(&in)
	}
	in.RT.Attempt = in.Run.Attempt
	return in
}

var (
	ocOK      = outcome{result: model.ResultSuccess, duration: 2 * time.Second, executor: "exec-a"}
	ocFailed  = outcome{result: model.ResultFailed, errText: "HTTP 500"}
	ocTimeout = outcome{result: model.ResultTimeout, errText: "no response within timeout_sec"}
	ocLost    = outcome{result: model.ResultLost, errText: "executor lost"}
)

func atAttempt(n int, sched int64) func(*endInput) {
	return func(in *endInput) { in.Run.Attempt, in.Run.ScheduledAt, in.Run.DispatchedAt = n, sched, sched }
}

func endingAt(now int64) func(*endInput) { return func(in *endInput) { in.Now = now } }

func allOf(fs ...func(*endInput)) func(*endInput) {
	return func(in *endInput) {
		for _, f := range fs {
			f(in)
		}
	}
}

func pauseRequested(d *model.TaskDef) { d.Paused = true }
func pauseAfter(n int) func(*model.TaskDef) {
	return func(d *model.TaskDef) { d.PauseAfterFailures = n }
}
func withTrigger(tr string) func(*model.TaskDef) {
	return func(d *model.TaskDef) { d.Trigger, d.Cron = tr, "" }
}
func killBy(actor string) func(*endInput) {
	return func(in *endInput) { in.Kill, in.KilledBy = true, actor }
}

var endRows = []endRow{
	// Success.
	{name: "cron success arms the next fire (SUCCESS→SCHEDULED)", oc: ocOK, want: endWant{
		state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr, acts: []string{"schedule SUCCESS>SCHEDULED"},
		detail: "next fire 2026-01-01T11:00:00Z", result: model.ResultSuccess, durationMS: 2000, executor: "exec-a",
		successes: 6, failures: 3, breaker: feedOK,
	}},
	{name: "success of an upstream releases its downstream tasks once durable", oc: ocOK,
		in: func(in *endInput) { in.Upstream = true }, want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr, acts: []string{"schedule SUCCESS>SCHEDULED"},
			result: model.ResultSuccess, durationMS: 2000, executor: "exec-a", successes: 6, failures: 3,
			release: true, breaker: feedOK,
		}},
	{name: "a failure of an upstream releases nothing", oc: ocFailed,
		in: allOf(atAttempt(3, e0), func(in *endInput) { in.Upstream = true }), want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
			acts: []string{"result RUNNING>FAILED", "schedule FAILED>SCHEDULED"}, result: model.ResultFailed,
			runError: "HTTP 500", durationMS: 30000, executor: "host:80", consecutive: 3, successes: 5, failures: 4,
			failureAt: true, finalFailure: "nightly failed after 3 attempt(s): failed: HTTP 500", breaker: feedFail,
		}},
	{name: "one-shot (delay) success rests SUCCESS", oc: ocOK, def: withTrigger(model.TriggerDelay), want: endWant{
		state: model.StateSuccess, result: model.ResultSuccess, durationMS: 2000, executor: "exec-a",
		successes: 6, failures: 3, breaker: feedOK,
	}},
	{name: "dependency success waits for its upstreams again (SUCCESS→WAITING)", oc: ocOK,
		def: withTrigger(model.TriggerDependency), want: endWant{
			state: model.StateWaiting, acts: []string{"schedule SUCCESS>WAITING"}, detail: "waiting for upstreams",
			result: model.ResultSuccess, durationMS: 2000, executor: "exec-a", successes: 6, failures: 3, breaker: feedOK,
		}},
	{name: "cron that fires no more rests SUCCESS", oc: ocOK,
		def: func(d *model.TaskDef) { d.Cron = "0 0 10 1 1 ? 2026" }, want: endWant{
			state: model.StateSuccess, result: model.ResultSuccess, durationMS: 2000, executor: "exec-a",
			successes: 6, failures: 3, breaker: feedOK,
		}},

	// Retries.
	{name: "failure with retries left retries after the interval (RUNNING→RETRYING)", oc: ocFailed, want: endWant{
		state: model.StateRetrying, attempt: 2, next: e0 + 40*eSec, arm: e0 + 40*eSec, retryDelay: 10 * time.Second,
		retryOf: e0, acts: []string{"retry RUNNING>RETRYING"}, detail: "failed: HTTP 500; attempt 2 in 10s",
		result: model.ResultFailed, runError: "HTTP 500", durationMS: 30000, executor: "host:80", consecutive: 2,
		successes: 5, failures: 3, failureAt: true, breaker: feedFail, retried: true,
	}},
	{name: "timeout with retries left retries and counts a timeout", oc: ocTimeout, want: endWant{
		state: model.StateRetrying, attempt: 2, next: e0 + 40*eSec, arm: e0 + 40*eSec, retryDelay: 10 * time.Second,
		retryOf: e0, acts: []string{"retry RUNNING>RETRYING"}, detail: "timeout: no response within timeout_sec; attempt 2",
		result: model.ResultTimeout, runError: "no response within timeout_sec", durationMS: 30000, executor: "host:80",
		consecutive: 2, successes: 5, failures: 3, failureAt: true, breaker: feedFail, retried: true, timeout: true,
	}},
	{name: "the last retry is still sent (attempt 2 of 1+2)", oc: ocFailed,
		in: allOf(atAttempt(2, e0+10*eSec), func(in *endInput) { in.RetryOf = e0 }), want: endWant{
			state: model.StateRetrying, attempt: 3, next: e0 + 40*eSec, arm: e0 + 40*eSec, retryDelay: 10 * time.Second,
			retryOf: e0, acts: []string{"retry RUNNING>RETRYING"}, detail: "attempt 3 in 10s", result: model.ResultFailed,
			runError: "HTTP 500", durationMS: 20000, executor: "host:80", consecutive: 2, successes: 5, failures: 3,
			failureAt: true, breaker: feedFail, retried: true,
		}},
	{name: "no retries: the first failure is the last", oc: ocFailed, def: func(d *model.TaskDef) { d.RetryCount = 0 },
		want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
			acts: []string{"result RUNNING>FAILED", "schedule FAILED>SCHEDULED"}, result: model.ResultFailed,
			runError: "HTTP 500", durationMS: 30000, executor: "host:80", consecutive: 3, successes: 5, failures: 4,
			failureAt: true, finalFailure: "nightly failed after 1 attempt(s)", breaker: feedFail,
		}},
	{name: "the third retry waits twice the interval", oc: ocFailed, def: func(d *model.TaskDef) { d.RetryCount = 5 },
		in: atAttempt(3, e0+20*eSec), want: endWant{
			state: model.StateRetrying, attempt: 4, next: e0 + 50*eSec, arm: e0 + 50*eSec, retryDelay: 20 * time.Second,
			retryOf: e0 + 20*eSec, acts: []string{"retry RUNNING>RETRYING"}, detail: "attempt 4 in 20s",
			result: model.ResultFailed, runError: "HTTP 500", durationMS: 10000, executor: "host:80", consecutive: 2,
			successes: 5, failures: 3, failureAt: true, breaker: feedFail, retried: true,
		}},
	{name: "the backoff stops at retry_backoff_cap", oc: ocFailed, def: func(d *model.TaskDef) { d.RetryCount = 10 },
		in: allOf(atAttempt(8, e0), func(in *endInput) { in.RetryBackoffCap = 30 * time.Second; in.RetryOf = e0 }), want: endWant{
			state: model.StateRetrying, attempt: 9, next: e0 + 60*eSec, arm: e0 + 60*eSec, retryDelay: 30 * time.Second,
			retryOf: e0, acts: []string{"retry RUNNING>RETRYING"}, result: model.ResultFailed, runError: "HTTP 500",
			durationMS: 30000, executor: "host:80", consecutive: 2, successes: 5, failures: 3, failureAt: true,
			breaker: feedFail, retried: true,
		}},
	{name: "a pause requested during the run stops retries (FAILED→PAUSED)", oc: ocFailed, def: pauseRequested, want: endWant{
		state: model.StatePaused, next: e0 + eHr, acts: []string{"result RUNNING>FAILED", "pause FAILED>PAUSED"},
		detail: "pause requested during the run takes effect", result: model.ResultFailed, runError: "HTTP 500",
		durationMS: 30000, executor: "host:80", consecutive: 3, successes: 5, failures: 4, failureAt: true,
		finalFailure: "after 1 attempt(s)", breaker: feedFail,
	}},

	// The last attempt.
	{name: "last retry failed: FAILED, then the next cycle (FAILED→SCHEDULED)", oc: ocFailed,
		in: allOf(atAttempt(3, e0+20*eSec), endingAt(e0+50*eSec), func(in *endInput) { in.RetryOf = e0 }), want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
			acts: []string{"result RUNNING>FAILED", "schedule FAILED>SCHEDULED"}, result: model.ResultFailed,
			runError: "HTTP 500", durationMS: 30000, executor: "host:80", consecutive: 3, successes: 5, failures: 4,
			failureAt: true, finalFailure: "nightly failed after 3 attempt(s): failed: HTTP 500", breaker: feedFail,
		}},
	{name: "last attempt timed out: a timeout action and a final failure", oc: ocTimeout, in: atAttempt(3, e0), want: endWant{
		state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
		acts: []string{"timeout RUNNING>FAILED", "schedule FAILED>SCHEDULED"}, result: model.ResultTimeout,
		runError: "no response within timeout_sec", durationMS: 30000, executor: "host:80", consecutive: 3,
		successes: 5, failures: 4, failureAt: true, finalFailure: "failed after 3 attempt(s): timeout",
		breaker: feedFail, timeout: true,
	}},
	{name: "a lost run fails at once, with no retry, alert, count or breaker", oc: ocLost, want: endWant{
		state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
		acts: []string{"lost RUNNING>FAILED", "schedule FAILED>SCHEDULED"}, result: model.ResultLost,
		runError: "executor lost", durationMS: 30000, executor: "host:80", consecutive: 2, successes: 5, failures: 4,
		failureAt: true,
	}},
	{name: "one-shot (delay) final failure rests FAILED", oc: ocFailed, def: withTrigger(model.TriggerDelay),
		in: atAttempt(3, e0), want: endWant{
			state: model.StateFailed, acts: []string{"result RUNNING>FAILED"}, result: model.ResultFailed,
			runError: "HTTP 500", durationMS: 30000, executor: "host:80", consecutive: 3, successes: 5, failures: 4,
			failureAt: true, finalFailure: "after 3 attempt(s)", breaker: feedFail,
		}},
	{name: "dependency final failure waits for its upstreams again (FAILED→WAITING)", oc: ocFailed,
		def: withTrigger(model.TriggerDependency), in: atAttempt(3, e0), want: endWant{
			state: model.StateWaiting, acts: []string{"result RUNNING>FAILED", "schedule FAILED>WAITING"},
			result: model.ResultFailed, runError: "HTTP 500", durationMS: 30000, executor: "host:80", consecutive: 3,
			successes: 5, failures: 4, failureAt: true, finalFailure: "after 3 attempt(s)", breaker: feedFail,
		}},

	// A pause requested while the run was in flight.
	{name: "a pause requested during the run takes effect at a success (SUCCESS→PAUSED)", oc: ocOK, def: pauseRequested,
		want: endWant{
			state: model.StatePaused, next: e0 + eHr, acts: []string{"pause SUCCESS>PAUSED"},
			detail: "pause requested during the run takes effect", result: model.ResultSuccess, durationMS: 2000,
			executor: "exec-a", successes: 6, failures: 3, breaker: feedOK,
		}},
	{name: "a one-shot paused during its run rests PAUSED with no due time", oc: ocOK,
		def: func(d *model.TaskDef) { withTrigger(model.TriggerDelay)(d); d.Paused = true }, want: endWant{
			state: model.StatePaused, acts: []string{"pause SUCCESS>PAUSED"}, result: model.ResultSuccess,
			durationMS: 2000, executor: "exec-a", successes: 6, failures: 3, breaker: feedOK,
		}},

	// Pause on failure.
	{name: "pause_after_failures reached: FAILED→PAUSED with a note and the paused definition", oc: ocFailed,
		def: pauseAfter(3), in: atAttempt(3, e0), want: endWant{
			state: model.StatePaused, next: e0 + eHr, acts: []string{"result RUNNING>FAILED", "pause FAILED>PAUSED"},
			detail: "paused after 3 consecutive failed runs (pause_after_failures: 3)", result: model.ResultFailed,
			runError: "HTTP 500", durationMS: 30000, executor: "host:80", consecutive: 3, successes: 5, failures: 4,
			failureAt: true, pausedDef: true,
			note:         "paused after 3 consecutive failed runs (pause_after_failures: 3); resume to run it again",
			finalFailure: "after 3 attempt(s)", breaker: feedFail,
		}},
	{name: "a timeout counts towards pause_after_failures", oc: ocTimeout, def: pauseAfter(1), in: allOf(atAttempt(3, e0),
		func(in *endInput) { in.RT.ConsecutiveFailures = 0 }), want: endWant{
		state: model.StatePaused, next: e0 + eHr, acts: []string{"timeout RUNNING>FAILED", "pause FAILED>PAUSED"},
		result: model.ResultTimeout, runError: "no response within timeout_sec", durationMS: 30000, executor: "host:80",
		consecutive: 1, successes: 5, failures: 4, failureAt: true, pausedDef: true,
		note:         "paused after 1 consecutive failed runs (pause_after_failures: 1); resume to run it again",
		finalFailure: "after 3 attempt(s)", breaker: feedFail, timeout: true,
	}},
	{name: "below pause_after_failures: counted, and the next fire", oc: ocFailed, def: pauseAfter(4),
		in: atAttempt(3, e0), want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
			acts: []string{"result RUNNING>FAILED", "schedule FAILED>SCHEDULED"}, result: model.ResultFailed,
			runError: "HTTP 500", durationMS: 30000, executor: "host:80", consecutive: 3, successes: 5, failures: 4,
			failureAt: true, finalFailure: "after 3 attempt(s)", breaker: feedFail,
		}},
	{name: "a retry is no failed run: it neither counts nor pauses", oc: ocFailed, def: pauseAfter(1), want: endWant{
		state: model.StateRetrying, attempt: 2, next: e0 + 40*eSec, arm: e0 + 40*eSec, retryDelay: 10 * time.Second,
		retryOf: e0, acts: []string{"retry RUNNING>RETRYING"}, result: model.ResultFailed, runError: "HTTP 500",
		durationMS: 30000, executor: "host:80", consecutive: 2, successes: 5, failures: 3, failureAt: true,
		breaker: feedFail, retried: true,
	}},
	{name: "a lost run neither counts nor pauses", oc: ocLost, def: pauseAfter(1), want: endWant{
		state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
		acts: []string{"lost RUNNING>FAILED", "schedule FAILED>SCHEDULED"}, result: model.ResultLost,
		runError: "executor lost", durationMS: 30000, executor: "host:80", consecutive: 2, successes: 5, failures: 4,
		failureAt: true,
	}},
	{name: "a success sets the count back to 0", oc: ocOK, def: pauseAfter(3), want: endWant{
		state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr, acts: []string{"schedule SUCCESS>SCHEDULED"},
		result: model.ResultSuccess, durationMS: 2000, executor: "exec-a", successes: 6, failures: 3, breaker: feedOK,
	}},
	{name: "bound reached while a pause was requested: the user's pause, no second one", oc: ocFailed,
		def: func(d *model.TaskDef) { d.PauseAfterFailures = 3; d.Paused = true }, in: atAttempt(3, e0), want: endWant{
			state: model.StatePaused, next: e0 + eHr, acts: []string{"result RUNNING>FAILED", "pause FAILED>PAUSED"},
			detail: "pause requested during the run takes effect", result: model.ResultFailed, runError: "HTTP 500",
			durationMS: 30000, executor: "host:80", consecutive: 3, successes: 5, failures: 4, failureAt: true,
			finalFailure: "after 3 attempt(s)", breaker: feedFail,
		}},
	{name: "bound reached by a task deleted during the run: counted, not paused", oc: ocFailed, def: pauseAfter(3),
		in: allOf(atAttempt(3, e0), func(in *endInput) { in.Deleted = true }), want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
			acts: []string{"result RUNNING>FAILED", "schedule FAILED>SCHEDULED"}, result: model.ResultFailed,
			runError: "HTTP 500", durationMS: 30000, executor: "host:80", consecutive: 3, successes: 5, failures: 4,
			failureAt: true, finalFailure: "after 3 attempt(s)", breaker: feedFail,
		}},

	// Overruns and misfires: the next cycle counts from the fire the run belongs to.
	{name: "fires missed while the run overran are coalesced into one", oc: ocOK, in: endingAt(e0 + 2*eHr + 30*eSec),
		want: endWant{
			state: model.StateScheduled, next: e0 + 2*eHr, arm: e0 + 2*eHr, acts: []string{"overlap SUCCESS>SUCCESS", "schedule SUCCESS>SCHEDULED"},
			detail: "(overlap: buffer_one)", overlap: "buffer_one: the latest fire due while the run was in flight, 2026-01-01T12:00:00Z, runs now; 1 fire(s) (2026-01-01T11:00:00Z) before it skipped", result: model.ResultSuccess,
			durationMS: 2000, executor: "exec-a", successes: 6, failures: 3, breaker: feedOK,
		}},
	{name: "an overrun past the misfire threshold under fire_once fires the latest missed fire", oc: ocOK,
		in: endingAt(e0 + 2*eHr + 5*60*eSec), want: endWant{
			state: model.StateScheduled, next: e0 + 2*eHr, arm: e0 + 2*eHr, acts: []string{"overlap SUCCESS>SUCCESS", "schedule SUCCESS>SCHEDULED"},
			detail: "(overlap: buffer_one)", overlap: "2026-01-01T12:00:00Z, runs now; 1 fire(s) (2026-01-01T11:00:00Z) before it skipped", result: model.ResultSuccess,
			durationMS: 2000, executor: "exec-a", successes: 6, failures: 3, breaker: feedOK, misfire: true,
		}},
	{name: "an overrun past the misfire threshold under skip goes on to the first fire after now", oc: ocOK,
		def: func(d *model.TaskDef) { d.MisfirePolicy = model.MisfireSkip }, in: endingAt(e0 + 2*eHr + 5*60*eSec),
		want: endWant{
			state: model.StateScheduled, next: e0 + 3*eHr, arm: e0 + 3*eHr, acts: []string{"overlap SUCCESS>SUCCESS", "schedule SUCCESS>SCHEDULED"},
			detail: "(overlap: buffer_one, a misfire under misfire_policy skip)", overlap: "buffer_one: 2 fire(s) (2026-01-01T11:00:00Z to 2026-01-01T12:00:00Z) due while the run was in flight skipped", result: model.ResultSuccess, durationMS: 2000, executor: "exec-a",
			successes: 6, failures: 3, breaker: feedOK, misfire: true,
		}},
	// Jitter (design.md, Jitter): a fire is missed and late by nominal + offset. The offset of
	// nightly's fire at e0+1h for a bound of 3000 s is 259,842 ms (JitterOffset).
	{name: "jitter: a fire whose nominal time passed during the run but not its offset is not missed", oc: ocOK,
		def: func(d *model.TaskDef) { d.JitterSec = 3000 }, in: endingAt(e0 + eHr + 120*eSec), want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr, acts: []string{"schedule SUCCESS>SCHEDULED"},
			detail: "next fire 2026-01-01T11:00:00Z", result: model.ResultSuccess, durationMS: 2000, executor: "exec-a",
			successes: 6, failures: 3, breaker: feedOK,
		}},
	{name: "jitter: a fire later than the threshold past nominal + offset misfires", oc: ocOK,
		def: func(d *model.TaskDef) { d.JitterSec = 3000 }, in: endingAt(e0 + eHr + 259_842 + 120*eSec), want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr, acts: []string{"overlap SUCCESS>SUCCESS", "schedule SUCCESS>SCHEDULED"},
			detail: "(overlap: buffer_one)", overlap: "the latest fire due while the run was in flight, 2026-01-01T11:00:00Z, runs now", result: model.ResultSuccess, durationMS: 2000,
			executor: "exec-a", successes: 6, failures: 3, breaker: feedOK, misfire: true,
		}},
	{name: "a retry's end counts from the original fire, so the fire its retries overran still fires", oc: ocFailed,
		in: allOf(atAttempt(3, e0+eHr+10*eSec), endingAt(e0+eHr+20*eSec), func(in *endInput) { in.RetryOf = e0 }), want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
			acts: []string{"result RUNNING>FAILED", "overlap FAILED>FAILED", "schedule FAILED>SCHEDULED"}, detail: "next fire 2026-01-01T11:00:00Z",
			result: model.ResultFailed, runError: "HTTP 500", durationMS: 10000, executor: "host:80", consecutive: 3,
			successes: 5, failures: 4, failureAt: true, finalFailure: "after 3 attempt(s)", breaker: feedFail,
		}},
	{name: "a first attempt ignores a retryOf left over (by a kill)", oc: ocOK,
		in: allOf(atAttempt(1, e0+eHr), endingAt(e0+eHr+20*eSec), func(in *endInput) { in.RetryOf = e0 }), want: endWant{
			state: model.StateScheduled, next: e0 + 2*eHr, arm: e0 + 2*eHr, acts: []string{"schedule SUCCESS>SCHEDULED"},
			result: model.ResultSuccess, durationMS: 2000, executor: "exec-a", successes: 6, failures: 3, breaker: feedOK,
		}},

	// Kills: an operator's act.
	{name: "kill of a cron run: KILLED, WAITING, then the next fire", in: killBy("alice"), want: endWant{
		state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
		acts:  []string{"kill RUNNING>KILLED", "schedule KILLED>WAITING", "schedule WAITING>SCHEDULED"},
		actor: "alice", result: model.ResultKilled, runError: "killed by alice", durationMS: 30000, executor: "host:80",
		consecutive: 2, successes: 5, failures: 3, killed: true,
	}},
	{name: "kill while a pause was requested rests PAUSED (KILLED→PAUSED)", def: pauseRequested, in: killBy("alice"),
		want: endWant{
			state: model.StatePaused, acts: []string{"kill RUNNING>KILLED", "pause KILLED>PAUSED"},
			detail: "pause requested during the run takes effect", result: model.ResultKilled,
			runError: "killed by alice", durationMS: 30000, executor: "host:80", consecutive: 2, successes: 5,
			failures: 3, killed: true,
		}},
	{name: "kill of a one-shot (delay) rests WAITING (KILLED→WAITING)", def: withTrigger(model.TriggerDelay),
		in: killBy("alice"), want: endWant{
			state: model.StateWaiting, acts: []string{"kill RUNNING>KILLED", "schedule KILLED>WAITING"},
			result: model.ResultKilled, runError: "killed by alice", durationMS: 30000, executor: "host:80",
			consecutive: 2, successes: 5, failures: 3, killed: true,
		}},
	{name: "kill of a dependency task waits for its upstreams", def: withTrigger(model.TriggerDependency),
		in: killBy("alice"), want: endWant{
			state: model.StateWaiting, acts: []string{"kill RUNNING>KILLED", "schedule KILLED>WAITING"},
			result: model.ResultKilled, runError: "killed by alice", durationMS: 30000, executor: "host:80",
			consecutive: 2, successes: 5, failures: 3, killed: true,
		}},
	{name: "kill of a retry counts from the killed run's own fire and keeps retryOf",
		in: allOf(killBy("alice"), atAttempt(2, e0+eHr+10*eSec), endingAt(e0+eHr+20*eSec), func(in *endInput) { in.RetryOf = e0 }),
		want: endWant{
			state: model.StateScheduled, next: e0 + 2*eHr, arm: e0 + 2*eHr, retryOf: e0,
			acts:   []string{"kill RUNNING>KILLED", "schedule KILLED>WAITING", "schedule WAITING>SCHEDULED"},
			result: model.ResultKilled, runError: "killed by alice", durationMS: 10000, executor: "host:80",
			consecutive: 2, successes: 5, failures: 3, killed: true,
		}},
	{name: "kill of an overrun past the threshold under skip misfires", def: func(d *model.TaskDef) { d.MisfirePolicy = model.MisfireSkip },
		in: allOf(killBy("alice"), endingAt(e0+eHr+5*60*eSec)), want: endWant{
			state: model.StateScheduled, next: e0 + 2*eHr, arm: e0 + 2*eHr,
			acts:   []string{"kill RUNNING>KILLED", "schedule KILLED>WAITING", "overlap WAITING>WAITING", "schedule WAITING>SCHEDULED"},
			detail: "(overlap: buffer_one, a misfire under misfire_policy skip)", overlap: "buffer_one: 1 fire(s) (2026-01-01T11:00:00Z) due while",
			result: model.ResultKilled, runError: "killed by alice",
			durationMS: 65 * 60 * eSec, executor: "host:80", consecutive: 2, successes: 5, failures: 3, killed: true,
			misfire: true,
		}},
	// Overlap and catch-up (core_overlap.go, core_overlap_test.go for the whole table).
	{name: "cancel_other: the kill made when the next fire came due starts that fire",
		def: func(d *model.TaskDef) { d.OverlapPolicy = model.OverlapCancelOther },
		in:  allOf(killBy(ActorOverlap), endingAt(e0+eHr+eSec)), want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
			acts:  []string{"kill RUNNING>KILLED", "schedule KILLED>WAITING", "overlap WAITING>WAITING", "schedule WAITING>SCHEDULED"},
			actor: ActorOverlap, overlap: "cancel_other: the latest fire due while the run was in flight, 2026-01-01T11:00:00Z, runs now",
			result: model.ResultKilled, runError: "killed by overlap", durationMS: 60*60*eSec + eSec, executor: "host:80",
			consecutive: 2, successes: 5, failures: 3, killed: true,
		}},
	{name: "skip: the end of an overrun goes on to the first fire not due, recorded", oc: ocOK,
		def: func(d *model.TaskDef) { d.OverlapPolicy = model.OverlapSkip }, in: endingAt(e0 + 2*eHr + 30*eSec),
		want: endWant{
			state: model.StateScheduled, next: e0 + 3*eHr, arm: e0 + 3*eHr, acts: []string{"overlap SUCCESS>SUCCESS", "schedule SUCCESS>SCHEDULED"},
			detail: "(overlap: skip)", overlap: "skip: 2 fire(s) (2026-01-01T11:00:00Z to 2026-01-01T12:00:00Z)",
			result: model.ResultSuccess, durationMS: 2000, executor: "exec-a", successes: 6, failures: 3, breaker: feedOK,
		}},
	{name: "catch-up: a run's end runs the next missed fire", oc: ocOK,
		def: func(d *model.TaskDef) { d.OverlapPolicy = model.OverlapSkip; d.CatchupWindowSec = 86400 },
		in:  allOf(endingAt(e0+3*eHr+30*eSec), func(in *endInput) { in.CatchupFrom, in.CatchupUntil = e0-eHr, e0+3*eHr }),
		want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr, acts: []string{"schedule SUCCESS>SCHEDULED"},
			detail: "(catch-up: a missed fire, run now)", result: model.ResultSuccess, durationMS: 2000, executor: "exec-a",
			successes: 6, failures: 3, breaker: feedOK,
		}},
	{name: "catch-up: a pause during it keeps the next missed fire for the resume", oc: ocOK,
		def: func(d *model.TaskDef) { d.CatchupWindowSec = 86400; d.Paused = true },
		in:  allOf(endingAt(e0+3*eHr+30*eSec), func(in *endInput) { in.CatchupFrom, in.CatchupUntil = e0-eHr, e0+3*eHr }),
		want: endWant{
			state: model.StatePaused, next: e0 + eHr, acts: []string{"pause SUCCESS>PAUSED"},
			detail: "pause requested during the run takes effect", result: model.ResultSuccess, durationMS: 2000,
			executor: "exec-a", successes: 6, failures: 3, breaker: feedOK,
		}},
	{name: "kill of a cron that fires no more rests WAITING", def: func(d *model.TaskDef) { d.Cron = "0 0 10 1 1 ? 2026" },
		in: killBy("alice"), want: endWant{
			state: model.StateWaiting, acts: []string{"kill RUNNING>KILLED", "schedule KILLED>WAITING"},
			result: model.ResultKilled, runError: "killed by alice", durationMS: 30000, executor: "host:80",
			consecutive: 2, successes: 5, failures: 3, killed: true,
		}},
	{name: "an outcome with a kill says nothing: a kill is decided by Kill alone", oc: ocOK, in: killBy("alice"),
		want: endWant{
			state: model.StateScheduled, next: e0 + eHr, arm: e0 + eHr,
			acts:   []string{"kill RUNNING>KILLED", "schedule KILLED>WAITING", "schedule WAITING>SCHEDULED"},
			result: model.ResultKilled, runError: "killed by alice", durationMS: 30000, executor: "host:80",
			consecutive: 2, successes: 5, failures: 3, killed: true,
		}},
}

func TestDecideEnd(t *testing.T) {
	t.Parallel()
	for _, row := range endRows {
		t.Run(row.name, func(t *testing.T) {
			in := baseEnd(t, row)
			before := *in.Def
			d := decideEnd(in)
			checkEnd(t, in, d, row.want)
			if !reflect.DeepEqual(*in.Def, before) {
				t.Errorf("the input definition changed: %+v", *in.Def)
			}
			if again := decideEnd(in); !reflect.DeepEqual(again, d) {
				t.Errorf("a second decision from the same input differs:\n%+v\n%+v", again, d)
			}
		})
	}
}

func checkEnd(t *testing.T, in endInput, d endDecision, w endWant) {
	t.Helper()
	ne := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	ne("state", d.RT.State, w.state)
	ne("attempt", d.RT.Attempt, w.attempt)
	ne("next trigger time", d.RT.NextTriggerTime, w.next)
	ne("armAt", d.armAt(), w.arm)
	ne("retry delay", d.RetryDelay, w.retryDelay)
	ne("retryOf", d.RetryOf, w.retryOf)
	var acts []string
	for _, a := range d.Acts {
		acts = append(acts, a.Action+" "+string(a.From)+">"+string(a.To))
		if a.From != a.To {
			if err := checkTransition(a.From, a.To); err != nil {
				t.Errorf("action %s: %v", a.Action, err)
			}
		}
		if a.TaskID != in.ID || a.TaskName != in.Def.Name || a.At != in.Now {
			t.Errorf("action %s names task %d %q at %d", a.Action, a.TaskID, a.TaskName, a.At)
		}
	}
	ne("actions", acts, w.acts)
	if w.overlap != "" {
		found := false
		for _, a := range d.Acts {
			if (a.Action == ActOverlap || a.Action == ActCatchup) && strings.Contains(a.Detail, w.overlap) {
				found = true
			}
		}
		if !found {
			t.Errorf("no overlap or catch-up action's detail contains %q: %+v", w.overlap, d.Acts)
		}
	}
	if len(d.Acts) > 0 {
		if w.detail != "" && !strings.Contains(d.Acts[len(d.Acts)-1].Detail, w.detail) {
			t.Errorf("last action's detail = %q, want it to contain %q", d.Acts[len(d.Acts)-1].Detail, w.detail)
		}
		actor := w.actor
		if actor == "" {
			actor = ActorScheduler
			if in.Kill {
				actor = in.KilledBy
			}
		}
		ne("first action's actor", d.Acts[0].Actor, actor)
	}
	if n := len(d.Acts); n > 0 && d.Acts[n-1].To != d.RT.State {
		t.Errorf("the last action ends in %s, the runtime in %s", d.Acts[n-1].To, d.RT.State)
	}
	ne("run result", d.Run.Result, w.result)
	ne("run error", d.Run.Error, w.runError)
	ne("run duration", d.Run.DurationMS, w.durationMS)
	ne("run executor", d.Run.Executor, w.executor)
	ne("run ended at", d.Run.EndedAt, in.Now)
	ne("run ticket", d.Run.Ticket, in.Run.Ticket)
	ne("runtime ticket", d.RT.CurrentTicket, "")
	ne("last end time", d.RT.LastEndTime, in.Now)
	ne("version", d.RT.Version, in.RT.Version) // the commit sets it
	ne("consecutive failures", d.RT.ConsecutiveFailures, w.consecutive)
	ne("success count", d.RT.SuccessCount, w.successes)
	ne("failure count", d.RT.FailureCount, w.failures)
	ne("last failure set", d.RT.LastFailureAt == in.Now, w.failureAt)
	ne("note", d.RT.Note, w.note)
	ne("paused definition", d.PausedDef != nil, w.pausedDef)
	if d.PausedDef != nil {
		if !d.PausedDef.Paused || d.PausedDef.UpdatedAt != in.Now || d.PausedDef.Name != in.Def.Name {
			t.Errorf("paused definition %+v", *d.PausedDef)
		}
	}
	ne("paused-on-failure alert", d.PausedOnFailure, w.pausedDef)
	if w.finalFailure == "" {
		ne("final failure alert", d.FinalFailure, "")
	} else if !strings.Contains(d.FinalFailure, w.finalFailure) {
		t.Errorf("final failure alert %q, want it to contain %q", d.FinalFailure, w.finalFailure)
	}
	ne("release downstream", d.ReleaseDownstream, w.release)
	ne("breaker feed", d.Breaker, w.breaker)
	ne("timeout counted", d.Timeout, w.timeout)
	ne("retry counted", d.Retried, w.retried)
	ne("misfire counted", d.Misfire, w.misfire)
	ne("kill counted", d.Killed, w.killed)
	ne("refused", len(d.Refused), 0)
	if in.Kill || d.RT.State == model.StateRetrying || d.RT.State == model.StateRunning {
		return
	}
	if d.RT.LastResult != d.Run.Result || d.RT.LastExecutor != d.Run.Executor {
		t.Errorf("runtime's last result %q by %q, the run's %q by %q", d.RT.LastResult, d.RT.LastExecutor, d.Run.Result, d.Run.Executor)
	}
}

// TestDecideEndKeepsKilledRuntime: a kill sets the task's last result to killed (the console
// shows the newest end was a kill) and leaves the executor and failure time of the run
// before: a kill is no failure.
func TestDecideEndKeepsKilledRuntime(t *testing.T) {
	t.Parallel()
	in := baseEnd(t, endRow{in: killBy("alice")})
	in.RT.LastResult, in.RT.LastFailureAt = model.ResultFailed, e0-eHr
	d := decideEnd(in)
	if d.RT.LastResult != model.ResultKilled || d.RT.LastExecutor != "old:1" || d.RT.LastFailureAt != e0-eHr {
		t.Fatalf("after a kill: last result %q, executor %q, failure at %d", d.RT.LastResult, d.RT.LastExecutor, d.RT.LastFailureAt)
	}
}

// TestBreakerFeedOf: only runs that say something about the task's health feed its breaker.
func TestBreakerFeedOf(t *testing.T) {
	t.Parallel()
	for result, want := range map[string]breakerFeed{
		model.ResultSuccess: feedOK, model.ResultFailed: feedFail, model.ResultTimeout: feedFail,
		model.ResultLost: feedNone, model.ResultKilled: feedNone, model.ResultSkipped: feedNone,
	} {
		if got := breakerFeedOf(result); got != want {
			t.Errorf("%s: %v, want %v", result, got, want)
		}
	}
}

// TestDecideFire: a periodic fire, case by case: the fire record it writes and the runtime it
// leaves in memory, or the state machine's refusal.
func TestDecideFire(t *testing.T) {
	t.Parallel()
	def := &model.TaskDef{ID: 7, Name: "nightly", Trigger: model.TriggerCron, Cron: "0 * * * *",
		Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://hooks.example:8080/run"}}
	exec := &model.TaskDef{ID: 7, Name: "nightly", Trigger: model.TriggerCron, Cron: "0 * * * *",
		Callback: model.Callback{Type: model.CallbackExecutor, App: "billing"}}
	base := model.Runtime{TaskID: 7, State: model.StateScheduled, NextTriggerTime: e0, Version: 12,
		LastTriggerTime: e0 - eHr, SuccessCount: 5, CurrentTicket: "7-old-1", Attempt: 1}
	for _, c := range []struct {
		name    string
		def     *model.TaskDef
		rt      func(*model.Runtime)
		detail  string
		refused bool
		ticket  string
		attempt int
		exec    string
	}{
		{name: "scheduled fire is attempt 1", def: def, ticket: scheduledTicket(7, e0, 1), attempt: 1, exec: "hooks.example:8080"},
		{name: "a retry keeps its attempt", def: def, rt: func(r *model.Runtime) { r.State, r.Attempt = model.StateRetrying, 3 },
			ticket: scheduledTicket(7, e0, 3), attempt: 3, exec: "hooks.example:8080"},
		{name: "an executor task names its app", def: exec, detail: "jitter 12 ms", ticket: scheduledTicket(7, e0, 1), attempt: 1, exec: "billing"},
		{name: "running cannot fire", def: def, rt: func(r *model.Runtime) { r.State = model.StateRunning }, refused: true},
		{name: "waiting cannot fire", def: def, rt: func(r *model.Runtime) { r.State = model.StateWaiting }, refused: true},
		{name: "killed cannot fire", def: def, rt: func(r *model.Runtime) { r.State = model.StateKilled }, refused: true},
		{name: "success cannot fire", def: def, rt: func(r *model.Runtime) { r.State = model.StateSuccess }, refused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rt := base
			if c.rt != nil {
				c.rt(&rt)
			}
			now := e0 + 40
			d := decideFire(fireInput{ID: 7, Def: c.def, RT: rt, Sched: e0, Now: now, Detail: c.detail})
			if c.refused {
				if d.Refused == nil || d.Run != (model.Run{}) || d.RT != (model.Runtime{}) {
					t.Fatalf("from %s: decision %+v, want a refusal and nothing else", rt.State, d)
				}
				return
			}
			if d.Refused != nil {
				t.Fatalf("refused: %v", d.Refused)
			}
			wantRun := model.Run{Ticket: c.ticket, TaskID: 7, TaskName: "nightly", Kind: model.RunScheduled,
				Attempt: c.attempt, ScheduledAt: e0, DispatchedAt: now, Result: model.ResultRunning,
				Executor: c.exec, Detail: c.detail}
			if d.Run != wantRun {
				t.Errorf("run\n got %+v\nwant %+v", d.Run, wantRun)
			}
			wantRT := rt
			wantRT.State, wantRT.CurrentTicket, wantRT.Attempt, wantRT.LastTriggerTime = model.StateRunning, c.ticket, c.attempt, now
			if d.RT != wantRT {
				t.Errorf("runtime\n got %+v\nwant %+v", d.RT, wantRT)
			}
			if d.RT.Version != 12 || d.RT.NextTriggerTime != e0 {
				t.Errorf("a fire writes no runtime: version %d, due %d, want 12 and %d unchanged", d.RT.Version, d.RT.NextTriggerTime, e0)
			}
		})
	}
}
