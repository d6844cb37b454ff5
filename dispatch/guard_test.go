package dispatch

import (
	"context"
	"crypto/hmac"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func mustGuard(t *testing.T, cfg GuardConfig) *Guard {
	t.Helper()
	g, err := NewGuard(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGuardCheckURL(t *testing.T) {
	deflt := mustGuard(t, GuardConfig{})
	linkLocal := mustGuard(t, GuardConfig{AllowLinkLocal: true})
	byName := mustGuard(t, GuardConfig{Allow: []string{"hooks.example.com"}})
	byCIDR := mustGuard(t, GuardConfig{Allow: []string{"10.0.0.0/8", "192.0.2.7"}})
	cases := []struct {
		g      *Guard
		url    string
		refuse bool
	}{
		{deflt, "http://169.254.169.254/latest/", true},
		{deflt, "http://169.254.0.1:8080/", true},
		{deflt, "http://[fe80::1]/", true},
		{deflt, "http://[fe80::1%25eth0]:80/", true},
		{deflt, "http://[fd00:ec2::254]/", true},
		{deflt, "http://100.100.100.200/latest/meta-data", true},
		{deflt, "http://[::ffff:169.254.169.254]/", true},
		{deflt, "http://[::ffff:a9fe:a9fe]/", true}, // the same address in hex
		{deflt, "http://127.0.0.1:8080/job", false},
		{deflt, "http://10.1.2.3/job", false},
		{deflt, "https://api.example.com/job", false},
		{deflt, "http://100.100.100.201/", false},
		{linkLocal, "http://169.254.169.254/latest/", false},
		{byName, "https://hooks.example.com/x", false},
		{byName, "https://HOOKS.example.com./x", false},
		{byName, "https://other.example.com/x", true},
		{byName, "http://10.1.2.3/", true},
		{byCIDR, "http://10.1.2.3/", false},
		{byCIDR, "http://192.0.2.7/", false},
		{byCIDR, "http://192.0.2.8/", true},
		{byCIDR, "http://169.254.169.254/", true},
		// A name cannot be judged against ranges before it resolves: the dial decides.
		{byCIDR, "http://hooks.example.com/", false},
	}
	for _, c := range cases {
		err := c.g.CheckURL(c.url)
		if (err != nil) != c.refuse {
			t.Errorf("CheckURL(%q) = %v, want refused=%v", c.url, err, c.refuse)
		}
		if err != nil && !errors.Is(err, ErrRefusedTarget) {
			t.Errorf("CheckURL(%q) = %v, want ErrRefusedTarget", c.url, err)
		}
	}
}

func TestGuardRefusesBadAllowEntries(t *testing.T) {
	for _, bad := range []string{"http://x", "10.0.0.0/99", "a b", "host:80", "-", "x..y"} {
		if _, err := NewGuard(GuardConfig{Allow: []string{bad}}); err == nil || !strings.Contains(err.Error(), "callback-allow") {
			t.Errorf("NewGuard(%q) = %v, want an error naming callback-allow", bad, err)
		}
	}
}

// A name that passed the create-time check but resolves to a refused address at dial time is
// refused before any connection opens, and so is a name with one good and one bad address.
func TestGuardChecksResolvedAddressesAtDial(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]

	g := mustGuard(t, GuardConfig{})
	answers := map[string][]netip.Addr{
		"good.test":   {netip.MustParseAddr("127.0.0.1")},
		"meta.test":   {netip.MustParseAddr("169.254.169.254")},
		"mixed.test":  {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::ffff:169.254.169.254")},
		"mapped.test": {netip.MustParseAddr("::ffff:100.100.100.200")},
	}
	g.lookup = func(_ context.Context, host string) ([]netip.Addr, error) { return answers[host], nil }
	d := newDispatcher(t, Config{Guard: g})

	send := func(host string) Outcome {
		if err := g.CheckURL("http://" + host + ":" + port + "/"); err != nil {
			t.Fatalf("create-time check of %s: %v", host, err)
		}
		ch := make(chan Outcome, 1)
		if err := d.Send(&Request{URL: "http://" + host + ":" + port + "/", Deadline: time.Now().Add(5 * time.Second)},
			func(o Outcome) { ch <- o }); err != nil {
			t.Fatal(err)
		}
		return <-ch
	}
	if o := send("good.test"); !o.OK() {
		t.Fatalf("good.test: %+v", o)
	}
	for _, h := range []string{"meta.test", "mixed.test", "mapped.test"} {
		o := send(h)
		if o.OK() || !errors.Is(o.Err, ErrRefusedTarget) {
			t.Errorf("%s: outcome %+v, want ErrRefusedTarget", h, o)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the server saw %d calls, want 1 (only good.test)", n)
	}
}

// The allowlist's ranges are applied to the address dialled; executor calls (Post) are not
// held to the allowlist.
func TestGuardAllowlistAtDialNotForExecutors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	d := newDispatcher(t, Config{Guard: mustGuard(t, GuardConfig{Allow: []string{"10.0.0.0/8"}})})
	ch := make(chan Outcome, 1)
	_ = d.Send(&Request{URL: srv.URL, Deadline: time.Now().Add(5 * time.Second)}, func(o Outcome) { ch <- o })
	if o := <-ch; !errors.Is(o.Err, ErrRefusedTarget) {
		t.Errorf("callback to %s outside 10.0.0.0/8: %+v, want refused", srv.URL, o)
	}
	if o := d.Post(&Request{URL: srv.URL, Deadline: time.Now().Add(5 * time.Second)}); !o.OK() {
		t.Errorf("executor call: %+v, want it outside the allowlist's reach", o)
	}
	d2 := newDispatcher(t, Config{Guard: mustGuard(t, GuardConfig{Allow: []string{"127.0.0.0/8"}})})
	_ = d2.Send(&Request{URL: srv.URL, Deadline: time.Now().Add(5 * time.Second)}, func(o Outcome) { ch <- o })
	if o := <-ch; !o.OK() {
		t.Errorf("callback inside 127.0.0.0/8: %+v", o)
	}
}

// A redirect is the answer, never followed: the 302 is not a 2xx, and the target it names is
// not called.
func TestCallbacksDoNotFollowRedirects(t *testing.T) {
	var followed atomic.Bool
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { followed.Store(true) }))
	defer target.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusFound)
	}))
	defer redirector.Close()
	d := newDispatcher(t, Config{Guard: mustGuard(t, GuardConfig{})})
	ch := make(chan Outcome, 1)
	_ = d.Send(&Request{URL: redirector.URL, Deadline: time.Now().Add(5 * time.Second)}, func(o Outcome) { ch <- o })
	o := <-ch
	if o.OK() || o.Status != http.StatusFound {
		t.Errorf("outcome %+v, want the 302 as a failure", o)
	}
	if followed.Load() {
		t.Error("the redirect was followed")
	}
}

