package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// RoleOwner is the role a node of the shard loop writes in the nodes table while it holds
// shards; it writes RoleBackup while it holds none.
const RoleOwner = "owner"

// ShardsConfig configures a Shards loop. Store, NodeID, Advertise, TTL, Renew, Logger, Clock
// and Metrics mean what they mean in Config.
type ShardsConfig struct {
	Store     persist.ShardStore
	NodeID    string
	Advertise string
	TTL       time.Duration
	Renew     time.Duration
	Logger    *slog.Logger
	Clock     clock.Clock
	Metrics   *metrics.Set
	// InFlight reports which of the given shards, being handed over, still have runs in
	// flight on this node. A shard is released once it has none, or DrainTimeout after its
	// hand-over began; until then its lease is renewed, so that the runs' results land
	// under its epoch, but the gate refuses it, so nothing new is dispatched for it. Nil
	// releases at once.
	InFlight func(model.ShardSet) model.ShardSet
	// DrainTimeout bounds a hand-over. Defaults to TTL.
	DrainTimeout time.Duration
	// HandOverPoint is, for a shard this node releases after handing it over (or at a
	// graceful stop), the instant (ms) from which it fired nothing of it: the hand-over
	// point, written with the release so that the taker fires every fire due from it, late
	// but not judged a misfire (docs/scale-out.md, "Hand-over point"). 0, or a nil func,
	// releases without a point: the taker applies the misfire policies as after a crash.
	HandOverPoint func(shard int) int64
	// HandOverWithin is how soon after its release a shard must be taken for its hand-over
	// point to count: a shard left unheld longer (the last node stopped, nobody took it) was
	// not handed over to anyone, and the fires due meanwhile are misfires. Defaults to
	// HandOverWithinDefault.
	HandOverWithin time.Duration
}

// HandOverWithinDefault is ShardsConfig.HandOverWithin's default: well above the tenth of a
// renew interval in which a node below its share takes a shard released, even on a box
// loaded enough to delay that by seconds, and short enough that a cluster stopped for good
// does not fire its downtime's fires when it comes back.
const HandOverWithinDefault = 30 * time.Second

func (c ShardsConfig) withDefaults() ShardsConfig {
	base := Config{Store: c.Store, NodeID: c.NodeID, Advertise: c.Advertise, TTL: c.TTL, Renew: c.Renew,
		Logger: c.Logger, Clock: c.Clock, Metrics: c.Metrics}.WithDefaults()
	c.TTL, c.Renew, c.Logger, c.Clock, c.Metrics = base.TTL, base.Renew, base.Logger, base.Clock, base.Metrics
	if c.DrainTimeout == 0 {
		c.DrainTimeout = c.TTL
	}
	if c.HandOverWithin == 0 {
		c.HandOverWithin = HandOverWithinDefault
	}
	return c
}

func (c ShardsConfig) validate() error {
	if c.Store == nil {
		return errors.New("store is required")
	}
	return Config{Store: c.Store, NodeID: c.NodeID, Advertise: c.Advertise, TTL: c.TTL, Renew: c.Renew}.validate()
}

// ShardChange is a change of the shards this node holds.
type ShardChange struct {
	// Gained are the shards taken, at their new epochs; the node may schedule them now.
	Gained []persist.ShardFence
	// HandedOver holds, for the shards of Gained that their previous holder handed over
	// within HandOverWithin of the take, the hand-over point (ms) it released them with:
	// every fire due from it is this node's to fire, however late.
	HandedOver map[int]int64
	// Draining are shards the node begins to hand over: it must stop dispatching their
	// fires and let the runs in flight finish.
	Draining model.ShardSet
	// Lost are shards the node no longer holds: released after a hand-over, lost to a
	// renewal that found another holder, or dropped when no renewal succeeded in time.
	Lost   model.ShardSet
	Reason string
	At     time.Time
}

