package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
)

// Bounds of a definition and of a run.
const (
	StepsMax              = 200     // steps of one workflow
	FanOutMax             = 10_000  // items of one fan-out
	FanOutParallelDefault = 64      // items of one fan-out in flight when no parallelism is given
	FanOutParallelMax     = 1_000   // the largest parallelism a fan-out may ask for
	OutputMax             = 1 << 20 // bytes of one step output (JSON)
	ParamsMax             = 64 << 10
	RetriesMax            = 20
	TimeoutMaxSec         = 7 * 24 * 3600
	TimeoutDefaultSec     = 60
	DelayMaxMS            = 10 * 365 * 24 * 3600 * 1000 // a delay trigger's delay_ms
)

// FieldError is a definition or request the service refuses: Field names what is wrong.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// validName is a workflow's or a step's name: the rule of a task's name (model.ValidName).
// A step's task is named WORKFLOW/STEP, which no task name can be (docs/workflows.md,
// "Steps are tasks"). A step's name is also at most stepNameMax long (Normalize).
func validName(s string) bool { return model.ValidName(s) }

// stepNameMax bounds a step's name: an attempt's ticket, w<run id>.<step>.<item>.<attempt>,
// holds it within the 128 bytes a ticket is stored in.
const stepNameMax = 100

// IsStepTaskName reports whether name is one a step's task can have: WORKFLOW/STEP, both
// valid names.
func IsStepTaskName(name string) bool {
	w, st, ok := strings.Cut(name, "/")
	return ok && validName(w) && validName(st)
}

// StepTask is the name of the task a step runs as.
func StepTask(workflow, step string) string { return workflow + "/" + step }

