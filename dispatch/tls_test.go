package dispatch

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/testpki"
	"github.com/axe-sched/axe/protocol"
	"github.com/valyala/fasthttp"
)

// tlsExecutor is an HTTPS executor endpoint that requires a client certificate of ca and
// records, per path, the common name of the certificate each call presented.
type tlsExecutor struct {
	srv *httptest.Server
	mu  sync.Mutex
	cns map[string][]string
}

func startTLSExecutor(t *testing.T, ca *testpki.CA) *tlsExecutor {
	t.Helper()
	e := &tlsExecutor{cns: map[string][]string{}}
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.cns[r.URL.Path] = append(e.cns[r.URL.Path], r.TLS.PeerCertificates[0].Subject.CommonName)
		e.mu.Unlock()
		switch r.URL.Path {
		case protocol.PathRun:
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(protocol.Accepted{Accepted: true})
		case protocol.PathRuns:
			var b protocol.RunBatch
			_ = json.NewDecoder(r.Body).Decode(&b)
			ans := protocol.RunBatchAnswer{}
			for range b.Runs {
				ans.Results = append(ans.Results, protocol.RunAnswer{Code: http.StatusAccepted, Body: json.RawMessage(`{"accepted":true}`)})
			}
			_ = json.NewEncoder(w).Encode(ans)
		case protocol.PathKill:
			_ = json.NewEncoder(w).Encode(protocol.KillAnswer{Killed: true})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	e.srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, "executor").Load(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	}
	// The refused handshakes are the point of some tests; keep them out of the output.
	e.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	e.srv.StartTLS()
	t.Cleanup(e.srv.Close)
	return e
}

func (e *tlsExecutor) addr() string { return strings.TrimPrefix(e.srv.URL, "https://") }

func (e *tlsExecutor) seen(path string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.cns[path]...)
}

func tlsDispatcher(t *testing.T, files ExecutorTLSFiles) *Dispatcher {
	t.Helper()
	cfg, err := files.Load()
	if err != nil {
		t.Fatal(err)
	}
	return newDispatcher(t, Config{ExecutorTLS: cfg})
}

func runOffer(ticket string) *Request {
	return &Request{Task: "t", Ticket: ticket, Attempt: 1, Body: []byte(`{"ticket":"` + ticket + `"}`),
		Deadline: time.Now().Add(5 * time.Second)}
}

// TestHTTPSExecutorGetsRunsBatchesAndKillsWithTheClientCertificate: an executor registered
// with protocol "https" is offered runs, run batches and kills over HTTPS, verified against
// --executor-ca, each presenting the --executor-cert client certificate.
func TestHTTPSExecutorGetsRunsBatchesAndKillsWithTheClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	ex := startTLSExecutor(t, ca)
	client := ca.Client(t, "scheduler")
	d := tlsDispatcher(t, ExecutorTLSFiles{CA: ca.File, Cert: client.CertFile, Key: client.KeyFile})
	x := executorAt(ex.addr(), protocol.ProtocolHTTPS)
	if got := x.URL(protocol.PathRun); got != "https://"+ex.addr()+protocol.PathRun {
		t.Fatalf("URL = %s", got)
	}

	if o := d.Offer(x, runOffer("t-1")); o.Err != nil || o.Status != http.StatusAccepted {
		t.Fatalf("offer over mTLS = %d %v", o.Status, o.Err)
	}
	d.offerBatch(x, []*offer{{req: runOffer("t-2"), done: make(chan Outcome, 1)}, {req: runOffer("t-3"), done: make(chan Outcome, 1)}})
	if err := d.Kill(context.Background(), x, "t-1", ""); err != nil {
		t.Fatalf("kill over mTLS: %v", err)
	}
	for _, path := range []string{protocol.PathRun, protocol.PathRuns, protocol.PathKill} {
		if cns := ex.seen(path); len(cns) != 1 || cns[0] != "scheduler" {
			t.Errorf("%s calls presented %v, want one with the scheduler's certificate", path, cns)
		}
	}
}

// TestHTTPSExecutorRefusalsAreClearErrors: a dispatcher without the client certificate the
// executor requires, or one that does not trust the executor's CA, fails the offer and the
// kill at once, with an error naming the TLS cause.
func TestHTTPSExecutorRefusalsAreClearErrors(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	other := testpki.NewCA(t, dir, "other")
	ex := startTLSExecutor(t, ca)
	x := executorAt(ex.addr(), protocol.ProtocolHTTPS)
	otherClient := other.Client(t, "scheduler")
	for _, c := range []struct {
		name  string
		files ExecutorTLSFiles
		want  string
	}{
		{"no client certificate", ExecutorTLSFiles{CA: ca.File}, "certificate required"},
		{"executor's CA not trusted", ExecutorTLSFiles{CA: other.File, Cert: otherClient.CertFile, Key: otherClient.KeyFile},
			"certificate signed by unknown authority"},
		{"system trust store", ExecutorTLSFiles{}, "certificate signed by unknown authority"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := tlsDispatcher(t, c.files)
			o := d.Offer(x, runOffer("t-1"))
			t.Logf("offer error: %v", o.Err)
			if o.Err == nil || !strings.Contains(o.Err.Error(), c.want) {
				t.Errorf("offer = %d %v, want an error saying %q", o.Status, o.Err, c.want)
			}
			if err := d.Kill(context.Background(), x, "t-1", ""); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("kill = %v, want an error saying %q", err, c.want)
			}
		})
	}
	if n := len(ex.seen(protocol.PathRun)) + len(ex.seen(protocol.PathKill)); n != 0 {
		t.Errorf("%d calls reached the executor", n)
	}
}