// shardMetrics are the series of the shard loop.
type shardMetrics struct {
	held       *metrics.Gauge
	takes      *metrics.Counter
	handovers  *metrics.Counter
	renewOK    *metrics.Counter
	renewLost  *metrics.Counter
	renewError *metrics.Counter
}

func newShardMetrics(s *metrics.Set) *shardMetrics {
	return &shardMetrics{
		held:       s.GetOrCreateGauge("axe_shards_held", nil),
		takes:      s.GetOrCreateCounter("axe_shard_takes_total"),
		handovers:  s.GetOrCreateCounter("axe_shard_handovers_total"),
		renewOK:    s.GetOrCreateCounter(`axe_shard_renewals_total{result="ok"}`),
		renewLost:  s.GetOrCreateCounter(`axe_shard_renewals_total{result="lost"}`),
		renewError: s.GetOrCreateCounter(`axe_shard_renewals_total{result="error"}`),
	}
}

// Shards is the shard loop of one node (docs/scale-out.md): every renew interval it renews
// the shards it holds in one statement, reads the live nodes and the shard leases, and takes
// unheld shards up to its fair share or hands over those another live node needs. Create with
// NewShards, then Start; Stop ends it.
//
// As with Elector, the leases are judged by the database's clock and this node's own clock
// only makes it give up earlier. All the shards it holds share two local moments, counted
// from when the last renewal (or take) that succeeded was sent:
//
//   - the deadline, TTL − renew after it: the gates close, so nothing is sent under a lease
//     that may run out while the request is on its way. The shards stay held: a renewal
//     stuck in a database that stalls (a Galera view change) may still succeed, and then
//     the gates open again and what waited is sent by this node, under the same epochs;
//   - the expiry, TTL after it: the earliest the database can judge a lease run out and let
//     another node take it. Without a successful renewal by then every shard is dropped.
//
// So a node whose database stalls for less than TTL − renew keeps its shards (see
// docs/scale-out.md, "A stalled database"), and a node cut off for longer gives them up
// before anyone can take them.
type Shards struct {
	cfg      ShardsConfig
	clk      clock.Clock
	log      *slog.Logger
	instance string
	changes  chan ShardChange
	m        *shardMetrics

	mu       sync.Mutex
	held     map[int]int64     // shard → epoch
	draining map[int]time.Time // shards being handed over → when it began
	leaving  bool              // stopping gracefully: the node row says RoleLeaving
	deadline time.Time         // the gates close (TTL − renew after the last good renewal sent)
	expiry   time.Time         // every shard is dropped (TTL after it)
	watchdog clock.Timer

	// sendMu orders sends on changes with its close: the watchdog and Lost may drop shards
	// from other goroutines while Stop runs.
	sendMu sync.Mutex
	closed bool

	life   startstop.Lifecycle
	cancel context.CancelFunc
	done   chan struct{}
}

// NewShards builds a shard loop; nothing runs until Start.
func NewShards(cfg ShardsConfig) (*Shards, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cannot create the shard loop: %w", err)
	}
	return &Shards{
		cfg:      cfg,
		clk:      cfg.Clock,
		log:      cfg.Logger.With("node", cfg.NodeID),
		instance: newInstance(),
		changes:  make(chan ShardChange, 64),
		m:        newShardMetrics(cfg.Metrics),
		held:     map[int]int64{},
		draining: map[int]time.Time{},
		done:     make(chan struct{}),
	}, nil
}

// Changes delivers every change of the shards held, in order. The daemon must keep reading
// it; it is closed by Stop.
func (s *Shards) Changes() <-chan ShardChange { return s.changes }

// liveWithin is how recently a node must have been seen to count as live.
func (s *Shards) liveWithin() time.Duration { return s.cfg.Renew + s.cfg.Renew/2 }

