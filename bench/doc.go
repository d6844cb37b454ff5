// Package bench holds axe's benchmark suites (issue 5; figures in BENCHMARKS.md). Each suite
// measures axe beside its baseline or peer in the same run and reports the ratio:
//
//   - B2 window load (window_test.go): a MariaDB table of tasks, half due within the
//     5-minute window, loaded by engine.Start, beside a plain SELECT of the same rows.
//   - B3 batched writer (writer_test.go): transitions with run and action rows through
//     persist.Writer, beside one autocommit UPDATE … WHERE version=? per transition.
//   - B5 peers (peers_test.go): the naive poll-every-second scheduler, hibiken/asynq on
//     Redis and time.AfterFunc per task, each on the same workload as axe.
//   - B7 backfill (backfill_test.go): a year of a once-a-minute backfill, its acceptance,
//     rate and memory, beside every-second cron fires measured alone in the same run.
//
// B1 (the timing wheel) lives beside the wheel in wheel/wheel_timing_test.go and B4 (end to
// end, with executors in a separate process) in bench/e2e. BENCHMARKS.md at the module root
// holds the commands, the machine and the results.
//
// The package holds only tests and benchmarks. It drives axe through its public API
// (engine, persist, admin) and must not reach into their internals; fixtures are written
// straight into the schema by bench/internal/benchkit. Default sizes are small so that
// `go test -race ./bench/...` stays a quick smoke test; full sizes are set with flags or
// environment variables (see BENCHMARKS.md).
package bench
