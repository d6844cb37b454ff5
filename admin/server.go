// Package admin is axe's HTTP layer. It translates HTTP to engine calls and engine errors to
// HTTP codes (in one place: statusOf) and holds no scheduling state of its own. It builds
// nothing it serves: the daemon (internal/daemon) opens the store, builds the engine and the
// HA loops, and hands them in; admin never imports it.
//
//   - Routes (server.go, routes): the REST API under <base>/api/v1 (docs/openapi.yaml) with
//     its handlers spread by resource (batch.go, backfill.go, groups.go, runkill.go,
//     executors_v2.go, cronnext.go, api_console.go, triage.go), /healthz, /readyz and
//     /metrics (metrics.go). Around them: tokens and scopes (auth.go), body limits
//     (bodylimit.go), the browser origin check (origin.go), ETags (etag.go) and the masking of
//     sensitive params (sensitive.go).
//   - The console (console.go): ES modules and CSS embedded in the binary, served under
//     <base>/ui/, reading the same API.
//   - The sharded front (shardfront.go), under --ha in shards mode: every node answers every
//     call; a write about one task, or a run's result or kill, is passed on once to the node
//     that schedules the task's shard, and a call over many tasks goes to every live node.
//     Calls between nodes are signed with the cluster's peer key (peersig.go).
//   - The primary/backup front (hafront.go), under --ha-mode primary: routes each request to
//     the API of the node's current term; a backup serves reads from the database and answers
//     writes with 503 naming the primary, except the console's writes, which it passes on to
//     the primary (haforward.go).
//
// It reads the store directly only to report readiness, to list a backup's executors and the
// nodes table, and to find a run's task by its ticket when routing a call on a sharded node.
package admin

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/internal/startstop"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/ratelimit"
	"github.com/axe-sched/axe/wire"
)

// Defaults for ServerConfig.
const (
	AddrDefault           = "127.0.0.1:7070"
	MaxRequestBodyDefault = 1 << 20
	ListLimitDefault      = 100
	ListLimitMax          = 10000
)

// Sentinel errors.
var (
	// ErrUnauthorized: a token is configured and the request did not carry it.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrBadRequest wraps malformed request parameters.
	ErrBadRequest = errors.New("bad request")
)

// ServerConfig configures the HTTP server.
type ServerConfig struct {
	// Addr to listen on. Defaults to AddrDefault. Port 0 picks a free port.
	Addr string
	// Token, when set, is required as "Authorization: Bearer <token>" on /api/ calls.
	Token string
	// Engine serves the API. Required.
	Engine *engine.Engine
	// Store is pinged by /readyz. Required.
	Store persist.Store
	// Version is reported by axe_build_info.
	Version string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Tokens, when set, are the accepted tokens with their scopes (--token-file); Token then
	// is ignored. Defaults to Token alone, as the "default" token, or no authentication.
	Tokens *Tokens
	// TokenSource, when set, is asked for the accepted tokens on every request, so several
	// servers share one set that a reload replaces; Tokens and Token are then ignored.
	TokenSource func() *Tokens
	// TLS, when set, serves the API over HTTPS with this configuration. Defaults to nil:
	// plain HTTP.
	TLS *tls.Config
	// MetricsPublic serves /metrics without a token. Defaults to false: /metrics needs the
	// read scope when tokens are configured.
	MetricsPublic bool
	// BasePath prefixes the console and the API for a reverse proxy, e.g. "/axe"; /metrics,
	// /healthz and /readyz stay at the root. Defaults to "" (the root).
	BasePath string
	// Pprof serves /debug/pprof behind the token. Defaults to false.
	Pprof bool
	// AllowHosts are the names (Host header values, without the port) a server without
	// tokens answers to besides IP addresses and localhost (guardRequests). Defaults to none.
	AllowHosts []string
	// Metrics returns the sets /metrics writes, asked on every scrape (the daemon's own and
	// the serving engine's). Defaults to the engine's set alone.
	Metrics func() []*metrics.Set
	// Minutes returns the last hour's fires and failures per minute, oldest first, for the
	// console's overview chart: the daemon's recorder of the engine. Defaults to an empty
	// hour.
	Minutes func(now time.Time) []MinutePoint
	// Sharding, when set, makes this the API of a node that schedules by shard: each write
	// is served by the node that schedules its task's shard (shardfront.go). Defaults to nil:
	// every write is served here.
	Sharding *ShardRouting
}

