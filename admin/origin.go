package admin

import (
	"fmt"
	"mime"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/protocol"
)

// A browser is a confused deputy: a page of any site can make it send requests to axe on
// 127.0.0.1, and by DNS rebinding (a name of the attacker's that resolves to 127.0.0.1) even
// read the answers. A token stops both, since no page can make the browser send it; the
// tokenless local default needs guardRequests (docs/security.md, "Browsers").

// guardRequests refuses what a browser sends on behalf of another site, before any body is
// read:
//   - without tokens, a request whose Host is not a name of this server (hostAllowed): a
//     page that rebound its own name to this address reads nothing (the health probes
//     excepted);
//   - a write (any method but GET, HEAD and OPTIONS) marked cross-site by the browser
//     (Sec-Fetch-Site other than same-origin or none), or, from a browser that does not mark
//     it, whose Origin is not this server's;
//   - a write with a body that is not JSON (Content-Type application/json; the batch
//     endpoint also takes application/x-ndjson): the types a page may send without the
//     browser asking first (text/plain, forms) are never what the API reads.
func (s *Server) guardRequests(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		if !s.tokenSource().Enabled() && !isProbe(c) && !s.hostAllowed(string(c.Host())) {
			c.SetConnectionClose()
			writeErr(c, fasthttp.StatusForbidden, fmt.Sprintf("host: %q is not a name of this server; without a token axe answers "+
				"only to IP addresses, localhost and the names of --allow-host", protocol.ClipText(string(c.Host()), 255)))
			return
		}
		if c.IsGet() || c.IsHead() || c.IsOptions() {
			next(c)
			return
		}
		if msg := crossSite(c); msg != "" {
			c.SetConnectionClose()
			writeErr(c, fasthttp.StatusForbidden, msg)
			return
		}
		if c.Request.Header.ContentLength() != 0 {
			if msg := s.notJSON(c); msg != "" {
				c.SetConnectionClose()
				writeErr(c, fasthttp.StatusUnsupportedMediaType, msg)
				return
			}
		}
		next(c)
	}
}

// isProbe reports the health probes, which answer nothing a page could use and which load
// balancers and orchestrators call by names of their own.
func isProbe(c *fasthttp.RequestCtx) bool {
	p := string(c.Request.URI().PathOriginal())
	return (p == "/healthz" || p == "/readyz") && (c.IsGet() || c.IsHead())
}

// crossSite says why a write is refused as sent on behalf of another site, or "".
func crossSite(c *fasthttp.RequestCtx) string {
	// Fetch Metadata: a header no page can set. When a browser sends it, it is the answer.
	if site := string(c.Request.Header.Peek("Sec-Fetch-Site")); site != "" {
		if site == "same-origin" || site == "none" {
			return ""
		}
		return fmt.Sprintf("Sec-Fetch-Site: a %s request may not change anything here; use the console of this server or a client with a token", protocol.ClipText(site, 32))
	}
	origin := string(c.Request.Header.Peek("Origin"))
	if origin == "" {
		return "" // not a browser, or one that sends no Origin on a same-origin write
	}
	u, err := url.Parse(origin)
	if err == nil && u.Host != "" && (strings.EqualFold(u.Host, string(c.Host())) || strings.EqualFold(u.Host, forwardedHost(c))) {
		return ""
	}
	return fmt.Sprintf("Origin: a write from %q may not change anything here; use the console of this server or a client with a token", protocol.ClipText(origin, 255))
}

// forwardedHost is the first X-Forwarded-Host, which a reverse proxy that rewrites Host
// sets to the name the browser used. No page can set it on a request its browser sends
// without asking first, and a write is refused before that (notJSON).
func forwardedHost(c *fasthttp.RequestCtx) string {
	h, _, _ := strings.Cut(string(c.Request.Header.Peek("X-Forwarded-Host")), ",")
	return strings.TrimSpace(h)
}

// notJSON says why the body of a write is refused for its type, or "".
func (s *Server) notJSON(c *fasthttp.RequestCtx) string {
	ct := string(c.Request.Header.ContentType())
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		return ""
	}
	path := string(c.Request.URI().PathOriginal())
	if err == nil && mt == ndjsonType && strings.TrimPrefix(path, s.cfg.BasePath) == batchPath {
		return ""
	}
	if ct == "" {
		ct = "none"
	}
	return fmt.Sprintf("Content-Type: a request body must be application/json, got %s (with curl: -H 'Content-Type: application/json')", protocol.ClipText(ct, 128))
}

// hostAllowed reports whether host (a Host header, with or without a port) names this server
// for a tokenless one: an IP address (rebinding needs a name), localhost, a name of
// ServerConfig.AllowHosts, or none (a client without Host is no browser).
func (s *Server) hostAllowed(host string) bool {
	if host == "" {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.ToLower(strings.Trim(name, "[]")), ".")
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	return name == "localhost" || slices.Contains(s.allowHosts, name)
}
