package persist

import (
	"context"
	"fmt"
	"strings"
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
//
// SQLite runs in WAL mode with synchronous=NORMAL: a committed batch survives the axe process
// being killed (not necessarily a power loss). MySQL gets interpolateParams=true unless the
// DSN says otherwise, which saves a prepare round trip per statement on the hot path.
//
// The store never reads the clock: every time it writes (created_at, registered_at, …) comes
// from the caller, except the lease's and the nodes table's, which the database's own clock
// writes and judges (ha.go).
func Open(ctx context.Context, dsn string) (Store, error) {
	scheme, rest, ok := strings.Cut(dsn, ":")
	if !ok || rest == "" {
		// The DSN may hold a password: never echo it.
		return nil, fmt.Errorf("cannot open store: the DSN must look like sqlite:PATH or mysql:DSN")
	}
	var (
		s   *sqlStore
		err error
	)
	switch scheme {
	case SchemeSQLite:
		s, err = openSQLite(rest)
	case SchemeMySQL:
		s, err = openMySQL(rest)
	default:
		return nil, fmt.Errorf("cannot open store: unknown scheme %q (want %q or %q)", scheme, SchemeSQLite, SchemeMySQL)
	}
	if err != nil {
		return nil, err
	}
	if err := s.Ping(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}
