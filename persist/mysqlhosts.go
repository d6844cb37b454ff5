package persist

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/go-sql-driver/mysql"
)

// A MySQL DSN may name several addresses, tcp(h1:3306,h2:3306,h3:3306): the nodes of one
// MariaDB Galera cluster. The store's connections all go to one node at a time, the first of
// the list that is synced, and move on when it dies or leaves the primary component
// (docs/galera.md).
//
// One node at a time, and the same order on every axe node, because a Galera node's locks
// are its own: a takeover waits for the old primary's writes in flight only on its own node,
// and refuses the others by certification instead (the fence on Galera, galera.go).

// hostConnectTimeout bounds connecting to one of several nodes, the node check included,
// when the DSN sets no timeout: a frozen node (its kernel still accepts connections) must
// not hold a connection attempt that the next node would answer.
const hostConnectTimeout = 2 * time.Second

// hostRetryAfter is how long a node that could not be connected to, or failed the check, is
// passed over by new connections while another node answers.
const hostRetryAfter = 5 * time.Second

// Galera's numbers the store reads.
const (
	// wsrepSynced is wsrep_local_state of a node that is part of the primary component and
	// has applied everything it received: the only state in which it serves the store.
	wsrepSynced = "4"
	// wsrepSyncWaitReads is the session's wsrep_sync_wait: every SELECT and every START
	// TRANSACTION first waits until the node has applied every write set the cluster had
	// committed when it was issued (a causal read). Writes need no wait: each of the
	// store's writes that decides on what it reads (the CAS of a batch, a lease take or
	// renewal, a node claim) either runs in such a transaction or is a single-row UPDATE
	// whose write set conflicts, at certification, with any write it did not see.
	wsrepSyncWaitReads = 1
	// mysqlErrWsrepNotReady is ER_UNKNOWN_COM_ERROR, what a Galera node outside the primary
	// component answers to any statement ("WSREP has not yet prepared node for application
	// use"): nothing ran.
	mysqlErrWsrepNotReady = 1047
)

// splitHosts finds the address of a go-sql-driver DSN as the driver does (between the first
// '(' after the last '@' before the last '/', and the ')' before that '/') and splits it at
// commas: dsn == prefix + strings.Join(addrs, ",") + suffix. A DSN without a parenthesised
// address gives one empty address.
func splitHosts(dsn string) (prefix string, addrs []string, suffix string, err error) {
	slash := strings.LastIndexByte(dsn, '/')
	if slash <= 0 || dsn[slash-1] != ')' {
		return dsn, []string{""}, "", nil
	}
	at := strings.LastIndexByte(dsn[:slash], '@')
	open := strings.IndexByte(dsn[at+1:slash], '(')
	if open < 0 {
		return dsn, []string{""}, "", nil
	}
	open += at + 1
	addr := dsn[open+1 : slash-1]
	prefix, suffix = dsn[:open+1], dsn[slash-1:]
	addrs = strings.Split(addr, ",")
	if len(addrs) == 1 {
		return prefix, addrs, suffix, nil
	}
	if network := dsn[at+1 : open]; network != "tcp" {
		return "", nil, "", fmt.Errorf("several database addresses need tcp(…), not %q", network)
	}
	seen := make(map[string]bool, len(addrs))
	for i, a := range addrs {
		if a == "" || strings.ContainsAny(a, "() /") {
			return "", nil, "", fmt.Errorf("database address %d of %d is not HOST[:PORT]: %q", i+1, len(addrs), a)
		}
		a = withPort(a)
		if seen[a] {
			return "", nil, "", fmt.Errorf("database address %s is listed twice", a)
		}
		seen[a] = true
	}
	return prefix, addrs, suffix, nil
}

// withPort adds MySQL's default port to an address without one, as the driver does.
func withPort(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return net.JoinHostPort(addr, "3306")
	}
	return addr
}

