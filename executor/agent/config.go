package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/axe-sched/axe/lib/tlsfiles"
)

// Defaults applied by Config.WithDefaults.
const (
	// ListenDefault is the listen address used when "listen" is empty.
	ListenDefault = "127.0.0.1:9100"
	// OutputTailBytesDefault is how much of a command's combined output is reported.
	OutputTailBytesDefault = 4096
	// KillGraceDefault is how long a killed or timed-out command's process group has between
	// SIGTERM and SIGKILL.
	KillGraceDefault = 5 * time.Second
)

// Limits on configured values.
const (
	maxOutputTailBytes = 1 << 20
	maxKillGrace       = 10 * time.Minute
	reservedEnvPrefix  = "AXE_" // the agent sets AXE_TICKET, AXE_ATTEMPT, AXE_TASK, AXE_PARAMS, AXE_OUTPUT
)

// Config is the agent's JSON config file. Field docs give the JSON names.
type Config struct {
	// App ("app") is the executor app name tasks reference in callback.app. Required.
	App string `json:"app"`
	// Listen ("listen") is the host:port the agent listens on. Defaults to ListenDefault.
	Listen string `json:"listen"`
	// Advertise ("advertise") is the host:port the scheduler dispatches to. Defaults to the
	// listener's address; required when listening on a wildcard host.
	Advertise string `json:"advertise"`
	// Schedulers ("schedulers") are the scheduler base URLs, e.g. "http://axe-a:7070",
	// followed in order on failure (docs/protocol.md, "Failover"). Required.
	Schedulers []string `json:"schedulers"`
	// Token ("token") is the agent's token for the scheduler (an executor-scope token).
	// With it, the agent runs only what the scheduler signed with the key derived from it.
	// Defaults to empty: no authentication either way.
	Token string `json:"token"`
	// SchedulerToken ("scheduler_token") is no longer used: the scheduler signs its calls
	// instead. Empty or equal to Token; any other value is refused at start, naming it.
	SchedulerToken string `json:"scheduler_token"`
	// TLSCert ("tls_cert") and TLSKey ("tls_key"), both set, are the PEM certificate (chain)
	// and private key the agent serves HTTPS with; it then registers with protocol "https".
	// The certificate must name the host or IP of the advertised address. Defaults to
	// empty: plain HTTP.
	TLSCert string `json:"tls_cert"`
	TLSKey  string `json:"tls_key"`
	// TLSClientCA ("tls_client_ca"), with tls_cert, is a PEM bundle of CAs: the scheduler
	// must present a client certificate one of them signed (its --executor-cert), or the
	// connection is refused. Defaults to empty: no client certificate asked for.
	TLSClientCA string `json:"tls_client_ca"`
	// SchedulerCA ("scheduler_ca") is a PEM bundle of the CAs trusted for https://
	// schedulers. Defaults to empty: the system's trust store.
	SchedulerCA string `json:"scheduler_ca"`
	// InsecureNoAuth ("insecure_no_auth") allows a non-loopback listen without a token.
	// Refused otherwise. Defaults to false.
	InsecureNoAuth bool `json:"insecure_no_auth"`
	// OutputTailBytes ("output_tail_bytes") is how many bytes of the end of a command's
	// combined stdout and stderr are reported. Defaults to OutputTailBytesDefault.
	OutputTailBytes int `json:"output_tail_bytes"`
	// KillGraceMS ("kill_grace_ms") is the time between SIGTERM and SIGKILL when a command is
	// killed or times out. Defaults to KillGraceDefault.
	KillGraceMS int64 `json:"kill_grace_ms"`
	// Handlers ("handlers") maps handler names to the commands they run. At least one.
	Handlers map[string]Command `json:"handlers"`
	// Logger receives the agent's logs; not part of the file. Defaults to slog.Default().
	Logger *slog.Logger `json:"-"`
}

// Command is what one handler runs. Only configured commands ever run: the scheduler chooses a
// handler by name and passes params, never a command line.
type Command struct {
	// Command ("command") is the program and its arguments, run without a shell unless the
	// program is one. Required.
	Command []string `json:"command"`
	// Dir ("dir") is the absolute working directory. Defaults to the agent's.
	Dir string `json:"dir"`
	// Env ("env") adds environment variables to the agent's own. Names starting with AXE_ are
	// reserved for the run's ticket, attempt, task and params.
	Env map[string]string `json:"env"`
	// Stdin ("stdin") is written to the command's standard input, which is otherwise empty
	// (cron's % lines: see axe import crontab).
	Stdin string `json:"stdin,omitempty"`
}

// Load reads, defaults and validates the config file at path. Unknown fields are errors, so a
// misspelt key does not silently fall back to a default.
func Load(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("cannot read agent config: %w", err)
	}
	return Parse(raw, path)
}

