package persist

import (
	"context"
	"errors"
	"strings"
)

// ConsecutiveIDs reports whether s takes the ids of a multi-row INSERT of definitions for
// consecutive (mysqlConsecutiveIDs).
func ConsecutiveIDs(s Store) bool { return s.(*sqlStore).consecutiveIDs }

// SetGalera makes s fence as on a Galera node (galera.go), or not, whatever its server: the
// Galera fence measured and tested on one server. Set it before Fenced.
func SetGalera(s Store, on bool) { s.(*sqlStore).galera = on }

// Galera reports whether s found its server to be a Galera node.
func Galera(s Store) bool { return s.(*sqlStore).galera }

// HoldSchemaLock takes Migrate's lock on a Galera cluster for the database of dsn (a
// mysql: DSN), as a Migrate in progress holds it, without migrating; release frees it.
func HoldSchemaLock(ctx context.Context, dsn string) (release func(), err error) {
	_, rest, _ := strings.Cut(dsn, ":")
	s, err := openMySQL(rest, OpenOptions{})
	if err != nil {
		return nil, err
	}
	if err := s.Ping(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	s.afterPing()
	if !s.galera {
		_ = s.Close()
		return nil, errors.New("not a Galera node")
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	_, unlock, err := s.galeraLockSchema(ctx, conn)
	if err != nil {
		_ = conn.Close()
		_ = s.Close()
		return nil, err
	}
	return func() {
		unlock()
		_ = conn.Close()
		_ = s.Close()
	}, nil
}