// hostSet is the database nodes of a store and the one its connections use.
type hostSet struct {
	addrs      []string
	connectors []driver.Connector
	// cur is the index of the node of the newest connection; connections to other nodes are
	// retired when next taken from the pool (batchConn.ResetSession). -1: none yet, or the
	// node was found gone.
	cur atomic.Int32
	// last is the index of the node of the newest connection, kept when cur is retired.
	last atomic.Int32
	// downUntil[i] is when node i may be tried again first (Unix ns; 0: now).
	downUntil []atomic.Int64
	// timeout bounds each connection attempt when there are several nodes.
	timeout time.Duration
	// m counts node switches and refusals: the store's series (storeMetrics).
	m *storeMetrics
}

// newHostSet builds one connector per address of cfg's DSN (addrs as splitHosts returned).
func newHostSet(cfg *mysql.Config, addrs []string) (*hostSet, error) {
	hs := &hostSet{timeout: hostConnectTimeout, m: newStoreMetrics(metrics.NewSet())}
	if cfg.Timeout > 0 {
		hs.timeout = cfg.Timeout
	}
	for _, a := range addrs {
		c := cfg.Clone()
		if len(addrs) > 1 {
			c.Addr = withPort(a)
		}
		connector, err := mysql.NewConnector(c)
		if err != nil {
			return nil, fmt.Errorf("cannot open mysql store: %w", err)
		}
		hs.addrs = append(hs.addrs, c.Addr)
		hs.connectors = append(hs.connectors, connector)
	}
	hs.downUntil = make([]atomic.Int64, len(addrs))
	hs.cur.Store(-1)
	hs.last.Store(-1)
	return hs, nil
}

func (hs *hostSet) multi() bool { return len(hs.addrs) > 1 }

// order is the order in which to try the nodes: as listed, those that failed within
// hostRetryAfter last (they are still tried when no other node answers).
func (hs *hostSet) order() []int {
	now := time.Now().UnixNano()
	out := make([]int, 0, len(hs.addrs))
	var later []int
	for i := range hs.addrs {
		if hs.downUntil[i].Load() > now {
			later = append(later, i)
			continue
		}
		out = append(out, i)
	}
	return append(out, later...)
}