// Parse decodes, defaults and validates the config file content raw as Load does; path
// names it in errors. A writer of a config (axe import crontab) checks what it is about to
// write with it, before anything is on disk.
func Parse(raw []byte, path string) (Config, error) {
	var cfg Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, path, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("%w: %s: trailing data after the JSON object", ErrInvalidConfig, path)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = ListenDefault
	}
	if c.OutputTailBytes == 0 {
		c.OutputTailBytes = OutputTailBytesDefault
	}
	if c.KillGraceMS == 0 {
		c.KillGraceMS = KillGraceDefault.Milliseconds()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// killGrace is KillGraceMS as a duration.
func (c Config) killGrace() time.Duration { return time.Duration(c.KillGraceMS) * time.Millisecond }

// validate reports the first invalid field of a defaulted Config, naming it as in the file.
func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.App == "":
		return bad("app", "required")
	case strings.ContainsAny(c.App, " \t\r\n"):
		return bad("app", "must not contain whitespace")
	case len(c.Schedulers) == 0:
		return bad("schedulers", "at least one scheduler URL is required")
	case c.OutputTailBytes < 0 || c.OutputTailBytes > maxOutputTailBytes:
		return bad("output_tail_bytes", "must be between 1 and %d", maxOutputTailBytes)
	case c.KillGraceMS < 0 || c.killGrace() > maxKillGrace:
		return bad("kill_grace_ms", "must be between 1 and %d", maxKillGrace.Milliseconds())
	case len(c.Handlers) == 0:
		return bad("handlers", "at least one handler is required")
	case c.SchedulerToken != "" && c.SchedulerToken != c.Token:
		return bad("scheduler_token", "is no longer used: the scheduler signs every call to the agent with a key "+
			"derived from \"token\" instead of sending a token; remove scheduler_token")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("listen", "%v", err)
	}
	if c.Advertise != "" {
		if _, port, err := net.SplitHostPort(c.Advertise); err != nil || port == "" || port == "0" {
			return bad("advertise", "must be host:port with a fixed port, got %q", c.Advertise)
		}
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	for i, s := range c.Schedulers {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
			return bad(fmt.Sprintf("schedulers[%d]", i), "must be http(s)://host[:port], got %q", s)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Handlers)) {
		if err := c.Handlers[name].validate("handlers." + name); err != nil {
			return err
		}
	}
	return nil
}

// validateTLS reads the TLS files, so that a mistake is reported naming its key.
func (c Config) validateTLS() error {
	bad := func(field string, err error) error {
		return fmt.Errorf("%w: %s: %w", ErrInvalidConfig, field, err)
	}
	if c.TLSCert != "" || c.TLSKey != "" {
		if _, err := tlsfiles.KeyPair(c.TLSCert, c.TLSKey); err != nil {
			return bad("tls_cert", err)
		}
	}
	if c.TLSClientCA != "" {
		if c.TLSCert == "" {
			return bad("tls_client_ca", errors.New("verifies the scheduler's client certificate over HTTPS: set tls_cert and tls_key too"))
		}
		if _, err := tlsfiles.CAPool(c.TLSClientCA); err != nil {
			return bad("tls_client_ca", err)
		}
	}
	if c.SchedulerCA != "" {
		if _, err := tlsfiles.CAPool(c.SchedulerCA); err != nil {
			return bad("scheduler_ca", err)
		}
	}
	return nil
}

// Validate reports the first invalid field of c by the rules Load applies, naming it below
// field ("handlers.backup").
func (c Command) Validate(field string) error { return c.validate(field) }

func (c Command) validate(field string) error {
	bad := func(sub, format string, args ...any) error {
		return fmt.Errorf("%w: %s.%s: %s", ErrInvalidConfig, field, sub, fmt.Sprintf(format, args...))
	}
	switch {
	case field == "handlers.":
		return fmt.Errorf("%w: handlers: a handler name must not be empty", ErrInvalidConfig)
	case len(c.Command) == 0 || c.Command[0] == "":
		return bad("command", "required: the program and its arguments")
	case c.Dir != "" && !filepath.IsAbs(c.Dir):
		return bad("dir", "must be an absolute path, got %q", c.Dir)
	}
	for _, arg := range c.Command {
		if strings.ContainsRune(arg, 0) {
			return bad("command", "arguments must not contain NUL bytes")
		}
	}
	for k, v := range c.Env {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			return bad("env", "invalid variable name %q", k)
		case strings.HasPrefix(strings.ToUpper(k), reservedEnvPrefix):
			return bad("env", "%q: names starting with %s are set by the agent", k, reservedEnvPrefix)
		case strings.ContainsRune(v, 0):
			return bad("env", "%q: value must not contain NUL bytes", k)
		}
	}
	return nil
}
