package persist

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/axe-sched/axe/model"
)

// This file holds the shard leases of scale-out (docs/scale-out.md): one lease row per
// shard, named model.ShardLeaseName(n), in the lease table beside the primary's, with its
// own fence row (fenceRow) that a takeover moves to the new epoch in the same transaction.
// A node renews all the shards it holds in one statement, so the cost of holding shards
// does not grow with their number. As for the primary's lease, every expiry is the
// database's clock.

// ShardLease is one shard's lease as the database judged it when it was read.
type ShardLease struct {
	Shard int
	LeaseState
	// HandedOver is, on a shard TakeShards took, the hand-over point its previous holder
	// released it with (HandOverShards): the instant, in ms of that node's clock, from which
	// it fired nothing of the shard. 0 when the shard was not handed over (its holder died,
	// or released it without a point). HandedOverAgo is how long before the take the
	// release was, by the database's clock.
	HandedOver    int64
	HandedOverAgo time.Duration
}

// ShardFence is the epoch of one shard that a write is fenced by.
type ShardFence struct {
	Shard int
	Epoch int64
}

// ShardStore is what the shard leases of scale-out need of a store (ha.Shards).
type ShardStore interface {
	LeaseStore
	// TakeShards takes, for holder, each of shards whose lease is unheld, expired or named
	// for holder already, with its epoch+1 and an expiry ttl from the database's now, and
	// moves each taken shard's fence to the new epoch in the same transaction. It returns
	// the shards taken with their new epochs, ascending. A shard holder holds already is
	// taken again at a new epoch, fencing off what was written under the old one: a caller
	// passes only shards it does not hold (a restarted node retakes its previous instance's).
	TakeShards(ctx context.Context, holder string, shards []int, ttl time.Duration) ([]ShardLease, error)
	// RenewShards moves the expiry of every shard of held to ttl from the database's now, in
	// one statement, as a compare-and-swap on holder and each shard's epoch. It returns the
	// shards it could not renew (another holder, another epoch, released): the caller must
	// stop acting for them at once.
	RenewShards(ctx context.Context, holder string, held []ShardFence, ttl time.Duration) (lost []int, err error)
	// ReleaseShards ends holder's leases of held now, keeping their epochs, so that another
	// node takes them at its next attempt. A shard no longer held is left as it is.
	ReleaseShards(ctx context.Context, holder string, held []ShardFence) error
	// HandOverShards is ReleaseShards for a graceful hand-over: in the same transaction each
	// shard of held with a point in at (ms of holder's clock: the instant from which holder
	// fired nothing of it) is marked handed over at that point, and the next TakeShards of it
	// reports the point (ShardLease.HandedOver), so that the taker fires every fire due from
	// it rather than judging them misfires (docs/scale-out.md, "Hand-over point").
	HandOverShards(ctx context.Context, holder string, held []ShardFence, at map[int]int64) error
	// ShardLeases returns every shard lease row, ascending by shard, as the database judges
	// it now. A shard never taken may have no row.
	ShardLeases(ctx context.Context) ([]ShardLease, error)
}

var _ ShardStore = (*sqlStore)(nil)

// checkShard refuses a number that is no shard.
func checkShard(n int) error {
	if n < 0 || n >= model.ShardCount {
		return fmt.Errorf("%d is not a shard (0-%d)", n, model.ShardCount-1)
	}
	return nil
}

// checkShards validates and sorts a list of shard numbers, refusing repeats.
func checkShards(shards []int) ([]int, error) {
	out := slices.Clone(shards)
	slices.Sort(out)
	for i, n := range out {
		if err := checkShard(n); err != nil {
			return nil, err
		}
		if i > 0 && out[i-1] == n {
			return nil, fmt.Errorf("shard %d is named twice", n)
		}
	}
	return out, nil
}

// checkFences validates held and returns it sorted by shard.
func checkFences(held []ShardFence) ([]ShardFence, error) {
	out := slices.Clone(held)
	slices.SortFunc(out, func(a, b ShardFence) int { return a.Shard - b.Shard })
	for i, f := range out {
		if err := checkShard(f.Shard); err != nil {
			return nil, err
		}
		if f.Epoch <= 0 {
			return nil, fmt.Errorf("shard %d: epoch %d is not one a take gives", f.Shard, f.Epoch)
		}
		if i > 0 && out[i-1].Shard == f.Shard {
			return nil, fmt.Errorf("shard %d is named twice", f.Shard)
		}
	}
	return out, nil
}

