package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/workflow"
)

// Defaults for ServerConfig.
const (
	AddrDefault           = "127.0.0.1:7070"
	MaxRequestBodyDefault = 1 << 20
	ListLimitDefault      = 100
	ListLimitMax          = 10000
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
	// Workflows serves /api/v1/workflows and /api/v1/workflow-runs. Defaults to nil: none.
	Workflows *workflow.Service
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
		c.Metrics = func() []*metrics.Set { return []*metrics.Set{eng.API().Metrics()} }
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
	// A workflow step's task (WORKFLOW/STEP) changes only with its workflow (workflows.go).
	task := func(next fasthttp.RequestHandler) fasthttp.RequestHandler { return s.notStepTask(s.byTask(next)) }
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
	r.POST(protocol.PathDeregister, h(s.deregisterExecutor))
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
	s.workflowRoutes(api) // workflows.go
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
