package engine

// Pacing the fire records to the sends (docs/faults.md, "A crash in a burst").
//
// A fire's record is committed before its run is sent (the fire record: at most once), and
// the writer commits a burst's records in large batches far faster than the dispatcher can
// put the runs on the wire. Without a bound, a node killed in a burst leaves every run whose
// record committed and whose request had not left yet in doubt: the next owner cannot tell
// such a run from one the receiver got, and resolves it per on_lost after its timeout.
//
// sendPace bounds those runs: a fire takes a permit before it is decided (fire) and gives it
// back once the send gate, asked just before the request leaves, lets it go (a run the gate
// holds back keeps its permit: holdUnsent), or once the run ends or fails without being
// sent. So at most
// Config.SendAhead runs of this node are recorded but not yet handed to the wire, and a
// crash leaves in doubt at most that many runs that never left, beside those on the wire.
//
// Per downstream (callback host, or executor app: downstreamOf). The runs that hold permits
// are those between their fire and the wire, and a slow host keeps its own there: once its
// connections are all busy its sends queue in the dispatcher (dispatch/pool.go) holding
// their permits. One such host must not hold every permit, or every fire of the node waits
// behind it. So one downstream holds at most its share, SendAhead less a quarter (less one
// at least, from SendAhead 2 on; permits are still counted node-wide: the bound on what a
// crash leaves in doubt is unchanged), and a fire whose downstream holds its share does not
// wait on the fire loop: it is parked with its downstream (admit), holding no permit, by
// priority as the ready queue holds it, and fired with the next permit its downstream gives
// back, which passes to it directly, by one goroutine that fires every parked fire
// (runParked). The fire loop goes on with the fires of other downstreams, which find at
// least that quarter of the permits left to them.
// It waits only when the permits are all taken by several downstreams together, as it waits
// on the writer's backpressure, holding no lock.

import (
	"sync"
	"sync/atomic"

	"github.com/axe-sched/axe/wheel"
)

// SendAheadDefault is the default Config.SendAhead.
const SendAheadDefault = 256

// sendPace is the semaphore of fires recorded and not yet handed to the wire, with each
// downstream's share of it.
type sendPace struct {
	slots chan struct{} // nil: unbounded
	share int           // permits one downstream may hold
	waits atomic.Int64  // fires that waited for a permit or were parked, for the metric

	mu      sync.Mutex
	hosts   map[string]*hostPace // downstreams holding a permit or with fires parked
	stopped bool                 // the engine is stopping: nothing is parked any more
	// unparked are parked fires given a permit, in the order given, for the runner
	// (runParked), which kick wakes; one goroutine fires them all, so a burst to one slow
	// downstream costs no goroutine a fire.
	unparked []unparked
	kick     chan struct{}
	watch    sync.Once // starts the runner at the first park
}

// unparked is a parked fire and the permit its downstream gave back for it.
type unparked struct {
	fire func(*permit)
	pm   *permit
}

// hostPace is one downstream's permits held and its fires parked, by priority (0 first, as
// the ready queue pops them) and within a priority oldest first, so that parking keeps the
// order in which the fire loop would have fired them.
type hostPace struct {
	held   int
	parked [wheel.MaxPriority + 1][]func(*permit)
	nPark  int
}

// park queues fire at priority prio. p.mu is held.
func (h *hostPace) park(prio uint8, fire func(*permit)) {
	l := min(int(prio), wheel.MaxPriority)
	h.parked[l] = append(h.parked[l], fire)
	h.nPark++
}

// next takes the parked fire to go next, or nil. p.mu is held.
func (h *hostPace) next() func(*permit) {
	for l := range h.parked {
		if q := h.parked[l]; len(q) > 0 {
			f := q[0]
			q[0] = nil
			h.parked[l] = q[1:]
			h.nPark--
			return f
		}
	}
	return nil
}

func (p *sendPace) init(n int) {
	if n > 0 {
		p.slots = make(chan struct{}, n)
		p.share = max(1, n-max(1, n/4)) // a quarter, at least one, left to the others
		p.hosts = make(map[string]*hostPace)
		p.kick = make(chan struct{}, 1)
	}
}

