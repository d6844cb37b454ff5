package persist

// Concurrency slots held across the nodes of a sharded cluster (schema step 20,
// docs/design.md "Concurrency limits", docs/scale-out.md). A run of a limited group or
// concurrency key holds one row of concurrency_slot per limit it counts in, keyed by its
// ticket and the limit's kind; the rows of a limit are its runs in flight on every node.
//
// A slot is taken by TakeSlots in one transaction that checks the shard fences of the runs
// it takes slots for (share-locked on one server, as a batch does), then locks the limits'
// rows by writing them (UPDATE … slot_seq + 1: an exclusive row lock on one server, a write
// set that certification orders on Galera, where SELECT … FOR UPDATE would lock one database
// node's copy only), counts their slot rows and inserts those that fit. Two nodes taking slots
// of one limit are therefore serialised by the limit's row, and the count each reads, after
// its lock, includes every slot the other committed. A slot row is deleted when its run ends
// (ReleaseSlots, by ticket and at most the epoch it was taken at, so a release by a node that
// lost the shard never deletes the row its next owner adopted), and by the next owner of a
// dead node's shard once that owner has adopted the runs left in flight (ReconcileSlots):
// the rows of runs it did not find in flight go, those it adopted are kept at its epoch.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SlotRef names one limit: model.LimitGroup or model.LimitKey, and its name.
type SlotRef struct {
	Kind, Name string
}

// SlotClaim asks for the slots of one run: one in each limit of Refs, all of them or none.
// Priority, FireAt and Since (when its fire began to wait, Unix ms) order it against the
// fires other nodes have waiting (TakeSlots), as the gate in memory orders its waiters by
// priority, fire time and arrival.
type SlotClaim struct {
	Ticket   string
	Shard    int
	Epoch    int64
	Refs     []SlotRef
	Priority int
	FireAt   int64
	Since    int64
}

// WaitTTL is how long a node's waiting fire (concurrency_wait) is heeded after the node
// last wrote it: a node that waits writes it at every try, and a dead node's is forgotten
// after that.
const WaitTTL = time.Second

// SlotRow is one slot held: the run's ticket, the limit, and the shard and epoch of the
// run's task when the slot was taken or adopted.
type SlotRow struct {
	Ticket string
	Ref    SlotRef
	Shard  int
	Epoch  int64
}

// SlotRelease gives back every slot of a run: its ticket, and the epoch of its shard it was
// held at (rows of a later epoch are another owner's and stay).
type SlotRelease struct {
	Ticket string
	Epoch  int64
}

// holdMark joins a run's ticket and its deadline in the ticket of a hold (HoldTicket).
const holdMark = "~lost@"

// HoldTicket is the ticket of the slot rows that hold a limit's slot for a run recorded lost
// while its endpoint may still be working on it, until deadline (Unix ms): the run's own
// rows go with its end. The next owner of its shard keeps such rows until their deadline
// (ReconcileSlots), whoever wrote them.
func HoldTicket(ticket string, deadline int64) string {
	return ticket + holdMark + strconv.FormatInt(deadline, 10)
}

// HoldDeadline returns the deadline of a hold's ticket (HoldTicket); ok is false for the
// ticket of a run.
func HoldDeadline(ticket string) (deadline int64, ok bool) {
	i := strings.LastIndex(ticket, holdMark)
	if i < 0 {
		return 0, false
	}
	d, err := strconv.ParseInt(ticket[i+len(holdMark):], 10, 64)
	return d, err == nil
}

// Outcomes of a SlotClaim.
const (
	SlotGranted   = iota // the rows are in
	SlotFull             // a limit had no room: nothing taken
	SlotShardLost        // the run's shard is not held at the claim's epoch: nothing taken
)

