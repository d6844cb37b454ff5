package engine

import (
	"net/url"
	"testing"

	"github.com/axe-sched/axe/model"
)

// downstreamOf's fast path names the same host url.Parse does, and leaves every URL it is
// not sure of to url.Parse.
func TestDownstreamOfMatchesURLParse(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"http://127.0.0.1:8080/fire", "https://Example.COM/a?b=c#d", "http://h", "http://h:1",
		"http://h/", "http://h?x", "http://h#f", "http://a-b.c.d:65535/p/q r",
		"http://user:pw@h:1/p", "http://[::1]:80/x", "http://h:/x", "http://:80/x", "http:///x",
		"http://h:8x/", "http://h/%zz", "http://h/%41", "http://h/\x7f", "http://h_u/x",
		"ftp://h/x", "h:80/x", "http://ex%41mple/x", "HTTP://h/x", "",
	} {
		want := ""
		if u, err := url.Parse(raw); err == nil {
			want = u.Host
		}
		def := &model.TaskDef{Callback: model.Callback{Type: model.CallbackHTTP, URL: raw}}
		if got := downstreamOf(def); got != want {
			t.Errorf("downstreamOf(%q) = %q, url.Parse's host is %q", raw, got, want)
		}
	}
}

func BenchmarkDownstreamOf(b *testing.B) {
	def := &model.TaskDef{Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:8080/fire"}}
	b.ReportAllocs()
	for b.Loop() {
		_ = downstreamOf(def)
	}
}