// A callback's response body is bounded: a huge one fails the call instead of being read
// whole.
func TestCallbackResponseBodyIsBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "8388608")
		_, _ = io.CopyN(w, zeros{}, 8<<20)
	}))
	defer srv.Close()
	d := newDispatcher(t, Config{})
	ch := make(chan Outcome, 1)
	_ = d.Send(&Request{URL: srv.URL, Deadline: time.Now().Add(10 * time.Second)}, func(o Outcome) { ch <- o })
	if o := <-ch; o.OK() || o.Err == nil {
		t.Errorf("8 MiB response: %+v, want an error", o)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestCallbacksAreSigned(t *testing.T) {
	secret := []byte("s3cret")
	got := make(chan [2]string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- [2]string{r.Header.Get(SignatureHeader), string(b)}
	}))
	defer srv.Close()
	d := newDispatcher(t, Config{CallbackSecret: secret})
	done := make(chan Outcome, 1)
	_ = d.Send(&Request{URL: srv.URL, Body: []byte(`{"ticket":"1-2-0"}`), Deadline: time.Now().Add(5 * time.Second)},
		func(o Outcome) { done <- o })
	<-done
	g := <-got
	if !hmac.Equal([]byte(g[0]), []byte(Sign(secret, []byte(g[1])))) || !strings.HasPrefix(g[0], "sha256=") {
		t.Errorf("signature %q over %q does not verify", g[0], g[1])
	}
	if Sign(secret, []byte(g[1])) == Sign([]byte("other"), []byte(g[1])) {
		t.Error("the signature does not depend on the secret")
	}
	// Executor calls are not signed.
	_ = d.Post(&Request{URL: srv.URL, Body: []byte(`{}`), Deadline: time.Now().Add(5 * time.Second)})
	if g := <-got; g[0] != "" {
		t.Errorf("executor call carries a signature %q", g[0])
	}
}

