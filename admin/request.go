package admin

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/protocol"
)

func reqCtx(c *fasthttp.RequestCtx) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// maxActorLen bounds the caller-supplied part of an actor, in bytes.
const maxActorLen = 64

// actor names who called, for action records: the token's name when tokens are configured,
// then the X-Axe-Actor header (the CLI sends the user's login) or, without either, the client
// address: "api:ops/alice", "api:alice", "api:127.0.0.1".
func actor(c *fasthttp.RequestCtx) string {
	if p := principalOf(c); p != nil {
		if a := callerActor(c); a != "" {
			return "api:" + p.name + "/" + a
		}
		return "api:" + p.name
	}
	if a := callerActor(c); a != "" {
		return "api:" + a
	}
	return "api:" + c.RemoteIP().String()
}

// callerActor is the bounded X-Axe-Actor header, or "".
func callerActor(c *fasthttp.RequestCtx) string {
	if a := strings.TrimSpace(string(c.Request.Header.Peek("X-Axe-Actor"))); a != "" {
		// Cut at a rune boundary: half a character would reach the audit log as garbage.
		a = strings.ToValidUTF8(a, "?")
		if len(a) > maxActorLen {
			cut := maxActorLen
			for cut > 0 && !utf8.RuneStart(a[cut]) {
				cut--
			}
			a = a[:cut]
		}
		return a
	}
	return ""
}

// decodeOptional decodes an optional JSON body strictly (protocol.Decode); an empty body
// leaves v as it is.
func decodeOptional(c *fasthttp.RequestCtx, v any) error {
	body := c.PostBody()
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return protocol.Decode(body, v)
}

// decodeStrict decodes a required JSON body strictly (protocol.Decode).
func decodeStrict(c *fasthttp.RequestCtx, v any) error { return protocol.Decode(c.PostBody(), v) }

// param is the path parameter name, percent-decoded: the router matches the path as sent, so
// a task named "ns:job" is reached at /tasks/ns:job and at /tasks/ns%3Ajob (as the console
// sends it) alike. A parameter that does not decode is passed on as it is, and names no task.
func param(c *fasthttp.RequestCtx, name string) string {
	v, _ := c.UserValue(name).(string)
	if strings.IndexByte(v, '%') < 0 {
		return v
	}
	if d, err := url.PathUnescape(v); err == nil {
		return d
	}
	return v
}

func intArg(c *fasthttp.RequestCtx, name string, def, lo, hi int) (int, error) {
	raw := string(c.QueryArgs().Peek(name))
	if raw == "" {
		return def, nil
	}
	v, err := strconv.Atoi(raw)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%w: %s: must be an integer %d..%d, got %q", ErrBadRequest, name, lo, hi, raw)
	}
	return v, nil
}

// list serves a list endpoint taking ?limit=: fetch gets the limit, the answer is
// {"<key>": [...], "count": n}, never null.
func list[T any](s *Server, key string, fetch func(ctx context.Context, c *fasthttp.RequestCtx, limit int) ([]T, error)) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		limit, err := intArg(c, "limit", ListLimitDefault, 1, ListLimitMax)
		if err != nil {
			s.fail(c, err)
			return
		}
		ctx, cancel := reqCtx(c)
		defer cancel()
		items, err := fetch(ctx, c, limit)
		if err != nil {
			s.fail(c, err)
			return
		}
		if items == nil {
			items = []T{}
		}
		writeJSON(c, 200, map[string]any{key: items, "count": len(items)})
	}
}
