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
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/ratelimit"
)

func serveCmd() *ffcli.Command {
	fs := flag.NewFlagSet("axe serve", flag.ContinueOnError)
	var cfg admin.DaemonConfig
	host, _ := os.Hostname()
	fs.StringVar(&cfg.Addr, "addr", admin.AddrDefault, "listen address (AXE_ADDR)")
	fs.StringVar(&cfg.DB, "db", admin.DBDefault, "store: sqlite:PATH or mysql:USER:PASS@tcp(HOST:3306)/DB (AXE_DB)")
	fs.StringVar(&cfg.Token, "token", "", "require Authorization: Bearer TOKEN on the API (AXE_TOKEN)")
	fs.StringVar(&cfg.NodeID, "node-id", host, "this scheduler's name in action records (AXE_NODE_ID)")
	fs.DurationVar(&cfg.Tick, "tick", engine.TickDefault, "timing wheel resolution (AXE_TICK)")
	fs.StringVar(&cfg.Timezone, "timezone", engine.TimezoneDefault, "default IANA zone of tasks (AXE_TIMEZONE)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", admin.ShutdownTimeoutDefault, "graceful stop bound (AXE_SHUTDOWN_TIMEOUT)")
	rateGlobal := fs.String("rate-global", "", "global dispatch rate, RATE[:BURST] per second; empty = unlimited (AXE_RATE_GLOBAL)")
	rateDefault := fs.String("rate-default", "", "per-downstream dispatch rate, RATE[:BURST] per second (AXE_RATE_DEFAULT)")
	fs.DurationVar(&cfg.Engine.LostAfter, "executor-lost-after", engine.LostAfterDefault, "an executor silent this long gets no new dispatch (AXE_EXECUTOR_LOST_AFTER)")
	fs.DurationVar(&cfg.Engine.HeartbeatInterval, "heartbeat-interval", engine.HeartbeatIntervalDefault, "the heartbeat period executors are told to keep (AXE_HEARTBEAT_INTERVAL)")
	fs.DurationVar(&cfg.Engine.PromoteLead, "promote-lead", engine.PromoteLeadDefault, "tasks due later than this are held as 48-byte references and read in full this long before they fire (AXE_PROMOTE_LEAD)")
	registerRetention(fs, &cfg.Engine.Retention)
	webhooks := fs.String("alert-webhook", "", "comma-separated URLs that receive alerts as JSON POSTs (AXE_ALERT_WEBHOOK)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error (AXE_LOG_LEVEL)")
	logFormat := fs.String("log-format", "text", "text or json (AXE_LOG_FORMAT)")
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
			cfg.Logger = log
			cfg.Version = version
			cfg.OnListen = func(addr string) {
				fmt.Printf("axe %s listening on http://%s (store %s)\n", version, addr, displayDB(cfg.DB))
			}
			return admin.Serve(ctx, cfg)
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
