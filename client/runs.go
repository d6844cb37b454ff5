package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/axe-sched/axe/model"
)

// GetRun returns the run with ticket (GET /api/v1/runs/{ticket}).
func (c *Client) GetRun(ctx context.Context, ticket string) (*model.Run, error) {
	var v model.Run
	return &v, c.Do(ctx, http.MethodGet, "/api/v1/runs/"+url.PathEscape(ticket), nil, &v)
}

// KillRun kills the run with ticket, whatever its kind, with an optional reason
// (POST /api/v1/runs/{ticket}/kill), and returns its record as the kill left it.
func (c *Client) KillRun(ctx context.Context, ticket, reason string) (*model.Run, error) {
	var v model.Run
	return &v, c.Do(ctx, http.MethodPost, "/api/v1/runs/"+url.PathEscape(ticket)+"/kill", reasonBody(reason), &v)
}

// KillTask kills every run of the task in flight, with an optional reason
// (POST /api/v1/tasks/{name}/kill).
func (c *Client) KillTask(ctx context.Context, name, reason string) (*TaskView, error) {
	var v TaskView
	return &v, c.Do(ctx, http.MethodPost, "/api/v1/tasks/"+url.PathEscape(name)+"/kill", reasonBody(reason), &v)
}

func reasonBody(reason string) any {
	if reason == "" {
		return nil
	}
	return map[string]string{"reason": reason}
}
