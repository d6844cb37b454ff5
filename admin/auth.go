package admin

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/protocol"
)

// Scopes a token may hold. read allows every GET; write allows read plus every change;
// executor allows the executor protocol (register, heartbeat, results) and nothing else.
const (
	ScopeRead     = "read"
	ScopeWrite    = "write"
	ScopeExecutor = "executor"
)

// DefaultTokenName names the token of --token: it holds the write and executor scopes, as the
// single token always did.
const DefaultTokenName = "default"

// MinTokenLen is the shortest token taken, from --token or a token file: a shorter one can
// be guessed by whoever can reach the port.
const MinTokenLen = 16

// maxTokenFileBytes bounds the token file: it is read whole at start and at every SIGHUP.
const maxTokenFileBytes = 1 << 20

// TokenEntry is one token of the token file (--token-file).
type TokenEntry struct {
	// Name identifies the token in action records and logs; the token itself never appears.
	Name string `json:"name"`
	// Scope is read, write or executor.
	Scope string `json:"scope"`
	// Token is the secret a client presents as "Authorization: Bearer <token>", or its
	// SHA-256 written "sha256:<64 hex digits>", so the file need not hold the secret.
	Token string `json:"token"`
	// Apps, for an executor token, lists the executor apps it may register, heartbeat and
	// report as. Empty means any app.
	Apps []string `json:"apps,omitempty"`
}

// principal is who a request authenticated as.
type principal struct {
	name   string
	scopes []string
	apps   []string // executor apps this principal may act for; empty: any
	hash   [sha256.Size]byte
}

func (p *principal) has(scope string) bool {
	if slices.Contains(p.scopes, scope) {
		return true
	}
	// write includes read.
	return scope == ScopeRead && slices.Contains(p.scopes, ScopeWrite)
}

// mayActFor reports whether p may speak the executor protocol as app.
func (p *principal) mayActFor(app string) bool {
	return len(p.apps) == 0 || slices.Contains(p.apps, app)
}

// scope reports the broadest scope p holds, for whoami.
func (p *principal) scope() string {
	for _, s := range []string{ScopeWrite, ScopeRead, ScopeExecutor} {
		if slices.Contains(p.scopes, s) {
			return s
		}
	}
	return ""
}

// Tokens is an immutable set of accepted tokens. The zero value (or nil) accepts every
// request as an anonymous writer: no authentication configured.
type Tokens struct {
	list []principal
}

// Enabled reports whether any token is configured.
func (ts *Tokens) Enabled() bool { return ts != nil && len(ts.list) > 0 }

// Len is the number of accepted tokens.
func (ts *Tokens) Len() int {
	if ts == nil {
		return 0
	}
	return len(ts.list)
}

// lookup finds the principal of a presented secret. Every entry is compared, in constant time
// on fixed-size hashes, so neither the answer's timing nor a secret's length tells a caller
// how close a guess came or which entry matched.
func (ts *Tokens) lookup(secret []byte) *principal {
	h := sha256.Sum256(secret)
	var found *principal
	for i := range ts.list {
		if subtle.ConstantTimeCompare(h[:], ts.list[i].hash[:]) == 1 {
			found = &ts.list[i]
		}
	}
	return found
}

var tokenNamePattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// NewTokens builds the token set of a --token (may be empty) and a token file's entries.
func NewTokens(single string, entries []TokenEntry) (*Tokens, error) {
	ts := &Tokens{}
	names := map[string]bool{}
	if single != "" && len(single) < MinTokenLen {
		return nil, fmt.Errorf("token: must be at least %d characters, as in a token file, got %d", MinTokenLen, len(single))
	}
	if single != "" {
		ts.list = append(ts.list, principal{name: DefaultTokenName, scopes: []string{ScopeWrite, ScopeExecutor},
			hash: sha256.Sum256([]byte(single))})
		names[DefaultTokenName] = true
	}
	// An error names an entry by its name and shows a bad scope, unless either holds a token
	// of the file (a name written equal to its token): no error ever repeats a token.
	holdsToken := func(s string) bool {
		for _, x := range entries {
			if x.Token != "" && strings.Contains(s, x.Token) {
				return true
			}
		}
		return single != "" && strings.Contains(s, single)
	}
	for i, e := range entries {
		where := fmt.Sprintf("tokens[%d]", i)
		if !tokenNamePattern.MatchString(e.Name) {
			return nil, fmt.Errorf("%s.name: must be 1-64 letters, digits, '.', '_', ':' or '-'", where)
		}
		if !holdsToken(e.Name) {
			where = fmt.Sprintf("tokens[%d] (%s)", i, e.Name)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("%s.name: used twice", where)
		}
		names[e.Name] = true
		if e.Scope != ScopeRead && e.Scope != ScopeWrite && e.Scope != ScopeExecutor {
			if holdsToken(e.Scope) {
				return nil, fmt.Errorf("%s.scope: must be read, write or executor", where)
			}
			return nil, fmt.Errorf("%s.scope: must be read, write or executor, got %q", where, e.Scope)
		}
		p := principal{name: e.Name, scopes: []string{e.Scope}}
		switch {
		case strings.HasPrefix(e.Token, "sha256:"):
			raw, err := hex.DecodeString(strings.TrimPrefix(e.Token, "sha256:"))
			if err != nil || len(raw) != sha256.Size {
				return nil, fmt.Errorf("%s.token: a hashed token is \"sha256:\" and 64 hex digits", where)
			}
			copy(p.hash[:], raw)
		case len(e.Token) < MinTokenLen:
			return nil, fmt.Errorf("%s.token: must be at least %d characters (or \"sha256:<hex>\")", where, MinTokenLen)
		default:
			p.hash = sha256.Sum256([]byte(e.Token))
		}
		if len(e.Apps) > 0 && e.Scope != ScopeExecutor {
			return nil, fmt.Errorf("%s.apps: only an executor token is bound to apps", where)
		}
		for _, a := range e.Apps {
			if a == "" {
				return nil, fmt.Errorf("%s.apps: an app name is empty", where)
			}
		}
		p.apps = e.Apps
		ts.list = append(ts.list, p)
	}
	return ts, nil
}

// LoadTokenFile reads a token file: a JSON array of TokenEntry. Unknown fields are refused, and
// no error ever repeats a token.
func LoadTokenFile(path string) ([]TokenEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token-file: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("token-file: cannot read %s: %w", path, err)
	}
	if len(raw) > maxTokenFileBytes {
		return nil, fmt.Errorf("token-file: %s is larger than %d bytes", path, maxTokenFileBytes)
	}
	return ParseTokenFile(raw)
}

// ParseTokenFile decodes a token file's contents strictly (protocol.Decode: no unknown or
// repeated key, nothing after the array). An error names the entry and the field, never a
// token's value.
func ParseTokenFile(raw []byte) ([]TokenEntry, error) {
	var entries []TokenEntry
	if err := protocol.Decode(raw, &entries); err != nil {
		var fe *protocol.FieldError
		switch {
		case errors.As(err, &fe) && strings.Contains(fe.Msg, "must be a JSON"):
			return nil, errors.New("token-file: must be a JSON array of {\"name\", \"scope\", \"token\"}")
		case errors.As(err, &fe) && fe.Field != "":
			return nil, fmt.Errorf("token-file: tokens%s: %s", fe.Field, fe.Msg)
		default:
			return nil, fmt.Errorf("token-file: %w", err)
		}
	}
	if entries == nil {
		return nil, errors.New("token-file: must be a JSON array of {\"name\", \"scope\", \"token\"}")
	}
	return entries, nil
}

