package dispatch

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrRefusedTarget is returned (wrapped) when an outbound address is refused by the Guard.
var ErrRefusedTarget = errors.New("refused callback target")

// refusedPrefixes are the ranges no HTTP callback may reach unless the operator allows them
// (Guard.AllowLinkLocal): link-local addresses, where every cloud serves its instance metadata
// and credentials, and the metadata addresses that sit outside link-local. IPv4-mapped IPv6
// forms (::ffff:169.254.169.254) are caught because addresses are unmapped before the check.
var refusedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),     // IPv4 link-local, incl. 169.254.169.254
	netip.MustParsePrefix("fe80::/10"),          // IPv6 link-local
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS metadata over IPv6
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud metadata
}

// Guard decides which hosts HTTP callbacks and alert webhooks may reach. It checks a URL when
// a task is created or updated, and again every address a connection is about to be opened to,
// after name resolution, so a name that resolves to a refused address later (or differently
// for the dial than for the check) is still caught. The zero Guard refuses only the ranges
// above. A Guard is immutable after NewGuard and safe for concurrent use.
type Guard struct {
	names          map[string]bool // allowed host names, lower case
	prefixes       []netip.Prefix  // allowed address ranges
	allowLinkLocal bool
	// lookup resolves a host name; net.DefaultResolver unless a test replaces it.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

// GuardConfig configures a Guard.
type GuardConfig struct {
	// Allow lists the hosts callbacks may reach: host names ("api.internal") and address
	// ranges in CIDR form ("10.0.0.0/8") or single addresses. Empty means every host but the
	// refused ranges.
	Allow []string
	// AllowLinkLocal lets callbacks reach link-local and cloud metadata addresses, which are
	// refused by default. Defaults to false.
	AllowLinkLocal bool
}

// NewGuard parses cfg. An entry that is neither a host name nor an address or CIDR range is
// an error naming it.
func NewGuard(cfg GuardConfig) (*Guard, error) {
	g := &Guard{names: map[string]bool{}, allowLinkLocal: cfg.AllowLinkLocal, lookup: defaultLookup}
	for _, raw := range cfg.Allow {
		s := strings.TrimSpace(raw)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			g.prefixes = append(g.prefixes, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(s); err == nil {
			a = a.Unmap()
			g.prefixes = append(g.prefixes, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		if !validHostName(s) {
			return nil, fmt.Errorf("callback-allow: %q is not a host name, an address or a CIDR range", s)
		}
		g.names[strings.ToLower(strings.TrimSuffix(s, "."))] = true
	}
	return g, nil
}

func validHostName(s string) bool {
	if len(s) > 253 || strings.ContainsAny(s, "/:@ ") {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}

func defaultLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// restricted reports whether an allowlist is configured.
func (g *Guard) restricted() bool { return len(g.names) > 0 || len(g.prefixes) > 0 }

// checkAddr judges one resolved address; nameAllowed says the host name it came from is on
// the allowlist.
func (g *Guard) checkAddr(host string, a netip.Addr, nameAllowed bool) error {
	a = a.Unmap().WithZone("") // a zoned address never matches a prefix

	if !g.allowLinkLocal {
		for _, p := range refusedPrefixes {
			if p.Contains(a) {
				return fmt.Errorf("%w: %s (%s) is a link-local or cloud metadata address; allow it with --callback-allow-link-local", ErrRefusedTarget, host, a)
			}
		}
	}
	if !g.restricted() || nameAllowed {
		return nil
	}
	for _, p := range g.prefixes {
		if p.Contains(a) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s (%s) is not in --callback-allow", ErrRefusedTarget, host, a)
}

// CheckURL judges a callback URL without resolving it: an address literal is checked fully; a
// host name is refused when an allowlist names hosts but not this one and has no address
// ranges that could admit it once resolved. The dial-time check does the rest.
func (g *Guard) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("cannot parse URL: %w", err)
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return g.checkAddr(host, a, false)
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if g.restricted() && !g.names[name] && len(g.prefixes) == 0 {
		return fmt.Errorf("%w: host %s is not in --callback-allow", ErrRefusedTarget, host)
	}
	return nil
}

// defaultGuard judges executors when no Guard is configured: the refused ranges only.
var defaultGuard = &Guard{names: map[string]bool{}, lookup: defaultLookup}

// orDefault is g, or defaultGuard when g is nil.
func (g *Guard) orDefault() *Guard {
	if g == nil {
		return defaultGuard
	}
	return g
}

// checkExecutorAddr judges one address an executor's name stands for. Executors are not held
// to --callback-allow (they register their own addresses, with an executor token), but no
// executor may send the scheduler's calls to a wildcard, multicast or broadcast address, nor
// to the ranges no callback may reach.
func (g *Guard) checkExecutorAddr(host string, a netip.Addr, _ bool) error {
	a = a.Unmap()
	switch {
	case a.IsUnspecified():
		return fmt.Errorf("%w: %s is a wildcard address, which names no executor", ErrRefusedTarget, host)
	case a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%w: %s is a multicast or broadcast address", ErrRefusedTarget, host)
	}
	open := *g
	open.names, open.prefixes = nil, nil // the allowlist is for callbacks
	return open.checkAddr(host, a, false)
}

// CheckExecutorAddress judges the address an executor registers, before any connection:
// exactly host:port, with a port of 1 to 65535 and a host that is an address literal
// (without a zone) or a host name, and not an address checkExecutorAddr refuses. So
// "user@host", "host#f", "host?x=1", "0.0.0.0:0", "[::]:80" or "169.254.169.254:80" never
// become a URL the scheduler posts runs to. A nil Guard judges with the refused ranges.
// The dial judges the name's addresses again (DialExecutor).
func (g *Guard) CheckExecutorAddress(addr string) error {
	g = g.orDefault()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("must be host:port: %w", err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || port[0] == '0' {
		return fmt.Errorf("port must be a number from 1 to 65535, got %q", port)
	}
	a, perr := netip.ParseAddr(host)
	if strings.HasPrefix(addr, "[") && (perr != nil || !a.Is6()) {
		// A URL brackets an IPv6 address and nothing else: "[0]:1" or "[1.2.3.4]:80" would
		// become a URL no request can be posted to.
		return fmt.Errorf("host %q: brackets hold an IPv6 address only", host)
	}
	if perr == nil {
		if a.Zone() != "" {
			return fmt.Errorf("host %q: an address with a zone names no executor another host can reach", host)
		}
		return g.checkExecutorAddr(host, a, false)
	}
	if host == "" || !validHostName(host) {
		return fmt.Errorf("host %q is neither an IP address nor a host name", host)
	}
	return nil
}

// DialExecutor is the dialer of the calls to executors: it refuses any address the name
// resolves to that checkExecutorAddr refuses, at every connection.
func (g *Guard) DialExecutor(addr string, timeout time.Duration) (net.Conn, error) {
	g = g.orDefault()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return g.dialJudged(ctx, "tcp", addr, g.checkExecutorAddr)
}

// dial resolves addr ("host:port"), refuses it if any address it resolves to is refused, and
// connects to the first that answers. Refusing on any, not only the one dialled, keeps a name
// with one good and one metadata address from being usable by whoever controls its records.
func (g *Guard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return g.dialJudged(ctx, network, addr, g.checkAddr)
}

func (g *Guard) dialJudged(ctx context.Context, network, addr string, judge func(host string, a netip.Addr, nameAllowed bool) error) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("cannot dial %s: %w", addr, err)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = g.lookup(ctx, host); err != nil {
		return nil, fmt.Errorf("cannot resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("cannot resolve %s: no addresses", host)
	}
	nameAllowed := g.names[strings.ToLower(strings.TrimSuffix(host, "."))]
	for _, a := range addrs {
		if err := judge(host, a, nameAllowed); err != nil {
			return nil, err
		}
	}
	var d net.Dialer
	var last error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// DialContext is the guarded dialer for net/http transports (alert webhooks).
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return g.dial(ctx, network, addr)
}

// dialTimeout is the guarded dialer of the callback client; fasthttp passes what is left of
// the call's deadline as timeout.
func (g *Guard) dialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return g.dial(ctx, "tcp", addr)
}

// SignatureHeader carries an HTTP callback's signature; see Sign.
const SignatureHeader = "X-Axe-Signature"

// Sign returns the X-Axe-Signature value of body under secret: "sha256=" and the hex
// HMAC-SHA256. A receiver recomputes it over the raw body it read and compares in constant
// time (hmac.Equal). The body names the ticket and the scheduled time, so a replayed call is
// the same run, which the ticket already makes idempotent.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