// shardNames returns the lease row names of shards, and their fence rows when fences.
func shardNames(shards []int, fences bool) []any {
	out := make([]any, 0, 2*len(shards))
	for _, n := range shards {
		out = append(out, model.ShardLeaseName(n))
		if fences {
			out = append(out, fenceRow(model.ShardLeaseName(n)))
		}
	}
	return out
}

// fencePairs is the condition "name IN (…) AND ((name = ? AND epoch = ?) OR …)" over the
// lease rows of held (their fence rows when fences), and its arguments. The IN list lets the
// statement look the rows up by name (dialect.leaseByName), so that it reads, and locks, no
// other row.
func fencePairs(held []ShardFence, fences bool) (string, []any) {
	var b strings.Builder
	args := make([]any, len(held), 3*len(held)) // the IN list's names, then the pairs
	b.WriteString("name IN (" + placeholders(len(held)) + ") AND (")
	for i, f := range held {
		name := model.ShardLeaseName(f.Shard)
		if fences {
			name = fenceRow(name)
		}
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(name = ? AND epoch = ?)")
		args[i] = name
		args = append(args, name, f.Epoch)
	}
	b.WriteString(")")
	return b.String(), args
}

// ensureShardRows creates the lease and fence rows of shards that have none, in one
// statement. A shard's rows are never deleted, so this finds nothing to do after the first
// take of each shard.
func (s *sqlStore) ensureShardRows(ctx context.Context, shards []int) error {
	names := shardNames(shards, true)
	var have int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lease`+s.d.leaseByName+` WHERE name IN (`+placeholders(len(names))+`)`,
		names...).Scan(&have); err != nil {
		return fmt.Errorf("cannot read the shard leases: %w", err)
	}
	if have == len(names) {
		return nil
	}
	const row = `(?, '', 0)`
	head, tail, ok := strings.Cut(s.d.ensureLease, row)
	if !ok {
		return fmt.Errorf("cannot create shard leases: the dialect's lease insert has no %s", row)
	}
	q := head + row + strings.Repeat(", "+row, len(names)-1) + tail
	if _, err := s.db.ExecContext(ctx, q, names...); err != nil {
		return fmt.Errorf("cannot create the shard leases: %w", err)
	}
	return nil
}

func (s *sqlStore) TakeShards(ctx context.Context, holder string, shards []int, ttl time.Duration) ([]ShardLease, error) {
	if holder == "" {
		return nil, errors.New("cannot take shards for an empty holder")
	}
	shards, err := checkShards(shards)
	if err != nil {
		return nil, fmt.Errorf("cannot take shards: %w", err)
	}
	if len(shards) == 0 {
		return nil, nil
	}
	for attempt := 0; ; attempt++ {
		// Two nodes creating or taking the same shards through two Galera nodes:
		// certification lets one commit and refuses the other as a deadlock; the loser's
		// retry finds the rows made, and the shards held.
		err := s.ensureShardRows(ctx, shards)
		var taken []ShardLease
		if err == nil {
			taken, err = s.takeShards(ctx, holder, shards, ttl)
		}
		if err == nil || attempt >= leaseRetries || !s.d.isRetryable(err) {
			return taken, err
		}
	}
}

func (s *sqlStore) takeShards(ctx context.Context, holder string, shards []int, ttl time.Duration) ([]ShardLease, error) {
	h := s.ha()
	names := shardNames(shards, false)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot begin taking shards: %w", err)
	}
	defer rollback(tx)
	args := append([]any{holder, h.shiftArg(ttl)}, names...)
	args = append(args, holder)
	res, err := tx.ExecContext(ctx, `UPDATE lease`+s.d.leaseByName+` SET holder = ?, epoch = epoch + 1, expiry = `+h.shift+
		` WHERE name IN (`+placeholders(len(names))+`) AND (holder = '' OR holder = ? OR expiry <= `+h.now+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot take shards: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, fmt.Errorf("cannot take shards: %w", err)
	} else if n == 0 {
		return nil, nil
	}
	// Every row named for holder now was written by the update above (it matches holder's
	// own rows too), so each carries the epoch this transaction gave it.
	rows, err := tx.QueryContext(ctx, `SELECT name, `+s.leaseCols()+` FROM lease`+s.d.leaseByName+` WHERE name IN (`+
		placeholders(len(names))+`) AND holder = ?`, append(names, holder)...)
	if err != nil {
		return nil, fmt.Errorf("cannot read the shards taken: %w", err)
	}
	taken, err := scanShardLeases(rows)
	if err != nil {
		return nil, err
	}
	if err := s.readHandOvers(ctx, tx, taken); err != nil {
		return nil, err
	}
	// The fence rows take the new epochs in the same transaction: as for the primary's
	// lease (takeLease), the update waits for the batches of the previous holder still
	// committing on this database node, and every later batch of that holder fails its
	// check. Their hand-over marks go: they were the previous epoch's.
	var set strings.Builder
	fargs := make([]any, 0, 3*len(taken))
	set.WriteString(`UPDATE lease` + s.d.leaseByName + ` SET holder = '', epoch = CASE name`)
	for _, l := range taken {
		set.WriteString(` WHEN ? THEN ?`)
		fargs = append(fargs, fenceRow(model.ShardLeaseName(l.Shard)), l.Epoch)
	}
	set.WriteString(` END WHERE name IN (` + placeholders(len(taken)) + `)`)
	for _, l := range taken {
		fargs = append(fargs, fenceRow(model.ShardLeaseName(l.Shard)))
	}
	if _, err := tx.ExecContext(ctx, set.String(), fargs...); err != nil {
		return nil, fmt.Errorf("cannot fence the shards taken: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("cannot commit the shards taken: %w", err)
	}
	return taken, nil
}

// scanShardLeases reads rows of (name, leaseCols) and closes them.
func scanShardLeases(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close() error
}) ([]ShardLease, error) {
	defer rows.Close()
	var out []ShardLease
	for rows.Next() {
		var name string
		var l ShardLease
		var leftUS int64
		if err := rows.Scan(&name, &l.Holder, &l.Epoch, &l.ExpiresAt, &leftUS); err != nil {
			return nil, fmt.Errorf("cannot scan a shard lease: %w", err)
		}
		n, ok := model.ParseShardLeaseName(name)
		if !ok {
			continue
		}
		l.Shard, l.Name = n, name
		l.Remaining = time.Duration(leftUS) * time.Microsecond
		l.Held = l.Holder != "" && l.Remaining > 0
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the shard leases: %w", err)
	}
	slices.SortFunc(out, func(a, b ShardLease) int { return a.Shard - b.Shard })
	return out, nil
}

func (s *sqlStore) RenewShards(ctx context.Context, holder string, held []ShardFence, ttl time.Duration) ([]int, error) {
	held, err := checkFences(held)
	if err != nil {
		return nil, fmt.Errorf("cannot renew shards: %w", err)
	}
	if len(held) == 0 {
		return nil, nil
	}
	h := s.ha()
	cond, pairs := fencePairs(held, false)
	res, err := s.db.ExecContext(ctx, `UPDATE lease`+s.d.leaseByName+` SET expiry = `+h.shift+` WHERE holder = ? AND `+cond,
		append([]any{h.shiftArg(ttl), holder}, pairs...)...)
	if err != nil {
		return nil, fmt.Errorf("cannot renew shards: %w", err)
	}
	// As for RenewLease, a matched row is a changed one: the expiry moves on with the clock.
	n, err := res.RowsAffected()
	if err != nil {
		return nil, fmt.Errorf("cannot renew shards: %w", err)
	}
	if n == int64(len(held)) {
		return nil, nil
	}
	// Some were not renewed: read which. A shard that reads as still holder's at its epoch
	// was renewed; any other is lost, even one whose renewal the read raced with.
	shards := make([]int, len(held))
	for i, f := range held {
		shards[i] = f.Shard
	}
	names := shardNames(shards, false)
	rows, err := s.db.QueryContext(ctx, `SELECT name, `+s.leaseCols()+` FROM lease`+s.d.leaseByName+` WHERE name IN (`+placeholders(len(names))+`)`, names...)
	if err != nil {
		return nil, fmt.Errorf("cannot read the shards not renewed: %w", err)
	}
	now, err := scanShardLeases(rows)
	if err != nil {
		return nil, err
	}
	mine := make(map[int]int64, len(now))
	for _, l := range now {
		if l.Holder == holder && l.Held {
			mine[l.Shard] = l.Epoch
		}
	}
	var lost []int
	for _, f := range held {
		if e, ok := mine[f.Shard]; !ok || e != f.Epoch {
			lost = append(lost, f.Shard)
		}
	}
	return lost, nil
}

func (s *sqlStore) ReleaseShards(ctx context.Context, holder string, held []ShardFence) error {
	held, err := checkFences(held)
	if err != nil {
		return fmt.Errorf("cannot release shards: %w", err)
	}
	if len(held) == 0 {
		return nil
	}
	h := s.ha()
	cond, pairs := fencePairs(held, false)
	if _, err := s.db.ExecContext(ctx, `UPDATE lease`+s.d.leaseByName+` SET holder = '', expiry = `+h.now+` WHERE holder = ? AND `+cond,
		append([]any{holder}, pairs...)...); err != nil {
		return fmt.Errorf("cannot release shards: %w", err)
	}
	return nil
}

// handOverMark is the prefix of a fence row's holder that marks its shard handed over
// (HandOverShards): "handed-over@" and the hand-over point in ms. A fence row's holder is
// otherwise empty; only its epoch fences batches.
const handOverMark = "handed-over@"

func (s *sqlStore) HandOverShards(ctx context.Context, holder string, held []ShardFence, at map[int]int64) error {
	held, err := checkFences(held)
	if err != nil {
		return fmt.Errorf("cannot hand shards over: %w", err)
	}
	if len(held) == 0 {
		return nil
	}
	var marked []ShardFence
	for _, f := range held {
		if at[f.Shard] > 0 {
			marked = append(marked, f)
		}
	}
	h := s.ha()
	for attempt := 0; ; attempt++ {
		err = func() error {
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				return fmt.Errorf("cannot begin handing shards over: %w", err)
			}
			defer rollback(tx)
			cond, pairs := fencePairs(held, false)
			if _, err := tx.ExecContext(ctx, `UPDATE lease`+s.d.leaseByName+` SET holder = '', expiry = `+h.now+` WHERE holder = ? AND `+cond,
				append([]any{holder}, pairs...)...); err != nil {
				return fmt.Errorf("cannot release shards: %w", err)
			}
			if len(marked) == 0 {
				return tx.Commit()
			}
			// The mark is written where the fence row still carries the epoch released: a
			// shard another node took meanwhile has moved its fence on and keeps no mark.
			var set strings.Builder
			args := make([]any, 0, 5*len(marked))
			set.WriteString(`UPDATE lease` + s.d.leaseByName + ` SET expiry = ` + h.now + `, holder = CASE name`)
			for _, f := range marked {
				set.WriteString(` WHEN ? THEN ?`)
				args = append(args, fenceRow(model.ShardLeaseName(f.Shard)), handOverMark+strconv.FormatInt(at[f.Shard], 10))
			}
			set.WriteString(` ELSE holder END WHERE `)
			cond, pairs = fencePairs(marked, true)
			set.WriteString(cond)
			if _, err := tx.ExecContext(ctx, set.String(), append(args, pairs...)...); err != nil {
				return fmt.Errorf("cannot mark the shards handed over: %w", err)
			}
			if err := tx.Commit(); err != nil {
				return fmt.Errorf("cannot commit the shards handed over: %w", err)
			}
			return nil
		}()
		if err == nil || attempt >= leaseRetries || !s.d.isRetryable(err) {
			return err
		}
	}
}

// readHandOvers fills in the hand-over points of the shards just taken in tx from their
// fence rows, before the take moves them on: a mark counts only when its fence row still
// carries the epoch before the take's, the epoch whose holder handed the shard over.
func (s *sqlStore) readHandOvers(ctx context.Context, tx *sql.Tx, taken []ShardLease) error {
	names := make([]any, len(taken))
	for i, l := range taken {
		names[i] = fenceRow(model.ShardLeaseName(l.Shard))
	}
	rows, err := tx.QueryContext(ctx, `SELECT name, holder, epoch, `+s.ha().leftUS("expiry")+` FROM lease`+s.d.leaseByName+
		` WHERE name IN (`+placeholders(len(names))+`) AND holder LIKE '`+handOverMark+`%'`, names...)
	if err != nil {
		return fmt.Errorf("cannot read the hand-over marks of the shards taken: %w", err)
	}
	defer rows.Close()
	byName := make(map[string]*ShardLease, len(taken))
	for i := range taken {
		byName[fenceRow(model.ShardLeaseName(taken[i].Shard))] = &taken[i]
	}
	for rows.Next() {
		var name, mark string
		var epoch, leftUS int64
		if err := rows.Scan(&name, &mark, &epoch, &leftUS); err != nil {
			return fmt.Errorf("cannot scan a hand-over mark: %w", err)
		}
		l := byName[name]
		at, err := strconv.ParseInt(strings.TrimPrefix(mark, handOverMark), 10, 64)
		if l == nil || err != nil || at <= 0 || epoch != l.Epoch-1 {
			continue
		}
		l.HandedOver, l.HandedOverAgo = at, max(0, -time.Duration(leftUS)*time.Microsecond)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read the hand-over marks of the shards taken: %w", err)
	}
	return nil
}

func (s *sqlStore) ShardLeases(ctx context.Context) ([]ShardLease, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, `+s.leaseCols()+` FROM lease WHERE name LIKE 'shard/%'`)
	if err != nil {
		return nil, fmt.Errorf("cannot query the shard leases: %w", err)
	}
	return scanShardLeases(rows)
}

