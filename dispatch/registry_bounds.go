package dispatch

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrTooManyExecutors is the error of a registration over a Bounds limit, wrapped naming it.
var ErrTooManyExecutors = errors.New("too many executors")

// Bounds limits how many executors the registry holds, lost ones included: a lost executor
// stays registered (a heartbeat brings it back), so without a bound a caller holding an
// executor token could make the registry, the store and the alerts grow with every address
// it registers.
type Bounds struct {
	// PerApp is the most executors of one app; 0: no limit.
	PerApp int
	// PerKey is the most executors registered with one dispatch key, that is with one token
	// (protocol.DispatchKey), whatever their apps; 0: no limit. Executors without a key
	// (unsigned) are bounded per app only.
	PerKey int
}

// RegisterBounded registers an executor as Register does, with its dispatch key, within b.
// An address already registered always registers again. A new one over a bound takes the
// place of the executor of that app (or key) that has been lost the longest with no run in
// flight, which it removes and returns in evicted for the caller to forget in the store;
// when there is none, it is refused with an error wrapping ErrTooManyExecutors and nothing
// changes.
func (r *Registry) RegisterBounded(app, addr, proto string, handlers []string, now int64, key []byte, b Bounds) (x *Executor, created, revived bool, evicted []*Executor, err error) {
	r.bounded.Lock()
	defer r.bounded.Unlock()
	if r.Get(app, addr) == nil {
		if evicted, err = r.makeRoom(app, key, b); err != nil {
			return nil, false, false, nil, err
		}
	}
	x, created, revived = r.Register(app, addr, proto, handlers, now)
	x.SetDispatchKey(key)
	return x, created, revived, evicted, nil
}

// makeRoom makes room for one more executor of app registered with key, evicting a lost
// one per bound reached.
func (r *Registry) makeRoom(app string, key []byte, b Bounds) ([]*Executor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var evicted []*Executor
	sameApp := func(m *Executor) bool { return m.App == app }
	sameKey := func(m *Executor) bool { return bytes.Equal(m.DispatchKey(), key) }
	if b.PerApp > 0 {
		x, err := r.evictOverLocked(sameApp, b.PerApp, fmt.Sprintf("app %q has %d executors registered, the most --max-executors-per-app allows", app, b.PerApp))
		if err != nil {
			return nil, err
		}
		if x != nil {
			evicted = append(evicted, x)
		}
	}
	if b.PerKey > 0 && len(key) > 0 {
		x, err := r.evictOverLocked(sameKey, b.PerKey, fmt.Sprintf("this token has %d executors registered, the most --max-executors-per-token allows", b.PerKey))
		if err != nil {
			// Undo nothing: an eviction for the app bound stays (the executor was lost and
			// idle), and the registration is refused.
			return evicted, err
		}
		if x != nil {
			evicted = append(evicted, x)
		}
	}
	return evicted, nil
}

// evictOverLocked counts the executors match selects; at limit or above it removes the
// longest-lost one with no run in flight and returns it, or refuses with why. r.mu is held.
func (r *Registry) evictOverLocked(match func(*Executor) bool, limit int, why string) (*Executor, error) {
	n := 0
	var oldest *Executor
	for _, set := range r.apps {
		for _, m := range set.members {
			if !match(m) {
				continue
			}
			n++
			if !m.Alive && m.Inflight() == 0 && (oldest == nil || m.LastHeartbeat < oldest.LastHeartbeat) {
				oldest = m
			}
		}
	}
	if n < limit {
		return nil, nil
	}
	if oldest == nil {
		return nil, fmt.Errorf("%w: %s, and none of them is lost and idle to make room; deregister or stop one first", ErrTooManyExecutors, why)
	}
	r.removeLocked(oldest)
	return oldest, nil
}

// Remove drops the executor registered as (app, addr) and returns it, or nil when there is
// none. Runs in flight on it keep their reference to it.
func (r *Registry) Remove(app, addr string) *Executor {
	r.mu.Lock()
	defer r.mu.Unlock()
	if set := r.apps[app]; set != nil {
		for _, m := range set.members {
			if m.Address == addr {
				r.removeLocked(m)
				return m
			}
		}
	}
	return nil
}

// DropAbsent removes the lost executors with no run in flight for which stored says the
// store holds no row (deleted by an operator or by another node), and returns them. Alive
// ones are left to their next heartbeat, which the store refuses.
func (r *Registry) DropAbsent(stored func(app, addr string) bool) []*Executor {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Executor
	for _, set := range r.apps {
		for _, m := range set.members {
			if !m.Alive && m.Inflight() == 0 && !stored(m.App, m.Address) {
				out = append(out, m)
			}
		}
	}
	for _, m := range out {
		r.removeLocked(m)
	}
	return out
}

// removeLocked takes x out of its app's set, and the set out of the registry once empty.
// r.mu is held.
func (r *Registry) removeLocked(x *Executor) {
	set := r.apps[x.App]
	if set == nil {
		return
	}
	for i, m := range set.members {
		if m == x {
			set.members = append(set.members[:i:i], set.members[i+1:]...)
			break
		}
	}
	if len(set.members) == 0 {
		delete(r.apps, x.App)
	}
}
