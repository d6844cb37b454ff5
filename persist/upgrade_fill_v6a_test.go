//go:build axe_fixture_v6a

package persist_test

import "github.com/axe-sched/axe/model"

// fixtureExtras sets, on the fixture's task definitions, the columns that schema versions
// after 2 added, as far as the schema a fixture is written for has them: each such version
// has its own file, chosen by build tag when its fixture is written
// (testdata/upgrade/make-fixture.sh); this one, untagged, is today's.
func fixtureExtras(d *model.TaskDef) {
	switch d.Name {
	case "nightly-report":
		d.OnLost = "resend"
		d.CronDialect = "unix"
		d.SensitiveParams = []string{"format"}
	case "welcome-mail":
		d.OnLost = "fail"
	case "long-import":
		d.Cron, d.CronDialect = "0 30 3 ? * MON", "quartz"
	case "invoice-run":
		d.CronDialect = "unix"
	}
}

// fixtureExecutor sets, on the fixture's executors, the columns later schema versions added:
// none at this one.
func fixtureExecutor(*model.Executor) {}

// executorKey is an executor's dispatch key as the snapshot records it: this schema has none.
func executorKey(model.Executor) string { return "" }

// fixtureRuntime sets the runtime columns of later schema versions: none before step 10.
func fixtureRuntime(string, *model.Runtime) {}

// executorIncarnation is an executor's incarnation as the snapshot records it: this schema
// has none (step 16).
func executorIncarnation(model.Executor) string { return "" }
