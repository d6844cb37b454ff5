package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/lib/tlsfiles"
)

// SecurityConfig is the daemon's bind protection and outbound guard.
type SecurityConfig struct {
	// InsecureNoAuth lets the API listen on a non-loopback address without a token. Refused
	// otherwise. Defaults to false; when set, every start logs a warning.
	InsecureNoAuth bool
	// CallbackAllow lists the hosts and CIDR ranges HTTP callbacks and alert webhooks may
	// reach; empty allows all but link-local and metadata addresses.
	CallbackAllow []string
	// CallbackAllowLinkLocal lets callbacks reach link-local and cloud metadata addresses.
	CallbackAllowLinkLocal bool
	// CallbackSecret, when set, signs every HTTP callback (X-Axe-Signature).
	CallbackSecret string
	// TokenFile, when set, holds the accepted tokens with their scopes (admin/auth.go); it is read
	// again on SIGHUP. Used together with Token, which becomes the token named "default".
	TokenFile string
	// MetricsPublic serves /metrics without a token.
	MetricsPublic bool
	// TLSCert and TLSKey, both set, are the PEM files the API is served with over HTTPS.
	TLSCert, TLSKey string
	// PeerCA, when set, is a PEM bundle of the CAs trusted for the other nodes' https
	// advertise URLs, which a backup forwards the console's writes to (admin/haforward.go).
	// Defaults to "": the system's trust store.
	PeerCA string
	// AllowHosts are the names a server without tokens answers to, besides IP addresses,
	// localhost and the host names of Addr and Advertise (--allow-host): any other Host is
	// refused, so that a page of another site cannot reach the API by rebinding its own name
	// to this address. Defaults to none.
	AllowHosts []string
}

// applySecurity refuses an unprotected non-loopback bind and installs the outbound guard on
// the engine's dispatcher. It runs before anything is opened, so a refusal changes nothing.
func (c *Config) applySecurity() error {
	ts, err := c.loadTokens()
	if err != nil {
		return err
	}
	c.tokens = new(atomic.Pointer[admin.Tokens])
	c.tokens.Store(ts)
	if (c.Security.TLSCert == "") != (c.Security.TLSKey == "") {
		return fmt.Errorf("tls-cert and tls-key: give both or neither")
	}
	if c.Security.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.Security.TLSCert, c.Security.TLSKey)
		if err != nil {
			return fmt.Errorf("tls-cert: cannot load the key pair: %w", err)
		}
		c.tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if c.Security.PeerCA != "" {
		pool, err := tlsfiles.CAPool(c.Security.PeerCA)
		if err != nil {
			return fmt.Errorf("peer-ca: %w", err)
		}
		c.peerTLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if c.Token == "" && c.Security.TokenFile == "" {
		public, err := nonLoopback(c.Addr)
		if err != nil {
			return err
		}
		if public && !c.Security.InsecureNoAuth {
			return fmt.Errorf("refusing to serve the API on %s without a token: anyone who can reach that address "+
				"could create tasks and read their params. Set --token (AXE_TOKEN), listen on 127.0.0.1, "+
				"or pass --insecure-no-auth if a proxy in front does the authentication", c.Addr)
		}
		if public {
			c.Logger.Warn("the API is served without authentication on a non-loopback address (--insecure-no-auth)", "addr", c.Addr)
		}
	}
	if c.Engine.ExecutorToken != "" {
		msg := "--executor-token is sent to every executor that registered without signed calls (they predate them): upgrade them, then drop it"
		if c.Engine.ExecutorToken == c.Token {
			msg += "; it is the API's --token, so those executors hold a write token"
		}
		c.Logger.Warn(msg)
	}
	g, err := dispatch.NewGuard(dispatch.GuardConfig{Allow: c.Security.CallbackAllow, AllowLinkLocal: c.Security.CallbackAllowLinkLocal})
	if err != nil {
		return err
	}
	for _, u := range c.Engine.AlertWebhooks {
		if err := g.CheckURL(u); err != nil {
			return fmt.Errorf("alert-webhook: %w", err)
		}
	}
	c.Engine.Dispatch.Guard = g
	if c.Security.CallbackSecret != "" {
		c.Engine.Dispatch.CallbackSecret = []byte(c.Security.CallbackSecret)
	}
	return nil
}

// nonLoopback reports whether addr ("host:port") listens beyond this machine: an empty host or
// an unspecified address (every interface), or a name or address that is not loopback.
func nonLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("addr: %q is not host:port: %w", addr, err)
	}
	if host == "" {
		return true, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return !a.Unmap().IsLoopback(), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return false, fmt.Errorf("addr: cannot resolve %q: %w", host, err)
	}
	for _, a := range addrs {
		if !a.Unmap().IsLoopback() {
			return true, nil
		}
	}
	return len(addrs) == 0, nil
}

// apiServer completes the configuration of one of the daemon's API servers: its tokens (shared,
// so a SIGHUP reaches every server, a primary's term included), TLS, /metrics access, the
// base path, pprof and the metric sets of /metrics.
func (c *Config) apiServer(sc admin.ServerConfig) admin.ServerConfig {
	sc.TokenSource = c.tokens.Load
	sc.TLS = c.tlsConfig
	sc.MetricsPublic = c.Security.MetricsPublic
	sc.BasePath = c.BasePath
	sc.Pprof = c.Pprof
	sc.Metrics = c.metricSets
	sc.AllowHosts = append([]string(nil), c.Security.AllowHosts...)
	// This node's own names: it is reached at them by clients and by the other nodes.
	if h, _, err := net.SplitHostPort(c.Addr); err == nil && h != "" {
		sc.AllowHosts = append(sc.AllowHosts, h)
	}
	if u, err := url.Parse(c.Advertise); err == nil && u.Hostname() != "" {
		sc.AllowHosts = append(sc.AllowHosts, u.Hostname())
	}
	return sc
}

// loadTokens builds the accepted token set from --token and --token-file.
func (c *Config) loadTokens() (*admin.Tokens, error) {
	var entries []admin.TokenEntry
	if c.Security.TokenFile != "" {
		var err error
		if entries, err = admin.LoadTokenFile(c.Security.TokenFile); err != nil {
			return nil, err
		}
		if len(entries) == 0 && c.Token == "" {
			return nil, fmt.Errorf("token-file: %s holds no token", c.Security.TokenFile)
		}
	}
	c.peerToken = peerTokenOf(c.Token, entries)
	return admin.NewTokens(c.Token, entries)
}

// reloadTokensOnHUP rereads the token file on every SIGHUP until stop is called. A file that
// no longer parses is logged and the tokens in force stay.
func (c *Config) reloadTokensOnHUP() (stop func()) {
	if c.Security.TokenFile == "" {
		return func() {}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-ch:
				ts, err := c.loadTokens()
				if err != nil {
					c.Logger.Error("cannot reload the token file; the tokens in force stay", "file", c.Security.TokenFile, "error", err)
					continue
				}
				c.tokens.Store(ts)
				c.Logger.Info("token file reloaded", "file", c.Security.TokenFile, "tokens", ts.Len())
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		wg.Wait()
	}
}
