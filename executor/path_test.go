package executor

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// FuzzRequestPath holds requestPath's shortcut to the path fasthttp's parser gives, which is
// what the server routes by: a body limit is chosen for the endpoint that will answer.
func FuzzRequestPath(f *testing.F) {
	for _, s := range []string{"/axe/run", "/axe/runs?x=1", "/axe/kill#f", "/axe//run", "/axe/./run",
		"/axe/%72un", "http://h/axe/run", "*", "", "/", "/axe/run/", "/a\\b", "/axe/run;p"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		uri := fasthttp.AcquireURI()
		defer fasthttp.ReleaseURI(uri)
		want := ""
		if err := uri.Parse(nil, []byte(raw)); err == nil {
			want = string(uri.Path())
		}
		if got := requestPath([]byte(raw)); got != want {
			t.Fatalf("requestPath(%q) = %q, the parser says %q", raw, got, want)
		}
	})
}
