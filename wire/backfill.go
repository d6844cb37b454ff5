package wire

// BackfillView is a backfill as the API shows it.
type BackfillView struct {
	ID       int64  `json:"id"`
	Task     string `json:"task"`
	From     string `json:"from"` // RFC 3339 in the backfill's time zone
	To       string `json:"to"`
	Parallel int    `json:"parallel"`
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
	Status   string `json:"status"`
	// Total is the number of fire times in the range; Started those the cursor has passed;
	// Done those whose run ended or that were skipped (Succeeded + Failed + Skipped);
	// Running the backfill's runs in flight; Pending those not started yet.
	Total     int64 `json:"total"`
	Started   int64 `json:"started"`
	Done      int64 `json:"done"`
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Skipped   int64 `json:"skipped"`
	Running   int64 `json:"running"`
	Pending   int64 `json:"pending"`
	// NextFireTime is the cursor: the next fire time not yet started; "" when none is left.
	NextFireTime string `json:"next_fire_time"`
	Actor        string `json:"actor"`
	CreatedAt    int64  `json:"created_at"`
	UpdatedAt    int64  `json:"updated_at"`
	EndedAt      int64  `json:"ended_at"`
	Note         string `json:"note"`
}

// BackfillBody is the body of POST /api/v1/tasks/{name}/backfill.
type BackfillBody struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Parallel *int   `json:"parallel"`
}

// BackfillList is the answer to GET /api/v1/tasks/{name}/backfills: the task's backfills,
// newest first, and their count.
type BackfillList struct {
	Backfills []BackfillView `json:"backfills"`
	Count     int            `json:"count"`
}
