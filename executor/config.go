package executor

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"time"

	"github.com/axe-sched/axe/protocol"
)

// Defaults applied by Config.WithDefaults.
const (
	// AddrDefault is the listen address used when Config.Addr is empty.
	AddrDefault = "127.0.0.1:0"
	// HeartbeatIntervalDefault is the heartbeat period (every 10 s).
	HeartbeatIntervalDefault = 10 * time.Second
	// PoolSizePerCPUDefault times runtime.NumCPU() is the default pool size (2×CPU×2).
	PoolSizePerCPUDefault = 4
	// QueueSizeDefault is how many accepted runs may wait for a free worker: a bounded queue.
	QueueSizeDefault = 256
	// DedupTTLDefault is how long a finished ticket is remembered when the run carries no
	// dedup_ttl_ms: the default task timeout (300 s) with no retries, plus 5 minutes.
	DedupTTLDefault = 10 * time.Minute
	// DedupSizeDefault is how many finished tickets are remembered at most.
	DedupSizeDefault = 10000
	// ResendMinDefault is the first delay before a result callback is re-sent.
	ResendMinDefault = 500 * time.Millisecond
	// ResendMaxDefault caps the doubling delay between result re-sends.
	ResendMaxDefault = 30 * time.Second
	// RequestTimeoutDefault bounds one HTTP call to one scheduler address.
	RequestTimeoutDefault = 5 * time.Second
	// ResultSendersDefault is how many result calls may be in flight at once.
	ResultSendersDefault = 8
	// OutputLimitDefault is the largest Result.Output sent to the scheduler; longer output
	// keeps its tail, where errors usually are.
	OutputLimitDefault = 64 << 10
)

// Limits on values the SDK accepts.
const (
	maxNameLen  = 256
	maxDedupTTL = 30 * 24 * time.Hour
)

