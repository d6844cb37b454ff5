package dispatch

import (
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/axe-sched/axe/protocol"
)

// Routing strategies, chosen per task; the names are protocol's.
const (
	RouteRoundRobin     = protocol.RouteRoundRobin
	RouteRandom         = protocol.RouteRandom
	RouteLeastBusy      = protocol.RouteLeastBusy
	RouteConsistentHash = protocol.RouteConsistentHash
	RouteFailover       = protocol.RouteFailover
)

// Executor statuses.
const (
	StatusAlive = "alive"
	StatusLost  = "lost"
	// StatusLeft is an executor that deregistered and still heartbeats (it drains): no new
	// run goes to it.
	StatusLeft = "left"
)

// ErrUnknownExecutor is returned by Heartbeat for an executor that never registered (or
// that the registry forgot): the executor registers again.
var ErrUnknownExecutor = errors.New("executor not registered")

// Executor is one registered executor instance as the registry sees it.
type Executor struct {
	App           string
	Address       string
	Handlers      []string
	RegisteredAt  int64
	LastHeartbeat int64
	Alive         bool
	// tls is whether the executor serves its endpoints over HTTPS (it registered with
	// protocol "https"); a registration may change it, so it is read without the registry's
	// lock by the calls that dial the executor.
	tls atomic.Bool
	// key is the dispatch key every call to the executor is signed with
	// (protocol.DispatchKey of the token it registered with); nil for an executor that
	// predates signed calls, which gets the legacy bearer token instead.
	key atomic.Pointer[[]byte]
	// incarnation and left are the executor's protocol version 2 state (incarnation.go):
	// the incarnation it registered ("" for a version 1 executor), which calls to it are
	// signed for, and whether it deregistered, after which no new run goes to it.
	incarnation atomic.Pointer[string]
	left        atomic.Bool
	// localAt is the LocalGeneration of this node's last registration or deregistration of
	// the executor (0: none), which a store row read before it must not undo.
	localAt atomic.Int64
	reg     registration
	// inflight counts runs sent and not yet resolved, for least-busy routing.
	inflight atomic.Int64
	// offers holds the runs waiting to be offered to this executor (Dispatcher.Offer).
	offers offerQueue
}

// SetDispatchKey sets the key calls to the executor are signed with; nil or empty: none.
func (x *Executor) SetDispatchKey(key []byte) {
	if len(key) == 0 {
		x.key.Store(nil)
		return
	}
	k := append([]byte(nil), key...)
	x.key.Store(&k)
}

// DispatchKey is the key calls to the executor are signed with, nil when they are not.
func (x *Executor) DispatchKey() []byte {
	if k := x.key.Load(); k != nil {
		return *k
	}
	return nil
}

// Signed reports whether calls to the executor are signed.
func (x *Executor) Signed() bool { return x.key.Load() != nil }

// Inflight returns the number of runs in flight on the executor.
func (x *Executor) Inflight() int64 { return x.inflight.Load() }

// AddInflight adjusts the in-flight count.
func (x *Executor) AddInflight(d int64) { x.inflight.Add(d) }

// Protocol is the scheme the executor is dialled with: protocol.ProtocolHTTP or
// protocol.ProtocolHTTPS.
func (x *Executor) Protocol() string {
	if x.tls.Load() {
		return protocol.ProtocolHTTPS
	}
	return protocol.ProtocolHTTP
}

// URL is the URL of path on the executor: scheme://address/path.
func (x *Executor) URL(path string) string { return x.Protocol() + "://" + x.Address + path }

func (x *Executor) serves(handler string) bool {
	for _, h := range x.Handlers {
		if h == handler {
			return true
		}
	}
	return false
}

type appSet struct {
	members []*Executor // sorted by address: a stable order for failover and hashing
	rr      atomic.Uint64
}

// Registry holds the executors by app. It is in memory only; the engine persists changes.
// Registration is idempotent by (app, address): a restarted executor is the same entry.
type Registry struct {
	mu   sync.RWMutex
	apps map[string]*appSet
	// bounded serialises RegisterBounded, so that its count and its registration are one
	// step (registry_bounds.go).
	bounded sync.Mutex
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{apps: make(map[string]*appSet)} }

