package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/ha"
	"github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/ratelimit"
)

func serveCmd() *ffcli.Command {
	fs := flag.NewFlagSet("axe serve", flag.ContinueOnError)
	var cfg daemon.Config
	fs.StringVar(&cfg.Addr, "addr", admin.AddrDefault, "listen address (AXE_ADDR)")
	fs.StringVar(&cfg.DB, "db", daemon.DBDefault, "store: sqlite:PATH or mysql:USER:PASS@tcp(HOST:3306)/DB; several HOST:PORT, comma-separated, for a Galera cluster (AXE_DB)")
	fs.StringVar(&cfg.Token, "token", "", "require Authorization: Bearer TOKEN on the API (AXE_TOKEN)")
	fs.StringVar(&cfg.NodeID, "node-id", "", "this scheduler's name in the lease, the nodes table and action records; default hostname:port (AXE_NODE_ID)")
	fs.BoolVar(&cfg.HA, "ha", false, "run as one of several nodes of a shared MySQL database: every node schedules its share of the shards (AXE_HA)")
	fs.StringVar(&cfg.HAMode, "ha-mode", daemon.HAModeShards, "with --ha: shards (every node schedules a share of the tasks) or primary (one primary schedules all, the others stand by) (AXE_HA_MODE)")
	fs.StringVar(&cfg.Advertise, "advertise", "", "with --ha: the URL other nodes and clients reach this node at; default http://ADDR (AXE_ADVERTISE)")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", ha.LeaseTTLDefault, "with --ha: how long the lease lasts past a renewal, by the database's clock (AXE_LEASE_TTL)")
	fs.DurationVar(&cfg.LeaseRenew, "lease-renew", ha.LeaseRenewDefault, "with --ha: how often the primary renews the lease and a backup tries to take it (AXE_LEASE_RENEW)")
	fs.DurationVar(&cfg.Tick, "tick", engine.TickDefault, "timing wheel resolution (AXE_TICK)")
	fs.StringVar(&cfg.Timezone, "timezone", engine.TimezoneDefault, "default IANA zone of tasks (AXE_TIMEZONE)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", daemon.ShutdownTimeoutDefault, "graceful stop bound (AXE_SHUTDOWN_TIMEOUT)")
	rateGlobal := fs.String("rate-global", "", "global dispatch rate, RATE[:BURST] per second; empty = unlimited (AXE_RATE_GLOBAL)")
	rateDefault := fs.String("rate-default", "", "per-downstream dispatch rate, RATE[:BURST] per second (AXE_RATE_DEFAULT)")
	fs.DurationVar(&cfg.Engine.LostAfter, "executor-lost-after", engine.LostAfterDefault, "an executor silent this long gets no new dispatch (AXE_EXECUTOR_LOST_AFTER)")
	fs.IntVar(&cfg.Engine.MaxExecutorsPerApp, "max-executors-per-app", engine.MaxExecutorsPerAppDefault, "the most executors one app may have registered, lost ones included; a new one takes the place of the longest-lost idle one, or is refused with 429 (AXE_MAX_EXECUTORS_PER_APP)")
	fs.IntVar(&cfg.Engine.MaxExecutorsPerToken, "max-executors-per-token", engine.MaxExecutorsPerTokenDefault, "the most executors registered with one token, whatever their apps, bounded as --max-executors-per-app (AXE_MAX_EXECUTORS_PER_TOKEN)")
	fs.DurationVar(&cfg.Engine.HeartbeatInterval, "heartbeat-interval", engine.HeartbeatIntervalDefault, "the heartbeat period executors are told to keep (AXE_HEARTBEAT_INTERVAL)")
	fs.DurationVar(&cfg.Engine.PromoteLead, "promote-lead", engine.PromoteLeadDefault, "tasks due later than this are held as 48-byte references and read in full this long before they fire (AXE_PROMOTE_LEAD)")
	fs.IntVar(&cfg.Engine.WriterLanes, "writer-lanes", engine.WriterLanesDefault, "batched writers committing in parallel, tasks spread over them; raise it where MySQL runs on a machine of its own (AXE_WRITER_LANES)")
	fs.IntVar(&cfg.Engine.Dispatch.MaxConnsPerHost, "max-conns-per-host", dispatch.MaxConnsPerHostDefault, "the most connections open at once to one executor or callback host; sends past it wait in that host's queue, first come first served (AXE_MAX_CONNS_PER_HOST)")
	sendAhead := fs.Int("send-ahead", engine.SendAheadDefault, "the most runs whose fire record is committed and whose request has not yet left; the fire loop waits for room, so a crash leaves at most this many runs in doubt that never left; 0: no bound (AXE_SEND_AHEAD)")
	registerRetention(fs, &cfg.Engine.Retention)
	webhooks := fs.String("alert-webhook", "", "comma-separated URLs that receive alerts as JSON POSTs (AXE_ALERT_WEBHOOK)")
	fs.StringVar(&cfg.Security.TokenFile, "token-file", "", "JSON file of scoped tokens [{\"name\",\"scope\":\"read|write|executor\",\"token\",\"apps\"}]; reread on SIGHUP (AXE_TOKEN_FILE)")
	fs.StringVar(&cfg.Engine.ExecutorToken, "executor-token", "", "only for executors that predate signed calls: the bearer token sent on run and kill calls to them (their scheduler_token); axe signs every call to an up-to-date executor and sends it no token; default none (AXE_EXECUTOR_TOKEN)")
	var executorTLS dispatch.ExecutorTLSFiles
	fs.StringVar(&executorTLS.CA, "executor-ca", "", "PEM bundle of the CAs trusted for executors that serve HTTPS; default the system's trust store (AXE_EXECUTOR_CA)")
	fs.StringVar(&executorTLS.Cert, "executor-cert", "", "PEM client certificate presented to executors that require one (mTLS); with --executor-key (AXE_EXECUTOR_CERT)")
	fs.StringVar(&executorTLS.Key, "executor-key", "", "PEM private key of --executor-cert (AXE_EXECUTOR_KEY)")
	fs.StringVar(&cfg.Security.TLSCert, "tls-cert", "", "PEM certificate (chain) to serve the API over HTTPS; with --tls-key (AXE_TLS_CERT)")
	fs.StringVar(&cfg.Security.TLSKey, "tls-key", "", "PEM private key of --tls-cert (AXE_TLS_KEY)")
	fs.StringVar(&cfg.Security.PeerCA, "peer-ca", "", "with --ha: PEM bundle of the CAs trusted for other nodes' https advertise URLs, which a backup forwards console writes to; default the system's trust store (AXE_PEER_CA)")
	fs.BoolVar(&cfg.Security.MetricsPublic, "metrics-public", false, "serve /metrics without a token (AXE_METRICS_PUBLIC)")
	fs.BoolVar(&cfg.Security.InsecureNoAuth, "insecure-no-auth", false, "allow a non-loopback --addr without --token; logs a warning at every start (AXE_INSECURE_NO_AUTH)")
	allowHost := fs.String("allow-host", "", "comma-separated host names a server without a token answers to, besides IP addresses, localhost and the names of --addr and --advertise (AXE_ALLOW_HOST)")
	callbackAllow := fs.String("callback-allow", "", "comma-separated hosts and CIDR ranges HTTP callbacks and alert webhooks may reach; empty = all but link-local and metadata addresses (AXE_CALLBACK_ALLOW)")
	fs.BoolVar(&cfg.Security.CallbackAllowLinkLocal, "callback-allow-link-local", false, "let callbacks reach link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10, …) (AXE_CALLBACK_ALLOW_LINK_LOCAL)")
	fs.StringVar(&cfg.Security.CallbackSecret, "callback-secret", "", "sign HTTP callbacks: X-Axe-Signature: sha256=HMAC(body) (AXE_CALLBACK_SECRET)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error (AXE_LOG_LEVEL)")
	logFormat := fs.String("log-format", "text", "text or json (AXE_LOG_FORMAT)")
	cronDialect := fs.String("cron-dialect", string(cron.DialectDefault), "dialect of tasks that name no cron_dialect: unix (0/7 = SUN) or quartz (1 = SUN); when not set, expressions the two read differently are refused (AXE_CRON_DIALECT)")
	fs.StringVar(&cfg.BasePath, "base-path", "", "path prefix of the console and the API behind a reverse proxy, e.g. /axe (AXE_BASE_PATH)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve /debug/pprof, behind the token (AXE_PPROF)")
	return &ffcli.Command{
		Name:       "serve",
		ShortUsage: "axe serve [--addr 127.0.0.1:7070] [--db sqlite:axe.db | --db 'mysql:USER:PASS@tcp(HOST:3306)/DB'] [flags]",
		ShortHelp:  "run the scheduler daemon",
		FlagSet:    fs,
		Options:    envOpts,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("serve: unexpected argument %q", args[0])
			}
			log, err := newLogger(*logLevel, *logFormat)
			if err != nil {
				return err
			}
			if cfg.Engine.RateLimit.Global, err = ratelimit.ParseLimit(*rateGlobal); err != nil {
				return fmt.Errorf("rate-global: %w", err)
			}
			if cfg.Engine.RateLimit.Default, err = ratelimit.ParseLimit(*rateDefault); err != nil {
				return fmt.Errorf("rate-default: %w", err)
			}
			for _, u := range strings.Split(*webhooks, ",") {
				if u = strings.TrimSpace(u); u == "" {
					continue
				}
				if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
					return fmt.Errorf("alert-webhook: %q is not an http(s) URL", u)
				}
				cfg.Engine.AlertWebhooks = append(cfg.Engine.AlertWebhooks, u)
			}
			for _, h := range strings.Split(*allowHost, ",") {
				if h = strings.TrimSpace(h); h != "" {
					cfg.Security.AllowHosts = append(cfg.Security.AllowHosts, h)
				}
			}
			for _, a := range strings.Split(*callbackAllow, ",") {
				if a = strings.TrimSpace(a); a != "" {
					cfg.Security.CallbackAllow = append(cfg.Security.CallbackAllow, a)
				}
			}
			// Checked here, not only by the engine: its config reads 0 as "the default".
			if cfg.Engine.WriterLanes < 1 || cfg.Engine.WriterLanes > engine.WriterLanesMax {
				return fmt.Errorf("writer-lanes: must be 1 to %d, got %d", engine.WriterLanesMax, cfg.Engine.WriterLanes)
			}
			if cfg.Engine.Dispatch.MaxConnsPerHost < 1 {
				return fmt.Errorf("max-conns-per-host: must be 1 or more, got %d", cfg.Engine.Dispatch.MaxConnsPerHost)
			}
			switch {
			case *sendAhead < 0:
				return fmt.Errorf("send-ahead: must be 0 (no bound) or more, got %d", *sendAhead)
			case *sendAhead == 0:
				cfg.Engine.SendAhead = -1 // the engine reads 0 as its default
			default:
				cfg.Engine.SendAhead = *sendAhead
			}
			if cfg.Engine.CronDialect, err = serverDialect(fs, *cronDialect); err != nil {
				return err
			}
			if cfg.Engine.Dispatch.ExecutorTLS, err = executorTLS.Load(); err != nil {
				return err
			}
			cfg.Logger = log
			cfg.Version = version
			cfg.OnListen = func(addr string) {
				scheme := "http"
				if cfg.Security.TLSCert != "" {
					scheme = "https"
				}
				fmt.Printf("axe %s listening on %s://%s (store %s)\n", version, scheme, addr, displayDB(cfg.DB))
			}
			return daemon.Serve(ctx, cfg)
		},
	}
}

func displayDB(db string) string {
	if strings.HasPrefix(db, "mysql:") {
		if i := strings.LastIndex(db, "@"); i > 0 {
			return "mysql:…" + db[i:]
		}
	}
	return db
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log-level: must be debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("log-format: must be text or json, got %q", format)
}
