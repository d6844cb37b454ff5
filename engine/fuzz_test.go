package engine

import (
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/axe-sched/axe/internal/test/jsonkeys"
	"github.com/axe-sched/axe/wire"
)

// FuzzDecodeTaskSpec feeds arbitrary bytes through the API's task decoding and validation:
// it must never panic, every refusal must be ErrInvalidTask (a 400 naming a field), and
// every accepted definition must satisfy the invariants the engine relies on.
func FuzzDecodeTaskSpec(f *testing.F) {
	for _, seed := range []string{
		`{"name":"a","cron":"*/1 * * * * *","callback":{"url":"http://h/x"}}`,
		`{"name":"b","trigger":"delay","delay_ms":1000,"callback":{"type":"http","url":"https://h:8/p"},"priority":0}`,
		`{"name":"c","trigger":"manual","callback":{"type":"executor","app":"x","handler":"y","route":"least_busy"}}`,
		`{"name":"d","depends_on":["a","b"],"depends_mode":"any","callback":{"url":"http://h"}}`,
		`{"name":"e","cron":"0 0 L * ?","timezone":"America/New_York","retry_count":3,"params":{"k":[1,2]}}`,
		`{"name":"f","trigger":"delay","delay_ms":-1}`, `{"priority":7}`, `[]`, `{"name":"x","extra":1}`, ``,
		`{"name":"g","cron":"0 0 12 ? * 2","cron_dialect":"quartz","callback":{"url":"http://h"}}`,
		`{"name":"h","cron":"0 0 12 ? * 6L","callback":{"url":"http://h"},"paused":true,"note":"from XXL-JOB"}`,
		`{"name":"i","name":"j","trigger":"manual","callback":{"url":"http://h"}}`, "{\"name\":\"k\",\"params\":\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := DecodeTaskSpec(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidTask) {
				t.Fatalf("decode error %v is not ErrInvalidTask", err)
			}
			return
		}
		// What the store could not hold, and what two parsers could read two ways, never
		// gets past the decoder.
		if !utf8.Valid(data) || jsonkeys.Repeated(data) {
			t.Fatalf("decoded %q: not UTF-8, or a repeated key", data)
		}
		def, err := Normalize(spec, TimezoneDefault)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" || !errors.Is(err, ErrInvalidTask) {
				t.Fatalf("validation error %v does not name a field", err)
			}
			return
		}
		if def.Priority < 0 || def.Priority > 4 || def.TimeoutSec < 1 || def.RetryCount < 0 ||
			def.RetryIntervalSec < 1 || def.DelayMS < 0 || def.Group == "" || def.Timezone == "" {
			t.Fatalf("accepted an out-of-range definition: %+v", def)
		}
		if def.Callback.Type != "http" && def.Callback.Type != "executor" {
			t.Fatalf("accepted callback type %q", def.Callback.Type)
		}
		if len(def.Params) > 0 && !json.Valid(def.Params) {
			t.Fatalf("accepted invalid params %q", def.Params)
		}
		tk := &task{def: &def}
		if err := tk.compile(); err != nil {
			t.Fatalf("accepted a definition that does not compile: %v", err)
		}
		if def.Trigger == "cron" && def.CronDialect != "unix" && def.CronDialect != "quartz" {
			t.Fatalf("accepted cron task with dialect %q", def.CronDialect)
		}
		// On a server that chose its dialect, a task that names its own keeps it, and what
		// is accepted compiles.
		for _, server := range []string{"unix", "quartz"} {
			d2, err := NormalizeIn(spec, TimezoneDefault, server)
			if err == nil && spec.CronDialect != "" && d2.CronDialect != def.CronDialect {
				t.Fatalf("server %s changed the task's own dialect %q to %q", server, def.CronDialect, d2.CronDialect)
			}
			if err == nil {
				tk := &task{def: &d2}
				if err := tk.compile(); err != nil {
					t.Fatalf("server %s accepted a definition that does not compile: %v", server, err)
				}
			}
		}
	})
}

// FuzzExecutorRegistration checks the scheduler side of the executor protocol: any body
// either decodes and validates into a registration the registry can hold, or is refused
// with a field error.
func FuzzExecutorRegistration(f *testing.F) {
	f.Add([]byte(`{"app":"billing","address":"127.0.0.1:9100","protocol":"http","handlers":["charge"]}`))
	f.Add([]byte(`{"app":"","address":"x","handlers":[]}`))
	f.Add([]byte(`{"app":"a","address":"h/p:1","handlers":["a b"]}`))
	for _, addr := range []string{"169.254.169.254:80", "0.0.0.0:0", "[::]:0", "user@host:1", "host#f:1", "host?x=1:1", "h:99999", "[::1]:9100", "[0]:1", "[1.2.3.4]:80", "[::ffff:1.2.3.4]:80"} {
		f.Add([]byte(`{"app":"a","address":"` + addr + `","handlers":["h"]}`))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var reg wire.ExecutorRegistration
		if json.Unmarshal(data, &reg) != nil {
			return
		}
		err := validateRegistration(&reg, nil)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("refusal %v names no field", err)
			}
			return
		}
		if reg.App == "" || reg.Address == "" || len(reg.Handlers) == 0 || reg.Protocol != "http" {
			t.Fatalf("accepted %+v", reg)
		}
		// An accepted address is the host and port of the URL runs are posted to, and
		// nothing more.
		host, port, err := net.SplitHostPort(reg.Address)
		n, perr := strconv.Atoi(port)
		u, uerr := url.Parse("http://" + reg.Address + "/axe/run")
		if err != nil || perr != nil || n < 1 || n > 65535 || uerr != nil || u.Hostname() != strings.Trim(host, "[]") ||
			u.Port() != port || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Path != "/axe/run" {
			t.Fatalf("accepted address %q: not exactly host:port (%v, %v, %v)", reg.Address, err, perr, uerr)
		}
		if a, err := netip.ParseAddr(host); err == nil && (a.IsUnspecified() || a.IsLinkLocalUnicast()) {
			t.Fatalf("accepted address %q", reg.Address)
		}
	})
}

// namePattern is the rule validName implements, kept here as its reference.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// FuzzValidName holds validName to namePattern on any string.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"", "a", "A.b_c:d-e", "-a", ".a", "a b", "é", "a\x00",
		strings.Repeat("x", 128), strings.Repeat("x", 129), "0", "a/b", "a:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validName(s), namePattern.MatchString(s); got != want {
			t.Fatalf("validName(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}
