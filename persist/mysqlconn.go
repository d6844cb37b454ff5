package persist

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQL batches run on the driver connection itself (BENCHMARKS.md, Profiles): the pool's
// connections are batchConns, and ApplyBatch takes one with sql.Conn.Raw and runs its
// transaction there. Through database/sql each multi-row statement had its arguments copied
// into a fresh []driver.NamedValue (40 B per value; 3,072 values for 256 runtime rows), a
// quarter of the bytes the scheduler allocated in a burst. Here they go into a buffer the
// connection reuses, and the multi-row statements are prepared once per connection and
// closed with it.

// batchConnector makes the pool's connections batchConns, each to the node of hosts in use
// (mysqlhosts.go).
type batchConnector struct {
	hosts *hostSet
	// txIdleSec, when > 0, bounds how long the server keeps a transaction that sits idle
	// (OpenOptions.TxIdleTimeout): idle_transaction_timeout on MariaDB, wait_timeout where
	// that variable is unknown (MySQL), which then also closes idle pooled connections, so
	// waitTimeoutUsed is set and the pool retires idle connections before the server does.
	txIdleSec       int
	waitTimeoutUsed *atomic.Bool
}

func (c batchConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, host, err := c.hosts.connect(ctx, func(ctx context.Context, dc driver.Conn) error {
		if c.txIdleSec > 0 {
			return c.boundIdleTransactions(ctx, dc)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	bc, err := newBatchConn(dc)
	if err != nil {
		return nil, err
	}
	bc.hosts, bc.host = c.hosts, host
	return bc, nil
}

func (c batchConnector) Driver() driver.Driver { return c.hosts.connectors[0].Driver() }

// boundIdleTransactions sets the session's idle-transaction bound. A process stopped in the
// middle of a transaction (SIGSTOP, a long GC pause, a frozen VM) keeps its row locks for as
// long as the server keeps the transaction; for an HA primary that includes the shared lock
// on the lease row that every batch takes, which would block a backup's takeover.
func (c batchConnector) boundIdleTransactions(ctx context.Context, dc driver.Conn) error {
	ex, ok := dc.(driver.ExecerContext)
	if !ok {
		return errors.New("cannot bound idle transactions: the driver connection cannot execute")
	}
	n := strconv.Itoa(c.txIdleSec)
	_, err := ex.ExecContext(ctx, "SET SESSION idle_transaction_timeout = "+n, nil)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == mysqlErrUnknownSystemVariable {
		c.waitTimeoutUsed.Store(true)
		_, err = ex.ExecContext(ctx, "SET SESSION wait_timeout = "+n, nil)
	}
	if err != nil {
		return fmt.Errorf("cannot bound idle transactions: %w", err)
	}
	return nil
}

// mysqlDriverConn is what the MySQL driver's connection implements and batchConn forwards.
type mysqlDriverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// batchConn is a MySQL driver connection with the batch path's prepared statements. It
// embeds every optional interface the driver's connection implements, so database/sql
// treats it as the driver's own; newBatchConn refuses a connection lacking one.
type batchConn struct {
	mysqlDriverConn
	// stmts are this connection's prepared multi-row statements; there are a fixed number
	// of keys (execRows), so the map stays small.
	stmts map[batchStmtKey]driver.Stmt
	// args is the argument buffer every batch statement reuses.
	args []driver.NamedValue
	// hosts and host are the store's nodes and the index of this connection's. lost is set
	// when a statement found the node gone or refusing: the pool then discards the
	// connection (IsValid).
	hosts *hostSet
	host  int
	lost  atomic.Bool
}

// seen notes what err says of the connection's node. A node outside the primary component
// refuses every statement (nothing ran): that error also wraps driver.ErrBadConn, so that
// database/sql runs a statement outside a transaction again on another connection, which
// the connector opens to a node that passes the check.
func (bc *batchConn) seen(err error) error {
	if err == nil || errors.Is(err, driver.ErrSkip) || !nodeLost(err) {
		return err
	}
	bc.lost.Store(true)
	bc.hosts.retire(bc.host)
	if mysqlErrIs(err, mysqlErrWsrepNotReady) {
		return errors.Join(err, driver.ErrBadConn)
	}
	return err
}

// ExecContext, QueryContext, PrepareContext and BeginTx are the driver's, noting what their
// errors say of the node (seen).
func (bc *batchConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	res, err := bc.mysqlDriverConn.ExecContext(ctx, query, args)
	return res, bc.seen(err)
}

func (bc *batchConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := bc.mysqlDriverConn.QueryContext(ctx, query, args)
	return rows, bc.seen(err)
}

func (bc *batchConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := bc.mysqlDriverConn.PrepareContext(ctx, query)
	return st, bc.seen(err)
}

func (bc *batchConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if _, err := bc.mysqlDriverConn.BeginTx(ctx, opts); err != nil {
		return nil, bc.seen(err)
	}
	return &boundTx{bc: bc, ctx: ctx}, nil
}

// rollbackTimeout bounds a rollback: it must not hang on a frozen node, and it runs after its
// transaction's context may have ended.
const rollbackTimeout = 10 * time.Second

// boundTx is a transaction on a batchConn whose commit is bounded by the context it began
// with. The driver's own commit watches no context, so on a frozen node (its socket open,
// nothing answering) it would wait for as long as the node is frozen, whatever the caller's
// deadline; the driver's transaction is no more than its COMMIT and ROLLBACK statements,
// which this sends itself.
type boundTx struct {
	bc  *batchConn
	ctx context.Context
}

func (t *boundTx) Commit() error {
	_, err := t.bc.ExecContext(t.ctx, "COMMIT", nil)
	return err
}

func (t *boundTx) Rollback() error {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	_, err := t.bc.ExecContext(ctx, "ROLLBACK", nil)
	return err
}

// ResetSession refuses (driver.ErrBadConn: the pool takes another connection) a connection
// whose node was found gone, or is no longer the one new connections go to.
func (bc *batchConn) ResetSession(ctx context.Context) error {
	if bc.lost.Load() || bc.hosts.retired(bc.host) {
		return driver.ErrBadConn
	}
	return bc.mysqlDriverConn.ResetSession(ctx)
}

// IsValid makes the pool discard such a connection when it is given back.
func (bc *batchConn) IsValid() bool {
	return !bc.lost.Load() && !bc.hosts.retired(bc.host) && bc.mysqlDriverConn.IsValid()
}

func newBatchConn(dc driver.Conn) (*batchConn, error) {
	bc := &batchConn{stmts: make(map[batchStmtKey]driver.Stmt)}
	var ok bool
	if bc.mysqlDriverConn, ok = dc.(mysqlDriverConn); !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("cannot use MySQL driver connection %T: it lacks an interface the batch path forwards", dc)
	}
	return bc, nil
}

// Close closes the prepared statements, then the connection.
func (bc *batchConn) Close() error {
	for k, st := range bc.stmts {
		_ = st.Close()
		delete(bc.stmts, k)
	}
	return bc.mysqlDriverConn.Close()
}

// batchRetries bounds how often a batch runs again on another connection (onBatchConn).
const batchRetries = 2

// onBatchConn runs fn in a transaction on one of the pool's batch connections. The pool's
// liveness check discards a connection the server dropped before handing it out
// (TestMySQLBatchConn); a failed rollback (connTx.rollback) or a lost node (batchConn.seen)
// makes the pool discard it after use.
//
// fn runs again, on another connection, when it failed before its commit was sent because
// the connection's node was lost (the server rolls back a transaction whose connection
// breaks, and a node outside the primary component commits nothing) or because a statement
// was rolled back as a deadlock: its transaction applied nothing. So the loss of a database
// node fails only the batches whose commit was in flight, whose outcome is unknown. An error
// of the commit itself is never retried, a deadlock included (a Galera certification
// conflict surfaces there): a node that leaves the primary component during a commit can
// report a deadlock for a write set the others commit.
func (s *sqlStore) onBatchConn(ctx context.Context, fn func(*connTx) error) error {
	for attempt := 0; ; attempt++ {
		var (
			tx       *connTx
			acquired bool
		)
		err := s.withBatchConn(ctx, func(bc *batchConn) error {
			acquired = true
			var err error
			if tx, err = bc.begin(ctx); err != nil {
				return fmt.Errorf("cannot begin batch: %w", err)
			}
			return fn(tx)
		})
		// No connection at all: database/sql and the connector have tried every node
		// already.
		if err == nil || !acquired || attempt >= batchRetries || ctx.Err() != nil || (tx != nil && tx.commitSent) {
			return err
		}
		switch {
		case s.d.isRetryable(err):
			s.m.batchRetriesConflict.Inc()
		case nodeLost(err):
			s.m.batchRetriesNodeLost.Inc()
		default:
			return err
		}
	}
}

// withBatchConn runs fn on one of the pool's batch connections.
func (s *sqlStore) withBatchConn(ctx context.Context, fn func(*batchConn) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("cannot begin batch: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		bc, ok := dc.(*batchConn)
		if !ok {
			return fmt.Errorf("cannot begin batch: %T is not a batch connection", dc)
		}
		return fn(bc)
	})
}

// begin starts a batch transaction on the connection.
func (bc *batchConn) begin(ctx context.Context) (*connTx, error) {
	tx, err := bc.BeginTx(ctx, driver.TxOptions{})
	if err != nil {
		return nil, err
	}
	return &connTx{bc: bc, tx: tx}, nil
}

// connTx is a batch transaction on a batchConn.
type connTx struct {
	bc *batchConn
	tx driver.Tx
	// commitSent is set once the commit is sent: from then on a lost node leaves the
	// outcome unknown.
	commitSent bool
}

// bind fills the connection's argument buffer with args, converted as database/sql would
// (the driver's CheckNamedValue). The caller clears it with unbind after the statement.
func (t *connTx) bind(args []any) ([]driver.NamedValue, error) {
	nv := t.bc.args[:0]
	for i, a := range args {
		nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: a})
		if err := t.bc.CheckNamedValue(&nv[i]); err != nil {
			clear(nv)
			return nil, fmt.Errorf("cannot convert argument %d (%T): %w", i+1, a, err)
		}
	}
	t.bc.args = nv
	return nv, nil
}

