// Package benchkit is the scaffolding shared by axe's benchmark suites (bench/ and
// bench/e2e): scratch MySQL databases, task fixtures bulk-inserted straight into the axe
// schema, process readings (RSS, CPU), a MySQL proxy that counts the commands a client
// sends, a no-op HTTP endpoint, and the statistics and tables the suites print.
//
// It owns no product behaviour. Its fixtures write the persist schema directly, bypassing
// the store, which only a benchmark may do: nothing outside bench/ may import it (the
// internal/ path enforces that), and it must never touch a database it did not create.
package benchkit

import "errors"

// Sentinel errors.
var (
	// ErrNotMySQL is returned for a DSN that does not name a MySQL/MariaDB server.
	ErrNotMySQL = errors.New("not a MySQL DSN")
	// ErrNoProcStat is returned where /proc (Linux) is needed and absent.
	ErrNoProcStat = errors.New("no /proc process statistics on this system")
)