// WithDefaults returns c with zero fields set to their defaults.
func (c ServerConfig) WithDefaults() ServerConfig {
	c.BasePath = strings.TrimRight(c.BasePath, "/")
	if c.Addr == "" {
		c.Addr = AddrDefault
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Minutes == nil {
		c.Minutes = noMinutes
	}
	if c.Metrics == nil && c.Engine != nil {
		eng := c.Engine
		c.Metrics = func() []*metrics.Set { return []*metrics.Set{eng.Metrics()} }
	}
	return c
}

func (c ServerConfig) validate() error {
	if c.Engine == nil {
		return errors.New("engine is required")
	}
	if c.Store == nil {
		return errors.New("store is required")
	}
	if c.Sharding != nil && len(c.Sharding.PeerSecret) == 0 {
		return errors.New("sharding: a peer secret is required to sign the calls between nodes")
	}
	return validBasePath(c.BasePath)
}

// Server is the HTTP server of the API.
type Server struct {
	cfg ServerConfig
	srv *fasthttp.Server
	ln  net.Listener
	log *slog.Logger

	life        startstop.Lifecycle
	serveErr    chan error
	ready       func() error
	tokens      atomic.Pointer[Tokens]
	tokenSource func() *Tokens
	router      *router.Router
	allowHosts  []string    // cfg.AllowHosts, lower case
	shards      *shardFront // the routing of a sharded node (shardfront.go); nil otherwise
}

// NewServer builds the server; Start listens.
func NewServer(cfg ServerConfig) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cannot create server: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, serveErr: make(chan error, 1)}
	if cfg.Sharding != nil {
		s.shards = newShardFront(s, *cfg.Sharding)
	}
	for _, h := range cfg.AllowHosts {
		s.allowHosts = append(s.allowHosts, strings.TrimSuffix(strings.ToLower(h), "."))
	}
	ts := cfg.Tokens
	if ts == nil {
		var err error
		if ts, err = NewTokens(cfg.Token, nil); err != nil {
			return nil, fmt.Errorf("cannot create server: %w", err)
		}
	}
	s.tokens.Store(ts)
	s.tokenSource = cfg.TokenSource
	if s.tokenSource == nil {
		s.tokenSource = s.tokens.Load
	}
	s.srv = &fasthttp.Server{
		Handler: s.guardRequests(s.limitBodies(s.checkPeerHeaders(s.routes()))),
		Name:    "axe",
		// Bodies over the smallest endpoint limit are streamed, so that limitBodies sees the
		// headers of every body it may refuse before any more of it is read; it reads the
		// rest (up to the endpoint's limit) for every endpoint but the batch one.
		MaxRequestBodySize: NoBodyMaxBytes,
		StreamRequestBody:  true,

		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           2 * time.Minute,
		NoDefaultServerHeader: false,
		Logger:                slogPrinter{cfg.Logger},
		ErrorHandler:          requestError,
	}
	return s, nil
}

type slogPrinter struct{ l *slog.Logger }

// Printf logs at debug level. fasthttp calls it for every streamed request body read whole
// (each single create), so the message is formatted only when debug is on.
func (p slogPrinter) Printf(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug(fmt.Sprintf(format, args...))
	}
}

// Start listens and serves in the background; it returns once the listener is bound.
func (s *Server) Start(ctx context.Context) error {
	err := s.life.StartOnce(func() error {
		ln, err := net.Listen("tcp", s.cfg.Addr)
		if err != nil {
			return fmt.Errorf("cannot listen on %s: %w", s.cfg.Addr, err)
		}
		if s.cfg.TLS != nil {
			ln = tls.NewListener(ln, s.cfg.TLS)
		}
		s.ln = ln
		go func() { s.serveErr <- s.srv.Serve(ln) }()
		return nil
	})
	if errors.Is(err, startstop.ErrStarted) || errors.Is(err, startstop.ErrStopped) {
		return nil
	}
	return err
}

// Addr returns the bound address (after Start).
func (s *Server) Addr() string {
	if s.ln == nil {
		return s.cfg.Addr
	}
	return s.ln.Addr().String()
}

// SetReady installs the readiness check of /readyz beyond the store ping (e.g. the engine
// is running).
func (s *Server) SetReady(f func() error) { s.ready = f }

// Stop closes the listener and waits for open requests to finish or ctx to expire.
// Idempotent; safe without Start.
func (s *Server) Stop(ctx context.Context) error {
	return s.life.StopOnce(ctx, func(started bool) error {
		if !started {
			return nil
		}
		return s.stop(ctx)
	})
}

func (s *Server) stop(ctx context.Context) error {
	err := s.srv.ShutdownWithContext(ctx)
	// Shutdown closes only the listeners Serve has registered; a Stop right after Start can
	// come first, and Serve would then accept forever. Closing it here ends Serve either way.
	_ = s.ln.Close()
	<-s.serveErr
	if err != nil {
		return fmt.Errorf("cannot shut down HTTP server: %w", err)
	}
	return nil
}