// Normalize fills a definition's defaults and checks it whole: every step known, no cycle,
// every fan-out source one that can exist, every callback usable. It returns the steps in
// an order where each comes after its needs.
func Normalize(d *model.WorkflowDef) ([]int, error) {
	if !validName(d.Name) {
		return nil, fieldErr("name", "must be 1-%d characters of A-Z a-z 0-9 . _ - : starting with a letter or digit, got %q", model.NameMax, d.Name)
	}
	if len(d.Group) > 128 || !utf8.ValidString(d.Group) {
		return nil, fieldErr("group", "must be at most 128 bytes of UTF-8")
	}
	switch d.Trigger {
	case "", model.TriggerManual:
		d.Trigger = model.TriggerManual
		if d.Cron != "" {
			return nil, fieldErr("cron", "is given but trigger is manual: set trigger to cron")
		}
	case model.TriggerCron:
		if _, err := cron.Parse(d.Cron); err != nil {
			return nil, fieldErr("cron", "%v", err)
		}
	case model.TriggerDelay:
		if d.Cron != "" {
			return nil, fieldErr("cron", "is given but trigger is delay")
		}
		if d.DelayMS < 0 || d.DelayMS > DelayMaxMS {
			return nil, fieldErr("delay_ms", "must be 0-%d (ten years), got %d", int64(DelayMaxMS), d.DelayMS)
		}
	case model.TriggerWorkflow:
		if !validName(d.After) {
			return nil, fieldErr("after", "trigger workflow needs the name of the workflow whose succeeded runs start this one, got %q", d.After)
		}
		if d.After == d.Name {
			return nil, fieldErr("after", "a workflow cannot follow itself")
		}
		if d.Cron != "" {
			return nil, fieldErr("cron", "is given but trigger is workflow")
		}
	default:
		return nil, fieldErr("trigger", "must be cron, delay, manual or workflow, got %q", d.Trigger)
	}
	if d.Trigger != model.TriggerDelay && d.DelayMS != 0 {
		return nil, fieldErr("delay_ms", "is for trigger delay; trigger is %s", d.Trigger)
	}
	if d.Trigger != model.TriggerWorkflow && d.After != "" {
		return nil, fieldErr("after", "is for trigger workflow; trigger is %s", d.Trigger)
	}
	switch d.OverlapPolicy {
	case "":
		d.OverlapPolicy = model.OverlapAllowAll
	case model.OverlapAllowAll, model.OverlapSkip:
	default:
		return nil, fieldErr("overlap_policy", "must be allow_all or skip for a workflow, got %q", d.OverlapPolicy)
	}
	if d.Trigger != model.TriggerCron && (d.JitterSec != 0 || d.CatchupWindowSec != 0) {
		return nil, fieldErr("trigger", "jitter_sec and catchup_window_sec are for trigger cron")
	}
	if d.JitterSec < 0 || d.JitterSec > 3600 {
		return nil, fieldErr("jitter_sec", "must be 0-3600, got %d", d.JitterSec)
	}
	if d.CatchupWindowSec < 0 || d.CatchupWindowSec > 7*86400 {
		return nil, fieldErr("catchup_window_sec", "must be 0-604800, got %d", d.CatchupWindowSec)
	}
	if d.PauseAfterFailures < 0 || d.PauseAfterFailures > 1000 {
		return nil, fieldErr("pause_after_failures", "must be 0-1000, got %d", d.PauseAfterFailures)
	}
	if d.Timezone == "" {
		d.Timezone = "UTC"
	}
	if _, err := time.LoadLocation(d.Timezone); err != nil {
		return nil, fieldErr("timezone", "unknown zone %q", d.Timezone)
	}
	switch d.MisfirePolicy {
	case "":
		d.MisfirePolicy = model.MisfireFireOnce
	case model.MisfireFireOnce, model.MisfireSkip:
	default:
		return nil, fieldErr("misfire_policy", "must be fire_once or skip, got %q", d.MisfirePolicy)
	}
	if err := checkParams("params", d.Params); err != nil {
		return nil, err
	}
	if len(d.Steps) == 0 {
		return nil, fieldErr("steps", "a workflow needs at least one step")
	}
	if len(d.Steps) > StepsMax {
		return nil, fieldErr("steps", "at most %d steps, got %d", StepsMax, len(d.Steps))
	}
	index := make(map[string]int, len(d.Steps))
	for i := range d.Steps {
		s := &d.Steps[i]
		f := fmt.Sprintf("steps[%d]", i)
		if !validName(s.Name) || len(s.Name) > stepNameMax {
			return nil, fieldErr(f+".name", "must be 1-%d characters of A-Z a-z 0-9 . _ - : starting with a letter or digit, got %q", stepNameMax, s.Name)
		}
		if len(d.Name)+1+len(s.Name) > 128 {
			return nil, fieldErr(f+".name", "workflow name, \"/\" and step name must fit in 128 bytes")
		}
		if _, dup := index[s.Name]; dup {
			return nil, fieldErr(f+".name", "step %q is defined twice", s.Name)
		}
		index[s.Name] = i
		if err := checkStep(f, s); err != nil {
			return nil, err
		}
	}
	for i := range d.Steps {
		s := &d.Steps[i]
		f := fmt.Sprintf("steps[%d]", i)
		seen := map[string]bool{}
		for _, n := range s.Needs {
			if _, ok := index[n]; !ok {
				return nil, fieldErr(f+".needs", "step %q needs %q, which is not a step of this workflow", s.Name, n)
			}
			if n == s.Name {
				return nil, fieldErr(f+".needs", "step %q needs itself", s.Name)
			}
			if seen[n] {
				return nil, fieldErr(f+".needs", "step %q names %q twice", s.Name, n)
			}
			seen[n] = true
		}
	}
	order, err := topoOrder(d.Steps, index)
	if err != nil {
		return nil, err
	}
	for i := range d.Steps {
		s := &d.Steps[i]
		if s.FanOut == "" {
			continue
		}
		f := fmt.Sprintf("steps[%d].fan_out", i)
		src, key, ok := strings.Cut(s.FanOut, ".")
		if !ok || key == "" || src == "" {
			return nil, fieldErr(f, "must be params.KEY or STEP.KEY, got %q", s.FanOut)
		}
		if src == "params" {
			if len(d.Params) > 0 {
				var top map[string]json.RawMessage
				if json.Unmarshal(d.Params, &top) == nil {
					if v, has := top[key]; has && !isArray(v) {
						return nil, fieldErr(f, "params.%s is not a JSON array in the workflow's params", key)
					}
				}
			}
			continue
		}
		if !contains(s.Needs, src) {
			if _, known := index[src]; !known {
				return nil, fieldErr(f, "takes its items from %q, which is not a step of this workflow", src)
			}
			return nil, fieldErr(f, "takes its items from step %q, which is not among its needs: its output would not exist yet", src)
		}
	}
	return order, nil
}

