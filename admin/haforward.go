package admin

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/wire"
)

// A backup's console writes reach the primary through the backup: the console marks its
// writes with ForwardHeader, and a backup passes such a request on to the primary's
// advertise URL (the lease holder's row of the nodes table), with its Authorization and
// X-Axe-Actor headers and its body, and answers with the primary's answer. Without the
// header a write on a backup keeps the backup's 503 naming the primary, so API clients and the CLI
// see where to go and no request is ever sent on behind their back. The console goes
// through the backup rather than to the primary directly because the browser reaches only
// the node it loaded the page from: the advertise URL is how nodes reach each other, and
// the console's Content-Security-Policy allows its own origin only (docs/operations.md).

// ForwardHeader asks a backup to pass a write on to the primary; its value is "primary".
const ForwardHeader = "X-Axe-Forward"

// ForwardedHeader, on an answer, names the primary's advertise URL that served a write
// passed on by a backup.
const ForwardedHeader = "X-Axe-Primary"

// forwardTimeout bounds a forwarded write: the longest the primary takes over one is a bulk
// operation (bulkTimeout, batch.go), plus the way there and back.
const forwardTimeout = bulkTimeout + 30*time.Second

// errNoPrimary answers a forwarded write when no node holds the lease.
var errNoPrimary = errors.New("this node is a backup and no primary holds the lease, so the write was not forwarded; retry once a node has taken over")

// newForwardClient is the HTTP client a backup forwards with; peer, when not nil, holds the
// CAs trusted for an https primary (SecurityConfig.PeerCA).
func newForwardClient(peer *tls.Config) *fasthttp.Client {
	return &fasthttp.Client{
		TLSConfig:           peer,
		Name:                "axe-backup",
		ReadTimeout:         forwardTimeout,
		WriteTimeout:        time.Minute,
		MaxIdleConnDuration: time.Minute,
		DialDualStack:       true,
		// The primary's answer is passed on as it is, whatever its size.
		MaxResponseBodySize:           0,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
	}
}

// wantsForward reports whether c asks to be passed on to the primary.
func wantsForward(c *fasthttp.RequestCtx) bool {
	return strings.EqualFold(strings.TrimSpace(string(c.Request.Header.Peek(ForwardHeader))), "primary")
}

// forward passes the authenticated write c on to the primary at primary (an advertise URL)
// and copies its answer back. A request is forwarded once: the header that asks for it is
// not passed on, so a node that is no longer the primary answers 503 instead of sending it
// further.
func (f *haFront) forward(c *fasthttp.RequestCtx, primary string) {
	if primary == "" {
		// A takeover under way: the client asks again in a moment (Retry-After).
		c.Response.Header.Set("Retry-After", "1")
		writeJSON(c, fasthttp.StatusServiceUnavailable, wire.BackupAnswer{Error: errNoPrimary.Error()})
		return
	}
	u, err := url.Parse(primary)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		writeJSON(c, fasthttp.StatusBadGateway, wire.BackupAnswer{
			Error: fmt.Sprintf("this node is a backup and the primary's advertise URL %q is not an http(s) URL", primary), Primary: primary})
		return
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	c.Request.Header.CopyTo(&req.Header)
	req.Header.Del(ForwardHeader)
	for _, h := range peerHeaders {
		req.Header.Del(h) // a primary believes none of them (peersig.go)
	}
	// This node judged the browser's headers (guardRequests); to the primary the request
	// comes from this node, at its advertise URL, not from the page's origin.
	for _, h := range []string{"Origin", "Sec-Fetch-Site", "Sec-Fetch-Mode", "Sec-Fetch-Dest", "Sec-Fetch-User"} {
		req.Header.Del(h)
	}
	req.SetRequestURI(strings.TrimRight(primary, "/") + requestTarget(c))
	req.Header.Set("X-Forwarded-For", c.RemoteIP().String())
	if principalOf(c) == nil && len(c.Request.Header.Peek("X-Axe-Actor")) == 0 {
		// Without a token or an actor, the primary would record the backup's address as the
		// actor: name the caller's instead, as a direct call would.
		req.Header.Set("X-Axe-Actor", c.RemoteIP().String())
	}
	if body := c.RequestBodyStream(); body != nil {
		req.SetBodyStream(body, c.Request.Header.ContentLength())
	} else {
		req.SetBody(c.Request.Body())
	}
	if err := f.fwd.DoTimeout(req, resp, forwardTimeout); err != nil {
		f.s.log.Warn("cannot forward a write to the primary", "primary", primary, "path", string(c.Path()), "error", err)
		writeJSON(c, fasthttp.StatusBadGateway, wire.BackupAnswer{
			Error: fmt.Sprintf("this node is a backup and cannot reach the primary at %s: %v", primary, err), Primary: primary})
		return
	}
	resp.CopyTo(&c.Response)
	c.Response.Header.ResetConnectionClose()
	c.Response.Header.Set(ForwardedHeader, primary)
}