func (s *Server) routes() fasthttp.RequestHandler {
	r := router.New()
	s.router = r
	// authed reads the route the router matched, so that a request is authorised for the
	// handler that serves it (routePath).
	r.SaveMatchedRoutePath = true
	r.RedirectTrailingSlash = false
	r.HandleMethodNotAllowed = true
	r.NotFound = func(c *fasthttp.RequestCtx) { writeErr(c, fasthttp.StatusNotFound, "no such endpoint") }
	r.MethodNotAllowed = func(c *fasthttp.RequestCtx) {
		writeErr(c, fasthttp.StatusMethodNotAllowed, "method not allowed")
	}
	r.PanicHandler = func(c *fasthttp.RequestCtx, p any) {
		s.log.Error("API handler panicked", "path", string(c.Path()), "panic", p)
		writeErr(c, fasthttp.StatusInternalServerError, "internal error")
	}

	r.GET("/healthz", func(c *fasthttp.RequestCtx) { writeJSON(c, 200, map[string]string{"status": "ok"}) })
	if s.shards != nil {
		r.GET("/readyz", s.shardReadyz)
	} else {
		r.GET("/readyz", s.readyz)
	}
	r.GET("/metrics", s.metricsAuth(func(c *fasthttp.RequestCtx) {
		c.SetContentType("text/plain; version=0.0.4")
		writeMetrics(c, s.cfg.Metrics())
	}))

	api := r.Group(s.cfg.BasePath + "/api/v1")
	h := s.authed
	// On a sharded node each write goes to the node that schedules its task's shard, and a
	// call over many tasks or every node's limits to every node (shardfront.go); without
	// Sharding these wrappers serve the call here.
	task := s.byTask
	api.POST("/tasks", h(s.byBodyName(s.createTask)))
	api.GET("/tasks", h(s.listTasks))
	api.GET("/tasks/{name}", h(s.getTask))
	api.PUT("/tasks/{name}", h(task(s.updateTask)))
	api.DELETE("/tasks/{name}", h(task(s.deleteTask)))
	api.POST("/tasks/{name}/pause", h(task(s.pauseTask)))
	api.POST("/tasks/{name}/resume", h(task(s.resumeTask)))
	api.POST("/tasks/{name}/run", h(task(s.runTask)))
	api.POST("/tasks/{name}/kill", h(task(s.killTask)))
	api.GET("/tasks/{name}/runs", h(s.taskRunsPage))       // api_console.go
	api.GET("/tasks/{name}/actions", h(s.taskActionsPage)) // api_console.go
	api.GET("/runs/{ticket}", h(s.getRun))
	api.POST("/runs/{ticket}/kill", h(s.byTicket(s.killRun)))                                    // runkill.go
	api.GET("/alerts", h(s.alertsAnswer))                                                        // api_console.go
	api.POST("/groups/{group}/pause", h(s.fanOut(s.pauseGroup, "tasks", "already_paused")))      // groups.go
	api.POST("/groups/{group}/resume", h(s.fanOut(s.resumeGroup, "tasks", "left_paused_count"))) // groups.go
	api.GET("/executors", h(s.listExecutors))
	r.POST(protocol.PathRegister, h(s.registerExecutor))
	r.POST(protocol.PathHeartbeat, h(s.executorHeartbeat))
	r.POST(protocol.PathDeregister, h(s.deregisterExecutor)) // executors_v2.go
	r.POST(protocol.PathCallback, h(s.routeCallback(s.callback)))
	r.POST(protocol.PathCallbackBatch, h(s.routeCallbackBatch(s.callbackBatch)))
	api.GET("/cron/next", h(s.cronNext))
	api.GET("/whoami", h(s.whoami))
	api.GET("/ratelimits", h(s.getRateLimits))
	api.PUT("/ratelimits", h(s.fanOut(s.setRateLimit)))
	api.GET("/concurrency-limits", h(s.listConcurrencyLimits))
	api.GET("/concurrency-limits/{kind}/{name}", h(s.getConcurrencyLimit))
	api.PUT("/concurrency-limits/{kind}/{name}", h(s.fanOut(s.putConcurrencyLimit)))
	api.DELETE("/concurrency-limits/{kind}/{name}", h(s.fanOut(s.deleteConcurrencyLimit)))
	api.POST("/cluster/release", h(s.releaseDependents)) // shardfront.go
	s.haRoutes(api)                                      // hafront.go
	s.writeRoutes(api)
	s.backfillRoutes(api) // backfill.go
	s.consoleRoutes(r, api)
	s.consoleAPIRoutes(api)
	return s.consoleHeaders(r.Handler)
}