// SlotStore is what the concurrency limits of a sharded cluster need of a store.
type SlotStore interface {
	// TakeSlots deletes the slots of releases, then grants claims in their order while
	// their limits have room (a limit without a row has room), in one transaction. It
	// returns each claim's outcome and the slots held afterwards in every limit it looked
	// at. With node set, a slot is left free for each other node whose best waiting fire
	// (written within WaitTTL) goes before the claim (lower priority value, then earlier
	// fire time), and node's own best waiting fire of each limit, among the claims not
	// granted, replaces what it wrote before.
	TakeSlots(ctx context.Context, node string, releases []SlotRelease, claims []SlotClaim, now int64) ([]int, map[SlotRef]int, error)
	// ReleaseSlots deletes the slots of releases.
	ReleaseSlots(ctx context.Context, releases []SlotRelease) error
	// ReconcileSlots, for the shards of fences at their epochs (checked in the transaction),
	// deletes every slot of an earlier epoch that keep does not name, but for the holds
	// (HoldTicket) whose deadline is after now: those it moves to their fence's epoch and
	// returns, for the caller to give back at their deadline. It writes keep's rows (new, or
	// moved to keep's epoch). With prune false it only writes keep.
	ReconcileSlots(ctx context.Context, fences []ShardFence, keep []SlotRow, prune bool, now int64) ([]SlotRow, error)
	// CountSlots returns the slots held in every limit that holds any.
	CountSlots(ctx context.Context) (map[SlotRef]int, error)
}

var _ SlotStore = (*sqlStore)(nil)