// Start checks that the database takes writes, claims the node id as Elector.Start does,
// and starts the loop holding no shard.
func (s *Shards) Start(ctx context.Context) error {
	return s.life.StartOnce(func() error {
		if err := checkWritable(ctx, s.cfg.Store); err != nil {
			return startstop.NothingStarted(err)
		}
		me := persist.Node{ID: s.cfg.NodeID, Advertise: s.cfg.Advertise, Role: persist.RoleBackup, Instance: s.instance}
		if err := claimNode(ctx, s.cfg.Store, me, s.liveWithin(), s.cfg.Renew, s.clk, s.log); err != nil {
			return startstop.NothingStarted(err)
		}
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		s.cancel = cancel
		go s.run(runCtx)
		return nil
	})
}

// Leaving says, in the nodes table, that this node is stopping gracefully: the others count
// it out of the live set and look for its shards every tenth of a renew interval, so that
// each is taken soon after Stop releases it. It keeps renewing and holding its shards until
// Stop. Call it first thing in a graceful stop.
func (s *Shards) Leaving(ctx context.Context) error {
	s.mu.Lock()
	s.leaving = true
	s.mu.Unlock()
	ctx, cancel := s.call(ctx)
	defer cancel()
	return s.cfg.Store.TouchNode(ctx, s.cfg.NodeID, s.instance, persist.RoleLeaving)
}

// Stop ends the loop. With release set (a graceful stop, after the engine drained) the node
// releases every shard it holds, so that the others take them at their next step; otherwise
// they are taken once their leases run out. The node's row is marked stopped. Idempotent;
// safe without Start.
func (s *Shards) Stop(ctx context.Context, release bool) error {
	return s.life.StopOnce(ctx, func(started bool) error {
		if !started {
			return nil
		}
		s.cancel()
		<-s.done
		held := s.Held()
		points := s.handOverPoints(held)
		s.drop(heldSet(held), "stopping")
		var errs []error
		if release && len(held) > 0 {
			// The release gets a renew interval even past ctx's bound: without it the shards
			// wait out their leases and are taken as a dead node's, without hand-over points.
			rctx, cancel := context.WithCancel(ctx)
			if d, ok := ctx.Deadline(); ok && time.Until(d) < s.cfg.Renew {
				cancel()
				rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Renew)
			}
			t := s.clk.Now()
			err := s.cfg.Store.HandOverShards(rctx, s.cfg.NodeID, held, points)
			cancel()
			s.log.Info("shards released", "shards", heldSet(held).String(), "handed_over", len(points), "took", s.clk.Now().Sub(t), "error", err)
			errs = append(errs, err)
		}
		errs = append(errs, s.cfg.Store.TouchNode(ctx, s.cfg.NodeID, s.instance, persist.RoleStopped))
		s.sendMu.Lock()
		s.closed = true
		close(s.changes)
		s.sendMu.Unlock()
		return errors.Join(errs...)
	})
}

// Gate is nil while this node holds shard at epoch, is not handing it over, and its last
// successful renewal was sent less than TTL − renew ago. Every dispatch for the shard asks
// it just before it leaves.
func (s *Shards) Gate(shard int, epoch int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.held[shard]
	if _, handing := s.draining[shard]; !ok || e != epoch || handing {
		return fmt.Errorf("shard %d at epoch %d: %w", shard, epoch, model.ErrShardNotHeld)
	}
	if !s.clk.Now().Before(s.deadline) {
		return fmt.Errorf("shard %d at epoch %d: %w", shard, epoch, ErrLeaseDeadline)
	}
	return nil
}

// Holds is nil while this node holds shard at epoch and its last successful renewal was
// sent less than TTL − renew ago, whether or not it is handing the shard over: what a run
// decided under the lease asks just before it is sent.
func (s *Shards) Holds(shard int, epoch int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.held[shard]; !ok || e != epoch {
		return fmt.Errorf("shard %d at epoch %d: %w", shard, epoch, model.ErrShardNotHeld)
	}
	if !s.clk.Now().Before(s.deadline) {
		return fmt.Errorf("shard %d at epoch %d: %w", shard, epoch, ErrLeaseDeadline)
	}
	return nil
}

