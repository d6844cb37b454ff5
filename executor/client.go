package executor

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/axe-sched/axe/protocol"
	"github.com/valyala/fasthttp"
)

// schedulerClient calls the scheduler API on whichever configured address answers, preferring the
// one that answered last (docs/protocol.md, "Failover"). A connection error or a 503 (a backup
// scheduler, or one that is starting) moves on to the next address; any other status is that
// scheduler's answer.
type schedulerClient struct {
	urls    []schedulerURL
	hosts   []*fasthttp.HostClient
	auth    string
	timeout time.Duration
	log     *slog.Logger

	current atomic.Int32 // index into urls of the scheduler that answered last
}

// newSchedulerClient makes the client of cfg.Schedulers; tc, when set, is the TLS
// configuration of the https:// ones (Config.SchedulerCA).
func newSchedulerClient(cfg Config, tc *tls.Config) *schedulerClient {
	c := &schedulerClient{timeout: cfg.RequestTimeout, log: cfg.Logger}
	if cfg.Token != "" {
		c.auth = "Bearer " + cfg.Token
	}
	for _, s := range cfg.Schedulers {
		u, _ := parseScheduler(s) // validated by Config.validate
		c.urls = append(c.urls, u)
		c.hosts = append(c.hosts, &fasthttp.HostClient{
			Addr:         u.host,
			IsTLS:        u.isTLS,
			TLSConfig:    tc.Clone(),
			Name:         "axe-executor",
			ReadTimeout:  cfg.RequestTimeout,
			WriteTimeout: cfg.RequestTimeout,
			// Heartbeats reuse one connection; keep it a little longer than their period.
			MaxIdleConnDuration: cfg.HeartbeatInterval + time.Second,
			// When more results are ready at once than the client keeps connections
			// (MaxConns, 512), a call waits for a free one instead of failing at once with
			// ErrNoFreeConns, which would cost the result a whole re-send delay.
			MaxConnWaitTimeout: cfg.RequestTimeout,
		})
	}
	return c
}

// post sends body to path and returns the status and a copy of the response body of the first
// scheduler that answered with anything but 503. It starts with the scheduler that answered
// last; after a connection error it tries the next address, and after a 503 the primary that
// the 503 names when that is one of the configured addresses (a backup knows the primary's
// advertise address), else the next address. Each address is tried at most once per call.
func (c *schedulerClient) post(path string, body []byte) (int, []byte, error) {
	start := int(c.current.Load())
	var lastErr error
	var tried []bool // allocated on the first failure: the usual call answers at once
	idx := start
	for range c.urls {
		status, resp, err := c.postTo(idx, path, body)
		next := -1
		switch {
		case err != nil:
			lastErr = fmt.Errorf("cannot reach scheduler %s: %w", c.urls[idx].base, err)
		case status == http.StatusServiceUnavailable:
			lastErr = fmt.Errorf("scheduler %s answered %s with 503: %s", c.urls[idx].base, path, errorText(resp))
			next = c.indexOf(primaryOf(resp))
		default:
			if idx != start && c.current.CompareAndSwap(int32(start), int32(idx)) {
				c.log.Info("following scheduler", "scheduler", c.urls[idx].base)
			}
			return status, resp, nil
		}
		if tried == nil {
			tried = make([]bool, len(c.urls))
		}
		tried[idx] = true
		if next < 0 || tried[next] {
			next = -1
			for i := 1; i < len(c.urls); i++ {
				if j := (idx + i) % len(c.urls); !tried[j] {
					next = j
					break
				}
			}
		}
		if next < 0 {
			break
		}
		idx = next
	}
	return 0, nil, fmt.Errorf("%w: %w", ErrNoScheduler, lastErr)
}

// primaryOf returns the "primary" a backup's 503 names, or "" when it names none.
func primaryOf(body []byte) string {
	var b struct {
		Primary string `json:"primary"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	return b.Primary
}

// indexOf returns the index of the configured address that base names, or -1.
func (c *schedulerClient) indexOf(base string) int {
	if base == "" {
		return -1
	}
	u, err := parseScheduler(strings.TrimRight(base, "/"))
	if err != nil {
		return -1
	}
	for i, have := range c.urls {
		if have.host == u.host && have.isTLS == u.isTLS {
			return i
		}
	}
	return -1
}

func (c *schedulerClient) postTo(idx int, path string, body []byte) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(c.urls[idx].base + path)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if c.auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, c.auth)
	}
	req.SetBody(body)
	if err := c.hosts[idx].DoTimeout(req, resp, c.timeout); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
}

// closeIdle drops kept-alive connections so a stopped executor holds no sockets.
func (c *schedulerClient) closeIdle() {
	for _, h := range c.hosts {
		h.CloseIdleConnections()
	}
}

// errorText extracts the "error" of an error body, or returns the body itself.
func errorText(body []byte) string {
	var e protocol.Error
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return string(body)
}

// statusError describes a scheduler answer the caller did not expect.
func statusError(path string, status int, body []byte) error {
	return fmt.Errorf("scheduler answered %s with %d: %s", path, status, errorText(body))
}

// isAuthStatus reports whether status means the token was refused.
func isAuthStatus(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}