// unbind drops the buffer's references to the last statement's values.
func (t *connTx) unbind() { clear(t.bc.args) }

func (t *connTx) exec(ctx context.Context, query string, args []any) (int64, error) {
	return driverRowsAffected(t.execResult(ctx, query, args))
}

// execFirstID runs an INSERT and returns the rows it inserted and the first id it gave
// (LAST_INSERT_ID()).
func (t *connTx) execFirstID(ctx context.Context, query string, args []any) (n, first int64, err error) {
	return driverInsert(t.execResult(ctx, query, args))
}

func (t *connTx) execResult(ctx context.Context, query string, args []any) (driver.Result, error) {
	nv, err := t.bind(args)
	if err != nil {
		return nil, err
	}
	defer t.unbind()
	res, err := t.bc.ExecContext(ctx, query, nv)
	if errors.Is(err, driver.ErrSkip) {
		// interpolateParams=false in the DSN: the driver sends arguments only to prepared
		// statements, as database/sql would do here.
		return t.execOnce(ctx, query, nv)
	}
	return res, err
}

// execOnce prepares query, runs it once and closes it.
func (t *connTx) execOnce(ctx context.Context, query string, nv []driver.NamedValue) (driver.Result, error) {
	st, err := t.bc.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	res, err := st.(driver.StmtExecContext).ExecContext(ctx, nv)
	return res, t.bc.seen(err)
}