// Renewed is nil unless this node holds shards and its last successful renewal was sent TTL
// − renew ago or more: the part of every shard's gate that is the node's own. The dispatcher
// asks it as its Config.Gate at the first write of every request (dispatch/conn.go), where it
// cannot tell the request's shard: a send that passed its shard's gate and was then held up
// past the deadline (a process frozen by SIGSTOP, a starved CPU) does not leave.
func (s *Shards) Renewed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) > 0 && !s.clk.Now().Before(s.deadline) {
		return fmt.Errorf("no successful shard renewal within lease-ttl − lease-renew: %w", ErrLeaseDeadline)
	}
	return nil
}

// Held returns the shards this node holds (those being handed over too), with their epochs,
// ascending.
func (s *Shards) Held() []persist.ShardFence {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldLocked()
}

func (s *Shards) heldLocked() []persist.ShardFence {
	out := make([]persist.ShardFence, 0, len(s.held))
	for n, e := range s.held {
		out = append(out, persist.ShardFence{Shard: n, Epoch: e})
	}
	slices.SortFunc(out, func(a, b persist.ShardFence) int { return a.Shard - b.Shard })
	return out
}

func heldSet(fs []persist.ShardFence) model.ShardSet {
	var out model.ShardSet
	for _, f := range fs {
		out.Add(f.Shard)
	}
	return out
}

// send reports a change unless Stop has closed the channel.
func (s *Shards) send(ch ShardChange) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if !s.closed {
		s.changes <- ch
	}
}

// Lost tells the loop that a write fenced by shard at epoch failed on the fence: another node
// holds it now. The node drops the shard at once.
func (s *Shards) Lost(shard int, epoch int64, err error) {
	s.mu.Lock()
	current := s.held[shard] == epoch && epoch > 0
	s.mu.Unlock()
	if current {
		s.log.Error("a write failed on a shard's fence: another node holds it; dropping it", "shard", shard, "epoch", epoch, "error", err)
		var set model.ShardSet
		set.Add(shard)
		s.drop(set, "a write failed on the shard's fence")
	}
}

// drop forgets shards (closing their gate first) and reports them lost.
func (s *Shards) drop(shards model.ShardSet, reason string) {
	s.mu.Lock()
	var gone model.ShardSet
	for _, n := range shards.List() {
		if _, ok := s.held[n]; ok {
			delete(s.held, n)
			delete(s.draining, n)
			gone.Add(n)
		}
	}
	if len(s.held) == 0 && s.watchdog != nil {
		s.watchdog.Stop()
		s.watchdog = nil
		s.deadline, s.expiry = time.Time{}, time.Time{}
	}
	left := len(s.held)
	s.mu.Unlock()
	if gone.Len() == 0 {
		return
	}
	s.m.held.Set(float64(left))
	s.log.Warn("shards no longer held", "shards", gone.String(), "reason", reason, "still_held", left)
	s.send(ShardChange{Lost: gone, Reason: reason, At: s.clk.Now()})
}

// armLocked moves the local deadline to TTL − renew and the local expiry to TTL after sent,
// the moment a renewal (or a take) of every shard held left. Caller holds s.mu.
func (s *Shards) armLocked(sent time.Time) {
	if !s.deadline.IsZero() && !s.clk.Now().Before(s.deadline) {
		s.log.Warn("a shard renewal succeeded after the local deadline; the gates open again and what waited is sent",
			"late", s.clk.Now().Sub(s.deadline))
	}
	s.deadline = sent.Add(s.cfg.TTL - s.cfg.Renew)
	s.expiry = sent.Add(s.cfg.TTL)
	if s.watchdog != nil {
		s.watchdog.Stop()
	}
	deadline, expiry := s.deadline, s.expiry
	// The watchdog works on time even when the loop is stuck in a database call: at the
	// deadline it says the gates closed (Gate and Holds see the deadline themselves), at the
	// expiry it drops every shard.
	s.watchdog = s.clk.AfterFunc(deadline.Sub(s.clk.Now()), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.expiry.Equal(expiry) || len(s.held) == 0 {
			return // renewed meanwhile, or nothing held
		}
		s.log.Warn("no successful shard renewal within lease-ttl − lease-renew; nothing is sent until one succeeds, and every shard is dropped if none does by lease-ttl",
			"shards", len(s.held), "drop_in", expiry.Sub(s.clk.Now()))
		s.watchdog = s.clk.AfterFunc(expiry.Sub(s.clk.Now()), func() {
			s.mu.Lock()
			due := s.expiry.Equal(expiry) && len(s.held) > 0
			all := heldSet(s.heldLocked())
			s.mu.Unlock()
			if due {
				s.log.Error("no successful shard renewal within lease-ttl; dropping every shard")
				s.drop(all, "no successful renewal within lease-ttl")
			}
		})
	})
}

