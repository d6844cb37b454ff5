package engine

// The rate limits as the API shows and changes them. The gate that holds fires back to them
// is in core_rategate.go.

import (
	"context"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/ratelimit"
	"github.com/axe-sched/axe/wire"
)

// RateLimits returns the limits in force. Rate 0 means unlimited.
func (e *API) RateLimits() wire.RateLimits {
	g := e.gate
	global, per := g.lim.Limits()
	g.mu2.Lock()
	d := g.deflt
	g.mu2.Unlock()
	if per == nil {
		per = map[string]ratelimit.Limit{}
	}
	return wire.RateLimits{Global: global, Default: d, PerKey: per}
}

// SetRateLimit changes a limit at runtime: key "" is the global bucket; otherwise the
// downstream's (an executor app name or a callback host:port). A zero Rate removes the
// downstream's explicit limit (or lifts the global one).
func (e *API) SetRateLimit(ctx context.Context, key string, l ratelimit.Limit, actor string) error {
	if !validDownstream(key) {
		return fieldErr("downstream", "must be \"\" (the global bucket), an executor app, a callback host[:port], a rate key or a pattern of rate keys (tenant:*) of at most "+
			"%d bytes of letters, digits, '.', '-', '_', ':', '[', ']' or '%%', got %q", maxDownstreamBytes, protocol.ClipText(key, 64))
	}
	if l.Rate > MaxRateLimit {
		return fieldErr("rate", "must be at most %g per second, got %g", float64(MaxRateLimit), l.Rate)
	}
	if l.Burst > MaxRateBurst {
		return fieldErr("burst", "must be at most %d, got %d", MaxRateBurst, l.Burst)
	}
	if err := l.Validate(); err != nil {
		return fieldErr("rate", "%v", err)
	}
	g := e.gate
	g.mu2.Lock()
	defer func() { g.mu2.Unlock(); g.refresh() }()
	if key == "" {
		if err := g.lim.SetGlobal(l); err != nil {
			return fieldErr("rate", "%v", err)
		}
		g.global = l
	} else {
		_, per := g.lim.Limits()
		_, had := per[key]
		if l.Unlimited() {
			g.lim.Remove(key)
			if had {
				g.perKeyN--
			}
		} else {
			if err := g.lim.Set(key, l); err != nil {
				return fieldErr("rate", "%v", err)
			}
			if !had {
				g.perKeyN++
			}
		}
	}
	select {
	case g.wake <- struct{}{}:
	default:
	}
	act := model.Action{Action: "rate_limit", Actor: actor, At: e.nowMS(),
		Detail: "downstream " + orGlobal(key) + ": " + limitText(l)}
	return e.write(ctx, &persist.Group{Actions: []model.Action{act}})
}

// Bounds of a rate limit set through the API: no downstream of a scheduler takes more, and
// the bucket's arithmetic stays exact well within them.
const (
	MaxRateLimit = 1_000_000 // tokens per second
	MaxRateBurst = 1_000_000
	// maxDownstreamBytes is the longest callback host (a URL's host is at most 253
	// characters of name and a port).
	maxDownstreamBytes = 255
)

// validDownstream reports whether key can name a downstream: "" (the global bucket), or what
// downstreamOf makes of a task, an executor app or a callback URL's host[:port] (an IPv6
// address in brackets, a zone escaped with '%', a name of any script).
func validDownstream(key string) bool {
	if len(key) > maxDownstreamBytes || !utf8.ValidString(key) {
		return false
	}
	// A pattern (tenant:*) limits each key that starts with its prefix and has no limit of
	// its own: the rate keys rendered from tasks' rate_key templates (core_keys.go).
	if p, ok := strings.CutSuffix(key, "*"); ok {
		if p == "" {
			return false // every key: that is the default limit
		}
		key = p
	}
	for _, r := range key {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), strings.ContainsRune(".-_:[]%", r):
		default:
			return false
		}
	}
	return true
}

func orGlobal(k string) string {
	if k == "" {
		return "(global)"
	}
	return k
}

func limitText(l ratelimit.Limit) string {
	if l.Unlimited() {
		return "unlimited"
	}
	return time.Duration(float64(time.Second)/l.Rate).String() + " per token, burst " + strconv.Itoa(l.Burst)
}