// permit is one fire's place in the pace. Its release is idempotent and nil-safe.
type permit struct {
	p    *sendPace
	host string
	done atomic.Bool
}

// admit gives fire a permit for a run of t: at once on the caller's goroutine, waiting
// while the permits are all taken, or, when t's downstream holds its share (or has fires
// parked before this one), later by the runner (runParked) with a permit its downstream
// gives back. fire gets nil when the pace is unbounded, or when stop is closed while it waits
// (the engine stopping: the fire goes on unpaced; it finds the engine stopped and does
// nothing). t.mu is not held.
func (p *sendPace) admit(t *task, prio uint8, stop <-chan struct{}, fire func(*permit)) {
	if p.slots == nil {
		fire(nil)
		return
	}
	t.mu.Lock()
	host := downstreamOf(t.def)
	t.mu.Unlock()
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		fire(nil)
		return
	}
	h := p.hosts[host]
	if h == nil {
		h = &hostPace{}
		p.hosts[host] = h
	}
	if h.held >= p.share || h.nPark > 0 {
		h.park(prio, fire)
		p.mu.Unlock()
		p.waits.Add(1)
		p.watch.Do(func() { go p.runParked(stop) })
		return
	}
	h.held++
	p.mu.Unlock()
	select {
	case p.slots <- struct{}{}:
		fire(&permit{p: p, host: host})
		return
	default:
	}
	p.waits.Add(1)
	select {
	case p.slots <- struct{}{}:
		fire(&permit{p: p, host: host})
	case <-stop:
		p.mu.Lock()
		p.dropHeld(host, h)
		p.mu.Unlock()
		fire(nil)
	}
}

// dropHeld counts one permit of host fewer. p.mu is held.
func (p *sendPace) dropHeld(host string, h *hostPace) {
	if h.held--; h.held == 0 && h.nPark == 0 {
		delete(p.hosts, host)
	}
}

// runParked fires the parked fires that were given a permit (release), in the order given,
// until stop is closed (the engine stopping). Then those given a permit go too, and every
// fire still parked gets nil: each finds the engine stopped and gives back what it holds (a
// concurrency slot, its permit), as a fire that waited for a permit does; the fire stays
// durable in the store and happens after a restart.
func (p *sendPace) runParked(stop <-chan struct{}) {
	var batch []unparked
	for {
		stopping := false
		select {
		case <-p.kick:
		case <-stop:
			stopping = true
		}
		p.mu.Lock()
		batch, p.unparked = p.unparked, batch[:0]
		var rest []func(*permit)
		if stopping {
			p.stopped = true
			for _, h := range p.hosts {
				for f := h.next(); f != nil; f = h.next() {
					rest = append(rest, f)
				}
			}
		}
		p.mu.Unlock()
		for i, u := range batch {
			u.fire(u.pm)
			batch[i] = unparked{}
		}
		if stopping {
			for _, f := range rest {
				f(nil)
			}
			return
		}
	}
}

// release gives the permit back, once: to its downstream's next parked fire (best priority,
// then oldest), which the runner fires with it (runParked), else to the pace.
func (pm *permit) release() {
	if pm == nil || pm.done.Swap(true) {
		return
	}
	p := pm.p
	p.mu.Lock()
	h := p.hosts[pm.host]
	if next := h.next(); next != nil {
		// The downstream's count and the node's stay as they are: the permit passes on.
		p.unparked = append(p.unparked, unparked{fire: next, pm: &permit{p: p, host: pm.host}})
		p.mu.Unlock()
		select {
		case p.kick <- struct{}{}:
		default:
		}
		return
	}
	p.dropHeld(pm.host, h)
	p.mu.Unlock()
	<-p.slots
}

// ahead reports the runs recorded and not yet handed to the wire (or being decided).
func (p *sendPace) ahead() int { return len(p.slots) }

// onWire wraps a send gate so that asking it releases pm: the request is being handed to the
// HTTP client (the gate is asked just before it leaves). gate nil: always open.
func onWire(pm *permit, gate func() error) func() error {
	if pm == nil {
		return gate
	}
	return func() error {
		if gate != nil {
			if err := gate(); err != nil {
				return err // not on the wire: a run held back keeps its permit (holdUnsent)
			}
		}
		pm.release()
		return nil
	}
}