// connect opens a connection to the first node that answers and passes checkNode, runs
// prepare on it, and returns it with the node's index.
func (hs *hostSet) connect(ctx context.Context, prepare func(context.Context, driver.Conn) error) (driver.Conn, int, error) {
	if !hs.multi() {
		dc, err := hs.connectOne(ctx, 0, prepare)
		if err != nil {
			return nil, 0, err
		}
		hs.cur.Store(0)
		return dc, 0, nil
	}
	var errs []error
	for _, i := range hs.order() {
		dc, err := hs.connectOne(ctx, i, prepare)
		if err == nil {
			hs.cur.Store(int32(i))
			if prev := hs.last.Swap(int32(i)); prev != int32(i) && prev >= 0 {
				hs.m.nodeSwitches.Inc()
			}
			return dc, i, nil
		}
		if errors.Is(err, errNotGalera) {
			return nil, 0, err
		}
		hs.m.nodeRefused.Inc()
		hs.downUntil[i].Store(time.Now().Add(hostRetryAfter).UnixNano())
		errs = append(errs, fmt.Errorf("%s: %w", hs.addrs[i], err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, 0, fmt.Errorf("cannot connect to any of %d database nodes: %w", len(hs.addrs), errors.Join(errs...))
}

// connectOne connects to node i. With several nodes the attempt has its own bound; with
// one, ctx alone bounds it, as without this layer.
func (hs *hostSet) connectOne(ctx context.Context, i int, prepare func(context.Context, driver.Conn) error) (driver.Conn, error) {
	if hs.multi() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, hs.timeout)
		defer cancel()
	}
	dc, err := hs.connectors[i].Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkNode(ctx, dc, hs.multi()); err != nil {
		_ = dc.Close()
		return nil, err
	}
	if err := prepare(ctx, dc); err != nil {
		_ = dc.Close()
		return nil, err
	}
	return dc, nil
}

// retire makes every connection to node i leave the pool when next taken, after one of them
// found the node gone; the next connection made finds a node that answers.
func (hs *hostSet) retire(i int) {
	if hs.multi() {
		hs.cur.CompareAndSwap(int32(i), -1)
	}
}

// retired reports whether connections to node i should leave the pool.
func (hs *hostSet) retired(i int) bool { return hs.multi() && hs.cur.Load() != int32(i) }

// errNotGalera refuses several addresses on servers that are not Galera nodes.
var errNotGalera = errors.New("not a Galera node")

// checkNode checks the server behind a new connection. A Galera node (wsrep_on) must be
// synced, ready and in the primary component, and its session gets wsrep_sync_wait so that
// reads see what other nodes committed. Several addresses (multi) are refused unless the
// server is a Galera node: between asynchronous replicas a write committed on one can be
// lost when the store moves to another, and axe would not know.
func checkNode(ctx context.Context, dc driver.Conn, multi bool) error {
	on, err := queryString(ctx, dc, `SELECT @@wsrep_on`)
	if mysqlErrIs(err, mysqlErrUnknownSystemVariable) {
		on, err = "0", nil // MySQL without wsrep
	}
	if err != nil {
		return fmt.Errorf("cannot check the database node: %w", err)
	}
	if on != "1" {
		if multi {
			return fmt.Errorf("cannot use several database addresses: the server is %w (wsrep_on is off); "+
				"asynchronous replicas can lose a committed write when the store moves to another one", errNotGalera)
		}
		return nil
	}
	st, err := wsrepStatus(ctx, dc)
	if err != nil {
		return err
	}
	if st["wsrep_ready"] != "ON" || st["wsrep_local_state"] != wsrepSynced || st["wsrep_cluster_status"] != "Primary" {
		return fmt.Errorf("the Galera node is not synced in the primary component (wsrep_ready %s, wsrep_local_state %s %s, wsrep_cluster_status %s)",
			st["wsrep_ready"], st["wsrep_local_state"], st["wsrep_local_state_comment"], st["wsrep_cluster_status"])
	}
	ex := dc.(driver.ExecerContext)
	if _, err := ex.ExecContext(ctx, fmt.Sprintf("SET SESSION wsrep_sync_wait = %d", wsrepSyncWaitReads), nil); err != nil {
		return fmt.Errorf("cannot set wsrep_sync_wait: %w", err)
	}
	return nil
}

// wsrepStatus reads the node's wsrep status variables the check needs.
func wsrepStatus(ctx context.Context, dc driver.Conn) (map[string]string, error) {
	rows, err := dc.(driver.QueryerContext).QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN
		('wsrep_ready', 'wsrep_local_state', 'wsrep_local_state_comment', 'wsrep_cluster_status')`, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot read the Galera node's status: %w", err)
	}
	defer rows.Close()
	out := make(map[string]string, 4)
	vals := make([]driver.Value, 2)
	for {
		if err := rows.Next(vals); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("cannot read the Galera node's status: %w", err)
		}
		out[strings.ToLower(driverString(vals[0]))] = driverString(vals[1])
	}
}

// queryString runs a query of one row and one column on a driver connection.
func queryString(ctx context.Context, dc driver.Conn, q string) (string, error) {
	rows, err := dc.(driver.QueryerContext).QueryContext(ctx, q, nil)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	vals := make([]driver.Value, 1)
	if err := rows.Next(vals); err != nil {
		return "", fmt.Errorf("cannot read %q: %w", q, err)
	}
	return driverString(vals[0]), nil
}

func driverString(v driver.Value) string {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// nodeLost reports an error after which the connection's node is not to be used: the node
// is gone (the connection broke or timed out) or refuses statements (outside the primary
// component). A statement that failed so before its transaction's commit was sent applied
// nothing.
func nodeLost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	return mysqlErrIs(err, mysqlErrWsrepNotReady) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne)
}
