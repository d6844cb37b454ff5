// Package tlsfiles reads the PEM files axe's TLS settings name: trusted CA bundles and key
// pairs. The scheduler's dispatcher and the executor SDK share it, so both name a bad file
// the same way.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

// CAPool reads the PEM file at path and returns a pool holding every certificate in it. A
// file with no certificate, or with a PEM block that is not one, is an error: a pool that
// trusts nothing would only show up later as every handshake failing.
func CAPool(path string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := raw; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: holds a %q PEM block; a CA file holds certificates only", path, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: cannot parse certificate %d: %w", path, n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: no PEM certificate in the file", path)
	}
	return pool, nil
}

// KeyPair loads a PEM certificate (chain) and its private key. Both paths are required
// together; the error says which is missing.
func KeyPair(certFile, keyFile string) (tls.Certificate, error) {
	switch {
	case certFile == "" && keyFile == "":
		return tls.Certificate{}, fmt.Errorf("no certificate and key given")
	case certFile == "":
		return tls.Certificate{}, fmt.Errorf("a key without its certificate: give both")
	case keyFile == "":
		return tls.Certificate{}, fmt.Errorf("a certificate without its key: give both")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("cannot load the key pair: %w", err)
	}
	return cert, nil
}
