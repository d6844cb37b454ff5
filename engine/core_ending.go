package engine

import (
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
type endingResults struct {
	mu    sync.Mutex
	m     map[string]endingEntry // ticket → reported status and when
	order []endingEntry          // in settling order, for expiry
}

type endingEntry struct {
	ticket string
	status string
	at     time.Time
}

// add notes that ticket's run ended with status at now, and forgets the notes older than
// endingKeep (amortised O(1): the oldest are at the front).
func (r *endingResults) add(ticket, status string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]endingEntry{}
	}
	drop := 0
	for drop < len(r.order) && now.Sub(r.order[drop].at) > endingKeep {
		old := r.order[drop]
		if cur := r.m[old.ticket]; cur.at.Equal(old.at) {
			delete(r.m, old.ticket) // not re-added since
		}
		drop++
	}
	clear(r.order[:drop])
	r.order = r.order[drop:] // append reallocates with the live entries only
	e := endingEntry{ticket: ticket, status: status, at: now}
	r.m[ticket] = e
	r.order = append(r.order, e)
}

// forget drops the note add made for ticket at at, unless the ticket was noted again since:
// the result's record failed, so a re-send of it must be tried again, not acknowledged as a
// duplicate of a result nothing recorded (the expiry queue lets its entry go in time).
func (r *endingResults) forget(ticket string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.m[ticket]; ok && cur.at.Equal(at) {
		delete(r.m, ticket)
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