// Clock is the time source of an Executor: it stamps results, paces heartbeats and re-send
// backoff, and expires de-duplicated tickets. Tests substitute a manual clock so cadence and
// backoff are checked without sleeping. Handler deadlines are wall-clock times sent by the
// scheduler and always use the real clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has elapsed.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Config configures an Executor. The zero value of every field except App and Schedulers is
// replaced by its default.
type Config struct {
	// App is the executor application name that tasks reference in callback.app. Required.
	App string
	// Addr is the address the HTTP server listens on. Defaults to AddrDefault (loopback, any
	// free port).
	Addr string
	// AdvertiseAddr is the host:port the scheduler dispatches to. Defaults to the listener's
	// actual address; it must be set when Addr listens on a wildcard host such as 0.0.0.0.
	AdvertiseAddr string
	// Schedulers are the base URLs of the axe schedulers, e.g. "http://axe-a:7070". On a
	// connection error or 503 the next one is tried, and the one that answered is used first
	// from then on (docs/protocol.md, "Failover"). Required.
	Schedulers []string
	// Token is sent as "Authorization: Bearer <token>" on every call to the scheduler (an
	// executor-scope token of the scheduler's --token-file, or its --token). With a token,
	// every run, run batch and kill must carry the scheduler's signature under the key
	// derived from it (protocol.DispatchKey), so nobody else can make the executor run
	// anything, and the scheduler never hands the executor a credential. Defaults to empty:
	// no authentication either way.
	Token string
	// SchedulerToken is no longer used: the scheduler signs its calls (see Token) instead of
	// presenting a token of its own. Empty or equal to Token; anything else is refused by New,
	// so a configuration written for the bearer token scheme is not silently read another way.
	SchedulerToken string
	// TLSCert and TLSKey, both set, are the PEM files (certificate chain, private key) the
	// executor serves its endpoints with over HTTPS. It then registers with protocol
	// "https", and the scheduler dials it so, verifying the certificate against the
	// address it registered (AdvertiseAddr): the certificate must name that host or IP.
	// Defaults to empty: plain HTTP.
	TLSCert, TLSKey string
	// TLSClientCA, with TLSCert, is a PEM bundle of CAs: every connection must present a
	// client certificate one of them signed (mTLS; the scheduler's --executor-cert), or the
	// handshake fails before any request is read. The token is still required as well.
	// Defaults to empty: no client certificate is asked for.
	TLSClientCA string
	// SchedulerCA is a PEM bundle of the CAs trusted for https:// Schedulers, for a
	// scheduler whose --tls-cert a private CA signed. Defaults to empty: the system's trust
	// store.
	SchedulerCA string
	// InsecureNoAuth lets Addr listen on a non-loopback address with no Token. Refused otherwise:
	// anyone reaching the port could run the handlers. Defaults to false.
	InsecureNoAuth bool
	// HeartbeatInterval is the heartbeat period. If the scheduler advertises a shorter
	// heartbeat_interval_ms at registration, that one is used so the executor never looks
	// lost. Defaults to HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration
	// PoolSize is the number of handlers that run at once. Defaults to
	// PoolSizePerCPUDefault × runtime.NumCPU().
	PoolSize int
	// QueueSize is how many accepted runs may wait for a free worker; beyond PoolSize running
	// plus QueueSize waiting, /axe/run answers 429 busy. Defaults to QueueSizeDefault.
	QueueSize int
	// DedupTTL is how long a finished ticket is remembered when the run carries no
	// dedup_ttl_ms. Defaults to DedupTTLDefault.
	DedupTTL time.Duration
	// DedupSize bounds the number of finished tickets remembered. Defaults to
	// DedupSizeDefault.
	DedupSize int
	// ResendMin is the first delay before a result is re-sent; the delay doubles per attempt.
	// Defaults to ResendMinDefault.
	ResendMin time.Duration
	// ResendMax caps the re-send delay. Defaults to ResendMaxDefault.
	ResendMax time.Duration
	// RequestTimeout bounds one HTTP call to one scheduler address. Defaults to
	// RequestTimeoutDefault.
	RequestTimeout time.Duration
	// ResultSenders is how many result calls to the scheduler may be in flight at once. A
	// result finishing while every sender waits on the scheduler queues, and the next free
	// sender takes everything queued (up to 256 results) in one batch call, so under load
	// the batches grow instead of the calls. Defaults to ResultSendersDefault.
	ResultSenders int
	// OutputLimit is the largest Result.Output reported, in bytes; longer output keeps its
	// last OutputLimit bytes. Defaults to OutputLimitDefault.
	OutputLimit int
	// Logger receives the executor's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Clock is the time source. Defaults to the system clock.
	Clock Clock
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Addr == "" {
		c.Addr = AddrDefault
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = HeartbeatIntervalDefault
	}
	if c.PoolSize == 0 {
		c.PoolSize = PoolSizePerCPUDefault * runtime.NumCPU()
	}
	if c.QueueSize == 0 {
		c.QueueSize = QueueSizeDefault
	}
	if c.DedupTTL == 0 {
		c.DedupTTL = DedupTTLDefault
	}
	if c.DedupSize == 0 {
		c.DedupSize = DedupSizeDefault
	}
	if c.ResendMin == 0 {
		c.ResendMin = ResendMinDefault
	}
	if c.ResendMax == 0 {
		c.ResendMax = ResendMaxDefault
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = RequestTimeoutDefault
	}
	if c.ResultSenders == 0 {
		c.ResultSenders = ResultSendersDefault
	}
	if c.OutputLimit == 0 {
		c.OutputLimit = OutputLimitDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	c.Schedulers = append([]string(nil), c.Schedulers...)
	for i, s := range c.Schedulers {
		c.Schedulers[i] = strings.TrimRight(strings.TrimSpace(s), "/")
	}
	return c
}

// validate reports the first invalid field of a defaulted Config, naming it.
func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.App == "":
		return bad("App", "required")
	case len(c.App) > maxNameLen || strings.ContainsAny(c.App, " \t\r\n"):
		return bad("App", "must be at most %d bytes without whitespace", maxNameLen)
	case len(c.Schedulers) == 0:
		return bad("Schedulers", "at least one scheduler URL is required")
	case c.HeartbeatInterval < 0:
		return bad("HeartbeatInterval", "must be positive")
	case c.PoolSize < 0:
		return bad("PoolSize", "must be positive")
	case c.QueueSize < 0:
		return bad("QueueSize", "must be positive")
	case c.DedupTTL < 0 || c.DedupTTL > maxDedupTTL:
		return bad("DedupTTL", "must be between 0 and %s", maxDedupTTL)
	case c.DedupSize < 0:
		return bad("DedupSize", "must be positive")
	case c.ResendMin < 0:
		return bad("ResendMin", "must be positive")
	case c.ResendMax < c.ResendMin:
		return bad("ResendMax", "must not be below ResendMin")
	case c.RequestTimeout < 0:
		return bad("RequestTimeout", "must be positive")
	case c.ResultSenders < 0:
		return bad("ResultSenders", "must be positive")
	case c.OutputLimit < 0:
		return bad("OutputLimit", "must be positive")
	case c.OutputLimit > protocol.MaxOutputBytes:
		return bad("OutputLimit", "at most %d bytes (protocol.MaxOutputBytes), the largest output the scheduler takes", protocol.MaxOutputBytes)
	}
	host, _, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return bad("Addr", "%v", err)
	}
	if c.SchedulerToken != "" && c.SchedulerToken != c.Token {
		return bad("SchedulerToken", "is no longer used: the scheduler signs every call to the executor with a key "+
			"derived from Token instead of sending a token; remove SchedulerToken (the scheduler's --executor-token "+
			"is only for executors that predate signed calls)")
	}
	if c.Token == "" && !c.InsecureNoAuth && !loopbackHost(host) {
		return bad("Addr", "%s listens beyond this machine without a token: anyone who can reach it could run "+
			"the handlers; set Token, listen on 127.0.0.1, or set InsecureNoAuth", c.Addr)
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return bad("TLSClientCA", "verifies client certificates of an HTTPS listener: set TLSCert and TLSKey too")
	}
	if c.AdvertiseAddr != "" {
		if err := checkAdvertise(c.AdvertiseAddr); err != nil {
			return bad("AdvertiseAddr", "%v", err)
		}
	}
	for i, s := range c.Schedulers {
		if _, err := parseScheduler(s); err != nil {
			return bad(fmt.Sprintf("Schedulers[%d]", i), "%v", err)
		}
	}
	return nil
}

// checkAdvertise rejects addresses the scheduler could not dial back.
func checkAdvertise(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if port == "" || port == "0" {
		return fmt.Errorf("%q has no port", addr)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("%q is a wildcard address the scheduler cannot dial; set AdvertiseAddr", addr)
	}
	return nil
}

// schedulerURL is one parsed entry of Config.Schedulers.
type schedulerURL struct {
	base  string // scheme://host:port, no trailing slash
	host  string // host:port for the fasthttp HostClient
	isTLS bool
}

func parseScheduler(s string) (schedulerURL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return schedulerURL{}, fmt.Errorf("cannot parse %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return schedulerURL{}, fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return schedulerURL{}, fmt.Errorf("%q: host is required", s)
	}
	if u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return schedulerURL{}, fmt.Errorf("%q: must be scheme://host[:port] only", s)
	}
	isTLS := u.Scheme == "https"
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if isTLS {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	return schedulerURL{base: u.Scheme + "://" + u.Host, host: host, isTLS: isTLS}, nil
}

// loopbackHost reports whether a listen host is a loopback address or localhost. An empty or
// unspecified host listens on every interface.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.Unmap().IsLoopback()
}
