// Package client is the Go client of axe's REST API (docs in README.md, "REST API"). It
// speaks only HTTP and decodes into the domain types of package model, so a program that
// uses it links neither SQL driver nor the engine.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wire"
)

// APIError is an error answer of the API: the status and its {"error": ...} message.
type APIError struct {
	Status  int
	Message string
	// Items are the refused items of a batch (POST /api/v1/tasks/batch), by index.
	Items []BatchItemError
	// Done is what was done of a batch all the same (a sharded cluster's owners each create
	// their part): its created, skipped and replaced counts; zero for every other error.
	Done BatchResult
}

func (e *APIError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status) }

// Client calls the REST API. It takes several scheduler addresses and follows the one that answers
// (docs/protocol.md, "Failover"): a connection error or a 503 moves on to the next address. It is
// safe for concurrent use.
type Client struct {
	token string
	actor string
	http  *http.Client

	mu      sync.Mutex
	servers []string // the one that answered last comes first
}

// New builds a client for a comma-separated list of base URLs ("http://host:port");
// a bare host:port gets http://.
func New(servers, token, actor string) (*Client, error) {
	var list []string
	for _, s := range strings.Split(servers, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = "http://" + s
		}
		if _, err := url.Parse(s); err != nil {
			return nil, fmt.Errorf("server %q: %w", s, err)
		}
		list = append(list, strings.TrimRight(s, "/"))
	}
	if len(list) == 0 {
		return nil, errors.New("server: at least one address is required")
	}
	return &Client{servers: list, token: token, actor: actor, http: &http.Client{Timeout: 5 * time.Minute}}, nil
}

// Do sends a request and decodes a 2xx JSON answer into out (when non-nil).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var raw []byte
	if body != nil {
		switch b := body.(type) {
		case []byte:
			raw = b
		default:
			var err error
			if raw, err = json.Marshal(body); err != nil {
				return fmt.Errorf("cannot encode request: %w", err)
			}
		}
	}
	return c.do(ctx, method, path, "application/json", raw, out)
}

// movingRetry bounds how long a call is made again while every address answers 503 with a
// Retry-After: the nodes that schedule by shard say so while the call's shard moves between
// them (docs/scale-out.md), which takes a renew interval or two, and a backup that knows no
// primary yet says so during a takeover; both take longer on a loaded machine.
const movingRetry = 30 * time.Second

// do sends raw (of content type ct, when not nil) and decodes a 2xx JSON answer into out.
// When every address answered 503 with a Retry-After, it waits that long (at most 2 s) and
// tries them again, for up to movingRetry.
func (c *Client) do(ctx context.Context, method, path, ct string, raw []byte, out any) error {
	deadline := time.Now().Add(movingRetry)
	for {
		wait, err := c.round(ctx, method, path, ct, raw, out)
		if wait <= 0 || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// round tries each address once, as do describes; wait is the Retry-After of the last
// address when every one answered 503 with one, else 0.
func (c *Client) round(ctx context.Context, method, path, ct string, raw []byte, out any) (wait time.Duration, _ error) {
	c.mu.Lock()
	servers := append([]string(nil), c.servers...)
	c.mu.Unlock()
	var lastErr error
	for i := 0; i < len(servers); i++ {
		base := servers[i]
		req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(raw))
		if err != nil {
			return 0, fmt.Errorf("cannot build request: %w", err)
		}
		if raw != nil {
			req.Header.Set("Content-Type", ct)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		if c.actor != "" {
			req.Header.Set("X-Axe-Actor", c.actor)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			lastErr = fmt.Errorf("cannot reach %s: %w", base, err)
			continue
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			lastErr = fmt.Errorf("cannot read answer of %s: %w", base, err)
			continue
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			servers = followPrimary(servers, i, data)
		}
		if resp.StatusCode == http.StatusServiceUnavailable && i < len(servers)-1 {
			lastErr = apiErr(resp.StatusCode, data)
			continue
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
				wait = min(time.Duration(s)*time.Second, 2*time.Second)
			}
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return wait, apiErr(resp.StatusCode, data)
		}
		if i > 0 {
			c.prefer(base)
		}
		if out == nil {
			return 0, nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return 0, fmt.Errorf("cannot decode answer of %s: %w", base, err)
		}
		return 0, nil
	}
	return 0, lastErr
}

// prefer moves base to the front so the next call tries the server that answered first.
func (c *Client) prefer(base string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.servers {
		if s == base {
			c.servers[0], c.servers[i] = c.servers[i], c.servers[0]
			return
		}
	}
}

func apiErr(status int, data []byte) error {
	var e wire.BatchRefusal
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		return &APIError{Status: status, Message: e.Error, Items: e.Errors,
			Done: BatchResult{Created: e.Created, Skipped: e.Skipped, Replaced: e.Replaced}}
	}
	return &APIError{Status: status, Message: strings.TrimSpace(string(data))}
}

