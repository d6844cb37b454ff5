//go:build axe_fixture_v16

package persist_test

import "github.com/axe-sched/axe/model"

// fixtureExtras sets, on the fixture's task definitions, the columns that schema versions
// after 2 added, as far as the schema a fixture is written for has them: each such version
// has its own file, chosen by build tag when its fixture is written
// (testdata/upgrade/make-fixture.sh); this one (tag axe_fixture_v16) is that of v16.
func fixtureExtras(d *model.TaskDef) {
	switch d.Name {
	case "nightly-report":
		d.OnLost = "resend"
		d.CronDialect = "unix"
		d.SensitiveParams = []string{"format"}
		d.RetainHistoryMS, d.RetainFinishedMS = 30*86_400_000, 7*86_400_000
		d.PauseAfterFailures = 5
		d.JitterSec = 120
		d.ConcurrencyKey = "report-db"
		d.OverlapPolicy = "buffer_all"
		d.CatchupWindowSec = 3600
	case "welcome-mail":
		d.OnLost = "fail"
		d.RetainFinishedMS = 3_600_000
	case "long-import":
		d.Cron, d.CronDialect = "0 30 3 ? * MON", "quartz"
		d.OverlapPolicy = "cancel_other"
	case "invoice-run":
		d.CronDialect = "unix"
		d.PauseAfterFailures = 3
		d.JitterSec = 30
		d.ConcurrencyKey = "ledger"
		d.OverlapPolicy = "skip"
	}
}

// fixtureExecutor sets, on the fixture's executors, the columns schema versions after 2
// added: the dispatch key of step 9 on the one executor that registered with signed calls.
func fixtureExecutor(e *model.Executor) {
	if e.Address == "10.0.0.7:9100" {
		e.DispatchKey = "5f0c2b8e9d4a7f6e1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a"
		e.Incarnation = "3f9a0c1d2e4b5a6978f0e1d2c3b4a596"
	}
}

// executorKey is an executor's dispatch key as the snapshot records it.
func executorKey(e model.Executor) string { return e.DispatchKey }

// executorIncarnation is an executor's incarnation as the snapshot records it (step 16).
func executorIncarnation(e model.Executor) string { return e.Incarnation }

// fixtureRuntime sets, on the fixture's runtime rows, the columns schema versions after 2
// added: the last result and newest failure of step 10, the count of consecutive failures of
// step 11.
func fixtureRuntime(name string, rt *model.Runtime) {
	switch name {
	case "nightly-report":
		rt.LastResult = model.ResultSuccess
		rt.LastFailureAt = fxT0 - 30*86_400_000 // two failures, a month ago
	case "welcome-mail":
		rt.LastResult = model.ResultSuccess
	case "retry-export":
		rt.LastResult = model.ResultTimeout
		rt.LastFailureAt = fxT0 + 15_000
		rt.ConsecutiveFailures = 1
	case "notify-finance":
		rt.LastResult = model.ResultFailed
		rt.LastFailureAt = fxT0 - 299_000
		rt.ConsecutiveFailures = 2
	case "long-import":
		rt.LastResult = model.ResultKilled
	}
}
