package model

// Backfill statuses, stored in Backfill.Status.
const (
	BackfillRunning  = "running"  // the cursor has fire times left, or runs are in flight
	BackfillDone     = "done"     // every fire time of the range was started or skipped, and ended
	BackfillCanceled = "canceled" // canceled: no run starts any more; runs in flight finish
	BackfillAborted  = "aborted"  // the task was deleted or stopped being a cron task
)

// Backfill is a request to run a cron task once for every fire time its schedule would have
// produced in [From, To], each with that nominal time as its scheduled_at. It is a stored
// row with a cursor, not a list of runs: the runs are created in small batches as its
// parallelism allows (engine/backfills.go).
type Backfill struct {
	ID       int64  `json:"id"`
	TaskID   int64  `json:"task_id"`
	TaskName string `json:"task"`
	From     int64  `json:"from"` // Unix ms, inclusive
	To       int64  `json:"to"`   // Unix ms, inclusive
	Parallel int    `json:"parallel"`
	// Cron, CronDialect and Timezone are the task's schedule when the backfill was made: its
	// fire times are those of that schedule, whatever edits of the task follow.
	Cron        string `json:"cron"`
	CronDialect string `json:"cron_dialect"`
	Timezone    string `json:"timezone"`
	// Total is the number of fire times in [From, To], counted when the backfill was made.
	Total int64 `json:"total"`
	// Next is the cursor: the next fire time not yet started (Unix ms), 0 when none is left.
	Next int64 `json:"next"`
	// Low is at most the oldest fire time whose run may still be in flight, and at most
	// Next: recovery looks for this backfill's open runs from it on. Past To when none can
	// be.
	Low int64 `json:"-"`
	// Started counts the fire times the cursor has passed (run or skipped).
	Started int64 `json:"started"`
	// Skipped counts the fire times passed without a run from this backfill: their run
	// existed already (the schedule's own, another backfill's, a skip record), or the
	// schedule had not reached them yet.
	Skipped   int64  `json:"skipped"`
	Succeeded int64  `json:"succeeded"`
	Failed    int64  `json:"failed"` // failed, timed out, lost or killed
	Status    string `json:"status"`
	Actor     string `json:"actor"`
	CreatedAt int64  `json:"created_at"`
	UpdatedAt int64  `json:"updated_at"`
	EndedAt   int64  `json:"ended_at"`
	Note      string `json:"note"`
}
