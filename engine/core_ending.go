package engine

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// endingKeep is how long an executor's result is remembered after it ended its run. Its
// record is durable within a writer batch (milliseconds) unless the store is down; past this,
// a duplicate delivery is judged against the store alone, as before.
const endingKeep = time.Minute

// endingResults remembers the executor results that ended their run in memory, by ticket,
// for endingKeep. Between that moment and the run record's commit the store still says
// running; without it a second delivery of the same result (an executor that reports twice,
// a network that duplicates a request) was refused 409 as a stale ticket and left a
// refused_result action, where the protocol promises 200 duplicate. The zero value is ready.
//
// A repeat delivery is answered as the first one's record goes (waiter): 200 duplicate once it
// is durable, and the same error if it fails, never before. Acknowledged earlier, a result
// whose record then failed (the node cut off from the database, its lease or shard gone) was
// lost: the executor stopped re-sending it, and the run's next owner timed it out.
type endingResults struct {
	mu    sync.Mutex
	m     map[string]*endingEntry // ticket → reported status and when
	order []*endingEntry          // in settling order, for expiry
}

type endingEntry struct {
	ticket string
	status string
	at     time.Time
	done   chan struct{} // closed once the end's record is durable or has failed
	err    error         // how recording it went; set before done is closed
}

// add notes that ticket's run ended with status at now, and forgets the notes older than
// endingKeep (amortised O(1): the oldest are at the front).
func (r *endingResults) add(ticket, status string, now time.Time) *endingEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*endingEntry{}
	}
	drop := 0
	for drop < len(r.order) && now.Sub(r.order[drop].at) > endingKeep {
		old := r.order[drop]
		if r.m[old.ticket] == old {
			delete(r.m, old.ticket) // not re-added since
		}
		drop++
	}
	clear(r.order[:drop])
	r.order = r.order[drop:] // append reallocates with the live entries only
	e := &endingEntry{ticket: ticket, status: status, at: now, done: make(chan struct{})}
	r.m[ticket] = e
	r.order = append(r.order, e)
	return e
}

// settle says how recording the end noted by e went. A failed record forgets the note, unless
// the ticket was noted again since: a re-send of the result is then tried afresh.
func (r *endingResults) settle(e *endingEntry, err error) {
	e.err = err
	close(e.done)
	if err == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[e.ticket] == e {
		delete(r.m, e.ticket)
	}
}

// waiter returns how to answer a repeat delivery of ticket's result with status: it waits
// for the noted end's record and reports it a duplicate once durable, or the record's error.
// It returns nil when no such end is noted.
func (r *endingResults) waiter(ticket, status string) func(ctx context.Context) (bool, error) {
	r.mu.Lock()
	e, ok := r.m[ticket]
	r.mu.Unlock()
	if !ok || e.status != status {
		return nil
	}
	return func(ctx context.Context) (bool, error) {
		select {
		case <-e.done:
			if e.err != nil {
				return false, fmt.Errorf("cannot record the result of %s: %w", ticket, e.err)
			}
			return true, nil
		case <-ctx.Done():
			return false, fmt.Errorf("cannot record the result of %s: %w", ticket, ctx.Err())
		}
	}
}

// has reports whether ticket's run ended with status within the last endingKeep.
func (r *endingResults) has(ticket, status string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	got, ok := r.m[ticket]
	return ok && got.status == status
}

// len is how many results are remembered.
func (r *endingResults) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}
