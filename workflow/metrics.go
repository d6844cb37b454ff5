package workflow

import (
	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/model"
)

// wfMetrics are the workflow service's series, in the engine's set (so /metrics writes them
// with the engine's). Labels are bounded: states and triggers, never a name.
type wfMetrics struct {
	started map[string]*metrics.Counter // by trigger
	ended   map[string]*metrics.Counter // by state
	steps   *metrics.Counter
	waits   *metrics.Counter
	handoff *metrics.PrometheusHistogram
}

func newWFMetrics(set *metrics.Set) wfMetrics {
	m := wfMetrics{started: map[string]*metrics.Counter{}, ended: map[string]*metrics.Counter{}}
	for _, t := range []string{model.TriggerCron, model.TriggerDelay, model.TriggerManual, model.TriggerWorkflow, triggerBackfill} {
		m.started[t] = set.NewCounter(`axe_workflow_runs_started_total{trigger="` + t + `"}`)
	}
	for _, st := range []string{model.WorkflowSucceeded, model.WorkflowFailed, model.WorkflowCancelled} {
		m.ended[st] = set.NewCounter(`axe_workflow_runs_ended_total{state="` + st + `"}`)
	}
	m.steps = set.NewCounter("axe_workflow_step_starts_total")
	m.waits = set.NewCounter("axe_workflow_step_limit_waits_total")
	m.handoff = set.NewPrometheusHistogram("axe_workflow_step_handoff_seconds")
	return m
}
