package admin_test

import (
	"strings"
	"testing"

	"github.com/axe-sched/axe/admin"
)

// FuzzTokenFile feeds arbitrary bytes to the token-file parser: it must never panic, and an
// error must never repeat a token value the input held.
func FuzzTokenFile(f *testing.F) {
	f.Add([]byte(`[{"name":"ops","scope":"write","token":"0123456789abcdefXYZ"}]`))
	f.Add([]byte(`[{"name":"e","scope":"executor","token":"sha256:` + strings.Repeat("ab", 32) + `","apps":["billing"]}]`))
	f.Add([]byte(`[{"name":"x","scope":"root","token":"0123456789abcdefXYZ"}]`))
	f.Add([]byte(`[{"name":"x","scope":"read","token":"0123456789abcdefXYZ","extra":1}]`))
	// A name or a scope written equal to the token: the error names the entry by its index.
	f.Add([]byte(`[{"name":"0123456789abcdefXYZ","scope":"root","token":"0123456789abcdefXYZ"}]`))
	f.Add([]byte(`[{"name":"n","scope":"0123456789abcdefXYZ","token":"0123456789abcdefXYZ"}]`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		entries, err := admin.ParseTokenFile(raw)
		if err == nil {
			_, err = admin.NewTokens("", entries)
		}
		if err == nil {
			return
		}
		for _, e := range entries {
			if len(e.Token) >= 8 && strings.Contains(err.Error(), e.Token) {
				t.Fatalf("the error %q repeats a token", err)
			}
		}
	})
}
