// Package conformance checks that an executor speaks the axe executor protocol
// (docs/protocol.md): it plays the scheduler — serving register, heartbeat, callback,
// callback batch and deregister on loopback — and drives the executor under test through
// the protocol's cases, one named case each, reporting which passed. `axe conformance
// executor` is its command (docs/conformance.md).
//
// The executor under test serves the echo handler every axe SDK ships (its
// examples/echo): params {"sleep_ms": N} sleep, ending early when the run is cancelled;
// {"fail": "text"} fails; anything else succeeds with the params as output. The suite
// either starts it (Config.Exec, with AXE_SCHEDULERS, AXE_LISTEN, AXE_TOKEN and AXE_APP in
// its environment) or waits for an executor started by hand to register with it.
//
// The suite reads and writes every message with package protocol's types, decoder and
// signatures, so it checks the same wire format the scheduler speaks.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"
)

// Defaults applied by Config.WithDefaults.
const (
	// AppDefault is the app the executor under test registers (AXE_APP).
	AppDefault = "echo"
	// ListenDefault is where the suite's scheduler listens: loopback, any free port.
	ListenDefault = "127.0.0.1:0"
	// RegisterTimeoutDefault bounds the wait for the executor's first registration (a
	// started process may have to start a runtime first).
	RegisterTimeoutDefault = 30 * time.Second
	// WaitTimeoutDefault bounds every other wait: for a result, a heartbeat, a
	// deregistration. Generous, for a busy machine; a passing suite waits far less.
	WaitTimeoutDefault = 15 * time.Second
)

// Handler is the handler the suite runs: the echo handler of every SDK's example.
const Handler = "echo"

// Results of one case.
const (
	Pass = "PASS"
	Fail = "FAIL"
	Skip = "SKIP"
)

// Config says which executor to check and how.
type Config struct {
	// Exec, when set, is the command that starts the executor under test, with
	// AXE_SCHEDULERS, AXE_LISTEN, AXE_TOKEN and AXE_APP in its environment. /bin/sh runs it
	// as "exec " + Exec, so that the suite's signals reach the executor itself: one command
	// with its arguments (quoted as for sh); wrap anything more in a script. The suite stops
	// it at the end (SIGTERM, which the deregister case checks). One of Exec and URL is
	// required.
	Exec string
	// URL, when set, is the base URL (http://host:port) of an executor started by hand,
	// pointed at the suite's scheduler (Listen; OnListen tells where it is). It must
	// register that host:port as its address.
	URL string
	// Listen is the suite's scheduler address. Defaults to ListenDefault.
	Listen string
	// Token is the executor's token: the suite expects it as the bearer token of the
	// executor's calls and signs its calls with the key derived from it. Empty: no
	// authentication either way, and the signature cases are skipped.
	Token string
	// App is the app the executor registers. Defaults to AppDefault.
	App string
	// Run, when set, selects the cases whose name it matches.
	Run *regexp.Regexp
	// RegisterTimeout bounds the wait for the first registration. Defaults to
	// RegisterTimeoutDefault.
	RegisterTimeout time.Duration
	// WaitTimeout bounds every other wait. Defaults to WaitTimeoutDefault.
	WaitTimeout time.Duration
	// Output receives the started executor's standard output and error. Defaults to
	// nowhere (the last lines are quoted when it fails to register).
	Output io.Writer
	// OnListen, when set, is called with the scheduler's base URL once it listens, before
	// the suite waits for the executor.
	OnListen func(schedulerURL string)
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = ListenDefault
	}
	if c.App == "" {
		c.App = AppDefault
	}
	if c.RegisterTimeout == 0 {
		c.RegisterTimeout = RegisterTimeoutDefault
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = WaitTimeoutDefault
	}
	if c.Output == nil {
		c.Output = io.Discard
	}
	return c
}

// ErrInvalidConfig is what Run returns for a Config it cannot use.
var ErrInvalidConfig = errors.New("conformance: invalid config")

func (c Config) validate() error {
	switch {
	case (c.Exec == "") == (c.URL == ""):
		return fmt.Errorf("%w: exactly one of exec (start the executor) and url (an executor started by hand) is required", ErrInvalidConfig)
	case c.RegisterTimeout < 0 || c.WaitTimeout < 0:
		return fmt.Errorf("%w: timeouts must be positive", ErrInvalidConfig)
	}
	if c.URL != "" {
		if _, err := urlAddress(c.URL); err != nil {
			return fmt.Errorf("%w: url: %w", ErrInvalidConfig, err)
		}
	}
	return nil
}

// urlAddress is the host:port of an executor's base URL.
func urlAddress(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("must be http://host:port, got %q", raw)
	}
	if _, port, err := net.SplitHostPort(u.Host); err != nil || port == "" {
		return "", fmt.Errorf("must name a port, got %q", raw)
	}
	return u.Host, nil
}

// CaseResult is the outcome of one case.
type CaseResult struct {
	Name string `json:"name"`
	// Result is Pass, Fail or Skip.
	Result string `json:"result"`
	// Reason says why a case failed or was skipped, or what a passed one saw.
	Reason     string `json:"reason"`
	DurationMS int64  `json:"duration_ms"`
}

// Report is the outcome of a suite.
type Report struct {
	// Executor says what was checked: the command line or the URL.
	Executor string       `json:"executor"`
	Cases    []CaseResult `json:"cases"`
	Passed   int          `json:"passed"`
	Failed   int          `json:"failed"`
	Skipped  int          `json:"skipped"`
}

// OK reports whether no case failed.
func (r Report) OK() bool { return r.Failed == 0 }

// Names lists every case of the suite, in the order they run.
func Names() []string {
	names := make([]string, len(cases))
	for i, c := range cases {
		names[i] = c.name
	}
	return names
}

// Run checks one executor. The error is for a suite that could not run at all (a bad
// config, a port it cannot listen on); an executor that cannot start or never registers
// fails every case instead, with its exit status and last output.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	s, err := newSuite(cfg)
	if err != nil {
		return Report{}, err
	}
	defer s.close()
	return s.run(ctx), nil
}

// WriteTable writes the report as a table, one case a line, then a summary line.
func WriteTable(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRESULT\tTIME\tDETAIL")
	for _, c := range r.Cases {
		fmt.Fprintf(tw, "%s\t%s\t%.1fs\t%s\n", c.Name, c.Result, float64(c.DurationMS)/1000, strings.ReplaceAll(c.Reason, "\n", " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d passed, %d failed, %d skipped: %s\n", r.Passed, r.Failed, r.Skipped, r.Executor)
	return err
}