// slotTx begins a transaction for the slot statements: READ COMMITTED on MySQL, so that the
// count read after the limit's lock sees every slot committed before it, with no gap locks
// of its own on the slot rows.
func (s *sqlStore) slotTx(ctx context.Context) (*sql.Tx, error) {
	var opts *sql.TxOptions
	if s.d.kind == SchemeMySQL {
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	return s.db.BeginTx(ctx, opts)
}

// slotRetries bounds the runs of a slot transaction that met a deadlock (Galera's
// certification, or two lock orders on one server).
const slotRetries = 5

// slotBackoff waits before the next run of a transaction that met a deadlock: a few
// milliseconds, more at each attempt, at random, so that the nodes that met do not meet
// again at once.
func slotBackoff(ctx context.Context, attempt int) {
	d := time.Duration(1+rand.IntN(5*(attempt+1))) * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (s *sqlStore) TakeSlots(ctx context.Context, node string, releases []SlotRelease, claims []SlotClaim, now int64) ([]int, map[SlotRef]int, error) {
	out := make([]int, len(claims))
	lost := map[int]bool{}
	for attempt := 0; ; attempt++ {
		counts, err := s.takeSlots(ctx, node, releases, claims, lost, out, now)
		var sl *ShardsLostError
		switch {
		case err == nil:
			return out, counts, nil
		case errors.As(err, &sl):
			// The claims of a shard lost are refused; the others are tried again.
			for _, f := range sl.Lost {
				lost[f.Shard] = true
			}
			continue
		case s.d.isRetryable(err) && attempt < slotRetries && ctx.Err() == nil:
			slotBackoff(ctx, attempt)
			continue
		}
		return nil, nil, err
	}
}

func (s *sqlStore) takeSlots(ctx context.Context, node string, releases []SlotRelease, claims []SlotClaim, lost map[int]bool, out []int, now int64) (map[SlotRef]int, error) {
	tx, err := s.slotTx(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot take concurrency slots: %w", err)
	}
	defer rollback(tx)
	if err := s.deleteSlots(ctx, tx, releases); err != nil {
		return nil, err
	}
	// The fences of the claims' shards, each at its epoch.
	var fences []ShardFence
	seen := map[int]int64{}
	for i, c := range claims {
		out[i] = SlotFull
		if lost[c.Shard] {
			out[i] = SlotShardLost
			continue
		}
		if e, ok := seen[c.Shard]; ok {
			if e != c.Epoch {
				out[i] = SlotShardLost // two epochs of one shard: the older is stale
				if c.Epoch > e {
					return nil, fmt.Errorf("cannot take concurrency slots: shard %d claimed at epochs %d and %d", c.Shard, e, c.Epoch)
				}
			}
			continue
		}
		seen[c.Shard] = c.Epoch
		fences = append(fences, ShardFence{Shard: c.Shard, Epoch: c.Epoch})
	}
	if len(fences) > 0 {
		fs, err := checkFences(fences)
		if err != nil {
			return nil, fmt.Errorf("cannot take concurrency slots: %w", err)
		}
		if err := s.checkShardFences(ctx, sqlTx{tx}, fs); err != nil {
			return nil, err
		}
	}
	// The limits, locked in one order (kind, name) by writing their rows.
	refSet := map[SlotRef]bool{}
	for i, c := range claims {
		if out[i] == SlotShardLost {
			continue
		}
		for _, r := range c.Refs {
			refSet[r] = true
		}
	}
	refs := make([]SlotRef, 0, len(refSet))
	for r := range refSet {
		refs = append(refs, r)
	}
	slices.SortFunc(refs, func(a, b SlotRef) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	// A key without a limit of its own has its pattern's ("tenant:*"): the pattern's row is
	// locked and its max read, and the key's own slot rows counted. The rows locked are
	// known before any is locked, and locked in one order, each once.
	via, err := s.limitRows(ctx, tx, refs)
	if err != nil {
		return nil, err
	}
	locks := make([]SlotRef, 0, len(refs))
	for _, r := range refs {
		if l := via[r]; !slices.Contains(locks, l) {
			locks = append(locks, l)
		}
	}
	slices.SortFunc(locks, func(a, b SlotRef) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	lockedMax := map[SlotRef]int{}
	for _, l := range locks {
		if _, err := tx.ExecContext(ctx, `UPDATE concurrency_limit SET slot_seq = slot_seq + 1 WHERE kind = ? AND name = ?`, l.Kind, l.Name); err != nil {
			return nil, fmt.Errorf("cannot lock concurrency limit %s %s: %w", l.Kind, l.Name, err)
		}
		var max sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT max_runs FROM concurrency_limit WHERE kind = ? AND name = ?`, l.Kind, l.Name).Scan(&max); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("cannot read concurrency limit %s %s: %w", l.Kind, l.Name, err)
		}
		lockedMax[l] = int(max.Int64)
	}
	maxOf := map[SlotRef]int{}
	counts := map[SlotRef]int{}
	for _, r := range refs {
		maxOf[r] = lockedMax[via[r]] // 0: no limit (deleted meanwhile), every claim fits
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM concurrency_slot WHERE kind = ? AND name = ?`, r.Kind, r.Name).Scan(&n); err != nil {
			return nil, fmt.Errorf("cannot count the slots of %s %s: %w", r.Kind, r.Name, err)
		}
		counts[r] = n
	}
	others, err := s.othersWaiting(ctx, tx, node, refs, now)
	if err != nil {
		return nil, err
	}
	var rows []SlotRow
	blocked := make([][]SlotRef, len(claims)) // the limits without room for each claim
	for i, c := range claims {
		if out[i] == SlotShardLost {
			continue
		}
		fits := true
		for _, r := range c.Refs {
			m := maxOf[r]
			if m == 0 {
				continue
			}
			ahead := 0 // other nodes' waiting fires that go before this one
			for _, w := range others[r] {
				if w.before(waiting{priority: c.Priority, fireAt: c.FireAt, since: c.Since}) {
					ahead++
				}
			}
			if counts[r]+ahead >= m {
				fits = false
				blocked[i] = append(blocked[i], r)
			}
		}
		if !fits {
			continue
		}
		out[i] = SlotGranted
		for _, r := range c.Refs {
			counts[r]++
			rows = append(rows, SlotRow{Ticket: c.Ticket, Ref: r, Shard: c.Shard, Epoch: c.Epoch})
		}
	}
	if err := s.insertSlots(ctx, tx, rows, false, now); err != nil {
		return nil, err
	}
	if node != "" {
		if err := s.writeWaiting(ctx, tx, node, claims, blocked, now); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("cannot take concurrency slots: %w", err)
	}
	return counts, nil
}

// slotChunk bounds the rows of one statement of the slot writes: few statements a batch, and
// well within the placeholders a statement may carry.
const slotChunk = 1000

// limitRows returns, for each of refs, the row of concurrency_limit whose max it has: its
// own, or for a key without one the pattern of kind key ("tenant:*") with the longest prefix
// of its name, or itself when neither exists (no limit: its max reads 0).
func (s *sqlStore) limitRows(ctx context.Context, tx *sql.Tx, refs []SlotRef) (map[SlotRef]SlotRef, error) {
	rows, err := tx.QueryContext(ctx, `SELECT kind, name FROM concurrency_limit`)
	if err != nil {
		return nil, fmt.Errorf("cannot read the concurrency limits: %w", err)
	}
	defer rows.Close()
	have := map[SlotRef]bool{}
	var pats []string
	for rows.Next() {
		var r SlotRef
		if err := rows.Scan(&r.Kind, &r.Name); err != nil {
			return nil, fmt.Errorf("cannot read the concurrency limits: %w", err)
		}
		have[r] = true
		if p, ok := strings.CutSuffix(r.Name, "*"); ok && r.Kind == "key" {
			pats = append(pats, p)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the concurrency limits: %w", err)
	}
	out := make(map[SlotRef]SlotRef, len(refs))
	for _, r := range refs {
		out[r] = r
		if have[r] || r.Kind != "key" {
			continue
		}
		best, found := "", false
		for _, p := range pats {
			if strings.HasPrefix(r.Name, p) && (!found || len(p) > len(best)) {
				best, found = p, true
			}
		}
		if found {
			out[r] = SlotRef{Kind: r.Kind, Name: best + "*"}
		}
	}
	return out, nil
}

// deleteSlots deletes the rows of releases in tx: by epoch, a statement per slotChunk tickets
// of one epoch (a node's releases are mostly of a few epochs).
func (s *sqlStore) deleteSlots(ctx context.Context, tx *sql.Tx, releases []SlotRelease) error {
	byEpoch := map[int64][]any{}
	var epochs []int64
	for _, r := range releases {
		if _, ok := byEpoch[r.Epoch]; !ok {
			epochs = append(epochs, r.Epoch)
		}
		byEpoch[r.Epoch] = append(byEpoch[r.Epoch], clip(r.Ticket, ticketLen))
	}
	for _, ep := range epochs {
		tickets := byEpoch[ep]
		for len(tickets) > 0 {
			n := min(len(tickets), slotChunk)
			args := append([]any{ep}, tickets[:n]...)
			if _, err := tx.ExecContext(ctx, `DELETE FROM concurrency_slot WHERE epoch <= ? AND ticket IN (`+placeholders(n)+`)`, args...); err != nil {
				return fmt.Errorf("cannot release %d concurrency slots: %w", n, err)
			}
			tickets = tickets[n:]
		}
	}
	return nil
}

// insertSlots writes rows in tx: inserted, or with upsert, moved to the row's shard and epoch
// when the ticket holds the limit already.
func (s *sqlStore) insertSlots(ctx context.Context, tx *sql.Tx, rows []SlotRow, upsert bool, now int64) error {
	for len(rows) > 0 {
		n := min(len(rows), slotChunk)
		args := make([]any, 0, 6*n)
		for _, r := range rows[:n] {
			args = append(args, clip(r.Ticket, ticketLen), clip(r.Ref.Kind, shortLen), clip(r.Ref.Name, nameLen), r.Shard, r.Epoch, now)
		}
		q := `INSERT INTO concurrency_slot (ticket, kind, name, shard, epoch, taken_at) VALUES ` + valuesList(6, n)
		if upsert {
			if s.d.kind == SchemeMySQL {
				q += ` ON DUPLICATE KEY UPDATE name = VALUES(name), shard = VALUES(shard), epoch = VALUES(epoch)`
			} else {
				q += ` ON CONFLICT (ticket, kind) DO UPDATE SET name = excluded.name, shard = excluded.shard, epoch = excluded.epoch`
			}
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("cannot write %d concurrency slots: %w", n, err)
		}
		rows = rows[n:]
	}
	return nil
}

func (s *sqlStore) ReleaseSlots(ctx context.Context, releases []SlotRelease) error {
	if len(releases) == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		tx, err := s.slotTx(ctx)
		if err != nil {
			return fmt.Errorf("cannot release concurrency slots: %w", err)
		}
		err = s.deleteSlots(ctx, tx, releases)
		if err == nil {
			err = tx.Commit()
		}
		rollback(tx)
		if err == nil || !s.d.isRetryable(err) || attempt >= slotRetries || ctx.Err() != nil {
			return err
		}
		slotBackoff(ctx, attempt)
	}
}

func (s *sqlStore) ReconcileSlots(ctx context.Context, fences []ShardFence, keep []SlotRow, prune bool, now int64) ([]SlotRow, error) {
	for attempt := 0; ; attempt++ {
		held, err := s.reconcileSlots(ctx, fences, keep, prune, now)
		if err == nil || !s.d.isRetryable(err) || attempt >= slotRetries || ctx.Err() != nil {
			return held, err
		}
		slotBackoff(ctx, attempt)
	}
}

func (s *sqlStore) reconcileSlots(ctx context.Context, fences []ShardFence, keep []SlotRow, prune bool, now int64) ([]SlotRow, error) {
	tx, err := s.slotTx(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot reconcile concurrency slots: %w", err)
	}
	defer rollback(tx)
	if len(fences) > 0 {
		fs, err := checkFences(fences)
		if err != nil {
			return nil, fmt.Errorf("cannot reconcile concurrency slots: %w", err)
		}
		if err := s.checkShardFences(ctx, sqlTx{tx}, fs); err != nil {
			return nil, err
		}
		fences = fs
	}
	var held []SlotRow // the holds kept, at their fence's epoch
	if prune && len(fences) > 0 {
		// One read for all the shards (a takeover's recovery gains dozens at once, and a
		// statement each cost a round trip each while the fences' shared locks were held).
		epochOf := make(map[int]int64, len(fences))
		shards := make([]any, 0, len(fences))
		for _, f := range fences {
			epochOf[f.Shard] = f.Epoch
			shards = append(shards, f.Shard)
		}
		kept := make(map[string]bool, len(keep))
		for _, r := range keep {
			kept[r.Ticket] = true
		}
		rows, err := tx.QueryContext(ctx, `SELECT ticket, kind, name, shard, epoch FROM concurrency_slot WHERE shard IN (`+placeholders(len(shards))+`)`, shards...)
		if err != nil {
			return nil, fmt.Errorf("cannot read the slots of %d shards: %w", len(fences), err)
		}
		var gone []SlotRelease
		seen := map[string]bool{}
		for rows.Next() {
			var r SlotRow
			var epoch int64
			if err := rows.Scan(&r.Ticket, &r.Ref.Kind, &r.Ref.Name, &r.Shard, &epoch); err != nil {
				rows.Close()
				return nil, fmt.Errorf("cannot read the slots of %d shards: %w", len(fences), err)
			}
			fence := epochOf[r.Shard]
			if epoch >= fence || kept[r.Ticket] {
				continue // this owner's own row, or a run it adopted (written below)
			}
			// A hold stays until its deadline: its run may still be worked on where it was
			// sent. Its row moves to this owner, who gives it back then.
			if d, ok := HoldDeadline(r.Ticket); ok && d > now {
				r.Epoch = fence
				held = append(held, r)
				continue
			}
			if !seen[r.Ticket] {
				seen[r.Ticket] = true
				gone = append(gone, SlotRelease{Ticket: r.Ticket, Epoch: fence - 1})
			}
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return nil, fmt.Errorf("cannot read the slots of %d shards: %w", len(fences), err)
		}
		rows.Close()
		if err := s.deleteSlots(ctx, tx, gone); err != nil {
			return nil, err
		}
	}
	if err := s.insertSlots(ctx, tx, append(slices.Clip(keep), held...), true, now); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("cannot reconcile concurrency slots: %w", err)
	}
	return held, nil
}

func (s *sqlStore) CountSlots(ctx context.Context) (map[SlotRef]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT kind, name, COUNT(*) FROM concurrency_slot GROUP BY kind, name`)
	if err != nil {
		return nil, fmt.Errorf("cannot count concurrency slots: %w", err)
	}
	defer rows.Close()
	out := map[SlotRef]int{}
	for rows.Next() {
		var r SlotRef
		var n int
		if err := rows.Scan(&r.Kind, &r.Name, &n); err != nil {
			return nil, fmt.Errorf("cannot count concurrency slots: %w", err)
		}
		out[r] = n
	}
	return out, rows.Err()
}

// waiting is one node's best fire waiting for a limit.
type waiting struct {
	priority int
	fireAt   int64
	since    int64
}

// before orders waiting fires: priority (0 first), then fire time, then how long they have
// waited, so that fires due at one instant on several nodes go in the order they began to
// wait, whichever node frees the slots.
func (w waiting) before(o waiting) bool {
	if w.priority != o.priority {
		return w.priority < o.priority
	}
	if w.fireAt != o.fireAt {
		return w.fireAt < o.fireAt
	}
	return w.since < o.since
}

// othersWaiting reads the best waiting fire of every other node for each of refs, written
// within WaitTTL of now; none without node.
func (s *sqlStore) othersWaiting(ctx context.Context, tx *sql.Tx, node string, refs []SlotRef, now int64) (map[SlotRef][]waiting, error) {
	if node == "" || len(refs) == 0 {
		return nil, nil
	}
	var b strings.Builder
	args := []any{node, now - WaitTTL.Milliseconds()}
	b.WriteString(`SELECT kind, name, priority, fire_at, since FROM concurrency_wait WHERE node <> ? AND seen_at >= ? AND (`)
	for i, r := range refs {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(kind = ? AND name = ?)")
		args = append(args, r.Kind, r.Name)
	}
	b.WriteString(")")
	rows, err := tx.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("cannot read the fires other nodes have waiting: %w", err)
	}
	defer rows.Close()
	out := map[SlotRef][]waiting{}
	for rows.Next() {
		var r SlotRef
		var w waiting
		if err := rows.Scan(&r.Kind, &r.Name, &w.priority, &w.fireAt, &w.since); err != nil {
			return nil, fmt.Errorf("cannot read the fires other nodes have waiting: %w", err)
		}
		out[r] = append(out[r], w)
	}
	return out, rows.Err()
}

// writeWaiting replaces node's waiting fires with the best claim each limit had no room for
// (blocked, by claim): a claim waits only in the limits that held it back.
func (s *sqlStore) writeWaiting(ctx context.Context, tx *sql.Tx, node string, claims []SlotClaim, blocked [][]SlotRef, now int64) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM concurrency_wait WHERE node = ?`, clip(node, nameLen)); err != nil {
		return fmt.Errorf("cannot write this node's waiting fires: %w", err)
	}
	best := map[SlotRef]waiting{}
	var order []SlotRef
	for i, c := range claims {
		for _, r := range blocked[i] {
			w, ok := best[r]
			if !ok {
				order = append(order, r)
			}
			if cw := (waiting{priority: c.Priority, fireAt: c.FireAt, since: c.Since}); !ok || cw.before(w) {
				best[r] = cw
			}
		}
	}
	if len(order) == 0 {
		return nil
	}
	args := make([]any, 0, 7*len(order))
	for _, r := range order {
		w := best[r]
		args = append(args, clip(r.Kind, shortLen), clip(r.Name, nameLen), clip(node, nameLen), w.priority, w.fireAt, w.since, now)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO concurrency_wait (kind, name, node, priority, fire_at, since, seen_at) VALUES `+valuesList(7, len(order)), args...); err != nil {
		return fmt.Errorf("cannot write this node's waiting fires: %w", err)
	}
	return nil
}