func (t *connTx) execPrepared(ctx context.Context, key batchStmtKey, ncols int, args []any) (int64, error) {
	return driverRowsAffected(t.execPreparedResult(ctx, key, ncols, args))
}

// execPreparedFirstID is execFirstID through the statement of key (see execPrepared).
func (t *connTx) execPreparedFirstID(ctx context.Context, key batchStmtKey, ncols int, args []any) (n, first int64, err error) {
	return driverInsert(t.execPreparedResult(ctx, key, ncols, args))
}

func (t *connTx) execPreparedResult(ctx context.Context, key batchStmtKey, ncols int, args []any) (driver.Result, error) {
	st, ok := t.bc.stmts[key]
	if !ok {
		var err error
		if st, err = t.bc.PrepareContext(ctx, key.head+valuesList(ncols, key.rows)+key.tail); err != nil {
			return nil, fmt.Errorf("cannot prepare a %d-row statement: %w", key.rows, err)
		}
		t.bc.stmts[key] = st
	}
	nv, err := t.bind(args)
	if err != nil {
		return nil, err
	}
	defer t.unbind()
	res, err := st.(driver.StmtExecContext).ExecContext(ctx, nv)
	return res, t.bc.seen(err)
}

// query runs a read on the driver connection with args bound in the connection's buffer,
// preparing it when the driver asks to (interpolateParams=false). done closes the rows, the
// statement and releases the buffer.
func (t *connTx) query(ctx context.Context, query string, args []any) (rows driver.Rows, done func(), err error) {
	nv, err := t.bind(args)
	if err != nil {
		return nil, nil, err
	}
	var st driver.Stmt
	rows, err = t.bc.QueryContext(ctx, query, nv)
	if errors.Is(err, driver.ErrSkip) {
		if st, err = t.bc.PrepareContext(ctx, query); err == nil {
			rows, err = st.(driver.StmtQueryContext).QueryContext(ctx, nv)
			err = t.bc.seen(err)
		}
	}
	done = func() {
		if rows != nil {
			_ = rows.Close()
		}
		if st != nil {
			_ = st.Close()
		}
		t.unbind()
	}
	if err != nil {
		done()
		return nil, nil, err
	}
	return rows, done, nil
}

