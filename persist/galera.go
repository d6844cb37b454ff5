package persist

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/axe-sched/axe/model"
)

// On a MariaDB Galera cluster (docs/galera.md) a node's row locks and named locks are its
// own: a transaction on node B does not wait for one on node A. What orders writes across
// the cluster is certification: every write set is certified in one total order, and one
// that modifies a row another committed after it began (it did not see that write) fails,
// on its commit, as a deadlock (1213). So on Galera the store makes the two things that rely
// on locks on one server rely on writes instead:
//
//   - The fence (docs/ha.md, "Fencing"). On one server a fenced write reads the fence row LOCK IN
//     SHARE MODE and a takeover, which updates that row, waits for it. On Galera the fenced write
//     updates the fence row itself (galeraFence): its write set then shares a key with every
//     takeover's, so of a write of epoch e and the takeover to e+1 through another node, the one
//     certified later fails unless it saw the other. A write that saw the takeover matched no row
//     (its UPDATE asks for epoch e). Either way no write of epoch e is ordered after the takeover:
//     each is in the cluster's order before it, where the new primary's causal reads see it, or it
//     applied nothing.
//   - Migrate's lock. GET_LOCK is one node's; on Galera Migrate takes a row of schema_lock by
//     a committed conditional UPDATE, which certification lets only one node win
//     (galeraLockSchema).