// TestClosedConnectionKeepsItsErrorWhenTLSIsFine: an HTTPS executor that accepts the client
// certificate but closes a call's connection without answering fails the call with the
// connection error as it was, after sending it once more (the first answer was in doubt); the
// second look at the TLS asks the executor for /axe/beat, which it answers, and names no TLS
// cause.
func TestClosedConnectionKeepsItsErrorWhenTLSIsFine(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if r.URL.Path == protocol.PathBeat {
			_, _ = w.Write([]byte(`{"app":"app","running":0,"handlers":["h"]}`))
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "executor").Load(t)},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := ca.Client(t, "scheduler")
	d := tlsDispatcher(t, ExecutorTLSFiles{CA: ca.File, Cert: client.CertFile, Key: client.KeyFile})
	o := d.Offer(executorAt(strings.TrimPrefix(srv.URL, "https://"), protocol.ProtocolHTTPS), runOffer("t-1"))
	if !errors.Is(o.Err, fasthttp.ErrConnectionClosed) || strings.Contains(o.Err.Error(), "TLS") {
		t.Errorf("offer = %d %v, want the closed connection and no TLS cause", o.Status, o.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"POST " + protocol.PathRun, "POST " + protocol.PathRun, "GET " + protocol.PathBeat}; !slices.Equal(paths, want) {
		t.Errorf("the executor saw %v, want %v", paths, want)
	}
}

// TestHTTPExecutorStaysHTTP: an executor registered with protocol "http" (or none, as before
// TLS) is dialled over plain HTTP even when the dispatcher has TLS settings, and registering
// again with "https" switches it.
func TestHTTPExecutorStaysHTTP(t *testing.T) {
	r := NewRegistry()
	x, _, _ := r.Register("app", "10.0.0.1:9100", "", []string{"h"}, 1)
	if got := x.URL(protocol.PathKill); got != "http://10.0.0.1:9100/axe/kill" {
		t.Errorf("URL with no protocol = %s", got)
	}
	r.Register("app", "10.0.0.1:9100", protocol.ProtocolHTTPS, []string{"h"}, 2)
	if got := x.URL(protocol.PathKill); got != "https://10.0.0.1:9100/axe/kill" || r.Snapshot()[0].Protocol != "https" {
		t.Errorf("URL after registering https = %s, snapshot %+v", got, r.Snapshot())
	}
	r.Register("app", "10.0.0.1:9100", protocol.ProtocolHTTP, []string{"h"}, 3)
	if got := x.URL(protocol.PathKill); got != "http://10.0.0.1:9100/axe/kill" {
		t.Errorf("URL after registering http again = %s", got)
	}

	f := startFakeExecutor(t, nil, 0)
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	d := tlsDispatcher(t, ExecutorTLSFiles{CA: ca.File})
	if o := d.Offer(executorAt(f.addr(), protocol.ProtocolHTTP), runOffer("t-2")); o.Err != nil || o.Status != http.StatusAccepted {
		t.Errorf("offer to an HTTP executor = %d %v", o.Status, o.Err)
	}
}

// TestExecutorTLSFilesNameTheFlag: a mistake in the files fails Load naming the flag.
func TestExecutorTLSFilesNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	pair := ca.Client(t, "scheduler")
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err := (ExecutorTLSFiles{}).Load(); cfg != nil || err != nil {
		t.Errorf("Load of nothing = %v, %v; want nil, nil", cfg, err)
	}
	for _, c := range []struct {
		name  string
		files ExecutorTLSFiles
		want  string
	}{
		{"CA missing", ExecutorTLSFiles{CA: filepath.Join(dir, "absent.pem")}, "executor-ca:"},
		{"CA empty", ExecutorTLSFiles{CA: empty}, "executor-ca:"},
		{"CA is a key", ExecutorTLSFiles{CA: pair.KeyFile}, "executor-ca:"},
		{"cert without key", ExecutorTLSFiles{Cert: pair.CertFile}, "executor-cert and executor-key:"},
		{"key without cert", ExecutorTLSFiles{Key: pair.KeyFile}, "executor-cert and executor-key:"},
		{"key of another cert", ExecutorTLSFiles{Cert: pair.CertFile, Key: ca.Client(t, "other").KeyFile}, "executor-cert and executor-key:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := c.files.Load(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load = %v, want an error naming %q", err, c.want)
			}
		})
	}
}
