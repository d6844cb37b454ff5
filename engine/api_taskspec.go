package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/wire"
)

// MaxParamsBytes bounds a task's params (and a run-now's), in bytes of JSON.
const MaxParamsBytes = 64 << 10

// Task definition defaults.
const (
	GroupDefault            = "default"
	TimeoutSecDefault       = 300
	RetryIntervalSecDefault = 30
	PriorityDefault         = 2
	TimezoneDefault         = "Asia/Shanghai"

	maxTimeoutSec       = 7 * 24 * 3600
	maxRetryCount       = 100
	maxRetryIntervalSec = 24 * 3600
	maxParamsBytes      = MaxParamsBytes
	maxDependsOn        = 64
	maxCronLen          = 255 // the stored column's size
	maxNoteBytes        = 1024
	maxSensitiveParams  = 32
	maxTimezoneLen      = 64 // the stored column's size
)

// MaxPauseAfterFailures bounds pause_after_failures: a task that failed a thousand runs in a
// row is broken, and a higher bound would only mean "never", which 0 already says.
const MaxPauseAfterFailures = 1000

// MaxCallbackURLBytes bounds an HTTP callback's URL: the length HTTP asks every server to
// take (RFC 9110, 4.1: at least 8,000 octets), well within the column that stores it.
const MaxCallbackURLBytes = 8000

// FieldError is a validation failure of one field of a task definition. It unwraps to
// ErrInvalidTask, so the API maps it to 400 and names the field.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes errors.Is(err, ErrInvalidTask) true.
func (e *FieldError) Unwrap() error { return ErrInvalidTask }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// DecodeTaskSpec parses a task definition from JSON strictly (protocol.Decode): unknown
// fields are rejected so that a typo ("retry_cnt") is an error rather than a silently ignored
// setting, and so are a repeated key and invalid UTF-8, which the store would refuse.
func DecodeTaskSpec(data []byte) (*wire.TaskSpec, error) {
	var s wire.TaskSpec
	if err := protocol.Decode(data, &s); err != nil {
		var fe *protocol.FieldError
		if errors.As(err, &fe) && fe.Field != "" {
			return nil, fieldErr(fe.Field, "%s", fe.Msg)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidTask, err)
	}
	return &s, nil
}

// validName is the one rule of a name (model.ValidName): tasks, groups, apps, upstreams,
// and the workflow service's workflows and steps.
var validName = model.ValidName

// Normalize validates s and returns the definition with defaults applied. defaultTZ is the
// server's default zone; the cron dialect default is unix, chosen by no one (see
// NormalizeIn). Errors are *FieldError naming the field.
func Normalize(s *wire.TaskSpec, defaultTZ string) (model.TaskDef, error) {
	return NormalizeIn(s, defaultTZ, "")
}

// NormalizeIn is Normalize on a server whose cron dialect is serverDialect: "unix" or
// "quartz" when the operator chose one, "" when nobody did. In that last case a task that
// names no dialect reads as unix, and an expression that unix and Quartz read differently
// (cron.CheckAmbiguous) is refused rather than guessed at.
//
// The jitter check measures the schedule's shortest gap over the year from now; with no
// engine to ask, NormalizeIn reads now on clock.Real. The engine's API normalizes on its own
// clock (normalizeAt).
func NormalizeIn(s *wire.TaskSpec, defaultTZ, serverDialect string) (model.TaskDef, error) {
	return normalizeAt(s, defaultTZ, serverDialect, clock.Real.Now())
}

