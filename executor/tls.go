package executor

import (
	"crypto/tls"
	"fmt"

	"github.com/axe-sched/axe/lib/tlsfiles"
	"github.com/axe-sched/axe/protocol"
)

// tlsConfigs are the TLS settings Config's files describe, loaded once by New so that a bad
// file fails New, naming its field, rather than the first run.
type tlsConfigs struct {
	// server is the listener's configuration; nil serves plain HTTP.
	server *tls.Config
	// scheduler is the client configuration of https:// scheduler URLs; nil trusts the
	// system's store.
	scheduler *tls.Config
}

func loadTLS(c Config) (tlsConfigs, error) {
	bad := func(field string, err error) error {
		return fmt.Errorf("%w: %s: %w", ErrInvalidConfig, field, err)
	}
	var out tlsConfigs
	if c.TLSCert != "" || c.TLSKey != "" {
		cert, err := tlsfiles.KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return out, bad("TLSCert", err)
		}
		out.server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if c.TLSClientCA != "" {
			pool, err := tlsfiles.CAPool(c.TLSClientCA)
			if err != nil {
				return out, bad("TLSClientCA", err)
			}
			out.server.ClientCAs = pool
			out.server.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	if c.SchedulerCA != "" {
		pool, err := tlsfiles.CAPool(c.SchedulerCA)
		if err != nil {
			return out, bad("SchedulerCA", err)
		}
		out.scheduler = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return out, nil
}

// scheme is the protocol this executor registers: how the scheduler dials it.
func (t tlsConfigs) scheme() string {
	if t.server != nil {
		return protocol.ProtocolHTTPS
	}
	return protocol.ProtocolHTTP
}