// authed enforces the bearer token and its scope when tokens are configured (auth.go).
func (s *Server) authed(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		if !s.authenticate(c, s.routePath(c)) {
			return
		}
		next(c)
	}
}

// routePath is the path a request is authorised on: the pattern of the route the router
// matched ("/api/v1/tasks/{name}"), which names the handler that serves it, or, for a
// request no route serves here (a backup's writes, hafront.go), the path as sent, not decoded,
// as the router matches it. Either way without the base path. The decoded, cleaned path
// (fasthttp's Path) is never it: "/api/v1/tasks/x%2F..%2F..%2Fcallback" is a task's path
// to the router and the result endpoint's once decoded.
func (s *Server) routePath(c *fasthttp.RequestCtx) string {
	p, _ := c.UserValue(router.MatchedRoutePathParam).(string)
	if p == "" {
		p = string(c.Request.URI().PathOriginal())
	}
	if base := s.cfg.BasePath; base != "" && strings.HasPrefix(p, base+"/api/") {
		p = p[len(base):]
	}
	return p
}

// maxActorLen bounds the caller-supplied part of an actor, in bytes.
const maxActorLen = 64

// actor names who called, for action records: the token's name when tokens are configured,
// then the X-Axe-Actor header (the CLI sends the user's login) or, without either, the client
// address: "api:ops/alice", "api:alice", "api:127.0.0.1".
func actor(c *fasthttp.RequestCtx) string {
	if p := principalOf(c); p != nil {
		if a := callerActor(c); a != "" {
			return "api:" + p.name + "/" + a
		}
		return "api:" + p.name
	}
	if a := callerActor(c); a != "" {
		return "api:" + a
	}
	return "api:" + c.RemoteIP().String()
}

// callerActor is the bounded X-Axe-Actor header, or "".
func callerActor(c *fasthttp.RequestCtx) string {
	if a := strings.TrimSpace(string(c.Request.Header.Peek("X-Axe-Actor"))); a != "" {
		// Cut at a rune boundary: half a character would reach the audit log as garbage.
		a = strings.ToValidUTF8(a, "?")
		if len(a) > maxActorLen {
			cut := maxActorLen
			for cut > 0 && !utf8.RuneStart(a[cut]) {
				cut--
			}
			a = a[:cut]
		}
		return a
	}
	return ""
}

func (s *Server) readyz(c *fasthttp.RequestCtx) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Store.Ping(ctx); err != nil {
		writeErr(c, fasthttp.StatusServiceUnavailable, "store unreachable: "+err.Error())
		return
	}
	if s.ready != nil {
		if err := s.ready(); err != nil {
			writeErr(c, fasthttp.StatusServiceUnavailable, err.Error())
			return
		}
	}
	writeJSON(c, 200, map[string]string{"status": "ready", "shards": allShards})
}

func reqCtx(c *fasthttp.RequestCtx) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func (s *Server) createTask(c *fasthttp.RequestCtx) {
	spec, err := engine.DecodeTaskSpec(c.PostBody())
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	t, err := s.cfg.Engine.CreateTask(ctx, spec, actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusCreated, taskView(t))
}

func (s *Server) updateTask(c *fasthttp.RequestCtx) {
	spec, err := engine.DecodeTaskSpec(c.PostBody())
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	s.unmaskSpec(ctx, param(c, "name"), spec)
	t, err := s.cfg.Engine.UpdateTask(ctx, param(c, "name"), spec, actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, taskView(t))
}

func (s *Server) getTask(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	t, err := s.cfg.Engine.GetTask(ctx, param(c, "name"))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, taskView(t))
}

func (s *Server) deleteTask(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	name := param(c, "name")
	if err := s.cfg.Engine.DeleteTask(ctx, name, actor(c)); err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, map[string]string{"deleted": name})
}

var validStates = map[string]model.State{}

func init() {
	for _, st := range []model.State{model.StateWaiting, model.StateScheduled, model.StateRunning,
		model.StateSuccess, model.StateFailed, model.StateRetrying, model.StatePaused, model.StateKilled} {
		validStates[string(st)] = st
	}
}

