package persist

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/axe-sched/axe/model"
)

// This file holds what high availability needs of the store (docs/ha.md): the lease judged by the
// database's clock, the nodes table, and fencing every write by the lease epoch.
//
// No statement here takes a time from the caller. Expiries and last-seen times are written
// and compared by the database itself, in UTC (UTC_TIMESTAMP(6) on MySQL, whatever the
// session's time zone; strftime('now') on SQLite), so two nodes whose clocks disagree still
// agree on who holds the lease.

// Policies for an HTTP run left in doubt (TaskDef.OnLost).
const (
	// OnLostFail records the run lost and moves the task on: at most once. The default.
	OnLostFail = "fail"
	// OnLostResend sends the same ticket again as a new attempt of the same fire, for
	// endpoints that de-duplicate on X-Axe-Ticket.
	OnLostResend = "resend"
)

// Node roles stored in the nodes table.
const (
	RolePrimary = "primary"
	RoleBackup  = "backup"
	RoleStopped = "stopped"
	// RoleLeaving is a node of the shard loop that is stopping gracefully: it still holds
	// its shards while its engine drains, then releases them. The other nodes count it out
	// of the live set and look for its shards often, so they take each as soon as it is
	// released rather than at their next renewal.
	RoleLeaving = "leaving"
)

// LeaseState is a lease as the database judged it when it was read.
type LeaseState struct {
	model.Lease
	// Held is true while a holder is named and its expiry is ahead of the database's now.
	Held bool
	// Remaining is the time left by the database's clock; <= 0 once expired.
	Remaining time.Duration
}

// Node is one scheduler process sharing the database (the nodes table).
type Node struct {
	ID        string `json:"id"`
	Advertise string `json:"advertise"`
	Role      string `json:"role"`
	// Instance tells two processes with one id apart (a restart, or a mistake).
	Instance string `json:"instance"`
	// LastSeen is the database's time of the node's last touch (Unix ms).
	LastSeen int64 `json:"last_seen"`
	// Age is how long ago that was, by the database's clock.
	Age time.Duration `json:"age_ns"`
}

// haSQL is the clock arithmetic of a dialect.
type haSQL struct {
	// now is the database's current time in the stored format.
	now string
	// shift is now moved by the duration bound to its one placeholder (see shiftArg).
	shift    string
	shiftArg func(time.Duration) any
	// leftUS(col) is col minus now, in microseconds; epochMS(col) is col as Unix ms.
	leftUS  func(col string) string
	epochMS func(col string) string
	// readOnly is a query of one integer: non-zero when the server refuses writes.
	readOnly string
}

