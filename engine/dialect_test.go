package engine

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalizeDialect(t *testing.T) {
	t.Parallel()
	cb := `"callback":{"url":"http://127.0.0.1:1/"}`
	norm := func(body, server string) (string, error) {
		t.Helper()
		spec, err := DecodeTaskSpec([]byte(`{"name":"t",` + body + `,` + cb + `}`))
		if err != nil {
			t.Fatal(err)
		}
		d, err := NormalizeIn(spec, "UTC", server)
		return d.CronDialect, err
	}
	for _, c := range []struct {
		body, server, want, errField string
	}{
		{`"cron":"0 0 12 ? * 2"`, "", "", "cron"},         // ambiguous, nobody chose
		{`"cron":"0 0 12 ? * MON"`, "", "unix", ""},       // names are never ambiguous
		{`"cron":"0 12 * * 2"`, "", "unix", ""},           // no Quartz-only syntax
		{`"cron":"0 0 12 ? * 2"`, "unix", "unix", ""},     // the server chose unix
		{`"cron":"0 0 12 ? * 2"`, "quartz", "quartz", ""}, // the server chose quartz
		{`"cron":"0 0 12 ? * 2","cron_dialect":"quartz"`, "", "quartz", ""},
		{`"cron":"0 0 12 ? * 2","cron_dialect":"unix"`, "quartz", "unix", ""},
		{`"cron":"0 0 12 1 * 2","cron_dialect":"quartz"`, "", "", "cron"},
		{`"cron":"0 0 12 ? * 2","cron_dialect":"posix"`, "", "", "cron_dialect"},
		{`"trigger":"manual","cron_dialect":"quartz"`, "", "", "cron_dialect"},
		{`"trigger":"manual","note":"n"`, "", "", "note"},
		{`"trigger":"manual","paused":true,"note":"` + strings.Repeat("n", 1025) + `"`, "", "", "note"},
	} {
		got, err := norm(c.body, c.server)
		var fe *FieldError
		switch {
		case c.errField != "" && (!errors.As(err, &fe) || fe.Field != c.errField):
			t.Errorf("%s on server %q: error %v, want one on field %s", c.body, c.server, err, c.errField)
		case c.errField == "" && (err != nil || got != c.want):
			t.Errorf("%s on server %q: dialect %q, %v; want %q", c.body, c.server, got, err, c.want)
		}
	}
}
