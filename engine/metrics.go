package engine

import (
	"fmt"
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/wheel"
)

// engineMetrics are one engine's series. They live in a Set of their own (Metrics), which the
// daemon registers for /metrics, so that several engines in one process (tests) never
// collide; label sets are bounded — never a task name or a ticket.
type engineMetrics struct {
	set          *metrics.Set
	triggers     *metrics.Counter
	retries      *metrics.Counter
	timeouts     *metrics.Counter
	misfires     *metrics.Counter
	conflicts    *metrics.Counter
	loaded       *metrics.Counter
	promoted     *metrics.Counter
	lateness     *metrics.PrometheusHistogram
	loadDuration *metrics.PrometheusHistogram
	rateWaits    *metrics.Counter
	alertDrops   *metrics.Counter
	alertFails   *metrics.Counter
	skipped      *metrics.Counter
	rateWait     *metrics.PrometheusHistogram
	dispatches   labelled
	results      labelled
	sent         *metrics.Counter
	dispatchLag  *metrics.PrometheusHistogram
	kills        *metrics.Counter
	dupFires     *metrics.Counter
	fireRefusals *metrics.Counter
	heldUnsent   *metrics.Counter // sends held back while a shard's lease renewal was overdue
	heldAtDrop   *metrics.Counter // runs marked held back as their shard dropped, never sent

	prunedRuns, prunedActions, prunedFinished *metrics.Counter

	concWaits *metrics.Counter             // fires held back by a concurrency limit
	concWait  *metrics.PrometheusHistogram // how long they waited
}

// labelled is a counter family with one bounded label.
type labelled struct {
	set   *metrics.Set
	name  string
	label string
	// counters caches the counter of each value: every run's end counts its result, and
	// formatting the series name and looking it up in the set each time was two
	// allocations and a lock a fire. The values are bounded (results, reasons).
	counters *sync.Map // string → *metrics.Counter
}

func newLabelled(set *metrics.Set, name, label string) labelled {
	return labelled{set: set, name: name, label: label, counters: new(sync.Map)}
}

func (l labelled) result(v string) *metrics.Counter {
	if c, ok := l.counters.Load(v); ok {
		return c.(*metrics.Counter)
	}
	c := l.set.GetOrCreateCounter(fmt.Sprintf(`%s{%s=%q}`, l.name, l.label, v))
	l.counters.Store(v, c)
	return c
}

