package persist

import (
	"context"
	"fmt"
	"strings"
)

// MigrateBefore creates the schema of dsn as an axe that knew only the migration steps
// below version would have: a database "created by the previous schema", for the upgrade
// tests.
func MigrateBefore(ctx context.Context, dsn string, version int) error {
	scheme, rest, _ := strings.Cut(dsn, ":")
	var (
		s   *sqlStore
		err error
	)
	switch scheme {
	case SchemeSQLite:
		s, err = openSQLite(rest)
	case SchemeMySQL:
		s, err = openMySQL(rest, OpenOptions{})
	default:
		return fmt.Errorf("unknown scheme %q", scheme)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	d := *s.d
	d.migrations = nil
	for _, m := range s.d.migrations {
		if m.version < version {
			d.migrations = append(d.migrations, m)
		}
	}
	s.d = &d
	return s.Migrate(ctx)
}

// MigrationStatements returns, by schema version, how many statements the step of that
// version runs on the store of scheme ("sqlite" or "mysql").
func MigrationStatements(scheme string) map[int]int {
	ms := mysqlMigrations
	if scheme == SchemeSQLite {
		ms = sqliteMigrations
	}
	out := map[int]int{}
	for _, m := range ms {
		out[m.version] = len(m.stmts)
	}
	return out
}