// run is the shard loop.
func (s *Shards) run(ctx context.Context) {
	defer close(s.done)
	next := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.clk.After(next):
		}
		next = s.step(ctx)
	}
}

// step is one turn of the loop; it returns when to run the next.
func (s *Shards) step(ctx context.Context) time.Duration {
	if !s.renew(ctx) {
		if ctx.Err() != nil {
			return 0
		}
		return min(s.cfg.Renew/5, time.Second)
	}
	s.mu.Lock()
	role := persist.RoleBackup
	switch {
	case s.leaving:
		role = persist.RoleLeaving
	case len(s.held) > 0:
		role = RoleOwner
	}
	s.mu.Unlock()
	if err := s.touch(ctx, role); errors.Is(err, persist.ErrNodeIDTaken) {
		s.log.Error("another instance claimed this node id; dropping every shard", "error", err)
		s.drop(heldSet(s.Held()), "another instance claimed this node id")
		return s.cfg.Renew
	}
	nodes, leases, err := s.read(ctx)
	if err != nil {
		s.log.Warn("cannot read the nodes and the shard leases", "error", err)
		return s.cfg.Renew
	}
	v := shardView{me: s.cfg.NodeID}
	leaving := map[string]bool{}
	for _, n := range nodes {
		switch {
		case n.ID == s.cfg.NodeID:
			v.live = append(v.live, n.ID)
		case n.Role == persist.RoleLeaving && n.Age < s.liveWithin():
			leaving[n.ID] = true
		case n.Role != persist.RoleStopped && n.Age < s.liveWithin():
			v.live = append(v.live, n.ID)
		}
	}
	// The earliest moment a lease of another node runs out: the next step is then, so that a
	// dead node's shards are taken about when its leases expire rather than up to a renew
	// interval later.
	soonest := s.cfg.Renew
	for _, l := range leases {
		if !l.Held {
			continue
		}
		v.owner[l.Shard] = l.Holder
		switch {
		case leaving[l.Holder]:
			// A node stopping gracefully releases its shards once its runs have ended:
			// look again soon, so that each is taken within a tenth of a renew interval
			// of its release rather than at the next renewal.
			soonest = min(soonest, s.cfg.Renew/10)
		case l.Holder != s.cfg.NodeID && !slices.Contains(v.live, l.Holder):
			soonest = min(soonest, l.Remaining+10*time.Millisecond)
		}
	}
	s.mu.Lock()
	// This node's own view of what it holds wins over the read, which may predate its take.
	for n, o := range v.owner {
		if _, mine := s.held[n]; o == s.cfg.NodeID && !mine {
			v.owner[n] = "" // held under this id by a previous instance: retaken at a new epoch
		}
	}
	for n := range s.held {
		v.owner[n] = s.cfg.NodeID
	}
	for n := range s.draining {
		v.draining.Add(n)
	}
	s.mu.Unlock()
	p := planShards(v)
	if got := s.take(ctx, p.take); got < len(p.take) {
		// Another node took some of them first: others may be free still.
		soonest = min(soonest, s.cfg.Renew/10)
	}
	if len(s.Held()) < p.quota {
		// Below its share with nothing free to take: the nodes over theirs are handing
		// shards over to it (or a dead node's leases are running out, timed above). Look
		// again soon, so that a shard released after its drain is taken within a tenth of a
		// renew interval rather than at the next renewal: a hand-over's fires wait for it.
		soonest = min(soonest, s.cfg.Renew/10)
	}
	s.handOver(ctx, p.release)
	s.mu.Lock()
	draining := len(s.draining) > 0
	s.mu.Unlock()
	if draining {
		// A shard being handed over fires nothing until its taker has recovered it: look
		// again soon, so that it is released within a tenth of a renew interval of its last
		// run ending rather than at the next renewal (each step releases what has drained).
		soonest = min(soonest, s.cfg.Renew/10)
	}
	return max(soonest, 10*time.Millisecond)
}