func (s *Server) listTasks(c *fasthttp.RequestCtx) {
	args := c.QueryArgs()
	f := persist.TaskFilter{Group: string(args.Peek("group"))}
	if st := string(args.Peek("state")); st != "" {
		state, ok := validStates[strings.ToUpper(st)]
		if !ok {
			writeErr(c, 400, fmt.Sprintf("state: unknown state %q", st))
			return
		}
		f.State = state
	}
	limit, err := intArg(c, "limit", ListLimitDefault, 1, ListLimitMax)
	if err != nil {
		s.fail(c, err)
		return
	}
	f.Limit = limit
	after, err := intArg(c, "after", 0, 0, 1<<62)
	if err != nil {
		s.fail(c, err)
		return
	}
	f.AfterID = int64(after)
	if err := pageArgs(c, &f); err != nil {
		s.fail(c, err)
		return
	}
	if err := s.findArgs(c, &f); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	list, last, err := s.cfg.Engine.ListTasksPage(ctx, f)
	if err != nil {
		s.fail(c, err)
		return
	}
	// The engine filters by state after reading (so the filter agrees with the in-memory
	// runtime it shows) and may then return more than the limit; the answer never does.
	if len(list) > limit {
		list = list[:limit]
	}
	out := make([]wire.TaskView, 0, len(list))
	for i := range list {
		out = append(out, taskView(&list[i]))
	}
	page := s.taskPage(ctx, c, f, list, out, last)
	if string(c.QueryArgs().Peek("total")) == "1" {
		if err := s.taskTotal(ctx, f, page); err != nil {
			s.fail(c, err)
			return
		}
	}
	writeJSON(c, 200, page)
}

// decodeOptional decodes an optional JSON body strictly (protocol.Decode); an empty body
// leaves v as it is.
func decodeOptional(c *fasthttp.RequestCtx, v any) error {
	body := c.PostBody()
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return protocol.Decode(body, v)
}

func (s *Server) pauseTask(c *fasthttp.RequestCtx)  { s.pauseResume(c, true) }
func (s *Server) resumeTask(c *fasthttp.RequestCtx) { s.pauseResume(c, false) }