// normalizeAt is NormalizeIn at now, the instant the jitter check's year starts from.
func normalizeAt(s *wire.TaskSpec, defaultTZ, serverDialect string, now time.Time) (model.TaskDef, error) {
	var d model.TaskDef
	if s.Name == "" {
		return d, fieldErr("name", "is required")
	}
	if !validName(s.Name) {
		return d, fieldErr("name", "must be 1-128 characters of letters, digits, '.', '_', ':' or '-', starting with a letter or digit")
	}
	if s.Note != "" && (s.Paused == nil || !*s.Paused) {
		return d, fieldErr("note", "is only valid with paused: true (it is the pause note)")
	}
	if len(s.Note) > maxNoteBytes {
		return d, fieldErr("note", "must be at most %d bytes", maxNoteBytes)
	}
	d.Name = s.Name
	d.Group = s.Group
	if d.Group == "" {
		d.Group = GroupDefault
	}
	if !validName(d.Group) {
		return d, fieldErr("group", "must be 1-128 characters of letters, digits, '.', '_', ':' or '-'")
	}
	if err := checkKeyTemplate("concurrency_key", s.ConcurrencyKey); err != nil {
		return d, err
	}
	d.ConcurrencyKey = s.ConcurrencyKey
	if err := checkKeyTemplate("rate_key", s.RateKey); err != nil {
		return d, err
	}
	d.RateKey = s.RateKey

	d.Trigger = s.Trigger
	if d.Trigger == "" {
		// Infer only when unambiguous; otherwise ask for it.
		switch {
		case s.Cron != "" && s.DelayMS == nil && len(s.DependsOn) == 0:
			d.Trigger = model.TriggerCron
		case s.DelayMS != nil && s.Cron == "" && len(s.DependsOn) == 0:
			d.Trigger = model.TriggerDelay
		case len(s.DependsOn) > 0 && s.Cron == "" && s.DelayMS == nil:
			d.Trigger = model.TriggerDependency
		default:
			return d, fieldErr("trigger", "is required: one of cron, delay, manual, dependency")
		}
	}
	tz := s.Timezone
	if tz == "" {
		tz = defaultTZ
	}
	if len(tz) > maxTimezoneLen {
		// The zone database also opens "Asia/./Shanghai": a name is held to the column.
		return d, fieldErr("timezone", "must be at most %d bytes, got %d", maxTimezoneLen, len(tz))
	}
	if _, err := cron.LoadLocation(tz); err != nil {
		return d, fieldErr("timezone", "unknown zone %q", tz)
	}
	d.Timezone = tz

	switch d.Trigger {
	case model.TriggerCron:
		if s.Cron == "" {
			return d, fieldErr("cron", "is required for trigger cron")
		}
		if len(s.Cron) > maxCronLen {
			return d, fieldErr("cron", "must be at most %d bytes, got %d", maxCronLen, len(s.Cron))
		}
		dialect, err := resolveDialect(s.CronDialect, serverDialect)
		if err != nil {
			return d, err
		}
		if s.CronDialect == "" && serverDialect == "" {
			if err := cron.CheckAmbiguous(s.Cron); err != nil {
				return d, fieldErr("cron", "%v", err)
			}
		}
		if _, err := cron.ParseIn(s.Cron, dialect); err != nil {
			return d, fieldErr("cron", "%v (dialect %s)", err, dialect)
		}
		d.Cron = s.Cron
		d.CronDialect = string(dialect)
	case model.TriggerDelay:
		if s.DelayMS == nil {
			return d, fieldErr("delay_ms", "is required for trigger delay")
		}
		if *s.DelayMS < 0 {
			return d, fieldErr("delay_ms", "must be >= 0, got %d", *s.DelayMS)
		}
		if *s.DelayMS > int64(10*365*24*time.Hour/time.Millisecond) {
			return d, fieldErr("delay_ms", "must be at most ten years")
		}
		d.DelayMS = *s.DelayMS
	case model.TriggerManual:
	case model.TriggerDependency:
		if len(s.DependsOn) == 0 {
			return d, fieldErr("depends_on", "is required for trigger dependency")
		}
	default:
		return d, fieldErr("trigger", "must be one of cron, delay, manual, dependency; got %q", s.Trigger)
	}
	if d.Trigger != model.TriggerCron && s.Cron != "" {
		return d, fieldErr("cron", "is only valid with trigger cron")
	}
	if d.Trigger != model.TriggerCron && s.CronDialect != "" {
		return d, fieldErr("cron_dialect", "is only valid with trigger cron")
	}
	if d.Trigger != model.TriggerDelay && s.DelayMS != nil {
		return d, fieldErr("delay_ms", "is only valid with trigger delay")
	}
	if d.Trigger != model.TriggerDependency && len(s.DependsOn) > 0 {
		return d, fieldErr("depends_on", "is only valid with trigger dependency")
	}
	if len(s.DependsOn) > maxDependsOn {
		return d, fieldErr("depends_on", "at most %d upstream tasks", maxDependsOn)
	}
	seen := make(map[string]bool, len(s.DependsOn))
	for _, up := range s.DependsOn {
		if !validName(up) {
			return d, fieldErr("depends_on", "invalid task name %q", up)
		}
		if up == s.Name {
			return d, fieldErr("depends_on", "a task cannot depend on itself")
		}
		if seen[up] {
			return d, fieldErr("depends_on", "%q is listed twice", up)
		}
		seen[up] = true
	}
	if len(s.DependsOn) > 0 {
		d.DependsOn = append([]string(nil), s.DependsOn...)
	}
	switch s.DependsMode {
	case "", "all":
		if d.Trigger == model.TriggerDependency {
			d.DependsMode = "all"
		}
	case "any":
		if d.Trigger != model.TriggerDependency {
			return d, fieldErr("depends_mode", "is only valid with trigger dependency")
		}
		d.DependsMode = "any"
	default:
		return d, fieldErr("depends_mode", "must be all or any; got %q", s.DependsMode)
	}

	d.TimeoutSec = TimeoutSecDefault
	if s.TimeoutSec != nil {
		if *s.TimeoutSec < 1 || *s.TimeoutSec > maxTimeoutSec {
			return d, fieldErr("timeout_sec", "must be 1..%d, got %d", maxTimeoutSec, *s.TimeoutSec)
		}
		d.TimeoutSec = *s.TimeoutSec
	}
	if s.RetryCount != nil {
		if *s.RetryCount < 0 || *s.RetryCount > maxRetryCount {
			return d, fieldErr("retry_count", "must be 0..%d, got %d", maxRetryCount, *s.RetryCount)
		}
		d.RetryCount = *s.RetryCount
	}
	d.RetryIntervalSec = RetryIntervalSecDefault
	if s.RetryIntervalSec != nil {
		if *s.RetryIntervalSec < 1 || *s.RetryIntervalSec > maxRetryIntervalSec {
			return d, fieldErr("retry_interval_sec", "must be 1..%d, got %d", maxRetryIntervalSec, *s.RetryIntervalSec)
		}
		d.RetryIntervalSec = *s.RetryIntervalSec
	}
	d.Priority = PriorityDefault
	if s.Priority != nil {
		if *s.Priority < 0 || *s.Priority > 4 {
			return d, fieldErr("priority", "must be 0..4 (0 is the highest), got %d", *s.Priority)
		}
		d.Priority = *s.Priority
	}

	if s.Callback == nil {
		return d, fieldErr("callback", "is required")
	}
	cb := *s.Callback
	if cb.Type == "" {
		switch {
		case cb.URL != "" && cb.App == "":
			cb.Type = model.CallbackHTTP
		case cb.App != "" && cb.URL == "":
			cb.Type = model.CallbackExecutor
		default:
			return d, fieldErr("callback.type", "is required: http or executor")
		}
	}
	switch cb.Type {
	case model.CallbackHTTP:
		if cb.URL == "" {
			return d, fieldErr("callback.url", "is required for callback type http")
		}
		if len(cb.URL) > MaxCallbackURLBytes {
			return d, fieldErr("callback.url", "must be at most %d bytes, got %d", MaxCallbackURLBytes, len(cb.URL))
		}
		u, err := url.Parse(cb.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return d, fieldErr("callback.url", "must be an absolute http:// or https:// URL, got %q", cb.URL)
		}
		if err := dispatch.CheckURLBytes(cb.URL); err != nil {
			// Refused, not rewritten: a URL silently encoded would call another target
			// than the one written.
			return d, fieldErr("callback.url", "%v", err)
		}
		if cb.App != "" || cb.Handler != "" || cb.Route != "" {
			return d, fieldErr("callback", "app, handler and route are only valid with callback type executor")
		}
	case model.CallbackExecutor:
		if cb.App == "" {
			return d, fieldErr("callback.app", "is required for callback type executor")
		}
		if !validName(cb.App) {
			return d, fieldErr("callback.app", "invalid app name %q", cb.App)
		}
		if cb.Handler == "" {
			return d, fieldErr("callback.handler", "is required for callback type executor")
		}
		if !validName(cb.Handler) {
			// What an executor may register (ExecutorRegistration): any other name never runs.
			return d, fieldErr("callback.handler", "invalid handler name %q", protocol.ClipText(cb.Handler, 64))
		}
		if cb.URL != "" {
			return d, fieldErr("callback.url", "is only valid with callback type http")
		}
		if !protocol.ValidRoute(cb.Route) {
			return d, fieldErr("callback.route", "must be one of %s; got %q", protocol.RouteList(), cb.Route)
		}
	default:
		return d, fieldErr("callback.type", "must be http or executor, got %q", cb.Type)
	}
	d.Callback = cb

	if len(s.Params) > 0 {
		if len(s.Params) > maxParamsBytes {
			return d, fieldErr("params", "must be at most %d bytes of JSON", maxParamsBytes)
		}
		if !json.Valid(s.Params) {
			return d, fieldErr("params", "must be valid JSON")
		}
		if !bytes.Equal(bytes.TrimSpace(s.Params), []byte("null")) {
			var buf bytes.Buffer
			if err := json.Compact(&buf, s.Params); err != nil {
				return d, fieldErr("params", "must be valid JSON")
			}
			d.Params = buf.Bytes()
		}
	}
	if err := checkKeyParams(&d); err != nil {
		return d, err
	}
	switch s.MisfirePolicy {
	case "":
		d.MisfirePolicy = model.MisfireFireOnce
	case model.MisfireFireOnce, model.MisfireSkip:
		d.MisfirePolicy = s.MisfirePolicy
	default:
		return d, fieldErr("misfire_policy", "must be fire_once or skip, got %q", s.MisfirePolicy)
	}
	d.Paused = s.Paused != nil && *s.Paused
	if s.PauseAfterFailures < 0 || s.PauseAfterFailures > MaxPauseAfterFailures {
		return d, fieldErr("pause_after_failures", "must be 0..%d (0: never pause), got %d", MaxPauseAfterFailures, s.PauseAfterFailures)
	}
	d.PauseAfterFailures = s.PauseAfterFailures
	d.JitterSec = s.JitterSec
	// The gap is that of the year from now: the zone's rules decide it, and the result is
	// cached per (cron, dialect, zone).
	if err := checkJitter(&d, now); err != nil {
		return d, err
	}
	if err := checkOverlap(s, &d); err != nil {
		return d, err
	}
	switch s.OnLost {
	case "", persist.OnLostFail:
		d.OnLost = s.OnLost
	case persist.OnLostResend:
		if d.Callback.Type != model.CallbackHTTP {
			return d, fieldErr("on_lost", "resend applies to HTTP callbacks only; an executor's runs are ended by the results it re-sends")
		}
		d.OnLost = s.OnLost
	default:
		return d, fieldErr("on_lost", "must be fail or resend, got %q", s.OnLost)
	}
	if len(s.SensitiveParams) > maxSensitiveParams {
		return d, fieldErr("sensitive_params", "at most %d keys, got %d", maxSensitiveParams, len(s.SensitiveParams))
	}
	for _, k := range s.SensitiveParams {
		if k == "" || len(k) > 128 {
			return d, fieldErr("sensitive_params", "keys must be 1..128 bytes, got %q", k)
		}
		if !slices.Contains(d.SensitiveParams, k) {
			d.SensitiveParams = append(d.SensitiveParams, k)
		}
	}
	// Last, what the store would refuse of the whole row, exactly as it is written: a value
	// refused there would fail the create or edit after it was accepted.
	if err := persist.CheckTaskDef(&d); err != nil {
		var ce *persist.ColumnError
		if errors.As(err, &ce) {
			return d, fieldErr(ce.Field, "%s", ce.Msg)
		}
		return d, fmt.Errorf("%w: %v", ErrInvalidTask, err)
	}
	return d, nil
}