func (t *connTx) queryInts(ctx context.Context, query string, args []any, row func([]int64)) error {
	rows, done, err := t.query(ctx, query, args)
	if err != nil {
		return err
	}
	defer done()
	vals := make([]driver.Value, len(rows.Columns()))
	ints := make([]int64, len(vals))
	for {
		if err := rows.Next(vals); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		for i, v := range vals {
			if ints[i], err = driverInt64(v); err != nil {
				return fmt.Errorf("column %d: %w", i+1, err)
			}
		}
		row(ints)
	}
}

func (t *connTx) queryIDNames(ctx context.Context, query string, args []any, row func(int64, string)) error {
	rows, done, err := t.query(ctx, query, args)
	if err != nil {
		return err
	}
	defer done()
	vals := make([]driver.Value, 2)
	for {
		if err := rows.Next(vals); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		id, err := driverInt64(vals[0])
		if err != nil {
			return fmt.Errorf("column 1: %w", err)
		}
		var name string
		switch v := vals[1].(type) {
		case []byte:
			name = string(v)
		case string:
			name = v
		default:
			return fmt.Errorf("column 2: unexpected %T", v)
		}
		row(id, name)
	}
}

func (t *connTx) commit() error {
	t.commitSent = true
	return t.tx.Commit()
}

// rollback rolls the transaction back. When that fails, the connection's state is unknown:
// the error then also wraps driver.ErrBadConn, which makes the pool discard the connection
// once sql.Conn.Raw returns it.
func (t *connTx) rollback() error {
	if err := t.tx.Rollback(); err != nil {
		return errors.Join(err, driver.ErrBadConn)
	}
	return nil
}

// driverInt64 reads an integer column as the driver returns it: int64 from a prepared
// statement, its decimal text from an interpolated one.
func driverInt64(v driver.Value) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case []byte:
		return strconv.ParseInt(string(v), 10, 64)
	default:
		return 0, fmt.Errorf("cannot read %T as an integer", v)
	}
}

// driverInsert returns an INSERT's row count and the first id it gave.
func driverInsert(res driver.Result, err error) (int64, int64, error) {
	if err != nil {
		return 0, 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, 0, err
	}
	first, err := res.LastInsertId()
	return n, first, err
}

func driverRowsAffected(res driver.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
