package daemon

import (
	"context"
	"errors"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/lib/startstop"
)

// One serve skeleton (serve) runs every mode of `axe serve`; a mode plugs into it what is its
// own. The skeleton opens the mode, starts its front server, lets the mode start what needs
// the bound address, logs the listening line and calls Config.OnListen, then waits for ctx
// and stops in order: not ready, the mode's steps before the HTTP server stops, the HTTP
// server, the mode's steps after it. The modes:
//
//   - a single node (singleNode, below);
//   - a primary or backup of one lease (haNode, ha.go; --ha --ha-mode primary);
//   - a node of a sharded cluster (shardNode, shards.go; --ha).

// mode is what one way of serving plugs into the skeleton.
type mode interface {
	// open opens the mode's stores and builds (and may start) what serves the API, up to the
	// front server, which it returns unstarted. What it started, it pushes on undo.
	open(ctx context.Context, cfg *Config, undo *startstop.Undo) (*admin.Server, error)
	// run starts, once the front server listens and cfg.Advertise is set, what the mode runs
	// beside it; it returns the listening line's message and its attributes after the
	// address. What it started, it pushes on undo.
	run(ctx context.Context, srv *admin.Server, undo *startstop.Undo) (msg string, attrs []any, err error)
	// notReady makes /readyz answer 503: the first step of the shutdown.
	notReady()
	// stopping returns the shutdown's steps before the HTTP server stops and after it. It is
	// asked once the node is not ready.
	stopping() (before, after []startstop.Step)
}

// serve runs m until ctx is cancelled, then shuts it down in order, logging each step with
// how long it took. A start that fails stops what had started, last first.
func serve(ctx context.Context, cfg Config, m mode) error {
	log := cfg.Logger
	var undo startstop.Undo
	fail := func(err error) error {
		// Silent, unbounded, as each mode's start always undid.
		return errors.Join(err, undo.Run(context.Background(), nil, nil, ""))
	}
	srv, err := m.open(ctx, &cfg, &undo)
	if err != nil {
		return fail(err)
	}
	if err := srv.Start(ctx); err != nil {
		return fail(err)
	}
	undo.Push("stop HTTP server", srv.Stop)
	if cfg.Advertise == "" {
		cfg.Advertise = cfg.scheme() + "://" + srv.Addr()
	}
	msg, attrs, err := m.run(ctx, srv, &undo)
	if err != nil {
		return fail(err)
	}
	log.Info(msg, append([]any{"addr", cfg.scheme() + "://" + srv.Addr()}, attrs...)...)
	if cfg.OnListen != nil {
		cfg.OnListen(srv.Addr())
	}

	<-ctx.Done()
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	sctx, scancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer scancel()
	const prefix = "shutdown: "
	err = startstop.Steps(sctx, log, nil, prefix,
		startstop.Step{Name: "not ready", Run: func(context.Context) error { m.notReady(); return nil }})
	before, after := m.stopping()
	steps := append(append(before, startstop.Step{Name: "stop HTTP server", Run: srv.Stop}), after...)
	return errors.Join(err, startstop.Steps(sctx, log, nil, prefix, steps...))
}
