package admin

import (
	"bytes"
	"encoding/hex"
	"hash/fnv"
	"strings"

	"github.com/valyala/fasthttp"
)

// Conditional GETs of the API: every successful JSON answer under <base>/api/v1/ carries an
// ETag, a 64-bit FNV-1a hash of its body, and a request whose If-None-Match names it is
// answered 304 Not Modified with no body. The console's polling sends the ETag of what it
// shows, so a page whose data did not change costs a hash and a few bytes instead of the
// list again. The hash is taken of the answer as written, so it is right for every endpoint
// (a list, a count, a forwarded answer) without each handler knowing a version.

// etagFor is the quoted ETag of an answer body.
func etagFor(body []byte) string {
	h := fnv.New64a()
	_, _ = h.Write(body)
	var sum [8]byte
	return `"` + hex.EncodeToString(h.Sum(sum[:0])) + `"`
}

// noneMatch says whether an If-None-Match header names etag (a list, or "*").
func noneMatch(header []byte, etag string) bool {
	for _, part := range bytes.Split(header, []byte(",")) {
		p := strings.TrimSpace(string(part))
		p = strings.TrimPrefix(p, "W/")
		if p == etag || p == "*" {
			return true
		}
	}
	return false
}

// conditional adds the ETag to a successful API GET's answer and turns it into a 304 when
// the request already holds it.
func (s *Server) conditional(c *fasthttp.RequestCtx) {
	if !c.IsGet() || c.Response.StatusCode() != fasthttp.StatusOK ||
		!bytes.HasPrefix(c.Path(), []byte(s.cfg.BasePath+"/api/v1/")) || c.Response.IsBodyStream() {
		return
	}
	// A handler whose answer holds a clock sets its own ETag, of the answer without it.
	etag := string(c.Response.Header.Peek("ETag"))
	if etag == "" {
		etag = etagFor(c.Response.Body())
	}
	c.Response.Header.Set("ETag", etag)
	// Revalidate each time: an answer may change at any moment.
	c.Response.Header.Set("Cache-Control", "no-cache")
	if inm := c.Request.Header.Peek("If-None-Match"); len(inm) > 0 && noneMatch(inm, etag) {
		c.Response.ResetBody()
		c.Response.SetStatusCode(fasthttp.StatusNotModified)
	}
}
