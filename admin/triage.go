package admin

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
)

// Triage: the failures (failed, timed out, lost) of a recent window grouped by task and by
// error text, newest group first, so "what is failing and why" is one page. The failures are
// read through the run listing (newest first, by the time index) and grouped here; the walk
// stops after TriageScanMax runs examined, and the answer says when it did.

// TriageScanMax bounds the runs one triage examines.
const TriageScanMax = 20_000

// triageWithinMax is the longest window a triage reads.
const triageWithinMax = 7 * 24 * time.Hour

// triageGroup is one group of GET /api/v1/triage: the tasks of one error text, or the
// errors of one task.
type triageGroup struct {
	Key        string   `json:"key"` // the task, or the error's first line
	Count      int      `json:"count"`
	LastAt     int64    `json:"last_at"` // the newest failure's scheduled time, Unix ms
	LastTicket string   `json:"last_ticket"`
	LastError  string   `json:"last_error,omitempty"` // by task: its newest failure's error
	Tasks      []string `json:"tasks,omitempty"`      // by error: up to 10 tasks that failed so
	TaskCount  int      `json:"task_count,omitempty"` // by error: how many tasks
}

// errorKey is what failures are grouped by: the error's first line, clipped.
func errorKey(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return "(no error text)"
	}
	return protocol.ClipText(s, 200)
}

// triage is GET /api/v1/triage?within=1h (a duration, 1m to 7 days; default 1 hour).
func (s *Server) triage(c *fasthttp.RequestCtx) {
	within := time.Hour
	if raw := string(c.QueryArgs().Peek("within")); raw != "" {
		d, err := time.ParseDuration(raw)
		if err != nil || d < time.Minute || d > triageWithinMax {
			writeErr(c, fasthttp.StatusBadRequest, fmt.Sprintf("within: must be a duration from 1m to 168h, got %q", protocol.ClipText(raw, 64)))
			return
		}
		within = d
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	now := time.Now()
	f := persist.RunFilter{Results: runResults["failure"], From: now.Add(-within).UnixMilli(), Limit: 1000}
	byTask := map[string]*triageGroup{}
	byErr := map[string]*triageGroup{}
	errTasks := map[string]map[string]bool{}
	examined, failures := 0, 0
	complete := true
	for {
		f.ScanMax = TriageScanMax - examined
		page, err := s.cfg.Engine.API().RunsPage(ctx, "", f)
		if err != nil {
			s.fail(c, err)
			return
		}
		examined += page.Scanned
		for _, r := range page.Runs {
			failures++
			// Pages come newest first: the first run of a group is its newest.
			g := byTask[r.TaskName]
			if g == nil {
				g = &triageGroup{Key: r.TaskName, LastAt: r.ScheduledAt, LastTicket: r.Ticket, LastError: errorKey(r.Error)}
				byTask[r.TaskName] = g
			}
			g.Count++
			k := errorKey(r.Error)
			e := byErr[k]
			if e == nil {
				e = &triageGroup{Key: k, LastAt: r.ScheduledAt, LastTicket: r.Ticket}
				byErr[k] = e
				errTasks[k] = map[string]bool{}
			}
			e.Count++
			if !errTasks[k][r.TaskName] {
				errTasks[k][r.TaskName] = true
				if len(e.Tasks) < 10 {
					e.Tasks = append(e.Tasks, r.TaskName)
				}
			}
		}
		if !page.More {
			break
		}
		if examined >= TriageScanMax {
			complete = false
			break
		}
		f.BeforeAt, f.BeforeTicket = page.NextAt, page.NextTicket
	}
	for k, e := range byErr {
		e.TaskCount = len(errTasks[k])
	}
	writeJSON(c, 200, map[string]any{
		"since": f.From, "within": within.String(), "failures": failures, "examined": examined, "complete": complete,
		"by_task": sortedGroups(byTask), "by_error": sortedGroups(byErr),
	})
}

// sortedGroups lists groups by count, then the newest first.
func sortedGroups(m map[string]*triageGroup) []*triageGroup {
	out := make([]*triageGroup, 0, len(m))
	for _, g := range m {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		if out[i].LastAt != out[j].LastAt {
			return out[i].LastAt > out[j].LastAt
		}
		return out[i].Key < out[j].Key
	})
	return out
}