// TaskView is a task as the API returns it.
type TaskView = wire.TaskView

// CreateTask posts a task definition (raw JSON).
func (c *Client) CreateTask(ctx context.Context, spec []byte) (*TaskView, error) {
	var v TaskView
	return &v, c.Do(ctx, http.MethodPost, "/api/v1/tasks", spec, &v)
}

// UpdateTask replaces a task definition (raw JSON).
func (c *Client) UpdateTask(ctx context.Context, name string, spec []byte) (*TaskView, error) {
	var v TaskView
	return &v, c.Do(ctx, http.MethodPut, "/api/v1/tasks/"+url.PathEscape(name), spec, &v)
}

// GetTask returns one task.
func (c *Client) GetTask(ctx context.Context, name string) (*TaskView, error) {
	var v TaskView
	return &v, c.Do(ctx, http.MethodGet, "/api/v1/tasks/"+url.PathEscape(name), nil, &v)
}

// ListTasks lists tasks.
func (c *Client) ListTasks(ctx context.Context, group, state string, limit int) ([]TaskView, error) {
	q := url.Values{}
	if group != "" {
		q.Set("group", group)
	}
	if state != "" {
		q.Set("state", state)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var v struct {
		Tasks []TaskView `json:"tasks"`
	}
	return v.Tasks, c.Do(ctx, http.MethodGet, "/api/v1/tasks?"+q.Encode(), nil, &v)
}

// DeleteTask deletes a task.
func (c *Client) DeleteTask(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, "/api/v1/tasks/"+url.PathEscape(name), nil, nil)
}

// TaskOp posts one of pause, resume, kill to a task.
func (c *Client) TaskOp(ctx context.Context, name, op, note string) (*TaskView, error) {
	var body any
	if note != "" {
		body = wire.NoteBody{Note: note}
	}
	var v TaskView
	return &v, c.Do(ctx, http.MethodPost, "/api/v1/tasks/"+url.PathEscape(name)+"/"+op, body, &v)
}

// RunNow starts a run-now instance and returns its ticket.
func (c *Client) RunNow(ctx context.Context, name string, params json.RawMessage) (string, error) {
	var body any
	if len(params) > 0 {
		body = wire.RunBody{Params: params}
	}
	var v wire.RunNowAnswer
	err := c.Do(ctx, http.MethodPost, "/api/v1/tasks/"+url.PathEscape(name)+"/run", body, &v)
	return v.Ticket, err
}

// GroupAnswer is what a group's pause or resume did (POST /api/v1/groups/{group}/pause|resume).
type GroupAnswer = wire.GroupAnswer

// PausedTask is a paused task with who paused it (model.Runtime.PausedBy) and its note.
type PausedTask = wire.PausedTask

// GroupOp pauses or resumes a group (op "pause" or "resume") with an optional note.
func (c *Client) GroupOp(ctx context.Context, group, op, note string) (GroupAnswer, error) {
	var body any
	if note != "" {
		body = wire.NoteBody{Note: note}
	}
	var v GroupAnswer
	err := c.Do(ctx, http.MethodPost, "/api/v1/groups/"+url.PathEscape(group)+"/"+op, body, &v)
	return v, err
}

// Runs returns a task's recent runs.
func (c *Client) Runs(ctx context.Context, name string, limit int) ([]model.Run, error) {
	var v struct {
		Runs []model.Run `json:"runs"`
	}
	return v.Runs, c.Do(ctx, http.MethodGet, "/api/v1/tasks/"+url.PathEscape(name)+"/runs?limit="+strconv.Itoa(limit), nil, &v)
}

// Actions returns a task's action records, newest first.
func (c *Client) Actions(ctx context.Context, name string, limit int) ([]model.Action, error) {
	var v struct {
		Actions []model.Action `json:"actions"`
	}
	return v.Actions, c.Do(ctx, http.MethodGet, "/api/v1/tasks/"+url.PathEscape(name)+"/actions?limit="+strconv.Itoa(limit), nil, &v)
}

