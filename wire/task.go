package wire

import (
	"encoding/json"

	"github.com/axe-sched/axe/model"
)

// TaskSpec is a task definition as a client sends it. Fields whose zero value is meaningful
// (priority 0 is the highest) are pointers so that "absent" can take the default.
type TaskSpec struct {
	Name             string          `json:"name"`
	Group            string          `json:"group"`
	Trigger          string          `json:"trigger"`
	Cron             string          `json:"cron"`
	DelayMS          *int64          `json:"delay_ms"`
	DependsOn        []string        `json:"depends_on"`
	DependsMode      string          `json:"depends_mode"`
	Timezone         string          `json:"timezone"`
	TimeoutSec       *int            `json:"timeout_sec"`
	RetryCount       *int            `json:"retry_count"`
	RetryIntervalSec *int            `json:"retry_interval_sec"`
	Priority         *int            `json:"priority"`
	Callback         *model.Callback `json:"callback"`
	Params           json.RawMessage `json:"params"`
	MisfirePolicy    string          `json:"misfire_policy"`
	// Paused creates the task paused. On update, absent keeps the task as it is, so an
	// edit never resumes (or pauses) a task by omission.
	Paused *bool `json:"paused"`
	// OnLost is what becomes of an HTTP run left in doubt by a failover or a restart:
	// "fail" (the default: recorded lost, at most once) or "resend" (the same ticket sent
	// again as a new attempt of the same fire, for endpoints that de-duplicate on
	// X-Axe-Ticket).
	OnLost string `json:"on_lost"`
	// CronDialect is "unix" or "quartz"; absent takes the server's --cron-dialect. Only
	// valid with trigger cron.
	CronDialect string `json:"cron_dialect"`
	// Note is the pause note of a task created paused (as a pause with a note would set
	// it); at most 1024 bytes. Only valid on create with paused true.
	Note string `json:"note"`
	// SensitiveParams names top-level keys of params whose values reads mask.
	SensitiveParams []string `json:"sensitive_params"`
	// RunAt is a delay task's one fire as an absolute time, RFC 3339 with a zone, instead of
	// delay_ms. Create only: an update keeps the fire time unless delay_ms changes.
	RunAt string `json:"run_at,omitempty"`
	// RetainHistory and RetainFinished override the server's retention for this task
	// ("7d", "36h"); see docs/retention.md.
	RetainHistory  string `json:"retain_history,omitempty"`
	RetainFinished string `json:"retain_finished,omitempty"`
	// PauseAfterFailures pauses the task after this many consecutive failed runs, 1 to
	// engine.MaxPauseAfterFailures; 0 or absent never does (docs/operations.md, Pause on failure).
	PauseAfterFailures int `json:"pause_after_failures,omitempty"`
	// JitterSec delays each fire of a cron task by a deterministic offset of 0 to JitterSec
	// seconds (at most engine.MaxJitterSec, and below the schedule's smallest gap between fires);
	// 0 or absent: none (docs/design.md, Jitter).
	JitterSec int `json:"jitter_sec,omitempty"`
	// ConcurrencyKey names the concurrency limit of kind "key" the task's runs count in,
	// beside its group's; a name as a group's, or absent: none (docs/design.md, Concurrency
	// limits).
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// RateKey names the rate limit the task's runs take a token of in place of their
	// downstream's: a name, or a template over the run's params such as
	// tenant:{params.tenant_id}, limited by a rate limit on a pattern (tenant:*); absent: the
	// downstream (docs/design.md, Keyed limits).
	RateKey string `json:"rate_key,omitempty"`
	// OverlapPolicy decides a cron task's fires due while its run is in flight: skip,
	// buffer_one (absent: the default), buffer_all or cancel_other; allow_all is refused
	// (docs/design.md, Overlap and catch-up).
	OverlapPolicy string `json:"overlap_policy,omitempty"`
	// CatchupWindowSec: a cron task's fires missed in downtime or a pause within this many
	// seconds run each once, oldest first; 0 or absent: misfire_policy decides. At most
	// engine.MaxCatchupWindowSec; refused with misfire_policy skip, which it would override.
	CatchupWindowSec int `json:"catchup_window_sec,omitempty"`
}

// TaskView is a task as the API shows it: the definition's fields, and the runtime under
// "runtime" with the next fire also as a readable time in the task's zone.
type TaskView struct {
	model.TaskDef
	Runtime TaskRuntime `json:"runtime"`
}

// TaskRuntime is a task's runtime as the API shows it, under "runtime" of a TaskView.
type TaskRuntime struct {
	model.Runtime
	NextFireAt string `json:"next_fire_at,omitempty"`
	// NextJitterMS is the next fire's jitter, for a jittered cron task that waits for it: the
	// fire leaves at next_trigger_time plus it (docs/design.md, Jitter).
	NextJitterMS *int64 `json:"next_jitter_ms,omitempty"`
}

// NoteBody is the optional body of pause and resume.
type NoteBody struct {
	Note string `json:"note"`
}

// RunBody is the optional body of run-now.
type RunBody struct {
	Params json.RawMessage `json:"params"`
}

// KillBody is the optional body of a kill: why the operator kills. "note", the field of the
// other task operations, is taken as the reason too, so a client that sent one still works.
type KillBody struct {
	Reason string `json:"reason"`
	Note   string `json:"note"`
}

// RunNowAnswer is the answer (202) to POST /api/v1/tasks/{name}/run: the run-now instance's
// ticket and its task.
type RunNowAnswer struct {
	Task   string `json:"task"`
	Ticket string `json:"ticket"`
}

// BackupAnswer is the 503 a backup answers a write with (and a read that only the primary
// serves): the error and the primary's advertise URL, "" when no primary is known. A client
// asks that URL next.
type BackupAnswer struct {
	Error   string `json:"error"`
	Primary string `json:"primary"`
}
