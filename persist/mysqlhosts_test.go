package persist

import (
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func TestSplitHosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn   string
		addrs []string // as the store dials them
		err   string
	}{
		{dsn: "u:p@tcp(db:3306)/axe", addrs: []string{"db:3306"}},
		{dsn: "u:p@tcp(a:3306,b:3307,c)/axe?timeout=1s", addrs: []string{"a:3306", "b:3307", "c:3306"}},
		{dsn: "u:p@tcp([::1]:3306,[::1]:3307)/axe", addrs: []string{"[::1]:3306", "[::1]:3307"}},
		// The password may hold anything the driver allows, commas and parentheses included.
		{dsn: "u:p,(x)@tcp(a,b)/axe", addrs: []string{"a:3306", "b:3306"}},
		{dsn: "u:p@/axe", addrs: []string{"127.0.0.1:3306"}},
		{dsn: "u:p@tcp(a,,b)/axe", err: "address 2 of 3"},
		{dsn: "u:p@tcp(a:1,a:1)/axe", err: "listed twice"},
		{dsn: "u:p@tcp(a,a:3306)/axe", err: "listed twice"},
		{dsn: "u:p@unix(/s1,/s2)/axe", err: "need tcp"},
	} {
		prefix, addrs, suffix, err := splitHosts(tc.dsn)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("splitHosts(%q) = %v, want an error naming %q", tc.dsn, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "p,(x)") {
				t.Errorf("splitHosts(%q) error shows the password: %v", tc.dsn, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("splitHosts(%q): %v", tc.dsn, err)
			continue
		}
		cfg, err := mysql.ParseDSN(prefix + addrs[0] + suffix)
		if err != nil {
			t.Errorf("%q: the DSN with the first address does not parse: %v", tc.dsn, err)
			continue
		}
		hs, err := newHostSet(cfg, addrs)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(hs.addrs, " ") != strings.Join(tc.addrs, " ") {
			t.Errorf("%q dials %v, want %v", tc.dsn, hs.addrs, tc.addrs)
		}
		if cfg.DBName != "axe" || cfg.Passwd == "" {
			t.Errorf("%q parsed as database %q, password %q", tc.dsn, cfg.DBName, cfg.Passwd)
		}
	}
}

// FuzzSplitHosts checks that splitting never loses or invents a byte of the DSN, and that
// each address it accepts among several is a plain HOST[:PORT] the driver takes as it is.
func FuzzSplitHosts(f *testing.F) {
	for _, s := range []string{"u:p@tcp(a:1,b:2)/db?x=y", "u:p@tcp(a)/db", "/db", "", "u:(p@tcp(a,b)/", "@(,)/", "u:p@tcp(a,b)/d/e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		prefix, addrs, suffix, err := splitHosts(dsn)
		if err != nil {
			return
		}
		if len(addrs) == 0 {
			t.Fatalf("splitHosts(%q) returned no address", dsn)
		}
		if got := prefix + strings.Join(addrs, ",") + suffix; got != dsn {
			t.Fatalf("splitHosts(%q) pieces rejoin to %q", dsn, got)
		}
		if len(addrs) == 1 {
			return
		}
		for _, a := range addrs {
			if a == "" || strings.ContainsAny(a, ",()/ ") {
				t.Fatalf("splitHosts(%q) accepted address %q", dsn, a)
			}
		}
		cfg, err := mysql.ParseDSN(prefix + addrs[0] + suffix)
		if err != nil {
			return
		}
		if cfg.Net != "tcp" {
			t.Fatalf("splitHosts(%q) accepted several addresses for net %q", dsn, cfg.Net)
		}
		if cfg.Addr != withPort(addrs[0]) {
			t.Fatalf("splitHosts(%q): the driver reads address %q, the store %q", dsn, cfg.Addr, withPort(addrs[0]))
		}
	})
}