// Alerts returns the newest action records that belong to no task.
func (c *Client) Alerts(ctx context.Context, limit int) ([]model.Action, error) {
	var v struct {
		Actions []model.Action `json:"actions"`
	}
	return v.Actions, c.Do(ctx, http.MethodGet, "/api/v1/alerts?limit="+strconv.Itoa(limit), nil, &v)
}

// ConcurrencyLimit is a concurrency limit as the API shows it: the stored limit, the runs
// counted in it and the fires waiting for it.
type ConcurrencyLimit = wire.ConcurrencyLimitView

func limitPath(kind, name string) string {
	return "/api/v1/concurrency-limits/" + url.PathEscape(kind) + "/" + url.PathEscape(name)
}

// ConcurrencyLimits lists every concurrency limit.
func (c *Client) ConcurrencyLimits(ctx context.Context) ([]ConcurrencyLimit, error) {
	var v wire.ConcurrencyLimitList
	return v.Limits, c.Do(ctx, http.MethodGet, "/api/v1/concurrency-limits", nil, &v)
}

// GetConcurrencyLimit returns the limit of kind ("group" or "key") and name.
func (c *Client) GetConcurrencyLimit(ctx context.Context, kind, name string) (*ConcurrencyLimit, error) {
	var v ConcurrencyLimit
	return &v, c.Do(ctx, http.MethodGet, limitPath(kind, name), nil, &v)
}

// SetConcurrencyLimit sets the limit of kind and name to max runs in flight at once.
func (c *Client) SetConcurrencyLimit(ctx context.Context, kind, name string, max int) (*ConcurrencyLimit, error) {
	var v ConcurrencyLimit
	return &v, c.Do(ctx, http.MethodPut, limitPath(kind, name), wire.ConcurrencyLimitBody{Max: &max}, &v)
}

// DeleteConcurrencyLimit removes the limit of kind and name.
func (c *Client) DeleteConcurrencyLimit(ctx context.Context, kind, name string) error {
	return c.Do(ctx, http.MethodDelete, limitPath(kind, name), nil, nil)
}

// Executors returns the executor registry.
func (c *Client) Executors(ctx context.Context) ([]model.Executor, error) {
	var v struct {
		Executors []model.Executor `json:"executors"`
	}
	return v.Executors, c.Do(ctx, http.MethodGet, "/api/v1/executors", nil, &v)
}

// CronNext previews the next n fires of expr in zone tz.
func (c *Client) CronNext(ctx context.Context, expr, tz string, n int) ([]string, string, error) {
	return c.CronNextIn(ctx, expr, tz, "", n)
}

// CronNextIn is CronNext for an expression in a cron dialect ("unix" or "quartz"; "" is the
// server's).
func (c *Client) CronNextIn(ctx context.Context, expr, tz, dialect string, n int) ([]string, string, error) {
	var v struct {
		Timezone string   `json:"timezone"`
		Next     []string `json:"next"`
	}
	err := c.Do(ctx, http.MethodGet, cronNextPath(expr, tz, dialect, n, nil), nil, &v)
	return v.Next, v.Timezone, err
}

// cronNextPath is the path and query of GET /api/v1/cron/next: expr, and tz, dialect and n
// when set, and any further parameters.
func cronNextPath(expr, tz, dialect string, n int, more url.Values) string {
	q := url.Values{"expr": {expr}}
	for k, v := range more {
		q[k] = v
	}
	if tz != "" {
		q.Set("tz", tz)
	}
	if dialect != "" {
		q.Set("dialect", dialect)
	}
	if n > 0 {
		q.Set("n", strconv.Itoa(n))
	}
	return "/api/v1/cron/next?" + q.Encode()
}

// JitteredFire is one fire of a jittered preview: its nominal time, when it leaves (that
// plus its jitter) and the jitter, as GET /api/v1/cron/next answers with jitter_sec.
type JitteredFire = wire.CronFire

// CronNextJitter is CronNextIn for the task named task with a jitter_sec of jitterSec: each
// fire's nominal time with the instant it leaves.
func (c *Client) CronNextJitter(ctx context.Context, expr, tz, dialect string, n int, task string, jitterSec int) ([]JitteredFire, string, error) {
	var v struct {
		Timezone string         `json:"timezone"`
		Fires    []JitteredFire `json:"fires"`
	}
	more := url.Values{"task": {task}, "jitter_sec": {strconv.Itoa(jitterSec)}}
	err := c.Do(ctx, http.MethodGet, cronNextPath(expr, tz, dialect, n, more), nil, &v)
	return v.Fires, v.Timezone, err
}
