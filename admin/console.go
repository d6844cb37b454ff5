package admin

import (
	"context"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"mime"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

// The operator console: plain ES modules and CSS embedded in the binary, no build step and
// nothing fetched from elsewhere. index.html is served at <base>/ and the assets at
// <base>/ui/; the console finds the API relative to its own address, so --base-path needs
// nothing in the files.
//
//go:embed console
var consoleFiles embed.FS

// consoleCSP allows only the console's own files and API calls: no inline script or style,
// no eval, no frames, no other origin. The console renders data as text, so even a task
// name full of markup stays inert; the policy is the second wall.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// validBasePath accepts "" or "/a/b": a path prefix without a trailing slash.
func validBasePath(p string) error {
	if p == "" {
		return nil
	}
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?#{}* \t") || path.Clean(p) != p {
		return fmt.Errorf("base-path: must be a clean path like /axe, got %q", p)
	}
	for _, root := range []string{"/metrics", "/healthz", "/readyz", "/debug"} {
		if p == root || strings.HasPrefix(p, root+"/") {
			return fmt.Errorf("base-path: %q would hide %s", p, root)
		}
	}
	return nil
}

// consoleHeaders adds the security headers to every answer: the CSP matters for the
// console's pages, and on JSON it keeps a response opened as a document inert too.
func (s *Server) consoleHeaders(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		h := &c.Response.Header
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// The router cannot hold both "/axe" and "/axe/"; the console's page needs the
		// slash, so that its relative ui/ and api/ addresses resolve under the prefix.
		if base := s.cfg.BasePath; base != "" && string(c.Path()) == base {
			c.Redirect(base+"/", fasthttp.StatusMovedPermanently)
			return
		}
		next(c)
		s.conditional(c) // etag.go
	}
}

// consoleRoutes registers the console's pages and its API additions.
func (s *Server) consoleRoutes(r *router.Router, api *router.Group) {
	base := s.cfg.BasePath
	index := s.consoleFile("index.html")
	r.GET(base+"/", index)
	r.GET(base+"/ui/{file:*}", func(c *fasthttp.RequestCtx) { s.consoleFile("ui/" + param(c, "file"))(c) })
	if s.cfg.Pprof {
		r.GET("/debug/pprof/{profile:*}", s.authed(pprofhandler.PprofHandler))
	}

	h := s.authed
	// The executor protocol answers at the root whatever the base path (routes registers it
	// there): executors reach the scheduler directly, not through the proxy that carries the
	// prefix (docs/protocol.md).
	// GET /api/v1/whoami is auth.go's, registered with the API routes.
	api.GET("/overview", h(s.overview))
	api.GET("/groups", h(s.listGroups))
}

// Routes lists the routes the server answers, as "METHOD /path" with catch-all parameters
// written "{name}", for checking docs/openapi.yaml against the live server.
func (s *Server) Routes() []string {
	var out []string
	for method, paths := range s.router.List() {
		for _, p := range paths {
			out = append(out, method+" "+strings.ReplaceAll(p, ":*}", "}"))
		}
	}
	sort.Strings(out)
	return out
}

// consoleFile serves one embedded file; a name outside the console is a 404.
func (s *Server) consoleFile(name string) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		sub, _ := fs.Sub(consoleFiles, "console")
		if name == "" || strings.Contains(name, "..") || !fs.ValidPath(name) {
			writeErr(c, fasthttp.StatusNotFound, "no such file")
			return
		}
		b, err := fs.ReadFile(sub, name)
		if err != nil {
			writeErr(c, fasthttp.StatusNotFound, "no such file")
			return
		}
		ct := mime.TypeByExtension(path.Ext(name))
		if strings.HasSuffix(name, ".js") {
			ct = "text/javascript; charset=utf-8"
		}
		if ct == "" {
			ct = "application/octet-stream"
		}
		c.SetContentType(ct)
		// The files change with the binary; a reload after an upgrade must see the new ones.
		c.Response.Header.Set("Cache-Control", "no-cache")
		c.SetBody(b)
	}
}

// overviewJSON is GET /api/v1/overview.
type overviewJSON struct {
	Node          string        `json:"node"`
	Version       string        `json:"version"`
	Now           int64         `json:"now"`
	Timezone      string        `json:"timezone"` // the zone of a task created without one
	ExecutorAlive int           `json:"executors_alive"`
	ExecutorLost  int           `json:"executors_lost"`
	BreakersOpen  int           `json:"breakers_open"`
	TasksInMemory int           `json:"tasks_in_memory"`
	Armed         int           `json:"armed"`
	Minutes       []MinutePoint `json:"minutes"`
}

// MinutePoint is one minute of the overview chart.
type MinutePoint struct {
	At       int64  `json:"at"` // the minute's start, Unix ms
	Fires    uint64 `json:"fires"`
	Failures uint64 `json:"failures"`
}

