package admin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The headers one node of a sharded cluster sends another (RoutedHeader,
// upstreamsCheckedHeader) change what the receiver checks and where it serves a call: a part
// of a batch carrying upstreamsCheckedHeader skips the dependency checks the sender made
// against the whole batch, and a call carrying RoutedHeader is served on this node alone
// instead of on every node. So the receiver believes them only from another node: every call
// one node makes of another is signed with a key every node of the cluster shares
// (PeerSignatureHeader). A request that carries the headers without a signature is a
// client's: the headers are dropped and it is served as any client's call, every check
// made. A request whose signature does not hold is refused with 403 before it is served. A
// node that is not sharded (a single node, a primary and its backups) receives no calls of
// other nodes: it drops the headers from every request and believes none of them
// (docs/security.md, "Calls between nodes").
//
// The signature is an HMAC-SHA256, with a key derived from the cluster's peer secret, over
// the method, the request target (path and query), the time of signing, the values of the
// two headers and the SHA-256 of the body. A signed call is believed for peerSkew either side
// of the receiver's clock, and once: the receiver remembers each signature it took for as
// long as it would take it, so a captured call replayed to it is refused. The caller's own
// headers (its token, its actor) travel with the call, so the receiver's scope checks judge
// the caller as a direct call would.

// PeerSignatureHeader carries the signature of a call one node makes of another:
// "t=<unix ms>,n=<hex nonce>,body=<hex SHA-256 of the body>,sig=<hex HMAC-SHA256>". The
// nonce makes two identical calls signed in the same millisecond (two run requests with
// the same body) two signatures, so the second is not taken for a replay of the first; a
// signature without one (a node of an older build) is checked without it.
const PeerSignatureHeader = "X-Axe-Peer-Signature"

// peerSkew is how far the signing time of a call may be from the receiver's clock: the
// nodes' clocks must agree within it (docs/scale-out.md). It also bounds the memory of the
// signatures taken: a node remembers each for at most twice this, so a node passed 1,000
// calls a second holds at most 240,000 of 32 bytes.
const peerSkew = 2 * time.Minute

// peerHeaders are the request headers only a node may send another.
var peerHeaders = []string{RoutedHeader, upstreamsCheckedHeader, PeerSignatureHeader}

// peerSigner signs and checks the calls between the nodes of one cluster.
type peerSigner struct {
	key []byte
	now func() time.Time

	mu   sync.Mutex
	seen map[[sha256.Size]byte]struct{} // signatures taken that would not be refused as too old
	// order holds the signatures of seen as they were taken, each with the time after which
	// it would be refused as too old: they are forgotten from the front.
	order []takenSig
}

// takenSig is a signature taken and when it becomes too old to be taken again.
type takenSig struct {
	sig   [sha256.Size]byte
	until time.Time
}

// newPeerSigner derives the signing key from the cluster's peer secret (NewServer refuses a
// sharded server without one).
func newPeerSigner(secret []byte) *peerSigner {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("axe peer signature v1"))
	return &peerSigner{key: m.Sum(nil), now: time.Now, seen: map[[sha256.Size]byte]struct{}{}}
}

// mac is the signature of a call: the HMAC of every part that decides what it does.
func (p *peerSigner) mac(method, target, at, routedBy, checked, bodySum, nonce string) []byte {
	m := hmac.New(sha256.New, p.key)
	parts := []string{method, target, at, routedBy, checked, bodySum}
	if nonce != "" {
		parts = append(parts, nonce)
	}
	for _, part := range parts {
		// Each part is length-prefixed, so that no two calls sign the same bytes.
		m.Write([]byte(strconv.Itoa(len(part))))
		m.Write([]byte{':'})
		m.Write([]byte(part))
	}
	return m.Sum(nil)
}

// PeerSignature is the PeerSignatureHeader value a node of the cluster whose peer secret is
// secret gives, at at, a call of method on target (path and query) carrying the routing
// headers routedBy (RoutedHeader) and checked (X-Axe-Upstreams-Checked) and body: the wire
// format of a call between nodes (docs/security.md), for tools and tests that speak it.
func PeerSignature(secret []byte, at time.Time, method, target, routedBy, checked string, body []byte) string {
	p := newPeerSigner(secret)
	p.now = func() time.Time { return at }
	return p.header(method, target, routedBy, checked, body)
}

// header is the PeerSignatureHeader value of a call signed now.
func (p *peerSigner) header(method, target, routedBy, checked string, body []byte) string {
	sum := sha256.Sum256(body)
	bodySum := hex.EncodeToString(sum[:])
	at := strconv.FormatInt(p.now().UnixMilli(), 10)
	var n [8]byte
	_, _ = rand.Read(n[:])
	nonce := hex.EncodeToString(n[:])
	sig := p.mac(method, target, at, routedBy, checked, bodySum, nonce)
	return "t=" + at + ",n=" + nonce + ",body=" + bodySum + ",sig=" + hex.EncodeToString(sig)
}

// sign sets req's PeerSignatureHeader for its method, its request target (path and query, as
// the receiver reads it: requestTarget), the routing headers it carries and body. Call it
// once the request is complete.
func (p *peerSigner) sign(req *fasthttp.Request, target string, body []byte) {
	req.Header.Set(PeerSignatureHeader, p.header(string(req.Header.Method()), target,
		string(req.Header.Peek(RoutedHeader)), string(req.Header.Peek(upstreamsCheckedHeader)), body))
}

