package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// peerCall is a request as a node receives it.
func peerCall(method, target, routedBy, checked, sig string, body []byte) *fasthttp.RequestCtx {
	var c fasthttp.RequestCtx
	c.Request.Header.SetMethod(method)
	c.Request.SetRequestURI(target)
	if routedBy != "" {
		c.Request.Header.Set(RoutedHeader, routedBy)
	}
	if checked != "" {
		c.Request.Header.Set(upstreamsCheckedHeader, checked)
	}
	c.Request.Header.Set(PeerSignatureHeader, sig)
	c.Request.SetBody(body)
	return &c
}

// TestPeerSignature: a call is believed as signed, once, within peerSkew of the receiver's
// clock; a change of its method, target, routing headers or body, another key, or a time
// out of the window is refused; and the signatures taken are forgotten once too old.
func TestPeerSignature(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := newPeerSigner(secret)
	p.now = func() time.Time { return now }
	body := []byte(`[{"name":"a"}]`)
	const target = "/api/v1/tasks/batch?on_conflict=skip"
	sig := PeerSignature(secret, now, "POST", target, "n1", "1", body)
	bodyOf := func(c *fasthttp.RequestCtx) func() ([]byte, error) {
		return func() ([]byte, error) { return c.Request.Body(), nil }
	}
	check := func(what string, c *fasthttp.RequestCtx, says string) {
		t.Helper()
		err := p.verify(c, bodyOf(c))
		switch {
		case says == "" && err != nil:
			t.Errorf("%s: refused: %v", what, err)
		case says != "" && (err == nil || !strings.Contains(err.Error(), says)):
			t.Errorf("%s: %v, want it refused naming %q", what, err, says)
		}
	}
	check("another method", peerCall("PUT", target, "n1", "1", sig, body), "does not match")
	check("another target", peerCall("POST", "/api/v1/tasks/batch", "n1", "1", sig, body), "does not match")
	check("another sender", peerCall("POST", target, "n2", "1", sig, body), "does not match")
	check("without the upstreams checked", peerCall("POST", target, "n1", "", sig, body), "does not match")
	check("another body", peerCall("POST", target, "n1", "1", sig, []byte(`[{"name":"b"}]`)), "body is not the one signed")
	check("another key", peerCall("POST", target, "n1", "1", PeerSignature([]byte("another secret"), now, "POST", target, "n1", "1", body), body), "does not match")
	check("signed too long ago", peerCall("POST", target, "n1", "1", PeerSignature(secret, now.Add(-peerSkew-time.Second), "POST", target, "n1", "1", body), body), "clocks")
	check("signed too far ahead", peerCall("POST", target, "n1", "1", PeerSignature(secret, now.Add(peerSkew+time.Second), "POST", target, "n1", "1", body), body), "clocks")
	check("garbled", peerCall("POST", target, "n1", "1", "t=x", body), "must be")
	check("the call as signed", peerCall("POST", target, "n1", "1", sig, body), "")
	check("the call again", peerCall("POST", target, "n1", "1", sig, body), "replay")
	if len(p.seen) != 1 || len(p.order) != 1 {
		t.Fatalf("%d signatures remembered (%d in order), want the one taken", len(p.seen), len(p.order))
	}
	now = now.Add(peerSkew + time.Second)
	check("the call once too old", peerCall("POST", target, "n1", "1", sig, body), "clocks")
	check("a new call", peerCall("POST", target, "n1", "1", PeerSignature(secret, now, "POST", target, "n1", "1", body), body), "")
	if len(p.seen) != 1 || len(p.order) != 1 {
		t.Errorf("%d signatures remembered (%d in order), want the old one forgotten", len(p.seen), len(p.order))
	}
}

// TestRequestTarget: the target passed on is the path as sent and the query, whatever the
// form of the request line.
func TestRequestTarget(t *testing.T) {
	for line, want := range map[string]string{
		"/api/v1/tasks/x/pause":                          "/api/v1/tasks/x/pause",
		"/api/v1/tasks/a%2Fb/pause?x=1&y=%20":            "/api/v1/tasks/a%2Fb/pause?x=1&y=%20",
		"http://127.0.0.1:7070/api/v1/tasks/x/pause?x=1": "/api/v1/tasks/x/pause?x=1",
		"https://evil.example:1/api/v1/tasks/x%2F..%2Fy": "/api/v1/tasks/x%2F..%2Fy",
	} {
		var c fasthttp.RequestCtx
		c.Request.SetRequestURI(line)
		if got := requestTarget(&c); got != want {
			t.Errorf("request line %q: target %q, want %q", line, got, want)
		}
	}
	if got := targetOf("http://10.0.0.1:7070/axe/api/v1/tasks?x=1"); got != "/axe/api/v1/tasks?x=1" {
		t.Errorf("targetOf = %q", got)
	}
}

// TestPeerSignaturesOfIdenticalCalls: two identical calls signed in the same millisecond
// are two signatures, each taken once; a signature without a nonce (an older node's) still
// holds.
func TestPeerSignaturesOfIdenticalCalls(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_000)
	secret := []byte("0123456789abcdef0123456789abcdef")
	a := PeerSignature(secret, at, "POST", "/api/v1/workflows/w/run", "n1", "", []byte(`{}`))
	b := PeerSignature(secret, at, "POST", "/api/v1/workflows/w/run", "n1", "", []byte(`{}`))
	if a == b {
		t.Fatalf("identical calls in the same millisecond signed alike: %s", a)
	}
	p := newPeerSigner(secret)
	p.now = func() time.Time { return at }
	check := func(hdr string) error {
		var c fasthttp.RequestCtx
		c.Request.Header.SetMethod("POST")
		c.Request.SetRequestURI("/api/v1/workflows/w/run")
		c.Request.Header.Set(RoutedHeader, "n1")
		c.Request.Header.Set(PeerSignatureHeader, hdr)
		c.Request.SetBody([]byte(`{}`))
		return p.verify(&c, func() ([]byte, error) { return []byte(`{}`), nil })
	}
	if err := check(a); err != nil {
		t.Fatalf("first call: %v", err)
	}
	if err := check(b); err != nil {
		t.Fatalf("the identical second call was refused: %v", err)
	}
	if err := check(a); err == nil || !strings.Contains(err.Error(), "replay") {
		t.Fatalf("a replay was taken: %v", err)
	}
	sum := sha256.Sum256([]byte(`{}`))
	old := "t=" + strconv.FormatInt(at.UnixMilli(), 10) + ",body=" + hex.EncodeToString(sum[:]) + ",sig=" +
		hex.EncodeToString(p.mac("POST", "/api/v1/workflows/w/run", strconv.FormatInt(at.UnixMilli(), 10), "n1", "", hex.EncodeToString(sum[:]), ""))
	if err := check(old); err != nil {
		t.Fatalf("a signature without a nonce: %v", err)
	}
}