var mysqlHA = haSQL{
	now:      `UTC_TIMESTAMP(6)`,
	shift:    `UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND`,
	shiftArg: func(d time.Duration) any { return d.Microseconds() },
	leftUS:   func(col string) string { return `TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), ` + col + `)` },
	epochMS: func(col string) string {
		return `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + col + `) DIV 1000)`
	},
	readOnly: `SELECT @@global.read_only`,
}

// sqliteTime is the text format of SQLite's stored times (UTC, milliseconds).
const sqliteTime = `'%Y-%m-%d %H:%M:%f'`

var sqliteHA = haSQL{
	now:      `strftime(` + sqliteTime + `, 'now')`,
	shift:    `strftime(` + sqliteTime + `, 'now', ?)`,
	shiftArg: func(d time.Duration) any { return fmt.Sprintf("%+.3f seconds", d.Seconds()) },
	// Both times hold whole milliseconds, but a julianday double near 2.46e6 days carries
	// about 40µs of rounding: the difference is rounded to the millisecond it really is.
	leftUS: func(col string) string {
		return `(CAST(ROUND((julianday(` + col + `) - julianday('now')) * 86400000) AS INTEGER) * 1000)`
	},
	epochMS: func(col string) string {
		return `CAST(ROUND((julianday(` + col + `) - 2440587.5) * 86400000) AS INTEGER)`
	},
	readOnly: `SELECT 0`,
}

func (s *sqlStore) ha() *haSQL {
	if s.d.kind == SchemeMySQL {
		return &mysqlHA
	}
	return &sqliteHA
}

// ---- lease ----

// leaseCols reads a lease row with the database's judgement of it.
func (s *sqlStore) leaseCols() string {
	h := s.ha()
	return `holder, epoch, ` + h.epochMS("expiry") + `, ` + h.leftUS("expiry")
}

func scanLease(row interface{ Scan(...any) error }, name string) (LeaseState, error) {
	l := LeaseState{Lease: model.Lease{Name: name}}
	var leftUS int64
	if err := row.Scan(&l.Holder, &l.Epoch, &l.ExpiresAt, &leftUS); err != nil {
		return LeaseState{}, err
	}
	l.Remaining = time.Duration(leftUS) * time.Microsecond
	l.Held = l.Holder != "" && l.Remaining > 0
	return l, nil
}

// TakeLease takes the lease with epoch+1 when it is expired, released or named for holder.
// The update and the read of its result share one transaction, so the epoch returned is the
// one this call wrote.
func (s *sqlStore) TakeLease(ctx context.Context, name, holder string, ttl time.Duration) (LeaseState, bool, error) {
	if holder == "" {
		return LeaseState{}, false, errors.New("cannot take a lease for an empty holder")
	}
	for attempt := 0; ; attempt++ {
		l, ok, err := s.takeLease(ctx, name, holder, ttl)
		if err == nil || attempt >= leaseRetries {
			return l, ok, err
		}
		switch {
		case errors.Is(err, errNoLeaseRow):
			if _, err := s.db.ExecContext(ctx, s.d.ensureLease, name); err != nil {
				return LeaseState{}, false, fmt.Errorf("cannot create lease %q: %w", name, err)
			}
		case s.d.isRetryable(err):
		default:
			return l, ok, err
		}
	}
}

// fenceRow names the lease table's row that fences the batches of lease name: it holds the
// current epoch, written by a takeover (TakeLease). Batches check and share-lock it (on
// Galera, write it: galeraFence), never the lease row, which renewals write every few
// seconds: a renewal so never waits behind a node's own batches.
func fenceRow(name string) string { return name + "#fence" }

// errNoLeaseRow tells TakeLease to create the lease row and try again.
var errNoLeaseRow = errors.New("no lease row")

func (s *sqlStore) takeLease(ctx context.Context, name, holder string, ttl time.Duration) (LeaseState, bool, error) {
	h := s.ha()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return LeaseState{}, false, fmt.Errorf("cannot begin taking lease %q: %w", name, err)
	}
	defer rollback(tx)
	res, err := tx.ExecContext(ctx, `UPDATE lease SET holder = ?, epoch = epoch + 1, expiry = `+h.shift+
		` WHERE name = ? AND (holder = '' OR holder = ? OR expiry <= `+h.now+`)`,
		holder, h.shiftArg(ttl), name, holder)
	if err != nil {
		return LeaseState{}, false, fmt.Errorf("cannot take lease %q: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return LeaseState{}, false, fmt.Errorf("cannot take lease %q: %w", name, err)
	}
	l, err := scanLease(tx.QueryRowContext(ctx, `SELECT `+s.leaseCols()+` FROM lease WHERE name = ?`, name), name)
	if errors.Is(err, sql.ErrNoRows) {
		return LeaseState{}, false, errNoLeaseRow
	}
	if err != nil {
		return LeaseState{}, false, fmt.Errorf("cannot read lease %q: %w", name, err)
	}
	if n == 1 {
		// The fence row takes the new epoch in the same transaction. Its update waits for the
		// batches of the previous holder that are still committing on the same database node
		// (they lock it), and every batch of that holder after this commit fails its epoch
		// check. On Galera a batch through another node is not waited for: certification
		// orders it before this takeover or refuses one of the two (galera.go).
		if _, err := tx.ExecContext(ctx, s.d.ensureLease, fenceRow(name)); err != nil {
			return LeaseState{}, false, fmt.Errorf("cannot create the fence of lease %q: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE lease SET epoch = ? WHERE name = ?`, l.Epoch, fenceRow(name)); err != nil {
			return LeaseState{}, false, fmt.Errorf("cannot fence lease %q: %w", name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return LeaseState{}, false, fmt.Errorf("cannot commit lease %q: %w", name, err)
	}
	return l, n == 1, nil
}