func checkStep(f string, s *model.WorkflowStep) error {
	switch s.Callback.Type {
	case model.CallbackHTTP:
		u, err := url.Parse(s.Callback.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fieldErr(f+".callback.url", "must be an absolute http or https URL, got %q", s.Callback.URL)
		}
		if s.Callback.App != "" || s.Callback.Handler != "" {
			return fieldErr(f+".callback", "an http callback takes no app or handler")
		}
	case model.CallbackExecutor:
		if s.Callback.App == "" || s.Callback.Handler == "" {
			return fieldErr(f+".callback", "an executor callback needs app and handler")
		}
		if s.Callback.URL != "" {
			return fieldErr(f+".callback.url", "an executor callback takes no url")
		}
	default:
		return fieldErr(f+".callback.type", "must be http or executor, got %q", s.Callback.Type)
	}
	if s.TimeoutSec == 0 {
		s.TimeoutSec = TimeoutDefaultSec
	}
	if s.TimeoutSec < 1 || s.TimeoutSec > TimeoutMaxSec {
		return fieldErr(f+".timeout_sec", "must be 1-%d, got %d", TimeoutMaxSec, s.TimeoutSec)
	}
	if s.RetryCount < 0 || s.RetryCount > RetriesMax {
		return fieldErr(f+".retry_count", "must be 0-%d, got %d", RetriesMax, s.RetryCount)
	}
	if s.RetryIntervalSec < 0 || s.RetryIntervalSec > 24*3600 {
		return fieldErr(f+".retry_interval_sec", "must be 0-86400, got %d", s.RetryIntervalSec)
	}
	if s.Priority < 0 || s.Priority > 9 {
		return fieldErr(f+".priority", "must be 0-9, got %d", s.Priority)
	}
	for _, k := range []struct{ field, key string }{{"concurrency_key", s.ConcurrencyKey}, {"rate_key", s.RateKey}} {
		if len(k.key) > model.KeyLen {
			return fieldErr(f+"."+k.field, "must be at most %d bytes", model.KeyLen)
		}
		// A template over the step's request params (params, inputs, item, index) is
		// rendered when an attempt starts; its syntax is checked here.
		if model.IsKeyTemplate(k.key) {
			if _, err := model.ParseKeyTemplate(k.key); err != nil {
				return fieldErr(f+"."+k.field, "%v", err)
			}
		}
	}
	switch s.Condition {
	case "":
		s.Condition = model.CondAllSucceeded
	case model.CondAllSucceeded, model.CondAllDone, model.CondAnySucceeded, model.CondAnyFailed:
	default:
		return fieldErr(f+".condition", "must be all_succeeded, all_done, any_succeeded or any_failed, got %q", s.Condition)
	}
	if s.Condition != model.CondAllSucceeded && len(s.Needs) == 0 {
		return fieldErr(f+".condition", "%s needs upstream steps (needs is empty)", s.Condition)
	}
	if s.FanOut == "" && s.Parallelism != 0 {
		return fieldErr(f+".parallelism", "is for a fan-out step; this step has no fan_out")
	}
	if s.Parallelism < 0 || s.Parallelism > FanOutParallelMax {
		return fieldErr(f+".parallelism", "must be 0-%d, got %d", FanOutParallelMax, s.Parallelism)
	}
	if s.FanOut != "" && s.Parallelism == 0 {
		s.Parallelism = FanOutParallelDefault
	}
	return nil
}

// topoOrder orders the steps so that each comes after its needs (Kahn's algorithm), and
// refuses a cycle naming the steps on it.
func topoOrder(steps []model.WorkflowStep, index map[string]int) ([]int, error) {
	indeg := make([]int, len(steps))
	next := make([][]int, len(steps))
	for i, s := range steps {
		for _, n := range s.Needs {
			j := index[n]
			next[j] = append(next[j], i)
			indeg[i]++
		}
	}
	var order, queue []int
	for i := range steps {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		order = append(order, i)
		for _, j := range next[i] {
			if indeg[j]--; indeg[j] == 0 {
				queue = append(queue, j)
			}
		}
	}
	if len(order) < len(steps) {
		var cyc []string
		for i := range steps {
			if indeg[i] > 0 {
				cyc = append(cyc, steps[i].Name)
			}
		}
		return nil, fieldErr("steps", "the needs form a cycle through %s", strings.Join(cyc, ", "))
	}
	return order, nil
}

func checkParams(field string, p json.RawMessage) error {
	if len(p) == 0 {
		return nil
	}
	if len(p) > ParamsMax {
		return fieldErr(field, "must be at most %d bytes of JSON, got %d", ParamsMax, len(p))
	}
	if !json.Valid(p) || !utf8.Valid(p) {
		return fieldErr(field, "must be valid JSON in UTF-8")
	}
	if t := bytes.TrimSpace(p); len(t) == 0 || (t[0] != '{' && string(t) != "null") {
		return fieldErr(field, "must be a JSON object")
	}
	return nil
}

func isArray(v json.RawMessage) bool {
	t := bytes.TrimSpace(v)
	return len(t) > 0 && t[0] == '['
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
