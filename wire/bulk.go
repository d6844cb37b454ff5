package wire

// Selector is the body of POST /api/v1/tasks/bulk/{op}: it picks the tasks of a bulk
// operation. Its criteria combine with AND; at least one must be given. An empty field is
// left out when a client encodes it, and read as absent by the server.
type Selector struct {
	Group      string   `json:"group,omitempty"`
	NamePrefix string   `json:"name_prefix,omitempty"`
	State      string   `json:"state,omitempty"`
	Names      []string `json:"names,omitempty"`
	// Note goes into each task's action record.
	Note string `json:"note,omitempty"`
}

// BatchResult is the answer to a batch create (POST /api/v1/tasks/batch): how many tasks
// were created, skipped (their name was taken, with on_conflict=skip) and replaced (with
// on_conflict=replace).
type BatchResult struct {
	Created  int `json:"created"`
	Skipped  int `json:"skipped"`
	Replaced int `json:"replaced"`
}

// PruneResult is the answer to POST /api/v1/prune: what a prune deleted (or would, on a dry
// run), by table.
type PruneResult struct {
	Runs     int64 `json:"task_run"`
	Actions  int64 `json:"task_action"`
	Finished int64 `json:"task_def"`
}

// BatchRefusal is the answer to a refused batch: the error, and every refused item by its
// index in the batch. Other error answers carry only "error".
type BatchRefusal struct {
	Error  string           `json:"error"`
	Errors []BatchItemError `json:"errors"`
	// Created, Skipped and Replaced are what was done of the batch all the same: on a
	// sharded cluster each owner creates the items of its shards, and a part one owner
	// refused leaves the others' parts created (409; docs/bulk.md).
	Created  int `json:"created,omitempty"`
	Skipped  int `json:"skipped,omitempty"`
	Replaced int `json:"replaced,omitempty"`
}

// BatchItemError names a refused item of a batch by its index in the batch.
type BatchItemError struct {
	Index int    `json:"index"`
	Error string `json:"error"`
}

// PruneBody is the body of POST /api/v1/prune: Before is an RFC 3339 time or an age ("7d",
// "36h").
type PruneBody struct {
	Before string `json:"before"`
	DryRun bool   `json:"dry_run"`
}
