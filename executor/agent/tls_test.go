package agent_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor/agent"
	"github.com/axe-sched/axe/executor/internal/schedpeer"
	"github.com/axe-sched/axe/internal/test/testpki"
	"github.com/axe-sched/axe/protocol"
)

// TestAgentServesTLSWithClientCertificates: an agent with tls_cert, tls_key and
// tls_client_ca, registered with an https:// scheduler trusted through scheduler_ca, runs its
// command for a caller with a client certificate of the CA, and refuses one without.
func TestAgentServesTLSWithClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	peer, err := schedpeer.Start(schedpeer.Config{
		TLS: &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "scheduler").Load(t)}},
		ExecutorTLS: &tls.Config{RootCAs: ca.Pool(),
			Certificates: []tls.Certificate{ca.Client(t, "scheduler-client").Load(t)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Close() })
	pair := ca.Server(t, "agent")
	body := fmt.Sprintf(`{"app":"ops","listen":"127.0.0.1:0","schedulers":[%q],
		"tls_cert":%q,"tls_key":%q,"tls_client_ca":%q,"scheduler_ca":%q,
		"handlers":{"hello":{"command":["/bin/sh","-c","echo hello over tls"]}}}`,
		peer.URL(), pair.CertFile, pair.KeyFile, ca.File, ca.File)
	cfg, err := agent.Load(writeConfig(t, body))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = quiet
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	if regs := peer.Registrations(); len(regs) == 0 || regs[0].Protocol != protocol.ProtocolHTTPS {
		t.Fatalf("registrations = %+v, want protocol https", regs)
	}

	resp, err := peer.Dispatch(a.Addr(), run("t-1", "greet", "hello", time.Minute))
	if err != nil || resp.Status != 202 {
		t.Fatalf("dispatch over mTLS = %+v, %v", resp, err)
	}
	cbs, err := peer.WaitCallbacks(1)
	if err != nil {
		t.Fatal(err)
	}
	if cbs[0].Status != protocol.StatusSuccess || !strings.Contains(cbs[0].Output, "hello over tls") {
		t.Errorf("result = %+v", cbs[0])
	}

	// A caller trusting the agent but with no client certificate gets no run in.
	bare, err := schedpeer.Start(schedpeer.Config{ExecutorTLS: &tls.Config{RootCAs: ca.Pool()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bare.Close() })
	if resp, err := bare.Dispatch(a.Addr(), run("t-2", "greet", "hello", time.Minute)); err == nil {
		t.Fatalf("dispatch without a client certificate answered %d %s", resp.Status, resp.Body)
	}
}

// TestAgentTLSConfigNamesTheKey: TLS mistakes in the file are reported by Load naming the key.
func TestAgentTLSConfigNamesTheKey(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	pair := ca.Server(t, "agent")
	absent := filepath.Join(dir, "absent.pem")
	const rest = `"app":"ops","schedulers":["https://127.0.0.1:7070"],"handlers":{"h":{"command":["true"]}}`
	for _, c := range []struct{ name, keys, field string }{
		{"cert without key", fmt.Sprintf(`"tls_cert":%q`, pair.CertFile), "tls_cert:"},
		{"key without cert", fmt.Sprintf(`"tls_key":%q`, pair.KeyFile), "tls_cert:"},
		{"client CA without cert", fmt.Sprintf(`"tls_client_ca":%q`, ca.File), "tls_client_ca:"},
		{"client CA missing", fmt.Sprintf(`"tls_cert":%q,"tls_key":%q,"tls_client_ca":%q`, pair.CertFile, pair.KeyFile, absent), "tls_client_ca:"},
		{"scheduler CA is a key", fmt.Sprintf(`"scheduler_ca":%q`, pair.KeyFile), "scheduler_ca:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := agent.Load(writeConfig(t, "{"+c.keys+","+rest+"}"))
			if !errors.Is(err, agent.ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
				t.Errorf("Load = %v, want ErrInvalidConfig naming %s", err, c.field)
			}
		})
	}
}
