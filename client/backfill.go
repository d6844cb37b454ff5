package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/axe-sched/axe/wire"
)

// BackfillView is a backfill as the API returns it (docs/openapi.yaml, Backfill).
type BackfillView = wire.BackfillView

func backfillsPath(name string) string { return "/api/v1/tasks/" + url.PathEscape(name) + "/backfills" }

// CreateBackfill starts a backfill of the cron task name over [from, to] (RFC 3339), at
// most parallel runs at once.
func (c *Client) CreateBackfill(ctx context.Context, name, from, to string, parallel int) (*BackfillView, error) {
	var v BackfillView
	body := wire.BackfillBody{From: from, To: to, Parallel: &parallel}
	err := c.Do(ctx, http.MethodPost, "/api/v1/tasks/"+url.PathEscape(name)+"/backfill", body, &v)
	return &v, err
}

// Backfills lists the task's backfills, newest first.
func (c *Client) Backfills(ctx context.Context, name string, limit int) ([]BackfillView, error) {
	var v wire.BackfillList
	err := c.Do(ctx, http.MethodGet, backfillsPath(name)+"?limit="+strconv.Itoa(limit), nil, &v)
	return v.Backfills, err
}

// Backfill returns one backfill of the task.
func (c *Client) Backfill(ctx context.Context, name string, id int64) (*BackfillView, error) {
	var v BackfillView
	err := c.Do(ctx, http.MethodGet, backfillsPath(name)+"/"+strconv.FormatInt(id, 10), nil, &v)
	return &v, err
}

// CancelBackfill cancels a backfill: no run of it starts any more; runs in flight finish.
func (c *Client) CancelBackfill(ctx context.Context, name string, id int64) (*BackfillView, error) {
	var v BackfillView
	err := c.Do(ctx, http.MethodPost, backfillsPath(name)+"/"+strconv.FormatInt(id, 10)+"/cancel", nil, &v)
	return &v, err
}
