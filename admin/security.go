package admin

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/engine"
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
}

// applySecurity refuses an unprotected non-loopback bind and installs the outbound guard on
// the engine's dispatcher. It runs before anything is opened, so a refusal changes nothing.
func (c *DaemonConfig) applySecurity() error {
	if c.Token == "" {
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
	g, err := dispatch.NewGuard(dispatch.GuardConfig{Allow: c.Security.CallbackAllow, AllowLinkLocal: c.Security.CallbackAllowLinkLocal})
	if err != nil {
		return err
	}
	for _, u := range c.Engine.AlertWebhooks {
		if err := engine.CheckWebhook(g, u); err != nil {
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
