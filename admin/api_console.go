package admin

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
)

// The listings of the console beyond the task API's own: runs across tasks, pages of a
// task's whole history, the task list's finding filters and bounded totals, and the alerts'
// delivery state. Every listing walks an index by keyset; totals stop counting at
// CountBound.

// CountBound is where a total stops counting: an answer of CountBound+1 with total_more
// true reads "10,000+". A bounded count reads at most CountBound+1 matching rows.
const CountBound = 10000

// runResults are the results GET /api/v1/runs filters by; "failure" is failed, timeout
// and lost together.
var runResults = map[string][]string{
	model.ResultRunning: {model.ResultRunning}, model.ResultSuccess: {model.ResultSuccess},
	model.ResultFailed: {model.ResultFailed}, model.ResultTimeout: {model.ResultTimeout},
	model.ResultKilled: {model.ResultKilled}, model.ResultLost: {model.ResultLost},
	model.ResultSkipped: {model.ResultSkipped},
	"failure":           {model.ResultFailed, model.ResultTimeout, model.ResultLost},
}

// consoleAPIRoutes registers the routes of this file; the task runs and actions routes
// replace plain ?limit= lists (list, request.go) with paged ones that answer the same keys.
func (s *Server) consoleAPIRoutes(api *router.Group) {
	h := s.authed
	api.GET("/runs", h(s.listRuns))
	api.GET("/triage", h(s.triage)) // triage.go
	api.GET("/stats/minutes", h(s.storedMinutes))
}

// runFilterArgs reads the run filters of a query: result (a comma-separated list of
// results, or "failure"), group, from and to (RFC 3339 or Unix ms), cursor, limit.
func runFilterArgs(c *fasthttp.RequestCtx) (persist.RunFilter, error) {
	var f persist.RunFilter
	args := c.QueryArgs()
	if raw := string(args.Peek("result")); raw != "" {
		for _, r := range strings.Split(raw, ",") {
			rs, ok := runResults[strings.TrimSpace(r)]
			if !ok {
				return f, fmt.Errorf("%w: result: must be running, success, failed, timeout, killed, lost, skipped or failure, got %q",
					ErrBadRequest, protocol.ClipText(r, 64))
			}
			f.Results = append(f.Results, rs...)
		}
	}
	f.Group = string(args.Peek("group"))
	for _, p := range []struct {
		name string
		to   *int64
	}{{"from", &f.From}, {"to", &f.To}} {
		t, err := timeArg(c, p.name)
		if err != nil {
			return f, err
		}
		if !t.IsZero() {
			*p.to = t.UnixMilli()
		}
	}
	limit, err := intArg(c, "limit", ListLimitDefault, 1, 1000)
	if err != nil {
		return f, err
	}
	f.Limit = limit
	if cur := string(args.Peek("cursor")); cur != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cur)
		at, ticket, ok := strings.Cut(string(raw), "\x00")
		n, perr := strconv.ParseInt(at, 10, 64)
		if err != nil || !ok || perr != nil || n <= 0 {
			return f, fmt.Errorf("%w: cursor: not a cursor this server gave out", ErrBadRequest)
		}
		f.BeforeAt, f.BeforeTicket = n, ticket
	}
	return f, nil
}

// runsAnswer is the answer of the run listings.
func (s *Server) runsAnswer(ctx context.Context, c *fasthttp.RequestCtx, name string, f persist.RunFilter) {
	page, err := s.cfg.Engine.API().RunsPage(ctx, name, f)
	if err != nil {
		s.fail(c, err)
		return
	}
	runs := page.Runs
	if runs == nil {
		runs = []model.Run{}
	}
	// A list leaves the params stored on run-now runs out (they could be masked only by a
	// read of each run's task): GET /api/v1/runs/{ticket} shows them, masked.
	for i := range runs {
		runs[i].Params = ""
	}
	out := map[string]any{"runs": runs, "count": len(runs), "scanned": page.Scanned}
	if page.More {
		out["next_cursor"] = base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(page.NextAt, 10) + "\x00" + page.NextTicket))
	}
	if string(c.QueryArgs().Peek("total")) == "1" {
		n, err := s.cfg.Engine.API().CountRuns(ctx, name, f, CountBound)
		if err != nil {
			s.fail(c, err)
			return
		}
		out["total"], out["total_more"] = min(n, CountBound), n > CountBound
	}
	writeJSON(c, 200, out)
}