func (s *Server) pauseResume(c *fasthttp.RequestCtx, pause bool) {
	var b wire.NoteBody
	if err := decodeOptional(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	if len(b.Note) > 1024 {
		writeErr(c, 400, "note: at most 1024 characters")
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	var t *model.Task
	var err error
	if pause {
		t, err = s.cfg.Engine.Pause(ctx, param(c, "name"), b.Note, actor(c))
	} else {
		t, err = s.cfg.Engine.Resume(ctx, param(c, "name"), b.Note, actor(c))
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, taskView(t))
}

func (s *Server) runTask(c *fasthttp.RequestCtx) {
	var b wire.RunBody
	if err := decodeOptional(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	run, err := s.cfg.Engine.RunNow(ctx, param(c, "name"), b.Params, actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, fasthttp.StatusAccepted, wire.RunNowAnswer{Task: run.TaskName, Ticket: run.Ticket})
}

// killTask is POST /api/v1/tasks/{name}/kill {"reason"}: every run of the task in flight
// ends (runkill.go).
func (s *Server) killTask(c *fasthttp.RequestCtx) {
	var b wire.KillBody
	if err := decodeOptional(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	t, err := s.cfg.Engine.KillTask(ctx, param(c, "name"), killReason(b), actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, taskView(t))
}

// list serves a list endpoint taking ?limit=: fetch gets the limit, the answer is
// {"<key>": [...], "count": n}, never null.
func list[T any](s *Server, key string, fetch func(ctx context.Context, c *fasthttp.RequestCtx, limit int) ([]T, error)) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		limit, err := intArg(c, "limit", ListLimitDefault, 1, ListLimitMax)
		if err != nil {
			s.fail(c, err)
			return
		}
		ctx, cancel := reqCtx(c)
		defer cancel()
		items, err := fetch(ctx, c, limit)
		if err != nil {
			s.fail(c, err)
			return
		}
		if items == nil {
			items = []T{}
		}
		writeJSON(c, 200, map[string]any{key: items, "count": len(items)})
	}
}

func (s *Server) getRun(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	run, err := s.cfg.Engine.Run(ctx, param(c, "ticket"))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, run)
}

func (s *Server) listExecutors(c *fasthttp.RequestCtx) {
	list := s.cfg.Engine.ExecutorViews()
	writeJSON(c, 200, map[string]any{"executors": list, "count": len(list)})
}

// decodeMessage decodes a required body of the executor protocol tolerantly
// (protocol.DecodeMessage: one object, members it does not know skipped, no repeated key,
// valid UTF-8, nothing after it) and checks it; the error names the field. The operators'
// API decodes strictly (decodeStrict).
func decodeMessage(c *fasthttp.RequestCtx, v interface{ Check() error }) error {
	if err := protocol.DecodeMessage(c.PostBody(), v); err != nil {
		return err
	}
	return v.Check()
}

// decodeStrict decodes a required JSON body strictly (protocol.Decode).
func decodeStrict(c *fasthttp.RequestCtx, v any) error { return protocol.Decode(c.PostBody(), v) }

func (s *Server) registerExecutor(c *fasthttp.RequestCtx) {
	var msg protocol.Register
	if err := decodeMessage(c, &msg); err != nil {
		s.fail(c, err)
		return
	}
	if !s.allowApp(c, msg.App) {
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	reg := wire.ExecutorRegistration{App: msg.App, Address: msg.Address, Protocol: msg.Protocol, Handlers: msg.Handlers,
		Auth: msg.Auth, Version: msg.Version, Incarnation: msg.Incarnation, Token: presentedToken(c)}
	if err := s.cfg.Engine.RegisterExecutor(ctx, reg); err != nil {
		s.fail(c, err)
		return
	}
	hb, lost := s.cfg.Engine.ExecutorTimings()
	writeJSON(c, 200, protocol.RegisterAnswer{HeartbeatIntervalMS: hb.Milliseconds(), LostAfterMS: lost.Milliseconds(),
		Version: protocol.Version})
}

// presentedToken is the bearer token of the request, "" for none: an executor's dispatch key
// is derived from it (protocol.DispatchKey).
func presentedToken(c *fasthttp.RequestCtx) string {
	t, ok := bytes.CutPrefix(c.Request.Header.Peek(fasthttp.HeaderAuthorization), []byte("Bearer "))
	if !ok {
		return ""
	}
	return string(t)
}

func (s *Server) executorHeartbeat(c *fasthttp.RequestCtx) {
	var hb protocol.Heartbeat
	if err := decodeMessage(c, &hb); err != nil {
		s.fail(c, err)
		return
	}
	if !s.allowApp(c, hb.App) {
		return
	}
	if err := s.cfg.Engine.CheckIncarnation(hb.App, hb.Address, hb.Incarnation); err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	if err := s.cfg.Engine.ExecutorHeartbeat(ctx, hb.App, hb.Address, presentedToken(c)); err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, map[string]any{})
}

// callback records one result. A token bound to apps reports only as one of them (allowApp),
// and the engine refuses a result naming an app other than its run's (engine.ErrForeignApp):
// together, an executor cannot settle another app's run.
func (s *Server) callback(c *fasthttp.RequestCtx) {
	var rep engine.Report
	if err := decodeMessage(c, &rep); err != nil {
		s.fail(c, err)
		return
	}
	if !s.allowApp(c, rep.App) {
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	dup, err := s.cfg.Engine.ReportResult(ctx, rep)
	if err != nil {
		s.fail(c, err)
		return
	}
	if dup {
		writeJSON(c, 200, map[string]bool{"ok": true, "duplicate": true})
		return
	}
	writeJSON(c, 200, map[string]bool{"ok": true})
}

// MaxCallbackBatch is the most results one POST /api/v1/callback/batch may carry.
const MaxCallbackBatch = protocol.MaxResultsPerCall

// callbackBatch records several results in one call, each exactly as callback would: a
// result refused (malformed, of another app, stale) does not refuse the others. The call
// itself fails only when the body is not a batch.
func (s *Server) callbackBatch(c *fasthttp.RequestCtx) {
	results, bad, err := protocol.DecodeResultBatch(c.PostBody())
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	out := make([]protocol.CallbackItem, len(results))
	p := principalOf(c)
	// Begin every result, then wait for each to be recorded: they share group commits, and
	// each is acknowledged only once durable.
	waits := make([]engine.ReportWait, len(results))
	for i, rep := range results {
		switch {
		case bad[i] != nil:
			out[i] = protocol.CallbackItem{Status: fasthttp.StatusBadRequest, Error: bad[i].Error()}
			continue
		case p != nil && !p.mayActFor(rep.App):
			out[i] = protocol.CallbackItem{Status: fasthttp.StatusForbidden, Error: fmt.Sprintf("token %q may not act for executor app %q", p.name, rep.App)}
			continue
		}
		waits[i] = s.cfg.Engine.BeginReport(ctx, rep)
	}
	for i, wait := range waits {
		if wait == nil {
			continue
		}
		dup, err := wait(ctx)
		if err != nil {
			code, msg := s.errorOf(c, err)
			out[i] = protocol.CallbackItem{Status: code, Error: msg}
			continue
		}
		out[i] = protocol.CallbackItem{Status: fasthttp.StatusOK, OK: true, Duplicate: dup}
	}
	writeJSON(c, 200, map[string]any{"results": out})
}

func (s *Server) cronNext(c *fasthttp.RequestCtx) {
	args := c.QueryArgs()
	expr := string(args.Peek("expr"))
	if expr == "" {
		writeErr(c, 400, "expr: is required")
		return
	}
	n, err := intArg(c, "n", 10, 1, 1000)
	if err != nil {
		s.fail(c, err)
		return
	}
	dialect := string(args.Peek("dialect"))
	from, err := timeArg(c, "from")
	if err != nil {
		s.fail(c, err)
		return
	}
	jitter, err := intArg(c, "jitter_sec", 0, 0, engine.MaxJitterSec)
	if err != nil {
		s.fail(c, err)
		return
	}
	task := string(args.Peek("task"))
	fires, loc, err := s.cfg.Engine.PreviewFires(expr, string(args.Peek("tz")), dialect, from, n)
	if err != nil {
		s.fail(c, err)
		return
	}
	if err := s.cfg.Engine.ApplyJitter(task, jitter, expr, loc.String(), dialect, fires); err != nil {
		s.fail(c, err)
		return
	}
	body := cronNextView(expr, loc, fires, jitter)
	if dialect != "" {
		body["dialect"] = dialect
	}
	if jitter > 0 {
		body["task"], body["jitter_sec"] = task, jitter
	}
	writeJSON(c, 200, body)
}

func (s *Server) getRateLimits(c *fasthttp.RequestCtx) {
	writeJSON(c, 200, s.cfg.Engine.RateLimits())
}

func (s *Server) setRateLimit(c *fasthttp.RequestCtx) {
	var b wire.RateLimitBody
	if err := decodeStrict(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	if b.Rate < 0 {
		writeErr(c, fasthttp.StatusBadRequest, fmt.Sprintf("rate: must be >= 0 per second (0 removes the limit), got %v", b.Rate))
		return
	}
	if b.Burst < 0 {
		writeErr(c, fasthttp.StatusBadRequest, fmt.Sprintf("burst: must be >= 0, got %d", b.Burst))
		return
	}
	if b.Rate > 0 && b.Burst == 0 {
		b.Burst = max(1, int(min(b.Rate, engine.MaxRateLimit))) // the engine refuses a rate over it
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	if err := s.cfg.Engine.SetRateLimit(ctx, b.Downstream, ratelimit.Limit{Rate: b.Rate, Burst: b.Burst}, actor(c)); err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, s.cfg.Engine.RateLimits())
}

// listConcurrencyLimits is GET /api/v1/concurrency-limits: every limit with its runs in
// flight and the fires waiting for it.
func (s *Server) listConcurrencyLimits(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	ls, err := s.cfg.Engine.ConcurrencyLimits(ctx)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, wire.ConcurrencyLimitList{Limits: ls})
}

func (s *Server) getConcurrencyLimit(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	v, err := s.cfg.Engine.ConcurrencyLimit(ctx, param(c, "kind"), param(c, "name"))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, v)
}

// putConcurrencyLimit is PUT /api/v1/concurrency-limits/{group|key}/{name} {"max": N}.
func (s *Server) putConcurrencyLimit(c *fasthttp.RequestCtx) {
	var b wire.ConcurrencyLimitBody
	if err := decodeStrict(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	if b.Max == nil {
		writeErr(c, fasthttp.StatusBadRequest, "max: is required: the runs in flight at once, 1.."+strconv.Itoa(engine.MaxConcurrencyLimit))
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	v, err := s.cfg.Engine.SetConcurrencyLimit(ctx, param(c, "kind"), param(c, "name"), *b.Max, actor(c))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, v)
}

func (s *Server) deleteConcurrencyLimit(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	kind, name := param(c, "kind"), param(c, "name")
	if err := s.cfg.Engine.DeleteConcurrencyLimit(ctx, kind, name, actor(c)); err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, map[string]string{"deleted": kind + " " + name})
}

// param is the path parameter name, percent-decoded: the router matches the path as sent, so
// a task named "ns:job" is reached at /tasks/ns:job and at /tasks/ns%3Ajob (as the console
// sends it) alike. A parameter that does not decode is passed on as it is, and names no task.
func param(c *fasthttp.RequestCtx, name string) string {
	v, _ := c.UserValue(name).(string)
	if strings.IndexByte(v, '%') < 0 {
		return v
	}
	if d, err := url.PathUnescape(v); err == nil {
		return d
	}
	return v
}

func intArg(c *fasthttp.RequestCtx, name string, def, lo, hi int) (int, error) {
	raw := string(c.QueryArgs().Peek(name))
	if raw == "" {
		return def, nil
	}
	v, err := strconv.Atoi(raw)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%w: %s: must be an integer %d..%d, got %q", ErrBadRequest, name, lo, hi, raw)
	}
	return v, nil
}

