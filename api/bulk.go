package api

// Selector picks the tasks of a bulk operation. Its criteria combine with AND; at least one
// must be given.
type Selector struct {
	Group      string   `json:"group"`
	NamePrefix string   `json:"name_prefix"`
	State      string   `json:"state"`
	Names      []string `json:"names"`
	// Note goes into each task's action record.
	Note string `json:"note"`
}

// BatchResult counts what CreateTasks did.
type BatchResult struct {
	Created  int `json:"created"`
	Skipped  int `json:"skipped"`
	Replaced int `json:"replaced"`
}

// PruneResult counts what a prune deleted (or would, on a dry run), by table.
type PruneResult struct {
	Runs     int64 `json:"task_run"`
	Actions  int64 `json:"task_action"`
	Finished int64 `json:"task_def"`
}