// listRuns is GET /api/v1/runs: the runs of every task, or of ?task=NAME, newest first.
func (s *Server) listRuns(c *fasthttp.RequestCtx) {
	s.runsOf(c, string(c.QueryArgs().Peek("task")))
}

// taskRunsPage is GET /api/v1/tasks/{name}/runs with the filters and cursor of listRuns.
func (s *Server) taskRunsPage(c *fasthttp.RequestCtx) { s.runsOf(c, param(c, "name")) }

// runsOf answers a run listing of the task named name ("": every task's).
func (s *Server) runsOf(c *fasthttp.RequestCtx, name string) {
	f, err := runFilterArgs(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	s.runsAnswer(ctx, c, name, f)
}

// taskActionsPage is GET /api/v1/tasks/{name}/actions: a page of the timeline, newest
// first, of the kinds in ?action= (comma-separated), before ?before= (Unix ms, the
// next_before of the previous page).
func (s *Server) taskActionsPage(c *fasthttp.RequestCtx) {
	limit, err := intArg(c, "limit", ListLimitDefault, 1, 1000)
	if err != nil {
		s.fail(c, err)
		return
	}
	before, err := intArg(c, "before", 0, 0, 1<<62)
	if err != nil {
		s.fail(c, err)
		return
	}
	var kinds []string
	if raw := string(c.QueryArgs().Peek("action")); raw != "" {
		for _, k := range strings.Split(raw, ",") {
			k = strings.TrimSpace(k)
			if k == "" || len(k) > 32 || strings.IndexFunc(k, func(r rune) bool { return !(r == '_' || r >= 'a' && r <= 'z') }) >= 0 {
				writeErr(c, fasthttp.StatusBadRequest, fmt.Sprintf("action: must be action names (lower case letters and _), got %q", protocol.ClipText(k, 64)))
				return
			}
			kinds = append(kinds, k)
		}
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	page, err := s.cfg.Engine.API().ActionsPage(ctx, param(c, "name"), int64(before), kinds, limit)
	if err != nil {
		s.fail(c, err)
		return
	}
	acts := page.Actions
	if acts == nil {
		acts = []model.Action{}
	}
	out := map[string]any{"actions": acts, "count": len(acts)}
	if page.Before > 0 {
		out["next_before"] = page.Before
	}
	writeJSON(c, 200, out)
}

// findArgs reads the task list's finding filters into f: q (a substring of the name, the
// group or the callback), last_result, failed_within (a duration: tasks whose newest
// failure ended within it) and breaker=open.
func (s *Server) findArgs(c *fasthttp.RequestCtx, f *persist.TaskFilter) error {
	args := c.QueryArgs()
	f.Search = string(args.Peek("q"))
	if len(f.Search) > 255 {
		return fmt.Errorf("%w: q: at most 255 bytes", ErrBadRequest)
	}
	if n := len(strings.Fields(f.Search)); n > persist.SearchWordsMax {
		return fmt.Errorf("%w: q: at most %d words, got %d", ErrBadRequest, persist.SearchWordsMax, n)
	}
	if r := string(args.Peek("last_result")); r != "" {
		if rs, ok := runResults[r]; !ok || len(rs) != 1 || r == model.ResultRunning {
			return fmt.Errorf("%w: last_result: must be success, failed, timeout, killed, lost or skipped, got %q", ErrBadRequest, protocol.ClipText(r, 64))
		}
		f.LastResult = r
	}
	if raw := string(args.Peek("failed_within")); raw != "" {
		d, err := time.ParseDuration(raw)
		if err != nil || d <= 0 || d > 366*24*time.Hour {
			return fmt.Errorf("%w: failed_within: must be a duration like 15m or 24h, got %q", ErrBadRequest, protocol.ClipText(raw, 64))
		}
		f.FailedSince = time.Now().Add(-d).UnixMilli()
	}
	switch b := string(args.Peek("breaker")); b {
	case "":
	case "open":
		f.IDs = s.cfg.Engine.API().OpenBreakerIDs()
	default:
		return fmt.Errorf("%w: breaker: must be open, got %q", ErrBadRequest, protocol.ClipText(b, 64))
	}
	return nil
}

// taskTotal adds the bounded total of f to a task list answer.
func (s *Server) taskTotal(ctx context.Context, f persist.TaskFilter, out map[string]any) error {
	n, err := s.cfg.Engine.API().CountTasks(ctx, f, CountBound)
	if err != nil {
		return err
	}
	out["total"], out["total_more"] = min(n, CountBound), n > CountBound
	return nil
}

// alertsAnswer is GET /api/v1/alerts: the stored action records that belong to no task
// (or, with task=NAME, to that task), newest first, of the kinds in kind=a,b (none: every
// kind); with counts=1 the number of records of each kind; and this node's recent alerts
// (task ones too) with their webhook delivery state.
func (s *Server) alertsAnswer(c *fasthttp.RequestCtx) {
	limit, err := intArg(c, "limit", ListLimitDefault, 1, ListLimitMax)
	if err != nil {
		s.fail(c, err)
		return
	}
	f := engine.AlertFilter{Limit: limit, Task: string(c.QueryArgs().Peek("task"))}
	if f.Kinds, err = alertKinds(string(c.QueryArgs().Peek("kind"))); err != nil {
		s.fail(c, err)
		return
	}
	switch v := string(c.QueryArgs().Peek("counts")); v {
	case "", "0", "false":
	case "1", "true":
		f.Counts = true
	default:
		s.fail(c, fmt.Errorf("%w: counts: must be 1 or 0, got %q", ErrBadRequest, protocol.ClipText(v, 64)))
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	acts, counts, err := s.cfg.Engine.API().Alerts().Records(ctx, f)
	if err != nil {
		s.fail(c, err)
		return
	}
	if acts == nil {
		acts = []model.Action{}
	}
	out := map[string]any{"actions": acts, "count": len(acts), "deliveries": s.cfg.Engine.API().Alerts().Recent()}
	if f.Counts {
		out["counts"] = counts
	}
	writeJSON(c, 200, out)
}

// maxAlertKinds bounds the kinds one alerts query names.
const maxAlertKinds = 32

// alertKinds reads kind=a,b: action kinds, each lower-case letters and underscores.
func alertKinds(raw string) ([]string, error) {
	if raw == "" {
		return nil, nil
	}
	kinds := strings.Split(raw, ",")
	if len(kinds) > maxAlertKinds {
		return nil, fmt.Errorf("%w: kind: at most %d kinds, got %d", ErrBadRequest, maxAlertKinds, len(kinds))
	}
	for _, k := range kinds {
		if k == "" || len(k) > 64 || strings.Trim(k, "abcdefghijklmnopqrstuvwxyz_") != "" {
			return nil, fmt.Errorf("%w: kind: must be action kinds such as executor_lost,refused_result, got %q", ErrBadRequest, protocol.ClipText(k, 64))
		}
	}
	return kinds, nil
}

// storedMinutes is GET /api/v1/stats/minutes?hours=N (1..24): fires, failures and the
// fires' mean lateness per minute, summed over the nodes, from the store, oldest first,
// every minute present (zero where nothing fired).
func (s *Server) storedMinutes(c *fasthttp.RequestCtx) {
	hours, err := intArg(c, "hours", 24, 1, 24)
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	now := time.Now().UnixMilli()
	to := now - now%60000 + 60000
	from := to - int64(hours)*60*60000
	rows, err := s.cfg.Engine.API().StoredMinutes(ctx, from, to)
	if err != nil {
		s.fail(c, err)
		return
	}
	type point struct {
		At        int64   `json:"at"`
		Fires     int64   `json:"fires"`
		Failures  int64   `json:"failures"`
		LateAvgMS float64 `json:"late_avg_ms"`
	}
	out := make([]point, 0, hours*60)
	i := 0
	for m := from; m < to; m += 60000 {
		p := point{At: m}
		for i < len(rows) && rows[i].Minute < m {
			i++
		}
		if i < len(rows) && rows[i].Minute == m {
			r := rows[i]
			p.Fires, p.Failures = r.Fires, r.Failures
			if r.LateCount > 0 {
				p.LateAvgMS = float64(r.LateSumMS) / float64(r.LateCount)
			}
		}
		out = append(out, p)
	}
	writeJSON(c, 200, map[string]any{"minutes": out, "count": len(out)})
}
