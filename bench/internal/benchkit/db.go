package benchkit

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/persist"
)

// parseDSN accepts a go-sql-driver DSN with or without the "mysql:" scheme of persist.Open.
func parseDSN(dsn string) (*mysql.Config, error) {
	if scheme, _, ok := strings.Cut(dsn, ":"); ok && scheme == persist.SchemeSQLite {
		return nil, fmt.Errorf("cannot use %s store for a MySQL benchmark: %w", scheme, ErrNotMySQL)
	}
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
	if err != nil {
		return nil, fmt.Errorf("cannot parse MySQL DSN: %w", err)
	}
	return cfg, nil
}

// CreateDatabase creates a fresh database named prefix_<random hex> on the server serverDSN
// names (a database in it is ignored) and returns its "mysql:…" DSN for persist.Open and a
// drop function. Only databases created here are ever dropped.
func CreateDatabase(ctx context.Context, serverDSN, prefix string) (dsn string, drop func(context.Context) error, err error) {
	cfg, err := parseDSN(serverDSN)
	if err != nil {
		return "", nil, err
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	name := prefix + "_" + hex.EncodeToString(r[:])
	admin := cfg.Clone()
	admin.DBName = ""
	if err := execOnce(ctx, admin, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return "", nil, fmt.Errorf("cannot create database %s: %w", name, err)
	}
	cfg.DBName = name
	drop = func(ctx context.Context) error {
		if err := execOnce(ctx, admin, "DROP DATABASE IF EXISTS "+name); err != nil {
			return fmt.Errorf("cannot drop database %s: %w", name, err)
		}
		return nil
	}
	return persist.SchemeMySQL + ":" + cfg.FormatDSN(), drop, nil
}

func execOnce(ctx context.Context, cfg *mysql.Config, stmt string) error {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// OpenSQL opens a plain *sql.DB on dsn (with or without the "mysql:" scheme) with
// client-side parameter interpolation, as the store uses, and up to maxConns connections.
func OpenSQL(dsn string, maxConns int) (*sql.DB, error) {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.InterpolateParams = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot open MySQL: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	return db, nil
}

// WithAddr returns dsn ("mysql:…") pointed at another host:port, e.g. a CommandProxy.
func WithAddr(dsn, addr string) (string, error) {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return "", err
	}
	cfg.Net, cfg.Addr = "tcp", addr
	return persist.SchemeMySQL + ":" + cfg.FormatDSN(), nil
}

// Addr returns the host:port dsn connects to.
func Addr(dsn string) (string, error) {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return "", err
	}
	return cfg.Addr, nil
}

// ServerInfo is what BENCHMARKS.md records about the database server.
type ServerInfo struct {
	Version             string
	FlushLogAtTrxCommit string
	BufferPoolBytes     int64
}

// ReadServerInfo reads the server version and the settings that decide commit cost.
func ReadServerInfo(ctx context.Context, db *sql.DB) (ServerInfo, error) {
	var si ServerInfo
	err := db.QueryRowContext(ctx, `SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@innodb_buffer_pool_size`).
		Scan(&si.Version, &si.FlushLogAtTrxCommit, &si.BufferPoolBytes)
	if err != nil {
		return si, fmt.Errorf("cannot read server settings: %w", err)
	}
	return si, nil
}

// String renders the server info in one line.
func (si ServerInfo) String() string {
	return fmt.Sprintf("MariaDB/MySQL %s, innodb_flush_log_at_trx_commit=%s, innodb_buffer_pool_size=%d MiB",
		si.Version, si.FlushLogAtTrxCommit, si.BufferPoolBytes>>20)
}

// TableBytes returns the data plus index size InnoDB reports for the tables of the
// database db is connected to.
func TableBytes(ctx context.Context, db *sql.DB) (int64, error) {
	var n sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT SUM(data_length + index_length) FROM information_schema.tables
		WHERE table_schema = DATABASE()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("cannot read table sizes: %w", err)
	}
	return n.Int64, nil
}
