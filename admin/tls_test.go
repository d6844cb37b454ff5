package admin_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/persist"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files and returns their
// paths and a pool trusting the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "axe-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestServeTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	cfg := axedaemon.Config{Addr: "127.0.0.1:0", DB: persist.SchemeSQLite + ":" + filepath.Join(t.TempDir(), "axe.db"),
		Logger: daemontest.TestLogger(nil), Security: axedaemon.SecurityConfig{TLSCert: certFile, TLSKey: keyFile}}
	addr := make(chan string, 1)
	cfg.OnListen = func(a string) { addr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- axedaemon.Serve(ctx, cfg) }()
	var a string
	select {
	case a = <-addr:
	case err := <-done:
		t.Fatalf("Serve: %v", err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get("https://" + a + "/api/v1/tasks")
	if err != nil {
		t.Fatalf("HTTPS GET: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "tasks") {
		t.Errorf("HTTPS GET /api/v1/tasks: %d %s", resp.StatusCode, b)
	}
	// Plain HTTP to the TLS port does not get the API.
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	if resp, err := plain.Get("http://" + a + "/api/v1/tasks"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP was served on the TLS port")
		}
	}
	plain.CloseIdleConnections()
}

func TestTLSConfigErrors(t *testing.T) {
	certFile, _, _ := selfSigned(t)
	for _, sec := range []axedaemon.SecurityConfig{
		{TLSCert: certFile},
		{TLSCert: certFile, TLSKey: certFile},
		{TLSCert: "/nonexistent.pem", TLSKey: "/nonexistent.key"},
	} {
		if err := serveOnce(t, axedaemon.Config{Addr: "127.0.0.1:0", Security: sec}); err == nil || !strings.Contains(err.Error(), "tls") {
			t.Errorf("Serve with %+v = %v, want an error naming tls", sec, err)
		}
	}
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ca := range []string{"/nonexistent-ca.pem", notPEM} {
		sec := axedaemon.SecurityConfig{PeerCA: ca}
		if err := serveOnce(t, axedaemon.Config{Addr: "127.0.0.1:0", Security: sec}); err == nil || !strings.Contains(err.Error(), "peer-ca") {
			t.Errorf("Serve with PeerCA %s = %v, want an error naming peer-ca", ca, err)
		}
	}
}