// renew renews every shard held, drops those another node took, and releases those handed
// over whose runs have finished. It reports false when the database did not answer.
func (s *Shards) renew(ctx context.Context) bool {
	held := s.Held()
	if len(held) == 0 {
		return true
	}
	s.mu.Lock()
	left := s.expiry.Sub(s.clk.Now())
	s.mu.Unlock()
	// A renewal is worth waiting for until the local expiry, no longer: by then the watchdog
	// has dropped every shard. Past the deadline it still reopens the gates.
	cctx, cancel := context.WithTimeout(ctx, max(left, time.Millisecond))
	defer cancel()
	sent := s.clk.Now()
	lost, err := s.cfg.Store.RenewShards(cctx, s.cfg.NodeID, held, s.cfg.TTL)
	if err != nil {
		s.m.renewError.Inc()
		if ctx.Err() == nil {
			s.log.Warn("cannot renew the shards; retrying until the local expiry", "error", err)
		}
		return false
	}
	s.m.renewOK.Inc()
	var gone model.ShardSet
	for _, n := range lost {
		gone.Add(n)
	}
	if gone.Len() > 0 {
		// Dropped before the renewal arms the gates again: a node woken from a freeze (or
		// back from a partition) renews first thing, and the gate of a shard another node
		// took meanwhile must not open, not for a moment, on the renewal of the others.
		s.drop(gone, "the renewal found another holder or epoch")
		s.m.renewLost.Inc()
		s.log.Error("shards lost: their renewal found another holder or epoch", "shards", gone.String())
	}
	s.mu.Lock()
	if len(s.held) > 0 {
		s.armLocked(sent)
	}
	s.mu.Unlock()
	s.releaseDrained(ctx)
	return true
}

// call bounds one store call of the loop by a renew interval of its own: one slow answer
// must not starve the calls after it (a release, above all, which would otherwise wait out
// the TTL).
func (s *Shards) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Renew)
}

// touch writes this node's row with role; a failure other than a lost id is only logged.
func (s *Shards) touch(ctx context.Context, role string) error {
	ctx, cancel := s.call(ctx)
	defer cancel()
	err := s.cfg.Store.TouchNode(ctx, s.cfg.NodeID, s.instance, role)
	if err != nil && !errors.Is(err, persist.ErrNodeIDTaken) && ctx.Err() == nil {
		s.log.Warn("cannot touch this node's row", "error", err)
	}
	return err
}

// read reads the nodes and the shard leases, as the database judges them now.
func (s *Shards) read(ctx context.Context) ([]persist.Node, []persist.ShardLease, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	nodes, err := s.cfg.Store.ListNodes(ctx)
	if err != nil {
		return nil, nil, err
	}
	leases, err := s.cfg.Store.ShardLeases(ctx)
	return nodes, leases, err
}