// checkShardFences is checkEpoch for every shard a batch is fenced by, in one statement
// whatever their number: on one server a read of their fence rows under a shared lock, on
// Galera an update of them that applies only at their epochs (galeraFence's argument, for
// each row). Both name the fence rows in ascending shard order. When a fence does not hold,
// the error is a *ShardsLostError naming every stale one, so that the writer fails only the
// groups of those shards.
func (s *sqlStore) checkShardFences(ctx context.Context, tx batchTx, fences []ShardFence) error {
	if len(fences) == 0 {
		return nil
	}
	for _, f := range fences {
		if f.Shard < 0 || f.Shard >= model.ShardCount {
			return fmt.Errorf("cannot apply batch: shard %d is out of range", f.Shard)
		}
	}
	names := fenceNames(fences)
	forShare := s.d.forShare
	if s.galera {
		cond, args := fencePairs(fences, true)
		n, err := tx.exec(ctx, `UPDATE lease`+s.d.leaseByName+` SET expiry = expiry + INTERVAL 1 MICROSECOND WHERE `+cond, args)
		if err != nil {
			return fmt.Errorf("cannot write the fences of %d shards: %w", len(fences), err)
		}
		if n == int64(len(fences)) {
			return nil
		}
		forShare = "" // the lock would be this node's own; the update wrote the rows it could
	}
	// The fence rows' names are literals of the query, not arguments: a query with
	// arguments is prepared, run and closed, three exchanges with the server for every
	// batch of a sharded node where one does (the names are the fixed "shard/NNN#fence").
	epochs := make(map[string]int64, len(fences))
	err := tx.queryIDNames(ctx, `SELECT epoch, name FROM lease`+s.d.leaseByName+` WHERE name IN (`+fenceList(fences)+`)`+forShare,
		nil, func(epoch int64, name string) { epochs[name] = epoch })
	if err != nil {
		return fmt.Errorf("cannot read the fences of %d shards: %w", len(fences), err)
	}
	lost := staleFences(fences, names, epochs, true)
	if len(lost) == 0 && !s.galera {
		return nil // the shared locks now hold every fence at its epoch until the commit
	}
	if len(lost) == 0 {
		// Every fence reads as current although the update missed one: a race with a take
		// this transaction cannot see. Not a refusal; the batch is tried again.
		return fmt.Errorf("cannot apply batch: the fences of %d shards did not all hold, yet each reads as current", len(fences))
	}
	return &ShardsLostError{Lost: lost}
}