// validRoute reports whether r names a routing strategy of the dispatcher's registry.
func validRoute(r string) bool {
	switch r {
	case "", dispatch.RouteRoundRobin, dispatch.RouteRandom, dispatch.RouteLeastBusy, dispatch.RouteConsistentHash, dispatch.RouteFailover:
		return true
	}
	return false
}

// resolveDialect picks a task's cron dialect: its own, else the server's, else unix.
func resolveDialect(own, server string) (cron.Dialect, error) {
	name := own
	if name == "" {
		name = server
	}
	d, err := cron.ParseDialect(name)
	if err != nil {
		if own != "" {
			return "", fieldErr("cron_dialect", "must be unix or quartz, got %q", own)
		}
		return "", fmt.Errorf("server cron dialect: %w", err)
	}
	return d, nil
}

// checkOverlap resolves and validates the overlap policy and catch-up window of s into d,
// whose trigger and misfire policy are resolved.
func checkOverlap(s *wire.TaskSpec, d *model.TaskDef) error {
	switch s.OverlapPolicy {
	case "", model.OverlapBufferOne:
		d.OverlapPolicy = model.OverlapBufferOne
	case model.OverlapSkip, model.OverlapBufferAll, model.OverlapCancelOther, model.OverlapAllowAll:
		if d.Trigger != model.TriggerCron {
			return fieldErr("overlap_policy", "is only valid with trigger cron: it decides cron fires due while a run is in flight")
		}
		d.OverlapPolicy = s.OverlapPolicy
	default:
		return fieldErr("overlap_policy", "must be skip, buffer_one, buffer_all, cancel_other or allow_all, got %q", s.OverlapPolicy)
	}
	if d.OverlapPolicy == model.OverlapAllowAll {
		// Several runs of the task are in flight at once, each outside the periodic state
		// machine (core_parallel.go), and none has a durable place to wait for a retry or a
		// re-send.
		if d.RetryCount > 0 {
			return fieldErr("retry_count", "must be 0 with overlap_policy allow_all: its runs are not retried "+
				"(each fire runs once, beside the others), got %d", d.RetryCount)
		}
		if s.OnLost == persist.OnLostResend {
			return fieldErr("on_lost", "resend is not supported with overlap_policy allow_all: a run in doubt is recorded lost")
		}
	}
	w := s.CatchupWindowSec
	if w < 0 || w > MaxCatchupWindowSec {
		return fieldErr("catchup_window_sec", "must be 0..%d seconds (0: none, misfire_policy decides), got %d", MaxCatchupWindowSec, w)
	}
	if w > 0 && d.Trigger != model.TriggerCron {
		return fieldErr("catchup_window_sec", "is only valid with trigger cron")
	}
	if w > 0 && s.MisfirePolicy == model.MisfireSkip {
		return fieldErr("misfire_policy", "skip contradicts catchup_window_sec %d, which decides missed fires instead: "+
			"leave misfire_policy out (or fire_once), or set catchup_window_sec 0", w)
	}
	d.CatchupWindowSec = w
	return nil
}

