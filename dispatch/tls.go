package dispatch

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/axe-sched/axe/lib/tlsfiles"
	"github.com/axe-sched/axe/protocol"
	"github.com/valyala/fasthttp"
)

// ExecutorTLSFiles names the PEM files of the scheduler's side of HTTPS to executors.
type ExecutorTLSFiles struct {
	// CA is the bundle of CAs trusted for executors' certificates. Empty: the system's
	// trust store.
	CA string
	// Cert and Key, both set, are the client certificate presented to executors that
	// require one (mTLS). Empty: none.
	Cert, Key string
}

// Load builds the client TLS configuration the files describe, for Config.ExecutorTLS. It
// returns nil when no file is named: HTTPS executors are then verified against the system
// trust store, with no client certificate. Errors name the flag of the file at fault.
func (f ExecutorTLSFiles) Load() (*tls.Config, error) {
	if f.CA == "" && f.Cert == "" && f.Key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pool, err := tlsfiles.CAPool(f.CA)
		if err != nil {
			return nil, fmt.Errorf("executor-ca: %w", err)
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" || f.Key != "" {
		cert, err := tlsfiles.KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("executor-cert and executor-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// tlsProbeTimeout bounds the second look explainClosed takes at an HTTPS executor.
const tlsProbeTimeout = 2 * time.Second

// explainClosed gives the cause of a call to an HTTPS executor that failed with the
// connection closed before any answer. fasthttp reports every such failure alike; over TLS
// 1.3 it is also how an executor refusing the client certificate looks, because its verdict
// (a TLS alert) arrives after the client's side of the handshake is done, and fasthttp does
// not keep it. So explainClosed opens one more connection with the same settings, bounded
// by tlsProbeTimeout and the call's deadline, asks it for /axe/beat and reads: an alert the
// executor sends is the cause, and the error says so. Any other error, or an executor that
// accepts the probe, leaves err as it was.
func (d *Dispatcher) explainClosed(rawURL string, err error, deadline time.Time) error {
	if !errors.Is(err, fasthttp.ErrConnectionClosed) {
		return err
	}
	u, perr := url.Parse(rawURL)
	if perr != nil || u.Scheme != "https" {
		return err
	}
	until := time.Now().Add(tlsProbeTimeout)
	if !deadline.IsZero() && deadline.Before(until) {
		until = deadline
	}
	if !until.After(time.Now()) {
		return err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if d.client.TLSConfig != nil {
		cfg = d.client.TLSConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Deadline: until}, Config: cfg}
	conn, derr := dialer.Dial("tcp", u.Host)
	if derr != nil {
		if tlsFailure(derr) {
			return fmt.Errorf("TLS with the executor failed: %w", derr)
		}
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(until)
	// Ask for something harmless, so that an executor that accepts the connection answers
	// at once instead of leaving the read to wait out the deadline; one that refused the
	// certificate has sent its alert, which the read returns instead.
	req := "GET " + protocol.PathBeat + " HTTP/1.1\r\nHost: " + u.Host + "\r\nConnection: close\r\n\r\n"
	if _, werr := conn.Write([]byte(req)); tlsFailure(werr) {
		return fmt.Errorf("the executor refused the TLS connection: %w", werr)
	}
	if _, rerr := conn.Read(make([]byte, 1)); tlsFailure(rerr) {
		return fmt.Errorf("the executor refused the TLS connection: %w", rerr)
	}
	return err
}

// tlsFailure reports whether err is TLS's own: an alert from the peer, a certificate that
// does not verify, or a peer that does not speak TLS.
func tlsFailure(err error) bool {
	var op *net.OpError
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	var record tls.RecordHeaderError
	var verify *tls.CertificateVerificationError
	return (errors.As(err, &op) && op.Op == "remote error") || errors.As(err, &unknown) ||
		errors.As(err, &invalid) || errors.As(err, &host) || errors.As(err, &record) || errors.As(err, &verify)
}