// mysqlWsrepOn reports whether the server is a Galera node with replication on. MySQL
// without wsrep has no such variable: false, as when it cannot be read.
func mysqlWsrepOn(db *sql.DB) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var on sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT @@wsrep_on`).Scan(&on); err != nil {
		return false
	}
	return on.Valid && on.Int64 == 1
}

// galeraFence is checkEpoch on Galera: one UPDATE of the fence row that applies only at
// epoch, so the check and the write that makes it conflict with a takeover are one
// statement. The fence row's expiry is not a time (only the lease row's is read): each
// fenced write moves it on by a microsecond, so that the row changes (InnoDB writes no row,
// and Galera certifies no key, for an UPDATE that changes nothing). The row lock it takes
// serialises a primary's fenced writes on its node, as a takeover's update waits for them.
func (s *sqlStore) galeraFence(ctx context.Context, tx batchTx, lease string, epoch int64) error {
	n, err := tx.exec(ctx, `UPDATE lease SET expiry = expiry + INTERVAL 1 MICROSECOND WHERE name = ? AND epoch = ?`,
		[]any{fenceRow(lease), epoch})
	if err != nil {
		return fmt.Errorf("cannot write the fence of lease %q: %w", lease, err)
	}
	if n == 1 {
		return nil
	}
	return s.readEpoch(ctx, tx, lease, epoch)
}

// readEpoch fails with ErrLeaseLost unless the lease's fence row carries epoch.
func (s *sqlStore) readEpoch(ctx context.Context, tx batchTx, lease string, epoch int64) error {
	found := false
	var current int64
	forShare := s.d.forShare
	if s.galera {
		forShare = "" // the lock would be this node's own; galeraFence wrote the row
	}
	err := tx.queryInts(ctx, `SELECT epoch FROM lease WHERE name = ?`+forShare, []any{fenceRow(lease)}, func(row []int64) {
		found, current = true, row[0]
	})
	if err != nil {
		return fmt.Errorf("cannot read lease %q: %w", lease, err)
	}
	if !found {
		return fmt.Errorf("cannot apply batch of epoch %d: lease %q does not exist: %w", epoch, lease, model.ErrLeaseLost)
	}
	if current != epoch {
		return fmt.Errorf("cannot apply batch of epoch %d: lease %q is at epoch %d: %w", epoch, lease, current, model.ErrLeaseLost)
	}
	return nil
}

// refusedAtCommit tells a fenced write that certification refused for a takeover from any
// other failed commit. On Galera a fenced write that failed as a deadlock (at its commit, or
// a statement's after the store's retries) rereads the fence (a causal read: the node first
// applies what the cluster committed): when it has moved past epoch, the error wraps
// ErrLeaseLost as well as err. The write did not
// commit after the takeover (galeraFence), so nothing is lost by reporting it refused; it
// is not run again, as no commit error is. Otherwise, and always off Galera, err is
// returned as it is: the outcome of a failed commit stays unknown.
func (s *sqlStore) refusedAtCommit(ctx context.Context, lease string, epoch int64, err error) error {
	if !s.galera || err == nil || errors.Is(err, model.ErrLeaseLost) || !s.d.isRetryable(err) || ctx.Err() != nil {
		return err
	}
	var current int64
	if rerr := s.db.QueryRowContext(ctx, `SELECT epoch FROM lease WHERE name = ?`, fenceRow(lease)).Scan(&current); rerr != nil || current == epoch {
		return err
	}
	return refusedByTakeover(lease, epoch, current, err)
}

// refusedByTakeover is the error of a write of lease at epoch that certification refused
// (err) while a takeover moved the fence to current.
func refusedByTakeover(lease string, epoch, current int64, err error) error {
	return fmt.Errorf("write of epoch %d refused as conflicting with a takeover: lease %q is at epoch %d: %w (%w)",
		epoch, lease, current, model.ErrLeaseLost, err)
}

// The schema lock on Galera.
const (
	// galeraSchemaLockTTL is how long a taken schema lock lasts by the database's clock
	// unless renewed: how long a Migrate that died holding it keeps the others waiting.
	galeraSchemaLockTTL = 60 * time.Second
	// galeraSchemaLockRenew is how often a Migrate renews the lock it holds.
	galeraSchemaLockRenew = 5 * time.Second
	// galeraSchemaLockPoll is how often a waiting Migrate tries the lock again.
	galeraSchemaLockPoll = 250 * time.Millisecond
)

// galeraSchemaLockTable holds Migrate's lock on Galera: one row, free when holder is empty
// or expiry (the database's clock, UTC) is past. Created before the lock is taken, as
// schema_migrations is, so it is no migration step.
const galeraSchemaLockTable = `CREATE TABLE IF NOT EXISTS schema_lock (
	name VARCHAR(64) NOT NULL,
	holder VARCHAR(64) NOT NULL,
	expiry DATETIME(6) NOT NULL,
	PRIMARY KEY (name)
)` + mysqlTableOpts

// errSchemaLockLost ends a Migrate whose schema lock another took after it expired.
var errSchemaLockLost = errors.New("the schema lock expired and another node took it")

// galeraLockSchema takes Migrate's lock on a Galera cluster: a committed UPDATE that names
// this Migrate holder of the schema_lock row while the row is free. Two nodes taking it
// through different database nodes both update the row; certification refuses the later
// commit (a deadlock, after which the node reads the row taken), so one holds it. It waits
// up to mysqlSchemaLockTimeoutSec as GET_LOCK does on one server. While held, the lock is
// renewed every galeraSchemaLockRenew; should a renewal find it taken (it expired while a
// long DDL held the cluster's commits), the returned context is cancelled, so that this
// Migrate stops at its next statement. unlock frees the row.
func (s *sqlStore) galeraLockSchema(ctx context.Context, conn *sql.Conn) (context.Context, func(), error) {
	if _, err := conn.ExecContext(ctx, galeraSchemaLockTable); err != nil {
		return nil, nil, fmt.Errorf("cannot create schema_lock: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO schema_lock (name, holder, expiry) VALUES ('migrate', '', '1970-01-01 00:00:00')
		ON DUPLICATE KEY UPDATE name = name`); err != nil && !s.d.isRetryable(err) {
		return nil, nil, fmt.Errorf("cannot create the schema lock: %w", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	holder := hex.EncodeToString(b[:])
	h := mysqlHA
	take := `UPDATE schema_lock SET holder = ?, expiry = ` + h.shift + ` WHERE name = 'migrate' AND (holder = '' OR holder = ? OR expiry <= ` + h.now + `)`
	deadline := time.Now().Add(mysqlSchemaLockTimeoutSec * time.Second)
	for {
		res, err := conn.ExecContext(ctx, take, holder, h.shiftArg(galeraSchemaLockTTL), holder)
		if err == nil {
			if n, err := res.RowsAffected(); err == nil && n == 1 {
				break
			}
		} else if !s.d.isRetryable(err) {
			return nil, nil, fmt.Errorf("cannot take the schema lock: %w", err)
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("cannot take the schema lock: another node held it for %d s", mysqlSchemaLockTimeoutSec)
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("cannot take the schema lock: %w", ctx.Err())
		case <-time.After(galeraSchemaLockPoll):
		}
	}
	mctx, cancel := context.WithCancelCause(ctx)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(galeraSchemaLockRenew)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-mctx.Done():
				return
			case <-t.C:
			}
			// Bounded, so that unlock does not wait on a renewal stuck on a frozen node.
			rctx, rcancel := context.WithTimeout(mctx, galeraSchemaLockRenew)
			res, err := s.db.ExecContext(rctx, `UPDATE schema_lock SET expiry = `+h.shift+` WHERE name = 'migrate' AND holder = ?`,
				h.shiftArg(galeraSchemaLockTTL), holder)
			rcancel()
			if err != nil {
				continue // the next renewal tries again; the lock lasts galeraSchemaLockTTL
			}
			if n, err := res.RowsAffected(); err == nil && n == 0 {
				cancel(errSchemaLockLost)
				return
			}
		}
	}()
	return mctx, func() {
		close(stop)
		<-stopped
		lost := context.Cause(mctx)
		cancel(nil)
		if errors.Is(lost, errSchemaLockLost) {
			return
		}
		// Background: the lock must be freed even when ctx was cancelled. Should this fail,
		// the lock expires after galeraSchemaLockTTL.
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		_, _ = conn.ExecContext(rctx, `UPDATE schema_lock SET holder = '', expiry = `+h.now+` WHERE name = 'migrate' AND holder = ?`, holder)
	}, nil
}