// checkKeyTemplate validates a concurrency_key or rate_key (field): empty, a static name,
// or a template over the run's params (model.ParseKeyTemplate; docs/design.md, Keyed
// limits).
func checkKeyTemplate(field, k string) error {
	if k == "" {
		return nil
	}
	if model.IsKeyTemplate(k) {
		if _, err := model.ParseKeyTemplate(k); err != nil {
			return fieldErr(field, "%v", err)
		}
		return nil
	}
	if !validName(k) {
		return fieldErr(field, "must be empty, a template such as tenant:{params.tenant_id}, or 1-128 characters of letters, digits, '.', '_', ':' or '-', starting with a letter or digit")
	}
	return nil
}

// checkKeyParams refuses a keyed task whose own params do not render its keys: every fire of
// it runs with those params, so it would have no key at every fire. A manual task is fired
// by run-now, which may give params of its own, and is checked then.
func checkKeyParams(d *model.TaskDef) error {
	if d.Trigger == model.TriggerManual {
		return nil
	}
	for _, k := range []struct{ field, tmpl string }{{"concurrency_key", d.ConcurrencyKey}, {"rate_key", d.RateKey}} {
		if !model.IsKeyTemplate(k.tmpl) {
			continue
		}
		if _, err := model.RenderKey(k.tmpl, d.Params); err != nil {
			return fieldErr(k.field, "%v with the task's params (every fire runs with them)", err)
		}
	}
	return nil
}
