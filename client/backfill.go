package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// BackfillView is a backfill as the API returns it (docs/openapi.yaml, Backfill).
type BackfillView struct {
	ID           int64  `json:"id"`
	Task         string `json:"task"`
	From         string `json:"from"`
	To           string `json:"to"`
	Parallel     int    `json:"parallel"`
	Cron         string `json:"cron"`
	Timezone     string `json:"timezone"`
	Status       string `json:"status"`
	Total        int64  `json:"total"`
	Started      int64  `json:"started"`
	Done         int64  `json:"done"`
	Succeeded    int64  `json:"succeeded"`
	Failed       int64  `json:"failed"`
	Skipped      int64  `json:"skipped"`
	Running      int64  `json:"running"`
	Pending      int64  `json:"pending"`
	NextFireTime string `json:"next_fire_time"`
	Actor        string `json:"actor"`
	CreatedAt    int64  `json:"created_at"`
	UpdatedAt    int64  `json:"updated_at"`
	EndedAt      int64  `json:"ended_at"`
	Note         string `json:"note"`
}

func backfillsPath(name string) string { return "/api/v1/tasks/" + url.PathEscape(name) + "/backfills" }

// CreateBackfill starts a backfill of the cron task name over [from, to] (RFC 3339), at
// most parallel runs at once.
func (c *Client) CreateBackfill(ctx context.Context, name, from, to string, parallel int) (*BackfillView, error) {
	var v BackfillView
	body := map[string]any{"from": from, "to": to, "parallel": parallel}
	err := c.Do(ctx, http.MethodPost, "/api/v1/tasks/"+url.PathEscape(name)+"/backfill", body, &v)
	return &v, err
}

// Backfills lists the task's backfills, newest first.
func (c *Client) Backfills(ctx context.Context, name string, limit int) ([]BackfillView, error) {
	var v struct {
		Backfills []BackfillView `json:"backfills"`
	}
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