// noMinutes is the overview chart of a server given no recorder: the last hour, empty.
func noMinutes(now time.Time) []MinutePoint {
	const window = 60
	cur := now.Unix() / 60
	out := make([]MinutePoint, 0, window)
	for mn := cur - window + 1; mn <= cur; mn++ {
		out = append(out, MinutePoint{At: mn * 60_000})
	}
	return out
}

func (s *Server) overview(c *fasthttp.RequestCtx) {
	e := s.cfg.Engine
	now := time.Now()
	v := overviewJSON{Node: e.API().NodeID(), Version: s.cfg.Version, Now: now.UnixMilli(), Timezone: e.API().DefaultTimezone(),
		BreakersOpen: e.API().BreakersOpen(), Minutes: s.cfg.Minutes(now)}
	v.TasksInMemory, v.Armed = e.API().InMemory()
	for _, x := range e.API().ExecutorViews() {
		if x.Status == "lost" {
			v.ExecutorLost++
		} else {
			v.ExecutorAlive++
		}
	}
	// The ETag leaves out now, which changes with every answer: an overview whose counts did
	// not change is answered 304 (etag.go).
	clock := v.Now
	v.Now = 0
	if b, err := json.Marshal(v); err == nil {
		c.Response.Header.Set("ETag", etagFor(b))
	}
	v.Now = clock
	writeJSON(c, 200, v)
}

// groupJSON is one group of GET /api/v1/groups.
type groupJSON struct {
	Group  string           `json:"group"`
	Total  int64            `json:"total"`
	States map[string]int64 `json:"states"`
}

func (s *Server) listGroups(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	counts, err := s.cfg.Engine.API().GroupCounts(ctx)
	if err != nil {
		s.fail(c, err)
		return
	}
	by := map[string]*groupJSON{}
	for _, gc := range counts {
		g := by[gc.Group]
		if g == nil {
			g = &groupJSON{Group: gc.Group, States: map[string]int64{}}
			by[gc.Group] = g
		}
		g.States[string(gc.State)] += gc.Count
		g.Total += gc.Count
	}
	out := make([]groupJSON, 0, len(by))
	for _, g := range by {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	writeJSON(c, 200, map[string]any{"groups": out, "count": len(out)})
}

// pageArgs reads the task list's name prefix, sort and cursor into f.
func pageArgs(c *fasthttp.RequestCtx, f *persist.TaskFilter) error {
	args := c.QueryArgs()
	f.NamePrefix = string(args.Peek("name_prefix"))
	f.Order = string(args.Peek("sort"))
	cur := string(args.Peek("cursor"))
	if cur == "" {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(cur)
	key, id, ok := strings.Cut(string(raw), "\x00")
	n, perr := strconv.ParseInt(id, 10, 64)
	if err != nil || !ok || perr != nil || n < 0 {
		return fmt.Errorf("%w: cursor: not a cursor this server gave out", ErrBadRequest)
	}
	f.After, f.AfterID = key, n
	return nil
}

// cursorAfter is the cursor of the page that follows the task t.
func cursorAfter(order string, t *model.Task) string {
	key := ""
	switch order {
	case persist.OrderName:
		key = t.Def.Name
	case persist.OrderGroup:
		key = t.Def.Group
	case persist.OrderNext:
		key = strconv.FormatInt(t.Runtime.NextTriggerTime, 10)
	case persist.OrderFailed:
		key = strconv.FormatInt(t.Runtime.LastFailureAt, 10)
	}
	return base64.RawURLEncoding.EncodeToString([]byte(key + "\x00" + strconv.FormatInt(t.Def.ID, 10)))
}

// taskRow is a task of the list with what the console shows beside it.
type taskRow struct {
	wire.TaskView
	BreakerOpen bool       `json:"breaker_open"`
	LastRun     *model.Run `json:"last_run,omitempty"`
}

// taskPage is the answer of GET /api/v1/tasks: the rows, and next_cursor when a page may
// follow (the store read a full page; last is its last row).
func (s *Server) taskPage(ctx context.Context, c *fasthttp.RequestCtx, f persist.TaskFilter, list []model.Task, views []wire.TaskView, last *model.Task) map[string]any {
	rows := make([]taskRow, len(views))
	var lastRuns map[int64]model.Run
	if string(c.QueryArgs().Peek("last_run")) == "1" {
		ids := make([]int64, len(list))
		for i := range list {
			ids[i] = list[i].Def.ID
		}
		var err error
		if lastRuns, err = s.cfg.Engine.API().LastRuns(ctx, ids); err != nil {
			s.log.Warn("cannot read the last runs of a task page", "error", err)
		}
	}
	for i := range views {
		rows[i] = taskRow{TaskView: views[i], BreakerOpen: s.cfg.Engine.API().BreakerOpen(list[i].Def.ID)}
		if r, ok := lastRuns[list[i].Def.ID]; ok {
			r.Params = "" // as in the run lists: GET /api/v1/runs/{ticket} shows them, masked
			rows[i].LastRun = &r
		}
	}
	out := map[string]any{"tasks": rows, "count": len(rows)}
	if last != nil {
		out["next_cursor"] = cursorAfter(f.Order, last)
	}
	return out
}