// RenewLease is the lease's renewal, a compare-and-swap on holder and epoch (docs/ha.md,
// "The lease").
func (s *sqlStore) RenewLease(ctx context.Context, name, holder string, epoch int64, ttl time.Duration) error {
	h := s.ha()
	res, err := s.db.ExecContext(ctx, `UPDATE lease SET expiry = `+h.shift+` WHERE name = ? AND holder = ? AND epoch = ?`,
		h.shiftArg(ttl), name, holder, epoch)
	if err != nil {
		return fmt.Errorf("cannot renew lease %q: %w", name, err)
	}
	// The expiry moves on with the database's clock, so a matched row is always a changed
	// one: 0 means another node took the lease (or it was released).
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("cannot renew lease %q: %w", name, err)
	} else if n == 0 {
		return fmt.Errorf("cannot renew lease %q at epoch %d for %s: %w", name, epoch, holder, model.ErrLeaseLost)
	}
	return nil
}

// ReleaseLease expires holder's lease at once, keeping the epoch.
func (s *sqlStore) ReleaseLease(ctx context.Context, name, holder string, epoch int64) error {
	h := s.ha()
	if _, err := s.db.ExecContext(ctx, `UPDATE lease SET holder = '', expiry = `+h.now+` WHERE name = ? AND holder = ? AND epoch = ?`,
		name, holder, epoch); err != nil {
		return fmt.Errorf("cannot release lease %q: %w", name, err)
	}
	return nil
}

// LeaseState returns the lease as the database judges it now.
func (s *sqlStore) LeaseState(ctx context.Context, name string) (LeaseState, error) {
	l, err := scanLease(s.db.QueryRowContext(ctx, `SELECT `+s.leaseCols()+` FROM lease WHERE name = ?`, name), name)
	if errors.Is(err, sql.ErrNoRows) {
		return LeaseState{}, nil
	}
	if err != nil {
		return LeaseState{}, fmt.Errorf("cannot read lease %q: %w", name, err)
	}
	return l, nil
}

// ReadLease returns the lease row, or a zero Lease when none exists or it was never held.
func (s *sqlStore) ReadLease(ctx context.Context, name string) (model.Lease, error) {
	l, err := s.LeaseState(ctx, name)
	if err != nil || l.Epoch == 0 {
		return model.Lease{}, err
	}
	return l.Lease, nil
}

// ---- nodes ----