// executorPaths are the executor protocol's calls: the executor scope allows these and no
// other.
var executorPaths = map[string]bool{
	protocol.PathRegister:      true,
	protocol.PathHeartbeat:     true,
	protocol.PathDeregister:    true,
	protocol.PathCallback:      true,
	protocol.PathCallbackBatch: true,
}

// neededScope is the scope a request needs: executor for the executor protocol, read for
// every other GET, write for every other change.
func neededScope(c *fasthttp.RequestCtx, apiPath string) string {
	switch {
	case apiPath == "/api/v1/whoami":
		return "" // any valid token may ask who it is
	case executorPaths[apiPath]:
		return ScopeExecutor
	case c.IsGet() || c.IsHead():
		return ScopeRead
	default:
		return ScopeWrite
	}
}

const principalKey = "axe.principal"

// authenticate checks the bearer token and the scope the request needs. It answers 401 for
// a missing or unknown token and 403, naming the scope needed, for the wrong scope, and
// returns false then.
func (s *Server) authenticate(c *fasthttp.RequestCtx, apiPath string) bool {
	ts := s.tokenSource()
	if !ts.Enabled() {
		return true
	}
	h := c.Request.Header.Peek("Authorization")
	secret, ok := bytes.CutPrefix(h, []byte("Bearer "))
	if !ok || len(secret) == 0 {
		c.Response.Header.Set("WWW-Authenticate", `Bearer realm="axe"`)
		writeErr(c, fasthttp.StatusUnauthorized, "missing bearer token: send Authorization: Bearer <token>")
		return false
	}
	p := ts.lookup(secret)
	if p == nil {
		c.Response.Header.Set("WWW-Authenticate", `Bearer realm="axe", error="invalid_token"`)
		writeErr(c, fasthttp.StatusUnauthorized, "unknown bearer token")
		return false
	}
	need := neededScope(c, apiPath)
	if need != "" && !p.has(need) {
		writeErr(c, fasthttp.StatusForbidden, fmt.Sprintf("token %q lacks the %s scope this call needs", p.name, need))
		return false
	}
	c.SetUserValue(principalKey, p)
	return true
}

func principalOf(c *fasthttp.RequestCtx) *principal {
	p, _ := c.UserValue(principalKey).(*principal)
	return p
}

// allowApp refuses (403) an executor-protocol call for an app the token is not bound to.
func (s *Server) allowApp(c *fasthttp.RequestCtx, app string) bool {
	p := principalOf(c)
	if p == nil || p.mayActFor(app) {
		return true
	}
	writeErr(c, fasthttp.StatusForbidden, fmt.Sprintf("token %q may not act for executor app %q", p.name, app))
	return false
}

// SetTokens replaces the accepted tokens of a server without a TokenSource. Requests in
// flight finish under the set they started with.
func (s *Server) SetTokens(ts *Tokens) { s.tokens.Store(ts) }

// whoami answers who the caller authenticated as: {"name", "scope"}. Without authentication
// configured every caller is an anonymous writer.
func (s *Server) whoami(c *fasthttp.RequestCtx) {
	p := principalOf(c)
	if p == nil {
		writeJSON(c, fasthttp.StatusOK, map[string]string{"name": "anonymous", "scope": ScopeWrite})
		return
	}
	writeJSON(c, fasthttp.StatusOK, map[string]string{"name": p.name, "scope": p.scope()})
}

// metricsAuth guards /metrics with the read scope when tokens are configured, unless
// MetricsPublic.
func (s *Server) metricsAuth(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		if !s.cfg.MetricsPublic && !s.authenticate(c, "/metrics") {
			return
		}
		next(c)
	}
}

// requestError answers a request fasthttp could not read (before any route runs) in the
// API's own error shape: 413 naming the limit for a body over it, 400 otherwise.
func requestError(c *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeErr(c, fasthttp.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than the limit of %d bytes", MaxRequestBodyDefault))
		return
	}
	writeErr(c, fasthttp.StatusBadRequest, "malformed HTTP request")
}