// Register adds or refreshes an executor and marks it alive; proto is the scheme it is
// dialled with (protocol.ProtocolHTTPS, or protocol.ProtocolHTTP for anything else). It
// reports whether the entry is new and whether it was lost before (it came back).
func (r *Registry) Register(app, addr, proto string, handlers []string, now int64) (x *Executor, created, revived bool) {
	isTLS := proto == protocol.ProtocolHTTPS
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.appLocked(app)
	for _, m := range set.members {
		if m.Address == addr {
			revived = !m.Alive
			m.Handlers = append([]string(nil), handlers...)
			m.tls.Store(isTLS)
			// A registration may come from a new version of the executor: let it show
			// again whether it takes run batches.
			m.offers.mu.Lock()
			m.offers.single = false
			m.offers.mu.Unlock()
			m.LastHeartbeat = now
			m.Alive = true
			return m, false, revived
		}
	}
	x = &Executor{App: app, Address: addr, Handlers: append([]string(nil), handlers...), RegisteredAt: now, LastHeartbeat: now, Alive: true}
	x.tls.Store(isTLS)
	set.add(x)
	return x, true, false
}

// appLocked returns app's set, made empty if it has none; r.mu is held.
func (r *Registry) appLocked(app string) *appSet {
	set := r.apps[app]
	if set == nil {
		set = &appSet{}
		r.apps[app] = set
	}
	return set
}

// add puts x among the members, kept in address order.
func (s *appSet) add(x *Executor) {
	s.members = append(s.members, x)
	sort.Slice(s.members, func(i, j int) bool { return s.members[i].Address < s.members[j].Address })
}

// Restore puts an executor read from the store into the registry as it was.
func (r *Registry) Restore(app, addr, proto string, handlers []string, registeredAt, lastHeartbeat int64, alive bool) {
	x, _, _ := r.Register(app, addr, proto, handlers, lastHeartbeat)
	r.mu.Lock()
	x.RegisteredAt = registeredAt
	x.Alive = alive
	r.mu.Unlock()
}

// Merge takes in an executor as another node recorded it in the store (scale-out, where
// executors register and heartbeat with any node): a new one is added; a known one keeps
// the newer of the two heartbeats, and is alive when the store says so by a heartbeat newer
// than this registry's, or lost when the store says so and this registry saw nothing newer.
// Its handlers and scheme follow the store's. It returns the entry, and whether it came
// back to life.
func (r *Registry) Merge(app, addr, proto string, handlers []string, registeredAt, lastHeartbeat int64, alive bool) (x *Executor, revived bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.appLocked(app)
	for _, m := range set.members {
		if m.Address != addr {
			continue
		}
		if !slices.Equal(m.Handlers, handlers) {
			m.Handlers = append([]string(nil), handlers...)
		}
		m.tls.Store(proto == protocol.ProtocolHTTPS)
		switch {
		case lastHeartbeat > m.LastHeartbeat:
			m.LastHeartbeat = lastHeartbeat
			revived = alive && !m.Alive
			m.Alive = alive
		case lastHeartbeat == m.LastHeartbeat && !alive:
			m.Alive = false
		}
		return m, revived
	}
	x = &Executor{App: app, Address: addr, Handlers: append([]string(nil), handlers...), RegisteredAt: registeredAt,
		LastHeartbeat: lastHeartbeat, Alive: alive}
	x.tls.Store(proto == protocol.ProtocolHTTPS)
	set.add(x)
	return x, false
}

// Get returns the executor registered as (app, addr), or nil.
func (r *Registry) Get(app, addr string) *Executor {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if set := r.apps[app]; set != nil {
		for _, m := range set.members {
			if m.Address == addr {
				return m
			}
		}
	}
	return nil
}

