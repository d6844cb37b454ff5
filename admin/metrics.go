package admin

import (
	"bufio"
	"bytes"
	"io"
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// metricMeta is one metric family's Prometheus type and help text.
type metricMeta struct {
	Type string // counter, gauge, histogram or summary
	Help string
}

// metricHelp is the one table of every series family /metrics exposes, with its meaning
// (docs/operations.md explains them at length). The metrics library writes no help text,
// so writeMetrics adds "# HELP" and "# TYPE" from here; TestMetricsHelp fails when a
// family is missing, so a new metric cannot ship undocumented.
var metricHelp = map[string]metricMeta{
	// Triggering.
	"axe_triggers_total":                   {"counter", "Fires started: scheduled fires, retries and run-now."},
	"axe_dispatches_total":                 {"counter", "Runs handed to their HTTP callback or executor."},
	"axe_dispatch_failures_total":          {"counter", "Fires not dispatched, by reason (conflict: the task changed first)."},
	"axe_results_total":                    {"counter", "Run results recorded, by result (success, failed, timeout, killed, lost, stale)."},
	"axe_retries_total":                    {"counter", "Failed or timed-out runs scheduled for another attempt."},
	"axe_timeouts_total":                   {"counter", "Runs that ran past their timeout."},
	"axe_kills_total":                      {"counter", "Runs killed by an operator."},
	"axe_misfires_total":                   {"counter", "Fires missed while the scheduler was down or late, handled by the misfire policy."},
	"axe_duplicate_fires_suppressed_total": {"counter", "Fires the database refused because their (task, fire time, attempt) run record exists: dispatched already, so not dispatched again."},
	"axe_wheel_stale_entries_total":        {"counter", "Timing-wheel entries dropped because the task was armed again: each would have fired the task twice."},
	"axe_sends_held_total":                 {"counter", "Runs whose send a shard's gate held back while the shard's lease renewal was overdue; each is sent once a renewal succeeds, or left to the shard's next owner."},
	"axe_sends_held_at_drop_total":         {"counter", "Runs never sent when their shard dropped from this node (still queued before its gate and not held back by it, or recorded only after the drop), marked held back for the shard's next owner to send."},
	"axe_sends_ahead":                      {"gauge", "Runs whose fire record is committed (or being committed) and whose request is not yet handed to the wire; bounded by --send-ahead: what a crash can leave in doubt that never left."},
	"axe_send_pace_waits_total":            {"counter", "Fires that waited for room under --send-ahead: the fire loop waiting on the sends."},
	"axe_heldback_refires_total":           {"counter", "Runs a shard's previous owner recorded as held back unsent and this node sent under their fire record after taking the shard."},
	"axe_workflow_runs_started_total":      {"counter", "Workflow runs started, by trigger."},
	"axe_workflow_runs_ended_total":        {"counter", "Workflow runs ended, by state."},
	"axe_workflow_step_starts_total":       {"counter", "Workflow step attempts started."},
	"axe_workflow_step_limit_waits_total":  {"counter", "Workflow step attempts that waited for a concurrency or rate limit before starting."},
	"axe_workflow_step_handoff_seconds":    {"histogram", "From a step's end being durable to the start of a step it released."},
	"axe_breaker_skipped_fires_total":      {"counter", "Cron fires skipped because the task's circuit breaker was open."},
	"axe_fire_lateness_seconds":            {"histogram", "Seconds from a fire's due time to the moment the scheduler fired it."},
	"axe_dispatch_latency_seconds":         {"histogram", "Seconds from a run's due time to the moment it was sent to its callback or executor."},
	"axe_write_conflicts_total":            {"counter", "Engine writes refused by the store's version check (another writer changed the task)."},
	// Queues and the wheel.
	"axe_wheel_pending":                   {"gauge", "Entries armed in the timing wheels, all shards."},
	"axe_wheel_shard_pending":             {"gauge", "Entries armed in one timing-wheel shard."},
	"axe_ready_queue_depth":               {"gauge", "Due entries waiting in the ready queues for dispatch, all priorities."},
	"axe_ready_queue_depth_by_priority":   {"gauge", "Due entries waiting in the ready queues, by priority (0 first)."},
	"axe_dispatch_inflight":               {"gauge", "Runs being sent or awaiting an HTTP callback's answer."},
	"axe_dispatch_queued":                 {"gauge", "Runs waiting for a dispatcher worker."},
	"axe_dispatch_run_batches_total":      {"counter", "Batched run offers sent to executors."},
	"axe_dispatch_batched_runs_total":     {"counter", "Runs sent to executors inside batched offers."},
	"axe_dispatch_resends_in_doubt_total": {"counter", "Calls sent once more because their connection failed after the request was sent (executor calls, and HTTP callbacks with on_lost: resend)."},
	"axe_tasks_in_memory":                 {"gauge", "Tasks held in memory: due within the loaded window or running."},
	"axe_tasks_cold":                      {"gauge", "Tasks held as references, to be read in full shortly before they fire."},
	"axe_tasks_promoted_total":            {"counter", "Tasks read in full from their references before firing."},
	"axe_window_loaded_tasks_total":       {"counter", "Tasks loaded from the store by the window loader."},
	"axe_window_load_duration_seconds":    {"histogram", "Seconds one window load took."},
	"axe_window_horizon_seconds":          {"gauge", "Seconds ahead of now up to which due tasks are loaded."},
	// Rate limits, breakers, executors.
	"axe_ratelimit_waits_total":        {"counter", "Fires held back by a rate limit."},
	"axe_ratelimit_wait_seconds":       {"histogram", "Seconds fires waited for a rate-limit token."},
	"axe_ratelimit_buffered":           {"gauge", "Fires waiting for a rate-limit token now."},
	"axe_breakers_open":                {"gauge", "Tasks whose circuit breaker is open."},
	"axe_concurrency_waits_total":      {"counter", "Fires held back by a concurrency limit of their group or key."},
	"axe_concurrency_wait_seconds":     {"histogram", "Seconds fires waited for a concurrency slot."},
	"axe_concurrency_waiting":          {"gauge", "Fires waiting for a concurrency slot now."},
	"axe_concurrency_slots_in_use":     {"gauge", "Runs counted by the concurrency gate now: in flight, or admitted and not yet sent."},
	"axe_concurrency_limit_in_use":     {"gauge", "Runs counted in one concurrency limit now, by kind (group, key) and name."},
	"axe_concurrency_limit_waiting":    {"gauge", "Fires waiting for one concurrency limit now, by kind and name."},
	"axe_concurrency_limit_max":        {"gauge", "One concurrency limit's bound, by kind and name."},
	"axe_executors_alive":              {"gauge", "Registered executors heard from within the lost-after period."},
	"axe_executors_lost":               {"gauge", "Registered executors not heard from within the lost-after period."},
	"axe_alerts_total":                 {"counter", "Alerts raised, by kind (breaker_open, executor_lost, …)."},
	"axe_refused_results_total":        {"counter", "Executor results refused, by reason (unknown_ticket, not_waiting, ended); each is counted, while the audit trail keeps one record per app, reason and task a window."},
	"axe_alert_webhook_dropped_total":  {"counter", "Alerts dropped because the webhook queue was full."},
	"axe_alert_webhook_failures_total": {"counter", "Alert webhook deliveries that failed."},
	// The batched writer and the store.
	"axe_writer_batch_rows":                   {"histogram", "Rows in one group commit of the batched writer."},
	"axe_writer_commit_duration_seconds":      {"histogram", "Seconds one group commit took."},
	"axe_writer_commits_total":                {"counter", "Group commits of the batched writer."},
	"axe_writer_commit_errors_total":          {"counter", "Group commits that failed, by reason (transient, lease_lost, rejected: the store refused the values)."},
	"axe_writer_unknown_commits_landed_total": {"counter", "Commits whose outcome was unknown that the writer found landed, by their fire record, and ended as committed."},
	"axe_writer_conflicts_total":              {"counter", "Transitions in group commits refused by the version check."},
	"axe_writer_queue_depth":                  {"gauge", "Transitions waiting for the batched writer."},
	"axe_writer_fenced_groups_total":          {"counter", "Writes refused because this node's lease epoch was no longer current."},
	"axe_store_batch_guard_misses_total":      {"counter", "Batches run again the reading way after a guarded write missed a row."},
	"axe_store_batch_retries_total":           {"counter", "Batches run again on another connection because they failed before their commit was sent, by reason (node_lost, conflict)."},
	"axe_store_db_node_refusals_total":        {"counter", "Connection attempts to a database node that failed, or that failed the Galera node check."},
	"axe_store_db_node_switches_total":        {"counter", "Connections made to another database node than the one before."},
	"axe_writer_refused_groups_total":         {"counter", "Groups the batched writer refused to queue because it was busy (creates answered 429)."},
	"axe_writer_rejected_groups_total":        {"counter", "Groups failed because the store refused their values (an API write answered 400); the rest of their batch landed."},
	"axe_pruned_rows_total":                   {"counter", "Rows deleted by retention, by table (task_run, task_action, task_def)."},
	// HA and build.
	"axe_lease_epoch":          {"gauge", "Epoch of the HA lease this node last held; 0 on a single node."},
	"axe_ha_primary":           {"gauge", "1 while this node is the primary (a single node always is), 0 on a backup."},
	"axe_lease_renewals_total": {"counter", "Lease renewals by result: ok, lost (another node holds the lease: leadership given up at once) or error."},
	// Scale-out (--ha, docs/scale-out.md): the shard loop's series.
	"axe_shards_held":                {"gauge", "Shards this node holds (schedules, or hands over), out of 256."},
	"axe_shard_takes_total":          {"counter", "Shards this node took: unheld, expired, or released to it."},
	"axe_shard_handovers_total":      {"counter", "Shards this node released to another after their runs in flight ended."},
	"axe_shard_renewals_total":       {"counter", "Renewals of every shard held, by result: ok, lost (some taken by another node: dropped at once) or error."},
	"axe_failovers_total":            {"counter", "Times this node became the primary by taking over the lease."},
	"axe_promotion_duration_seconds": {"histogram", "Seconds from taking the lease to the first dispatch allowed (reload, recovery, misfires)."},
	"axe_build_info":                 {"gauge", "Always 1; the version label names the running build."},

	// The Go runtime and the process, written by the metrics library.
	"go_gc_cpu_seconds_total":             {"counter", "CPU seconds spent in the garbage collector."},
	"go_gc_duration_seconds":              {"summary", "Seconds of garbage-collection stop-the-world pauses."},
	"go_gc_mark_assist_cpu_seconds_total": {"counter", "CPU seconds goroutines spent assisting the garbage collector."},
	"go_gc_pauses_seconds":                {"histogram", "Distribution of garbage-collection pause seconds."},
	"go_gomaxprocs":                       {"gauge", "GOMAXPROCS: the CPUs Go runs goroutines on at once."},
	"go_goroutines":                       {"gauge", "Goroutines that exist now."},
	"go_info":                             {"gauge", "Always 1; the version label names the Go release."},
	"go_info_ext":                         {"gauge", "Always 1; labels name the Go compiler settings."},
	"go_memlimit_bytes":                   {"gauge", "The Go memory limit (GOMEMLIMIT) in bytes."},
	"go_memstats_alloc_bytes":             {"gauge", "Bytes of allocated heap objects."},
	"go_memstats_alloc_bytes_total":       {"counter", "Bytes allocated for heap objects since the process started."},
	"go_memstats_buck_hash_sys_bytes":     {"gauge", "Bytes used by the profiling bucket hash table."},
	"go_memstats_frees_total":             {"counter", "Heap objects freed."},
	"go_memstats_gc_cpu_fraction":         {"gauge", "Fraction of CPU time used by the garbage collector."},
	"go_memstats_gc_sys_bytes":            {"gauge", "Bytes of garbage-collection metadata."},
	"go_memstats_heap_alloc_bytes":        {"gauge", "Bytes of allocated heap objects."},
	"go_memstats_heap_idle_bytes":         {"gauge", "Bytes in idle heap spans."},
	"go_memstats_heap_inuse_bytes":        {"gauge", "Bytes in in-use heap spans."},
	"go_memstats_heap_objects":            {"gauge", "Allocated heap objects."},
	"go_memstats_heap_released_bytes":     {"gauge", "Bytes of heap returned to the operating system."},
	"go_memstats_heap_sys_bytes":          {"gauge", "Bytes of heap obtained from the operating system."},
	"go_memstats_last_gc_time_seconds":    {"gauge", "Unix time of the last garbage collection."},
	"go_memstats_lookups_total":           {"counter", "Pointer lookups by the runtime."},
	"go_memstats_mallocs_total":           {"counter", "Heap objects allocated."},
	"go_memstats_mcache_inuse_bytes":      {"gauge", "Bytes of mcache structures in use."},
	"go_memstats_mcache_sys_bytes":        {"gauge", "Bytes obtained for mcache structures."},
	"go_memstats_mspan_inuse_bytes":       {"gauge", "Bytes of mspan structures in use."},
	"go_memstats_mspan_sys_bytes":         {"gauge", "Bytes obtained for mspan structures."},
	"go_memstats_next_gc_bytes":           {"gauge", "Heap size at which the next garbage collection starts."},
	"go_memstats_other_sys_bytes":         {"gauge", "Bytes of other runtime allocations."},
	"go_memstats_stack_inuse_bytes":       {"gauge", "Bytes of goroutine stacks in use."},
	"go_memstats_stack_sys_bytes":         {"gauge", "Bytes obtained for goroutine stacks."},
	"go_memstats_sys_bytes":               {"gauge", "Bytes of memory obtained from the operating system."},
	"go_mutex_wait_seconds_total":         {"counter", "Seconds goroutines spent blocked on mutexes."},
	"go_scavenge_cpu_seconds_total":       {"counter", "CPU seconds spent returning memory to the operating system."},
	"go_sched_latencies_seconds":          {"histogram", "Seconds goroutines waited to be scheduled."},
	"go_threads":                          {"gauge", "Operating-system threads of the process."},

	"process_cgroup_cpu_throttled_seconds_total":    {"counter", "Seconds the process's cgroup was throttled."},
	"process_cpu_seconds_system_total":              {"counter", "CPU seconds in the kernel."},
	"process_cpu_seconds_total":                     {"counter", "CPU seconds, user and kernel."},
	"process_cpu_seconds_user_total":                {"counter", "CPU seconds in user space."},
	"process_io_read_bytes_total":                   {"counter", "Bytes read, including the page cache."},
	"process_io_read_syscalls_total":                {"counter", "Read system calls."},
	"process_io_storage_read_bytes_total":           {"counter", "Bytes read from storage."},
	"process_io_storage_written_bytes_total":        {"counter", "Bytes written to storage."},
	"process_io_write_syscalls_total":               {"counter", "Write system calls."},
	"process_io_written_bytes_total":                {"counter", "Bytes written, including the page cache."},
	"process_major_pagefaults_total":                {"counter", "Page faults that read from disk."},
	"process_minor_pagefaults_total":                {"counter", "Page faults served from memory."},
	"process_num_threads":                           {"gauge", "Threads of the process."},
	"process_pressure_cpu_stalled_seconds_total":    {"counter", "Seconds all tasks of the cgroup stalled on CPU."},
	"process_pressure_cpu_waiting_seconds_total":    {"counter", "Seconds some task of the cgroup waited for CPU."},
	"process_pressure_io_stalled_seconds_total":     {"counter", "Seconds all tasks of the cgroup stalled on I/O."},
	"process_pressure_io_waiting_seconds_total":     {"counter", "Seconds some task of the cgroup waited for I/O."},
	"process_pressure_memory_stalled_seconds_total": {"counter", "Seconds all tasks of the cgroup stalled on memory."},
	"process_pressure_memory_waiting_seconds_total": {"counter", "Seconds some task of the cgroup waited for memory."},
	"process_resident_memory_anon_bytes":            {"gauge", "Resident anonymous memory in bytes."},
	"process_resident_memory_bytes":                 {"gauge", "Resident memory in bytes."},
	"process_resident_memory_file_bytes":            {"gauge", "Resident file-backed memory in bytes."},
	"process_resident_memory_peak_bytes":            {"gauge", "Peak resident memory in bytes."},
	"process_resident_memory_shared_bytes":          {"gauge", "Resident shared memory in bytes."},
	"process_start_time_seconds":                    {"gauge", "Unix time the process started."},
	"process_virtual_memory_bytes":                  {"gauge", "Virtual memory in bytes."},
	"process_virtual_memory_peak_bytes":             {"gauge", "Peak virtual memory in bytes."},
}

// omittedMetrics are written by the metrics library under names Prometheus reserves: a
// "_count" suffix belongs to histograms and summaries, so promtool rejects them. Their
// meaning is covered by go_gomaxprocs and the process_ series.
var omittedMetrics = map[string]bool{"go_cgo_calls_count": true, "go_cpu_count": true, "go_gc_forced_count": true}

// metricFamily returns the family a sample line belongs to: its name without labels, and
// without _bucket, _sum or _count when those end a histogram's or summary's samples.
func metricFamily(line string) string {
	name := line
	if i := strings.IndexAny(line, "{ "); i >= 0 {
		name = line[:i]
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if m, known := metricHelp[base]; known && (m.Type == "histogram" || m.Type == "summary") {
				return base
			}
		}
	}
	return name
}

// writeMetrics writes the series of sets, then the Go runtime's and the process's, in the
// Prometheus text format, each family preceded by its "# HELP" and "# TYPE" lines from
// metricHelp. A family missing from the table gets an "untyped" type and a help line saying
// so, rather than none. Nothing is read from the library's default set: every series of axe
// lives in a set its owner was given (ServerConfig.Metrics).
func writeMetrics(w io.Writer, sets []*metrics.Set) {
	var buf bytes.Buffer
	for _, s := range sets {
		s.WritePrometheus(&buf)
	}
	metrics.WriteProcessMetrics(&buf)
	out := bufio.NewWriter(w)
	defer out.Flush()
	seen := map[string]bool{}
	last := ""
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fam := metricFamily(line)
		if omittedMetrics[fam] {
			continue
		}
		if fam != last && !seen[fam] {
			m, ok := metricHelp[fam]
			if !ok {
				m = metricMeta{Type: "untyped", Help: "Not described in axe's metric table."}
			}
			out.WriteString("# HELP " + fam + " " + m.Help + "\n# TYPE " + fam + " " + m.Type + "\n")
			seen[fam] = true
		}
		last = fam
		out.WriteString(line)
		out.WriteByte('\n')
	}
}