// ClaimNode takes the id for n unless a live other instance has it.
func (s *sqlStore) ClaimNode(ctx context.Context, n Node, liveWithin time.Duration) (Node, error) {
	h := s.ha()
	res, err := s.db.ExecContext(ctx, `UPDATE nodes SET advertise = ?, role = ?, instance = ?, started_at = `+h.now+
		`, last_seen = `+h.now+` WHERE id = ? AND (instance = ? OR role = ? OR last_seen <= `+h.shift+`)`,
		clip(n.Advertise, nameLen), n.Role, n.Instance, n.ID, n.Instance, RoleStopped, h.shiftArg(-liveWithin))
	if err != nil {
		return Node{}, fmt.Errorf("cannot claim node id %q: %w", n.ID, err)
	}
	if k, err := res.RowsAffected(); err == nil && k == 1 {
		return n, nil
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO nodes (id, advertise, role, instance, started_at, last_seen) VALUES (?, ?, ?, ?, `+
		h.now+`, `+h.now+`)`, n.ID, clip(n.Advertise, nameLen), n.Role, n.Instance)
	if err == nil {
		return n, nil
	}
	if !s.d.isUniqueViolation(err) {
		return Node{}, fmt.Errorf("cannot claim node id %q: %w", n.ID, err)
	}
	nodes, err := s.ListNodes(ctx)
	if err != nil {
		return Node{}, err
	}
	for _, o := range nodes {
		if o.ID == n.ID {
			return o, fmt.Errorf("cannot claim node id %q: %s (instance %s) was seen %s ago: %w",
				n.ID, o.Advertise, o.Instance, o.Age.Round(time.Millisecond), ErrNodeIDTaken)
		}
	}
	return Node{}, fmt.Errorf("cannot claim node id %q: %w", n.ID, ErrNodeIDTaken)
}

// TouchNode sets the node's role and last-seen time.
func (s *sqlStore) TouchNode(ctx context.Context, id, instance, role string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE nodes SET role = ?, last_seen = `+s.ha().now+` WHERE id = ? AND instance = ?`,
		role, id, instance)
	if err != nil {
		return fmt.Errorf("cannot touch node %q: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("cannot touch node %q: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("cannot touch node %q: another instance claimed it: %w", id, ErrNodeIDTaken)
	}
	return nil
}

// ListNodes returns every node ordered by id.
func (s *sqlStore) ListNodes(ctx context.Context) ([]Node, error) {
	h := s.ha()
	rows, err := s.db.QueryContext(ctx, `SELECT id, advertise, role, instance, `+h.epochMS("last_seen")+`, `+
		h.leftUS("last_seen")+` FROM nodes ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("cannot query nodes: %w", err)
	}
	defer rows.Close()
	var out []Node
	for rows.Next() {
		var (
			n      Node
			leftUS int64
		)
		if err := rows.Scan(&n.ID, &n.Advertise, &n.Role, &n.Instance, &n.LastSeen, &leftUS); err != nil {
			return nil, fmt.Errorf("cannot scan node: %w", err)
		}
		n.Age = -time.Duration(leftUS) * time.Microsecond
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read nodes: %w", err)
	}
	return out, nil
}

// ReadOnly reports whether the server refuses writes.
func (s *sqlStore) ReadOnly(ctx context.Context) (bool, error) {
	var ro int64
	if err := s.db.QueryRowContext(ctx, s.ha().readOnly).Scan(&ro); err != nil {
		return false, fmt.Errorf("cannot read @@read_only: %w", err)
	}
	return ro != 0, nil
}

// ---- fencing ----

// fence is the lease epoch every write of a fenced store checks.
type fence struct {
	lease string
	epoch int64
}

// Fenced returns a view of s whose every write checks, inside its own transaction, that the lease
// named lease still has epoch (docs/ha.md, "Fencing"): task creates, edits and deletes, executor
// writes, concurrency limits and batches (a batch without an epoch gets this one). A write that
// finds another epoch applies nothing, returns an error wrapping ErrLeaseLost, and calls onLost
// (when set) before returning, so the caller can stop dispatching at once. Reads are s's own.
func Fenced(s Store, lease string, epoch int64, onLost func(error)) (Store, error) {
	ss, ok := s.(*sqlStore)
	if !ok {
		return nil, fmt.Errorf("cannot fence a %T store", s)
	}
	if lease == "" || epoch <= 0 {
		return nil, fmt.Errorf("cannot fence by lease %q at epoch %d", lease, epoch)
	}
	c := *ss
	c.fence = &fence{lease: lease, epoch: epoch}
	return &fencedStore{sqlStore: &c, onLost: onLost}, nil
}

// fencedStore reports fence failures of its sqlStore to onLost.
type fencedStore struct {
	*sqlStore
	onLost func(error)
}

// check is lost for a write outside a batch, once a failed commit is told apart from one that
// certification refused for a takeover (refusedAtCommit).
func (f *fencedStore) check(ctx context.Context, err error) error {
	return f.lost(f.refusedAtCommit(ctx, f.fence.lease, f.fence.epoch, err))
}

// lost calls onLost for a write the fence refused.
func (f *fencedStore) lost(err error) error {
	if err != nil && errors.Is(err, model.ErrLeaseLost) && f.onLost != nil {
		f.onLost(err)
	}
	return err
}

func (f *fencedStore) CreateTask(ctx context.Context, def *model.TaskDef, rt *model.Runtime) error {
	return f.check(ctx, f.sqlStore.CreateTask(ctx, def, rt))
}

func (f *fencedStore) UpdateTaskDef(ctx context.Context, def *model.TaskDef) error {
	return f.check(ctx, f.sqlStore.UpdateTaskDef(ctx, def))
}

func (f *fencedStore) DeleteTask(ctx context.Context, id int64) error {
	return f.check(ctx, f.sqlStore.DeleteTask(ctx, id))
}

func (f *fencedStore) UpsertExecutor(ctx context.Context, e *model.Executor) error {
	return f.check(ctx, f.sqlStore.UpsertExecutor(ctx, e))
}

func (f *fencedStore) Heartbeat(ctx context.Context, app, address string, at int64) error {
	return f.check(ctx, f.sqlStore.Heartbeat(ctx, app, address, at))
}

func (f *fencedStore) SetExecutorStatus(ctx context.Context, app, address, status string) error {
	return f.check(ctx, f.sqlStore.SetExecutorStatus(ctx, app, address, status))
}

func (f *fencedStore) DeleteExecutor(ctx context.Context, app, address string) error {
	return f.check(ctx, f.sqlStore.DeleteExecutor(ctx, app, address))
}

func (f *fencedStore) PutConcurrencyLimit(ctx context.Context, l model.ConcurrencyLimit) error {
	return f.check(ctx, f.sqlStore.PutConcurrencyLimit(ctx, l))
}

func (f *fencedStore) DeleteConcurrencyLimit(ctx context.Context, kind, name string) (bool, error) {
	ok, err := f.sqlStore.DeleteConcurrencyLimit(ctx, kind, name)
	return ok, f.check(ctx, err)
}

func (f *fencedStore) ApplyBatch(ctx context.Context, b *Batch) error {
	if b.Epoch == 0 {
		fb := *b
		fb.Epoch, fb.LeaseName = f.fence.epoch, f.fence.lease
		// ApplyBatch itself tells a batch refused at commit (refusedAtCommit).
		return f.lost(f.sqlStore.ApplyBatch(ctx, &fb))
	}
	return f.lost(f.sqlStore.ApplyBatch(ctx, b))
}

// begin starts a write transaction; on a fenced store it first checks the epoch, holding
// the fence row shared until commit so a takeover waits for this write (on Galera, writing
// it: checkEpoch), and with shard fences in ctx (WithShardFences) it checks them the same
// way (checkShardFences).
func (s *sqlStore) begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return tx, err
	}
	if s.fence != nil {
		if err := s.checkEpoch(ctx, sqlTx{tx}, s.fence.lease, s.fence.epoch); err != nil {
			_ = tx.Rollback()
			return nil, err
		}
	}
	if fs := shardFencesOf(ctx); len(fs) > 0 {
		fs, err := checkFences(fs)
		if err == nil {
			err = s.checkShardFences(ctx, sqlTx{tx}, fs)
		}
		if err != nil {
			_ = tx.Rollback()
			return nil, err
		}
	}
	return tx, nil
}

// exec runs a single write statement; on a fenced store, or with shard fences in ctx, inside
// a transaction that checks them first (begin).
func (s *sqlStore) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if s.fence == nil && len(shardFencesOf(ctx)) == 0 {
		return s.db.ExecContext(ctx, q, args...)
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer rollback(tx)
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return res, nil
}