// statusOf maps errors to HTTP status codes: the one place where that mapping lives.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrBadRequest), errors.Is(err, engine.ErrInvalidTask), errors.Is(err, persist.ErrBadFilter),
		errors.Is(err, protocol.ErrMalformed):
		return fasthttp.StatusBadRequest
	case errors.Is(err, persist.ErrRejected):
		return fasthttp.StatusBadRequest
	case errors.Is(err, engine.ErrForeignApp), errors.Is(err, engine.ErrForeignExecutor):
		return fasthttp.StatusForbidden
	case errors.Is(err, ErrUnauthorized):
		return fasthttp.StatusUnauthorized
	case errors.Is(err, engine.ErrTaskNotFound), errors.Is(err, engine.ErrRunNotFound), errors.Is(err, engine.ErrBackfillNotFound),
		errors.Is(err, model.ErrExecutorNotFound), errors.Is(err, engine.ErrUnknownExecutor),
		errors.Is(err, engine.ErrLimitNotFound):
		return fasthttp.StatusNotFound
	case errors.Is(err, engine.ErrTaskExists), errors.Is(err, engine.ErrConflict),
		errors.Is(err, engine.ErrInvalidTransition), errors.Is(err, model.ErrVersionConflict),
		errors.Is(err, engine.ErrStaleTicket):
		return fasthttp.StatusConflict
	case errors.Is(err, persist.ErrWriterBusy), errors.Is(err, engine.ErrConcurrencyLimit), errors.Is(err, engine.ErrTooManyExecutors):
		return fasthttp.StatusTooManyRequests
	case errors.Is(err, engine.ErrNotRunning), errors.Is(err, model.ErrLeaseLost), errors.Is(err, engine.ErrStoreStalled),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, engine.ErrShardNotHeld):
		return fasthttp.StatusServiceUnavailable
	default:
		return fasthttp.StatusInternalServerError
	}
}