// Heartbeat records a heartbeat; it reports whether the executor was lost and came back.
func (r *Registry) Heartbeat(app, addr string, now int64) (revived bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if set := r.apps[app]; set != nil {
		for _, m := range set.members {
			if m.Address == addr {
				revived = !m.Alive
				m.LastHeartbeat = now
				m.Alive = true
				return revived, nil
			}
		}
	}
	return false, ErrUnknownExecutor
}

// Seen records that x called in at now with something other than a heartbeat (a result):
// any call proves an executor alive, so a heartbeat queued behind a burst of results does
// not get it reaped. It never revives a lost executor; only a heartbeat does, with its alert.
func (r *Registry) Seen(x *Executor, now int64) {
	r.mu.Lock()
	if x.Alive && x.LastHeartbeat < now {
		x.LastHeartbeat = now
	}
	r.mu.Unlock()
}

// Reap marks executors silent since before deadline as lost and returns them: they get no new run.
// Lost executors stay registered: a heartbeat brings them back.
func (r *Registry) Reap(deadline int64) []*Executor {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lost []*Executor
	for _, set := range r.apps {
		for _, m := range set.members {
			if m.Alive && m.LastHeartbeat < deadline {
				m.Alive = false
				lost = append(lost, m)
			}
		}
	}
	return lost
}

// ExecutorInfo is a copy of an executor's registry entry.
type ExecutorInfo struct {
	App           string
	Address       string
	Protocol      string
	Handlers      []string
	RegisteredAt  int64
	LastHeartbeat int64
	Alive         bool
	// Left: the executor deregistered (Executor.Left).
	Left     bool
	Inflight int64
}

// Snapshot returns a copy of every executor, ordered by app then address.
func (r *Registry) Snapshot() []ExecutorInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []ExecutorInfo
	for _, set := range r.apps {
		for _, m := range set.members {
			out = append(out, ExecutorInfo{App: m.App, Address: m.Address, Protocol: m.Protocol(), Handlers: append([]string(nil), m.Handlers...),
				RegisteredAt: m.RegisteredAt, LastHeartbeat: m.LastHeartbeat, Alive: m.Alive, Left: m.Left(), Inflight: m.Inflight()})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].App != out[j].App {
			return out[i].App < out[j].App
		}
		return out[i].Address < out[j].Address
	})
	return out
}

// AliveCount returns the number of alive executors.
func (r *Registry) AliveCount() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, set := range r.apps {
		for _, m := range set.members {
			if m.Alive {
				n++
			}
		}
	}
	return n
}

// Candidates returns the alive executors of app that serve handler and have not
// deregistered, in the order the route
// prefers: the first is where the run goes, the rest are where it goes if that one refuses or
// is busy. key is what consistent hashing hashes (the task name).
func (r *Registry) Candidates(app, handler, route, key string) []*Executor {
	r.mu.RLock()
	set := r.apps[app]
	var alive []*Executor
	if set != nil {
		for _, m := range set.members {
			if m.Alive && !m.Left() && m.serves(handler) {
				alive = append(alive, m)
			}
		}
	}
	r.mu.RUnlock()
	n := len(alive)
	if n <= 1 {
		return alive
	}
	start := 0
	switch route {
	case RouteRandom:
		start = rand.IntN(n)
	case RouteLeastBusy:
		sort.SliceStable(alive, func(i, j int) bool { return alive[i].Inflight() < alive[j].Inflight() })
	case RouteConsistentHash:
		start = rendezvous(alive, key)
	case RouteFailover:
		// members are sorted by address: the first alive one is the primary.
	default: // round robin
		start = int(set.rr.Add(1)-1) % n
	}
	if start == 0 {
		return alive
	}
	out := make([]*Executor, 0, n)
	out = append(out, alive[start:]...)
	return append(out, alive[:start]...)
}

// rendezvous picks the member with the highest hash of (key, address): a task sticks to one
// executor, and only the tasks of an executor that leaves or joins move.
func rendezvous(members []*Executor, key string) int {
	best, bestH := 0, uint64(0)
	for i, m := range members {
		h := fnv.New64a()
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write([]byte(m.Address))
		if v := h.Sum64(); i == 0 || v > bestH {
			best, bestH = i, v
		}
	}
	return best
}
