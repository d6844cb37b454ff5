package persist

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/axe-sched/axe/model"
)

// On a MariaDB Galera cluster (docs/galera.md) a node's row locks and named locks are its
// own: a transaction on node B does not wait for one on node A. What orders writes across
// the cluster is certification: every write set is certified in one total order, and one
// that modifies a row another committed after it began (it did not see that write) fails,
// on its commit, as a deadlock (1213). So on Galera what relies on a lock on one server
// relies on a write instead:
//
//   - The fence (R8.3). On one server a fenced write reads the fence row LOCK IN SHARE MODE
//     and a takeover, which updates that row, waits for it. On Galera the fenced write
//     updates the fence row itself (galeraFence): its write set then shares a key with every
//     takeover's, so of a write of epoch e and the takeover to e+1 through another node, the
//     one certified later fails unless it saw the other. A write that saw the takeover
//     matched no row (its UPDATE asks for epoch e). Either way no write of epoch e is ordered
//     after the takeover: each is in the cluster's order before it, where the new primary's
//     causal reads see it, or it applied nothing.

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
// other failed commit. On Galera a fenced write whose commit failed as a deadlock rereads
// the fence (a causal read: the node first applies what the cluster committed): when it
// has moved past epoch, the error wraps ErrLeaseLost as well as err. The write did not
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
	return fmt.Errorf("write of epoch %d refused at commit: lease %q is at epoch %d: %w (%w)", epoch, lease, current, model.ErrLeaseLost, err)
}