// staleFences returns the fences whose row's epoch (epochs, by fence row name; names in the
// order of fences) is not theirs; a missing row is stale when missing is set.
func staleFences(fences []ShardFence, names []any, epochs map[string]int64, missing bool) []ShardFence {
	var lost []ShardFence
	for i, f := range fences {
		e, found := epochs[names[i].(string)]
		if (!found && missing) || (found && e != f.Epoch) {
			lost = append(lost, f)
		}
	}
	return lost
}

// ShardsLostError reports the shards whose fence refused a batch (Batch.Shards): another
// node took them, or they were released. Nothing of the batch was applied. It unwraps to
// ErrLeaseLost, and to the commit's own error when certification refused the commit.
type ShardsLostError struct {
	// Lost are the fences that no longer hold, with the epochs the batch carried.
	Lost []ShardFence
	// Err is the failed commit certification refused, or nil.
	Err error
}

func (e *ShardsLostError) Error() string {
	var b strings.Builder
	for i, f := range e.Lost {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s at epoch %d", model.ShardLeaseName(f.Shard), f.Epoch)
	}
	msg := "cannot apply batch: another node holds " + b.String()
	if e.Err != nil {
		msg += " (the commit was refused: " + e.Err.Error() + ")"
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrLeaseLost) true.
func (e *ShardsLostError) Unwrap() []error {
	if e.Err != nil {
		return []error{model.ErrLeaseLost, e.Err}
	}
	return []error{model.ErrLeaseLost}
}

// shardsRefusedAtCommit is refusedAtCommit for a batch fenced by shards, with one read of
// all their fence rows: every shard whose fence moved past its epoch is named in the
// *ShardsLostError.
func (s *sqlStore) shardsRefusedAtCommit(ctx context.Context, fences []ShardFence, err error) error {
	if !s.galera || err == nil || errors.Is(err, model.ErrLeaseLost) || !s.d.isRetryable(err) || ctx.Err() != nil {
		return err
	}
	names := fenceNames(fences)
	rows, rerr := s.db.QueryContext(ctx, `SELECT name, epoch FROM lease`+s.d.leaseByName+` WHERE name IN (`+placeholders(len(names))+`)`, names...)
	if rerr != nil {
		return err
	}
	defer rows.Close()
	epochs := make(map[string]int64, len(fences))
	for rows.Next() {
		var name string
		var epoch int64
		if rows.Scan(&name, &epoch) != nil {
			return err
		}
		epochs[name] = epoch
	}
	if rows.Err() != nil {
		return err
	}
	if lost := staleFences(fences, names, epochs, false); len(lost) > 0 {
		return &ShardsLostError{Lost: lost, Err: err}
	}
	return err
}

// fenceLiterals holds each shard's fence row name as a quoted SQL literal.
var fenceLiterals = func() (out [model.ShardCount]string) {
	for n := range out {
		out[n] = "'" + fenceRow(model.ShardLeaseName(n)) + "'"
	}
	return out
}()

// fenceList is the fence row names of fences as a comma-separated list of SQL literals.
func fenceList(fences []ShardFence) string {
	var b strings.Builder
	b.Grow(len(fences) * (len(fenceLiterals[0]) + 1))
	for i, f := range fences {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(fenceLiterals[f.Shard])
	}
	return b.String()
}

// fenceNames returns the fence row names of fences, in their order.
func fenceNames(fences []ShardFence) []any {
	out := make([]any, len(fences))
	for i, f := range fences {
		out[i] = fenceNameArgs[f.Shard]
	}
	return out
}

// fenceNameArgs holds each shard's fence row name as an argument, made once: a sharded
// node's batch names the fences of the shards it writes, and a burst's batches write to
// most of the 256, so building each name anew cost a few allocations per row written.
var fenceNameArgs = func() (out [model.ShardCount]any) {
	for n := range out {
		out[n] = fenceRow(model.ShardLeaseName(n))
	}
	return out
}()
