package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/axe-sched/axe/wire"
)

// BatchResult is the answer to a batch create: how many tasks were created, skipped (their
// name was taken, with on_conflict=skip) and replaced (with on_conflict=replace).
type BatchResult = wire.BatchResult

// BatchItemError names a refused item of a batch by its index in the batch.
type BatchItemError = wire.BatchItemError

// CreateTasks creates specs (raw JSON task definitions) in one batch, all or nothing
// (docs/bulk.md). onConflict is "" (error), "error", "skip" or "replace". A refused batch
// is an *APIError whose Items name every bad item by its index in specs.
func (c *Client) CreateTasks(ctx context.Context, specs []json.RawMessage, onConflict string) (BatchResult, error) {
	var body bytes.Buffer
	for _, s := range specs {
		// Compact keeps each definition on one line, as NDJSON needs.
		if err := json.Compact(&body, s); err != nil {
			return BatchResult{}, fmt.Errorf("cannot encode batch: %w", err)
		}
		body.WriteByte('\n')
	}
	path := "/api/v1/tasks/batch"
	if onConflict != "" {
		path += "?on_conflict=" + url.QueryEscape(onConflict)
	}
	var res BatchResult
	err := c.do(ctx, http.MethodPost, path, "application/x-ndjson", body.Bytes(), &res)
	return res, err
}

// BulkSelector picks the tasks of a bulk operation; the criteria combine with AND.
type BulkSelector = wire.Selector

// Bulk runs op (pause, resume, delete or run) on the tasks sel picks and returns how many
// it affected, or with dryRun how many it would.
func (c *Client) Bulk(ctx context.Context, op string, sel BulkSelector, dryRun bool) (int, error) {
	path := "/api/v1/tasks/bulk/" + url.PathEscape(op)
	if dryRun {
		path += "?dry_run=true"
	}
	var out struct {
		Affected int `json:"affected"`
	}
	err := c.Do(ctx, http.MethodPost, path, sel, &out)
	return out.Affected, err
}

// PruneResult counts what a prune deleted, or would on a dry run.
type PruneResult = wire.PruneResult

// Prune deletes runs, actions and finished one-shot tasks from before before: an RFC 3339
// time or an age ("7d", "36h").
func (c *Client) Prune(ctx context.Context, before string, dryRun bool) (PruneResult, error) {
	var out PruneResult
	err := c.Do(ctx, http.MethodPost, "/api/v1/prune", wire.PruneBody{Before: before, DryRun: dryRun}, &out)
	return out, err
}
