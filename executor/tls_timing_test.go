package executor_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/executor/internal/schedpeer"
	"github.com/axe-sched/axe/internal/test/testpki"
)

// BenchmarkRunRoundTripTLS measures one run through a real executor on loopback, as
// BenchmarkRunRoundTrip does, once over plain HTTP (the baseline) and once with the executor
// serving HTTPS and verifying the caller's client certificate (mTLS). Connections are kept
// alive, so the difference is the per-request cost of TLS, not the handshake's.
func BenchmarkRunRoundTripTLS(b *testing.B) {
	dir := b.TempDir()
	ca := testpki.NewCA(b, dir, "ca")
	pair := ca.Server(b, "executor")
	for _, c := range []struct {
		name string
		peer schedpeer.Config
		exe  executor.Config
	}{
		{"baseline=http", schedpeer.Config{}, executor.Config{}},
		{"mtls", schedpeer.Config{ExecutorTLS: &tls.Config{RootCAs: ca.Pool(),
			Certificates: []tls.Certificate{ca.Client(b, "scheduler").Load(b)}}},
			executor.Config{TLSCert: pair.CertFile, TLSKey: pair.KeyFile, TLSClientCA: ca.File}},
	} {
		b.Run(c.name, func(b *testing.B) {
			peer, err := schedpeer.Start(c.peer)
			if err != nil {
				b.Fatal(err)
			}
			defer peer.Close()
			cfg := c.exe
			cfg.App, cfg.Schedulers, cfg.Logger = "bench", []string{peer.URL()}, quiet
			exe, err := executor.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			exe.Handle("noop", func(context.Context, executor.Run) (executor.Result, error) {
				return executor.Result{Output: "ok"}, nil
			})
			if err := exe.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer exe.Stop(context.Background())
			b.ReportAllocs()
			sent := 0
			for b.Loop() {
				sent++
				tk := fmt.Sprintf("t-%d", sent)
				resp, err := peer.Dispatch(exe.Addr(), schedpeer.Run{Ticket: tk, Task: tk, Handler: "noop", Attempt: 1})
				if err != nil || resp.Status != http.StatusAccepted {
					b.Fatal(resp, err)
				}
				if err := peer.WaitCount(schedpeer.PathCallback, sent); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