func (s *Server) fail(c *fasthttp.RequestCtx, err error) {
	code, msg := s.errorOf(c, err)
	if code == fasthttp.StatusTooManyRequests || errors.Is(err, engine.ErrShardNotHeld) {
		c.Response.Header.Set("Retry-After", strconv.Itoa(RetryAfterBusySec))
	}
	writeErr(c, code, msg)
}

// errorOf returns the status and message err is answered with, logging internal errors.
func (s *Server) errorOf(c *fasthttp.RequestCtx, err error) (int, string) {
	code := statusOf(err)
	msg := err.Error()
	if code == fasthttp.StatusInternalServerError {
		s.log.Error("API call failed", "method", string(c.Method()), "path", string(c.Path()), "error", err)
	}
	// Validation messages already name the field; drop the sentinel's prefix for readability.
	msg = strings.TrimPrefix(msg, engine.ErrInvalidTask.Error()+": ")
	msg = strings.TrimPrefix(msg, ErrBadRequest.Error()+": ")
	msg = strings.TrimPrefix(msg, persist.ErrBadFilter.Error()+": ")
	msg = strings.TrimPrefix(msg, engine.ErrForeignApp.Error()+": ")
	msg = strings.TrimPrefix(msg, engine.ErrForeignExecutor.Error()+": ")
	return code, msg
}

func writeErr(c *fasthttp.RequestCtx, code int, msg string) {
	writeJSON(c, code, map[string]string{"error": msg})
}

func writeJSON(c *fasthttp.RequestCtx, code int, v any) {
	c.SetStatusCode(code)
	c.SetContentType("application/json")
	enc := json.NewEncoder(c)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		c.SetStatusCode(fasthttp.StatusInternalServerError)
	}
}

func taskView(t *model.Task) wire.TaskView {
	v := wire.TaskView{TaskDef: t.Def, Runtime: wire.TaskRuntime{Runtime: t.Runtime}}
	maskDef(&v.TaskDef)
	if v.DependsOn == nil {
		v.DependsOn = []string{}
	}
	if v.Runtime.State == model.StateRunning {
		// The store keeps the running fire's due there (model.Runtime); the next fire is
		// not known until the run ends.
		v.Runtime.NextTriggerTime = 0
	}
	if n := v.Runtime.NextTriggerTime; n > 0 {
		loc, err := time.LoadLocation(t.Def.Timezone)
		if err != nil {
			loc = time.UTC
		}
		v.Runtime.NextFireAt = time.UnixMilli(n).In(loc).Format(time.RFC3339Nano)
		if t.Def.JitterSec > 0 && t.Def.Trigger == model.TriggerCron && v.Runtime.State == model.StateScheduled {
			j := engine.JitterOffset(t.Def.Name, n, t.Def.JitterSec)
			v.Runtime.NextJitterMS = &j
		}
	}
	return v
}