// CheckExecutorAddress takes exactly host:port with a usable host, refuses what no executor
// can be (wildcards, port 0, URL parts) and the ranges no callback may reach, and ignores
// --callback-allow, which is for callbacks.
func TestGuardCheckExecutorAddress(t *testing.T) {
	deflt := mustGuard(t, GuardConfig{})
	allowList := mustGuard(t, GuardConfig{Allow: []string{"10.0.0.0/8"}})
	linkLocal := mustGuard(t, GuardConfig{AllowLinkLocal: true})
	var none *Guard
	cases := []struct {
		g      *Guard
		addr   string
		refuse bool
	}{
		{deflt, "127.0.0.1:9100", false},
		{deflt, "[::1]:9100", false},
		{deflt, "10.0.0.7:9100", false},
		{deflt, "worker-1.internal:443", false},
		{deflt, "localhost:1", false},
		{deflt, "localhost:65535", false},
		{allowList, "127.0.0.1:9100", false}, // executors are not held to --callback-allow
		{none, "127.0.0.1:9100", false},
		{deflt, "169.254.169.254:80", true},
		{none, "169.254.169.254:80", true},
		{deflt, "[::ffff:169.254.169.254]:80", true},
		{deflt, "[fe80::1]:80", true},
		{deflt, "[fe80::1%eth0]:80", true},
		{deflt, "100.100.100.200:80", true},
		{deflt, "0.0.0.0:0", true},
		{deflt, "0.0.0.0:9100", true},
		{deflt, "[::]:0", true},
		{deflt, "[::]:9100", true},
		{deflt, "224.0.0.1:9100", true},
		{deflt, "255.255.255.255:9100", true},
		{deflt, "127.0.0.1:0", true},
		{deflt, "127.0.0.1:99999", true},
		{deflt, "127.0.0.1:-1", true},
		{deflt, "127.0.0.1:+80", true},
		{deflt, "127.0.0.1:080", true},
		{deflt, "127.0.0.1:http", true},
		{deflt, "127.0.0.1:", true},
		{deflt, ":9100", true},
		{deflt, "user@host:9100", true},
		{deflt, "host#f:9100", true},
		{deflt, "[0]:9100", true}, // brackets hold an IPv6 address only (found by fuzzing)
		{deflt, "[10.0.0.8]:9100", true},
		{deflt, "[::ffff:10.0.0.8]:9100", false},
		{deflt, "host?x=1:9100", true},
		{deflt, "host/x:9100", true},
		{deflt, "host:9100/x", true},
		{deflt, "host:9100#f", true},
		{deflt, "ho st:9100", true},
		{deflt, "host", true},
		{deflt, "::1:9100", true},
		{deflt, "http://host:9100", true},
		{linkLocal, "169.254.169.254:80", false},
	}
	for _, c := range cases {
		err := c.g.CheckExecutorAddress(c.addr)
		if (err != nil) != c.refuse {
			t.Errorf("CheckExecutorAddress(%q) = %v, want refused=%v", c.addr, err, c.refuse)
		}
	}
}

// Executor calls are judged at every dial as registration judges them: a name that resolves
// to a metadata or wildcard address is refused before any connection opens; the allowlist
// does not apply to them.
func TestExecutorCallsAreGuardedAtDial(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	g := mustGuard(t, GuardConfig{Allow: []string{"10.0.0.0/8"}})
	answers := map[string][]netip.Addr{
		"good.test":     {netip.MustParseAddr("127.0.0.1")},
		"meta.test":     {netip.MustParseAddr("169.254.169.254")},
		"wildcard.test": {netip.MustParseAddr("0.0.0.0")},
		"mixed.test":    {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("fd00:ec2::254")},
	}
	g.lookup = func(_ context.Context, host string) ([]netip.Addr, error) { return answers[host], nil }
	d := newDispatcher(t, Config{Guard: g})
	for host, want := range map[string]bool{"good.test": true, "meta.test": false, "wildcard.test": false, "mixed.test": false} {
		addr := host + ":" + port
		if err := g.CheckExecutorAddress(addr); err != nil {
			t.Fatalf("registration check of %s: %v", addr, err)
		}
		o := d.Offer(executorAt(addr, "http"), runOffer("t-"+host))
		if want && !o.OK() {
			t.Errorf("%s: %+v, want accepted", host, o)
		}
		if !want && (o.OK() || !errors.Is(o.Err, ErrRefusedTarget)) {
			t.Errorf("%s: %+v, want ErrRefusedTarget", host, o)
		}
	}
	// A registered address literal is judged at the dial too.
	if o := d.Post(&Request{URL: "http://169.254.169.254:" + port + "/axe/run", Deadline: time.Now().Add(5 * time.Second)}); !errors.Is(o.Err, ErrRefusedTarget) {
		t.Errorf("post to 169.254.169.254: %+v, want ErrRefusedTarget", o)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the server saw %d calls, want 1 (good.test)", n)
	}
}
