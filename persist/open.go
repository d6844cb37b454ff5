package persist

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// DSN schemes accepted by Open.
const (
	SchemeSQLite = "sqlite"
	SchemeMySQL  = "mysql"
)

// Open connects to the store named by dsn and migrates its schema.
//
//	sqlite:PATH                         embedded SQLite file (created when missing)
//	mysql:USER:PASS@tcp(HOST:PORT)/DB   MySQL or MariaDB, a go-sql-driver DSN
//	mysql:USER:PASS@tcp(H1:P,H2:P,H3:P)/DB   the nodes of a MariaDB Galera cluster (mysqlhosts.go)
//
// SQLite runs in WAL mode with synchronous=NORMAL: a committed batch survives the axe process
// being killed (not necessarily a power loss). MySQL gets interpolateParams=true unless the
// DSN says otherwise, which saves a prepare round trip per statement on the hot path.
//
// The store never reads the clock: every time it writes (created_at, registered_at, …) comes
// from the caller, except the lease's and the nodes table's, which the database's own clock
// writes and judges (ha.go).
func Open(ctx context.Context, dsn string) (Store, error) {
	return OpenWith(ctx, dsn, OpenOptions{})
}

// OpenOptions tunes a store beyond its DSN.
type OpenOptions struct {
	// TxIdleTimeout, when > 0, has a MySQL server end any transaction of this store that sits
	// idle this long (rounded up to whole seconds), releasing its locks: an HA primary sets
	// it to its lease renew interval, so a primary frozen mid-transaction cannot hold the
	// lease row's lock past its lease. Defaults to 0: the server's own setting. Ignored by
	// SQLite.
	TxIdleTimeout time.Duration
	// ReachTimeout, when > 0, bounds reaching the database (the first ping) within ctx. The
	// schema migrations that follow are bounded by ctx alone: a step that rebuilds a large
	// table may take longer than any fixed bound, and a step cut short is applied again at
	// the next start. Defaults to 0: ctx alone bounds both.
	ReachTimeout time.Duration
	// Metrics is the set the store's series are registered in (axe_store_*); the daemon
	// writes it on /metrics. Stores opened with one set count together. Defaults to a new
	// set of this store's own, which nothing exposes.
	Metrics *metrics.Set
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, dsn string, opts OpenOptions) (Store, error) {
	scheme, rest, ok := strings.Cut(dsn, ":")
	if !ok || rest == "" {
		// The DSN may hold a password: never echo it.
		return nil, fmt.Errorf("cannot open store: the DSN must look like sqlite:PATH or mysql:DSN")
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.NewSet()
	}
	var (
		s   *sqlStore
		err error
	)
	switch scheme {
	case SchemeSQLite:
		s, err = openSQLite(rest)
	case SchemeMySQL:
		s, err = openMySQL(rest, opts)
	default:
		return nil, fmt.Errorf("cannot open store: unknown scheme %q (want %q or %q)", scheme, SchemeSQLite, SchemeMySQL)
	}
	if err != nil {
		return nil, err
	}
	s.m = newStoreMetrics(opts.Metrics) // for MySQL, the counters its host set has already
	pctx, cancel := ctx, context.CancelFunc(func() {})
	if opts.ReachTimeout > 0 {
		pctx, cancel = context.WithTimeout(ctx, opts.ReachTimeout)
	}
	err = s.Ping(pctx)
	cancel()
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	if s.afterPing != nil {
		s.afterPing()
	}
	if err := s.Migrate(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}
