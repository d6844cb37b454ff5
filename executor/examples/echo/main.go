// Command echo is the Go SDK's echo executor: the handler every axe SDK ships so that
// `axe conformance executor --exec` can drive it (docs/conformance.md). It reads its
// settings from the environment the conformance suite sets:
//
//	AXE_SCHEDULERS  comma-separated scheduler base URLs, e.g. "http://127.0.0.1:40123"
//	AXE_LISTEN      host:port to listen on and register as its address (default 127.0.0.1:0)
//	AXE_TOKEN       the executor token (empty: no signatures)
//	AXE_APP         the app to register (default "echo")
//
// and registers one handler, echo: params {"sleep_ms": N} wait N ms (ending early, failed,
// when the run is cancelled by its deadline or a kill), {"fail": "text"} fails with error
// "text", and otherwise the run succeeds with its params as compact JSON for output. On
// SIGTERM or SIGINT it drains, deregisters and exits 0.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/axe-sched/axe/executor"
)

// stopTimeout bounds the graceful drain on SIGTERM.
const stopTimeout = 30 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

func run() error {
	schedulers := os.Getenv("AXE_SCHEDULERS")
	if schedulers == "" {
		return errors.New("AXE_SCHEDULERS: required (comma-separated scheduler base URLs)")
	}
	app := os.Getenv("AXE_APP")
	if app == "" {
		app = "echo"
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	exe, err := executor.New(executor.Config{
		App:        app,
		Addr:       os.Getenv("AXE_LISTEN"),
		Schedulers: strings.Split(schedulers, ","),
		Token:      os.Getenv("AXE_TOKEN"),
		Logger:     log,
	})
	if err != nil {
		return err
	}
	exe.Handle("echo", echo)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := exe.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "echo: app %s serving at %s\n", app, exe.Addr())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	return exe.Stop(sctx)
}

// echoParams are the params the echo handler understands; any others are echoed back only.
type echoParams struct {
	SleepMS int64  `json:"sleep_ms"`
	Fail    string `json:"fail"`
}

// echo is the conformance suite's handler (docs/conformance.md, The echo handler).
func echo(ctx context.Context, run executor.Run) (executor.Result, error) {
	var p echoParams
	if len(run.Params) > 0 && run.Params[0] == '{' {
		if err := json.Unmarshal(run.Params, &p); err != nil {
			return executor.Result{}, fmt.Errorf("cannot read params: %w", err)
		}
	}
	if p.SleepMS > 0 {
		t := time.NewTimer(time.Duration(p.SleepMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return executor.Result{}, fmt.Errorf("cancelled while sleeping: %w", context.Cause(ctx))
		}
	}
	if p.Fail != "" {
		return executor.Result{}, errors.New(p.Fail)
	}
	out := []byte("{}")
	if len(run.Params) > 0 && string(run.Params) != "null" {
		var b bytes.Buffer
		if err := json.Compact(&b, run.Params); err != nil {
			return executor.Result{}, fmt.Errorf("cannot compact params: %w", err)
		}
		out = b.Bytes()
	}
	return executor.Result{Output: string(out)}, nil
}