// verify reports why c's signature does not hold, or nil when another node of the cluster
// signed c as it is, now, and c was not taken before. body is c's whole body.
func (p *peerSigner) verify(c *fasthttp.RequestCtx, body func() ([]byte, error)) error {
	raw := string(c.Request.Header.Peek(PeerSignatureHeader))
	if raw == "" {
		return errors.New(PeerSignatureHeader + ": missing")
	}
	var at, nonce, bodySum, sig string
	for _, kv := range strings.Split(raw, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		switch k {
		case "t":
			at = v
		case "n":
			nonce = v
		case "body":
			bodySum = v
		case "sig":
			sig = v
		}
	}
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil || bodySum == "" || sig == "" {
		return errors.New(PeerSignatureHeader + ": must be t=<unix ms>,body=<sha256>,sig=<hmac>")
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return errors.New(PeerSignatureHeader + ": sig is not a hex HMAC-SHA256")
	}
	want := p.mac(string(c.Method()), requestTarget(c), at,
		string(c.Request.Header.Peek(RoutedHeader)), string(c.Request.Header.Peek(upstreamsCheckedHeader)), bodySum, nonce)
	if !hmac.Equal(got, want) {
		return errors.New(PeerSignatureHeader + ": the signature does not match this request and the cluster's peer key")
	}
	now := p.now()
	signed := time.UnixMilli(ms)
	if d := now.Sub(signed); d > peerSkew || d < -peerSkew {
		return fmt.Errorf("%s: signed %s from this node's clock, more than the %s allowed (the nodes' clocks must agree)",
			PeerSignatureHeader, d.Round(time.Second), peerSkew)
	}
	b, err := body()
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != bodySum {
		return errors.New(PeerSignatureHeader + ": the body is not the one signed")
	}
	key := [sha256.Size]byte(got)
	p.mu.Lock()
	defer p.mu.Unlock()
	// Forget the signatures too old to be taken anyway. They were taken in about the order
	// they were signed; one out of order is only forgotten a little later.
	drop := 0
	for drop < len(p.order) && now.After(p.order[drop].until) {
		delete(p.seen, p.order[drop].sig)
		drop++
	}
	p.order = p.order[drop:]
	if _, ok := p.seen[key]; ok {
		return errors.New(PeerSignatureHeader + ": this signed call was already taken (a replay)")
	}
	p.seen[key] = struct{}{}
	p.order = append(p.order, takenSig{sig: key, until: signed.Add(peerSkew)})
	return nil
}

// peerVerifiedKey is the user value that marks a request another node signed.
const peerVerifiedKey = "axe.peer"

// routed reports a call another node passed on, signed as such (checkPeerHeaders).
func routed(c *fasthttp.RequestCtx) bool {
	ok, _ := c.UserValue(peerVerifiedKey).(bool)
	return ok
}

// checkPeerHeaders stands before the routes. A request without PeerSignatureHeader, and
// every request to a node that is not sharded, has the headers only a node may send dropped,
// so nothing after it believes them: it is served as a client's call. On a sharded node a
// request with PeerSignatureHeader is served as another node's call when that node signed it
// (peerSigner.verify), and refused with 403 otherwise, before anything reads or changes
// anything.
func (s *Server) checkPeerHeaders(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		carries := false
		for _, h := range peerHeaders {
			if len(c.Request.Header.Peek(h)) > 0 {
				carries = true
				break
			}
		}
		if !carries {
			next(c)
			return
		}
		if s.shards == nil || len(c.Request.Header.Peek(PeerSignatureHeader)) == 0 {
			for _, h := range peerHeaders {
				c.Request.Header.Del(h)
			}
			next(c)
			return
		}
		if err := s.shards.signer.verify(c, func() ([]byte, error) { return wholeBody(c) }); err != nil {
			var tl *errTooLarge
			if errors.As(err, &tl) {
				c.SetConnectionClose()
				writeErr(c, fasthttp.StatusRequestEntityTooLarge, tl.msg)
				return
			}
			s.log.Warn("refused a request whose peer signature does not hold",
				"path", string(c.Path()), "remote", c.RemoteIP().String(), "error", err)
			writeErr(c, fasthttp.StatusForbidden, err.Error()+"; only another node of the cluster signs its calls")
			return
		}
		c.SetUserValue(peerVerifiedKey, true)
		next(c)
	}
}

// wholeBody reads c's body into c whole, a streamed one (the batch endpoint's) included, up
// to the largest body any endpoint takes.
func wholeBody(c *fasthttp.RequestCtx) ([]byte, error) {
	r := c.RequestBodyStream()
	if r == nil {
		return c.Request.Body(), nil
	}
	b, err := io.ReadAll(io.LimitReader(r, BatchMaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read the body: %w", err)
	}
	if len(b) > BatchMaxBodyBytes {
		return nil, &errTooLarge{msg: fmt.Sprintf("body is over the limit of %d bytes (64 MiB)", BatchMaxBodyBytes)}
	}
	c.Request.SetBody(b)
	return b, nil
}

// targetOf is the request target (path and query) of url, an http(s) URL.
func targetOf(url string) string {
	_, rest, _ := strings.Cut(url, "://")
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[i:]
	}
	return "/"
}

// requestTarget is c's request target in origin form: its path as sent and its query, never
// a scheme and host. A request in absolute form ("POST http://host/api/... HTTP/1.1") is
// passed on to another node by its path and query alone.
func requestTarget(c *fasthttp.RequestCtx) string {
	u := c.Request.URI()
	target := string(u.PathOriginal())
	if q := u.QueryString(); len(q) > 0 {
		target += "?" + string(q)
	}
	return target
}