// latenessBuckets resolve the fire lateness around the tick (10ms) and the targets (2 ticks,
// 20ms) while still showing multi-second stalls.
var latenessBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func newEngineMetrics(e *Engine) *engineMetrics {
	s := e.cfg.Metrics
	m := &engineMetrics{
		set:          s,
		triggers:     s.NewCounter("axe_triggers_total"),
		retries:      s.NewCounter("axe_retries_total"),
		timeouts:     s.NewCounter("axe_timeouts_total"),
		misfires:     s.NewCounter("axe_misfires_total"),
		conflicts:    s.NewCounter("axe_write_conflicts_total"),
		loaded:       s.NewCounter("axe_window_loaded_tasks_total"),
		promoted:     s.NewCounter("axe_tasks_promoted_total"),
		lateness:     s.NewPrometheusHistogramExt("axe_fire_lateness_seconds", latenessBuckets),
		loadDuration: s.NewPrometheusHistogram("axe_window_load_duration_seconds"),
		rateWaits:    s.NewCounter("axe_ratelimit_waits_total"),
		alertDrops:   s.NewCounter("axe_alert_webhook_dropped_total"),
		alertFails:   s.NewCounter("axe_alert_webhook_failures_total"),
		skipped:      s.NewCounter("axe_breaker_skipped_fires_total"),
		rateWait:     s.NewPrometheusHistogram("axe_ratelimit_wait_seconds"),
		dispatches:   newLabelled(s, "axe_dispatch_failures_total", "reason"),
		results:      newLabelled(s, "axe_results_total", "result"),
		sent:         s.NewCounter("axe_dispatches_total"),
		dispatchLag:  s.NewPrometheusHistogramExt("axe_dispatch_latency_seconds", latenessBuckets),
		kills:        s.NewCounter("axe_kills_total"),
		// Not axe_duplicate_fires_suppressed_total: that counts fires the database's fire
		// record refused (core_recover.go); these are wheel entries the engine itself dropped.
		dupFires:   s.NewCounter("axe_wheel_stale_entries_total"),
		heldUnsent: s.NewCounter("axe_sends_held_total"),
		heldAtDrop: s.NewCounter("axe_sends_held_at_drop_total"),
		// Fires the database's fire record refused (core_recover.go).
		fireRefusals: s.NewCounter("axe_duplicate_fires_suppressed_total"),
		// Rows retention deleted, by table (retention.go).
		prunedRuns:     s.NewCounter(`axe_pruned_rows_total{table="task_run"}`),
		prunedActions:  s.NewCounter(`axe_pruned_rows_total{table="task_action"}`),
		prunedFinished: s.NewCounter(`axe_pruned_rows_total{table="task_def"}`),
		concWaits:      s.NewCounter("axe_concurrency_waits_total"),
		concWait:       s.NewPrometheusHistogram("axe_concurrency_wait_seconds"),
	}
	// The pace of fire records to sends (core_pace.go).
	s.NewGauge("axe_sends_ahead", func() float64 { return float64(e.pace.ahead()) })
	s.NewGauge("axe_send_pace_waits_total", func() float64 { return float64(e.pace.waits.Load()) })
	s.NewGauge("axe_heldback_refires_total", func() float64 { return float64(e.refires.Load()) })
	s.NewGauge("axe_concurrency_waiting", func() float64 { return float64(e.conc.nwait.Load()) })
	s.NewGauge("axe_concurrency_slots_in_use", func() float64 { return float64(e.conc.nused.Load()) })
	for p := 0; p <= wheel.MaxPriority; p++ {
		s.NewGauge(fmt.Sprintf(`axe_ready_queue_depth_by_priority{priority="%d"}`, p), func() float64 {
			n := 0
			for i := 0; i < e.wheel.Partitions(); i++ {
				n += e.wheel.Ready(i).LevelLen(p)
			}
			return float64(n)
		})
	}
	// Wheel partitions are counted from the CPUs, so the label set is bounded by the machine
	// (the metric keeps its name, axe_wheel_shard_pending, and its label, shard).
	for i := 0; i < e.wheel.Partitions(); i++ {
		s.NewGauge(fmt.Sprintf(`axe_wheel_shard_pending{shard="%d"}`, i), func() float64 { return float64(e.wheel.PartitionLen(i)) })
	}
	s.NewGauge("axe_executors_lost", func() float64 {
		n := 0
		for _, x := range e.registry.Snapshot() {
			if !x.Alive {
				n++
			}
		}
		return float64(n)
	})
	s.NewGauge("axe_wheel_pending", func() float64 { return float64(e.wheel.Len()) })
	s.NewGauge("axe_tasks_in_memory", func() float64 { return float64(e.tasks.len()) })
	s.NewGauge("axe_tasks_cold", func() float64 { return float64(e.loader.promo.queued.Load()) })
	s.NewGauge("axe_ready_queue_depth", func() float64 {
		n := 0
		for i := 0; i < e.wheel.Partitions(); i++ {
			n += e.wheel.Ready(i).Len()
		}
		return float64(n)
	})
	s.NewGauge("axe_dispatch_inflight", func() float64 { return float64(e.disp.Running()) })
	s.NewGauge("axe_dispatch_queued", func() float64 { return float64(e.disp.Queued()) })
	s.NewGauge("axe_ratelimit_buffered", func() float64 { return float64(e.gate.buffered.Load()) })
	s.NewGauge("axe_breakers_open", func() float64 { return float64(e.brk.openCount()) })
	s.NewGauge("axe_executors_alive", func() float64 { return float64(e.registry.AliveCount()) })
	s.NewGauge("axe_window_horizon_seconds", func() float64 {
		return float64(e.loader.Horizon().Sub(e.now()).Seconds())
	})
	return m
}

// refusedResults counts executor results refused (ActRefusedResult), recorded or folded
// into a summary, by reason (a bounded set: refusalUnknownTicket, …).
func (m *engineMetrics) refusedResults(reason string) *metrics.Counter {
	return m.set.GetOrCreateCounter(`axe_refused_results_total{reason="` + reason + `"}`)
}

// alerts counts alerts by kind (a bounded set: breaker_open, executor_lost, …).
func (m *engineMetrics) alerts(kind string) *metrics.Counter {
	return m.set.GetOrCreateCounter(`axe_alerts_total{kind="` + kind + `"}`)
}

// Metrics returns the engine's metric set (Config.Metrics), for the daemon to write.
func (e *API) Metrics() *metrics.Set { return e.m.set }