// take tries to take shards, reports those it got, and returns how many.
func (s *Shards) take(ctx context.Context, shards []int) int {
	if len(shards) == 0 {
		return 0
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	sent := s.clk.Now()
	taken, err := s.cfg.Store.TakeShards(ctx, s.cfg.NodeID, shards, s.cfg.TTL)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("cannot take shards", "error", err)
		}
		return 0
	}
	if len(taken) == 0 {
		return 0
	}
	gained := make([]persist.ShardFence, len(taken))
	var handedOver map[int]int64
	for _, l := range taken {
		if l.HandedOver > 0 && l.HandedOverAgo <= s.cfg.HandOverWithin {
			if handedOver == nil {
				handedOver = map[int]int64{}
			}
			handedOver[l.Shard] = l.HandedOver
		}
	}
	s.mu.Lock()
	if len(s.held) == 0 {
		s.armLocked(sent) // else the older renewal's deadline holds for all
	}
	for i, l := range taken {
		s.held[l.Shard] = l.Epoch
		gained[i] = persist.ShardFence{Shard: l.Shard, Epoch: l.Epoch}
	}
	left := len(s.held)
	s.mu.Unlock()
	s.m.takes.Add(len(taken))
	s.m.held.Set(float64(left))
	s.log.Info("shards taken", "shards", heldSet(gained).String(), "held", left, "handed_over", len(handedOver))
	s.send(ShardChange{Gained: gained, HandedOver: handedOver, Reason: "shards taken", At: sent})
	return len(taken)
}

// handOver begins handing shards over: their gate closes now, and releaseDrained releases
// them once their runs have finished.
func (s *Shards) handOver(ctx context.Context, shards []int) {
	if len(shards) == 0 {
		return
	}
	var set model.ShardSet
	now := s.clk.Now()
	s.mu.Lock()
	for _, n := range shards {
		if _, ok := s.held[n]; ok {
			s.draining[n] = now
			set.Add(n)
		}
	}
	s.mu.Unlock()
	if set.Len() == 0 {
		return
	}
	s.log.Info("handing shards over to a node below its share", "shards", set.String())
	s.send(ShardChange{Draining: set, Reason: "handing over to a node below its share", At: now})
	s.releaseDrained(ctx)
}

// releaseDrained releases the shards being handed over that have no run in flight left, or
// whose hand-over began DrainTimeout ago.
func (s *Shards) releaseDrained(ctx context.Context) {
	s.mu.Lock()
	var handing model.ShardSet
	for n := range s.draining {
		handing.Add(n)
	}
	s.mu.Unlock()
	if handing.Len() == 0 {
		return
	}
	var busy model.ShardSet
	if s.cfg.InFlight != nil {
		busy = s.cfg.InFlight(handing)
	}
	now := s.clk.Now()
	var out []persist.ShardFence
	var set model.ShardSet
	s.mu.Lock()
	for _, n := range handing.List() {
		began, ok := s.draining[n]
		if !ok || (busy.Has(n) && now.Sub(began) < s.cfg.DrainTimeout) {
			continue
		}
		out = append(out, persist.ShardFence{Shard: n, Epoch: s.held[n]})
		set.Add(n)
	}
	s.mu.Unlock()
	if len(out) == 0 {
		return
	}
	// Forget first, then release: once released another node may take them, and this one
	// must be done with them by then.
	points := s.handOverPoints(out)
	s.drop(set, "handed over")
	ctx, cancel := s.call(ctx)
	defer cancel()
	if err := s.cfg.Store.HandOverShards(ctx, s.cfg.NodeID, out, points); err != nil {
		// Not released: the leases run out after the TTL and are taken then.
		s.log.Warn("cannot release the shards handed over; they are taken once their leases run out", "shards", set.String(), "error", err)
		return
	}
	s.m.handovers.Add(len(out))
}

// handOverPoints asks the engine for the hand-over points of shards about to be released:
// the shards without one are released unmarked.
func (s *Shards) handOverPoints(shards []persist.ShardFence) map[int]int64 {
	if s.cfg.HandOverPoint == nil {
		return nil
	}
	out := make(map[int]int64, len(shards))
	for _, f := range shards {
		if at := s.cfg.HandOverPoint(f.Shard); at > 0 {
			out[f.Shard] = at
		}
	}
	return out
}
