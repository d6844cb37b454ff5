package engine

// Rate limits across nodes (docs/scale-out.md, "Rate limits across nodes"). Each sharded
// node's rate gate gives out its share of every limit. By shard count alone
// (shardOwner.updateRateShare) a downstream whose fires all fall in one node's shards would
// get a third of its rate on three nodes. So the nodes exchange, through the store, their
// recent demand for each rate-limited downstream, and each gives itself a share by demand:
//
//	share = floor + (1 − n·floor) · mine / total      (total > 0)
//	share = 1 / n                                     (nobody wants it now)
//
// where n is the nodes with a fresh row for the downstream and floor = rateShareFloor / n: a
// node that wants nothing keeps a little, so that its first fires do not wait a whole
// exchange. A downstream no node wants any more drops out of the table after rateDemandTTL,
// and every node falls back to its share by shards. Demand is what a node took in the last
// exchange, a second's worth, plus what waits in its buffer: a backlog asks for more.
//
// A live node without a row for a downstream (it has not exchanged since the downstream's
// first demand) gives out its share by shards of it. So every node also writes, each
// exchange, its share by shards under rateNodesKey, and the nodes with rows share only what
// the others' shares by shards leave (budget below): the shares in force then add up to one
// at every exchange, also at a downstream's first demand, when the first node to exchange
// would otherwise take the whole rate beside the others' shares by shards.
//
// Shares from demand read at different moments need not add up to one: a node whose demand
// rose takes more before the others have read it and given theirs up (10% over the rate in
// a run on a loaded box). So the exchanges run one at a time (the store's lock), each node
// writes with its demand the share it takes of each downstream (its claim, under
// claimKey), and it takes at most what the others' claims leave:
//
//	claim = min(share by demand, 1 − Σ the other live nodes' claims)
//
// where a live node without a claim for the downstream counts its share by shards, which is
// what it then gives out, and the shards no node's row accounts for count as held by a node
// without rows. A node lowers a share before its exchange commits and raises one
// only after, so at every moment each node gives out at most its claim in the store, and
// the claims there add up to at most one. A claim is heeded for rateDemandTTL from its
// exchange: a node whose exchanges stop succeeding (a slow database) gives out no more than
// a trickle of the downstreams it claimed (rateShareMin) from shortly before then until its
// next exchange commits, since the others no longer count its claim.

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

const (
	// rateExchange is how often a node writes its demand and reads the others'.
	rateExchange = 250 * time.Millisecond
	// rateDemandTTL is how long a node's row is heeded: forty exchanges, so that exchanges
	// slowed or failed by a busy database for seconds do not cost a node its claims (at 3 s
	// they did, in a loaded run: 84% of a rate used), while a dead or departed node's share
	// is reclaimed within seconds.
	rateDemandTTL = 10 * time.Second
	// rateClaimMargin is how long before its claims stop being heeded a node stops giving
	// out what they claim, should no exchange have committed since (clocks of the nodes
	// may differ by this much).
	rateClaimMargin = time.Second
	// rateShareMin is the share a node takes of a downstream the others' claims leave
	// nothing of, or whose claims it can no longer vouch for: a share must be positive.
	rateShareMin = 1e-6
	// rateShareFloor is the part of a downstream's rate the nodes that want none of it keep
	// between them: at most 5% of a rate is idle on nodes without demand.
	rateShareFloor = 0.05
	// rateDemandKeys bounds the downstreams a node writes each exchange (the busiest; the
	// others keep the share by shards).
	rateDemandKeys = 1000
	// rateNodesKey is the row under which each node writes its share by shards every
	// exchange: no downstream or rate key is named so (keys hold no spaces).
	rateNodesKey = " nodes"
	// rateClaimPrefix names the row of a node's claim of a downstream (claimKey).
	rateClaimPrefix = " claim "
)

// claimKey is the row under which a node writes the share it takes of downstream k.
func claimKey(k string) string { return rateClaimPrefix + k }

// rateShares is the demand exchange of a sharded node: a service of its own, started with
// the engine's loops when the engine is sharded and its store keeps demand.
type rateShares struct {
	e     *Engine
	st    persist.DemandStore
	last  time.Time
	known map[string]bool // the downstreams some node wanted at the last exchange (loop only)

	mu sync.Mutex
	// claimed are the shares given out by demand (SetKeyShares) now: at most what the store
	// holds as this node's claims, whatever became of an exchange that failed.
	claimed map[string]float64
	// lastAt is the time the last committed exchange's rows carry (ms); lapse is the timer
	// that stops giving out what they claim before they stop being heeded.
	lastAt int64
	lapse  clock.Timer
}

// newRateShares returns the demand exchange of e, or nil when no other node takes tokens of
// the same downstreams (acrossNodes false: not sharded), the node shares by shards
// (Config.RateShareByShards) or its store keeps no demand.
func newRateShares(e *Engine, acrossNodes bool) *rateShares {
	if !acrossNodes || e.cfg.RateShareByShards {
		return nil
	}
	st, ok := e.store.(persist.DemandStore)
	if !ok {
		return nil
	}
	return &rateShares{e: e, st: st, known: map[string]bool{}, claimed: map[string]float64{}}
}

func (r *rateShares) loop(ctx context.Context) {
	defer r.e.loopsWG.Done()
	t := r.e.cfg.Clock.NewTicker(rateExchange)
	defer t.Stop()
	r.last = r.e.now()
	defer r.stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		r.exchange(ctx)
	}
}

// stop stops the lapse timer (the loop has returned).
func (r *rateShares) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lapse != nil {
		r.lapse.Stop()
	}
}

// demand returns this node's demand per limited downstream: tokens a second taken since the
// last exchange plus its buffered fires.
func (r *rateShares) demand(now time.Time) map[string]float64 {
	g := r.e.gate
	el := now.Sub(r.last).Seconds()
	r.last = now
	if el <= 0 {
		el = rateExchange.Seconds()
	}
	out := map[string]float64{}
	for k, n := range g.lim.TakenSince() {
		out[k] = float64(n) / el
	}
	g.mu.Lock()
	for k, q := range g.queues {
		if q.Len() > 0 {
			out[k] += float64(q.Len())
		}
	}
	g.mu.Unlock()
	if len(out) > rateDemandKeys {
		keys := make([]string, 0, len(out))
		for k := range out {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return out[keys[i]] > out[keys[j]] })
		for _, k := range keys[rateDemandKeys:] {
			delete(out, k)
		}
	}
	return out
}

// exchange writes this node's demand, reads every node's and sets the shares.
func (r *rateShares) exchange(ctx context.Context) {
	e := r.e
	if !e.gate.limited.Load() {
		r.last = e.now()
		return // no rate limit at all: nothing to share, and no transaction every exchange
	}
	now := e.now()
	mine := r.demand(now)
	// A downstream some node wants is written with this node's demand for it, 0 too, so
	// that every node counts every other in n. So is every limit set for a key of its own:
	// a downstream's first demand on one node then finds every node counted at once, where
	// a node without a row gives out its share by shards (demandShares) until it has read
	// the demand and written its own row, two exchanges later. Keys of a pattern or the
	// default limit are learnt from the table.
	zero := func(k string) {
		if _, ok := mine[k]; !ok && len(mine) < rateDemandKeys {
			mine[k] = 0
		}
	}
	for k := range r.known {
		zero(k)
	}
	_, perKey := e.gate.lim.Limits()
	for k := range perKey {
		if _, pattern := model.KeyPattern(k); !pattern {
			zero(k)
		}
	}
	for k := range mine {
		if !e.gate.lim.Limited(k) {
			delete(mine, k)
		}
	}
	mine[rateNodesKey] = e.gate.lim.Share()
	me := e.cfg.NodeID
	var claims map[string]float64
	var known map[string]bool
	decide := func(rows map[string]map[string]float64) map[string]float64 {
		var out map[string]float64
		claims, known, out = nextClaims(rows, me, mine)
		r.lower(claims) // before the commit: never more than the claim the store holds
		return out
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	at, err := r.st.ExchangeDemand(cctx, me, rateDemandTTL.Milliseconds(), func() int64 { return e.now().UnixMilli() }, decide)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("cannot exchange rate demand; the shares stay as they were, or lower", "error", err)
		}
		return
	}
	r.known = known
	if err := r.commit(claims, at); err != nil {
		e.log.Error("cannot set the rate shares", "error", err)
		return
	}
	select {
	case e.gate.wake <- struct{}{}: // a larger share may let buffered fires go
	default:
	}
}

// nextClaims returns me's claims, from the rows an exchange read and me's own rows to write
// (mine: its demand by downstream and its share by shards), the downstreams some node wants,
// and the rows to write: mine with the claims.
func nextClaims(rows map[string]map[string]float64, me string, mine map[string]float64) (claims map[string]float64, known map[string]bool, out map[string]float64) {
	demand, others := splitClaims(rows, me)
	for k, d := range mine {
		if demand[k] == nil {
			demand[k] = map[string]float64{}
		}
		demand[k][me] = d
	}
	var targets map[string]float64
	targets, known = demandShares(demand, me)
	claims = capShares(targets, others, demand[rateNodesKey], me)
	out = make(map[string]float64, len(mine)+len(claims))
	for k, d := range mine {
		out[k] = d
	}
	for k, c := range claims {
		out[claimKey(k)] = c
	}
	return claims, known, out
}

// splitClaims splits the rows an exchange read into the demand rows (and the nodes' shares
// by shards), without me's own (its exchange writes them anew), and the other nodes'
// claims, by downstream and node.
func splitClaims(rows map[string]map[string]float64, me string) (demand, claims map[string]map[string]float64) {
	demand, claims = map[string]map[string]float64{}, map[string]map[string]float64{}
	for k, byNode := range rows {
		into := demand
		if d, ok := strings.CutPrefix(k, rateClaimPrefix); ok {
			into, k = claims, d
		}
		for n, v := range byNode {
			if n == me {
				continue
			}
			if into[k] == nil {
				into[k] = map[string]float64{}
			}
			into[k][n] = v
		}
	}
	return demand, claims
}

// capShares returns me's claim of each downstream of targets (its shares by demand): its
// target, at most what the other live nodes' claims leave of the rate, and at least
// rateShareMin. A node without a claim of the downstream counts its share by shards
// (byShards, me's among them), which is what it gives out then; so do the nodes without a
// row at all (one just started, or of an older version), which hold the shards the rows
// do not account for.
func capShares(targets map[string]float64, claims map[string]map[string]float64, byShards map[string]float64, me string) map[string]float64 {
	out := make(map[string]float64, len(targets))
	unknown := 1.0
	for _, s := range byShards {
		unknown -= s
	}
	unknown = max(0, unknown)
	for k, target := range targets {
		held := unknown
		for node, s := range byShards {
			if node == me {
				continue
			}
			if c, ok := claims[k][node]; ok {
				s = c
			}
			held += s
		}
		out[k] = min(1, max(rateShareMin, min(target, 1-held)))
	}
	return out
}

// lower gives out, of each downstream, the lesser of the share it gives out now and the
// one claimed next (a downstream without a claim: the share by shards), before the exchange
// that claims it commits.
func (r *rateShares) lower(next map[string]float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byShards := r.e.gate.lim.Share()
	low := make(map[string]float64, len(next)+len(r.claimed))
	of := func(m map[string]float64, k string) float64 {
		if v, ok := m[k]; ok {
			return v
		}
		return byShards
	}
	for k := range next {
		low[k] = min(of(next, k), of(r.claimed, k))
	}
	for k := range r.claimed {
		low[k] = min(of(next, k), of(r.claimed, k))
	}
	if err := r.e.gate.lim.SetKeyShares(low); err != nil {
		r.e.log.Error("cannot lower the rate shares", "error", err)
		return
	}
	r.claimed = low // should the exchange fail after its commit, the store holds no more
}

// commit gives out the claims of the exchange that committed at (ms), and arms the timer
// that stops giving them out (rateShareMin) shortly before the others stop heeding them,
// unless a later exchange commits first.
func (r *rateShares) commit(claims map[string]float64, at int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.e.gate.lim.SetKeyShares(claims); err != nil {
		return err
	}
	r.claimed, r.lastAt = claims, at
	if r.lapse != nil {
		r.lapse.Stop()
	}
	left := time.Duration(at)*time.Millisecond + rateDemandTTL - rateClaimMargin - time.Duration(r.e.now().UnixMilli())*time.Millisecond
	r.lapse = r.e.cfg.Clock.AfterFunc(max(0, left), func() { r.lapsed(at) })
	return nil
}

// lapsed stops giving out the claims of the exchange at (ms) should no later one have
// committed: the others stop heeding them soon.
func (r *rateShares) lapsed(at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastAt != at || len(r.claimed) == 0 {
		return
	}
	low := make(map[string]float64, len(r.claimed))
	for k := range r.claimed {
		low[k] = rateShareMin
	}
	if err := r.e.gate.lim.SetKeyShares(low); err != nil {
		r.e.log.Error("cannot lower the rate shares", "error", err)
		return
	}
	r.claimed = low
	r.e.log.Warn("no rate demand exchange committed lately: the downstreams this node claimed a share of get a trickle until one does",
		"downstreams", len(low), "last_exchange_ms_ago", r.e.now().UnixMilli()-at)
}

// demandShares returns node me's share of each downstream some node wants, from every
// node's fresh rows (downstream → node → demand, with each node's share by shards under
// rateNodesKey), and the downstreams some node wants. A node gets
//
//	budget · (floor + (1 − n·floor) · mine / total)
//
// where budget is what the live nodes without a row for the downstream (they give out their
// share by shards of it) leave of the rate, n the nodes with a row and floor rateShareFloor / n:
// the shares of the nodes with a row add up to budget, and with the others' shares by shards
// to one. A downstream nobody wants, or one me has no row for (not limited here, or past its
// bound of keys), is not in shares: the share by shards.
func demandShares(rows map[string]map[string]float64, me string) (shares map[string]float64, known map[string]bool) {
	byShards := rows[rateNodesKey]
	shares, known = map[string]float64{}, map[string]bool{}
	for k, byNode := range rows {
		if k == rateNodesKey {
			continue
		}
		total := 0.0
		for _, d := range byNode {
			total += d
		}
		if total == 0 {
			continue // nobody wants it: the share by shards, and the key drops out
		}
		known[k] = true
		if _, in := byNode[me]; !in {
			continue
		}
		held := 0.0
		for node, s := range byShards {
			if _, in := byNode[node]; !in {
				held += s
			}
		}
		// The nodes with a row hold a shard each at least, so the budget is at least one
		// shard's share; shares by shards read at different moments may add up to a little
		// more than one while shards move, and the budget then keeps that much.
		budget := max(1-held, 1.0/model.ShardCount)
		n := float64(len(byNode))
		floor := rateShareFloor / n
		shares[k] = budget * (floor + (1-n*floor)*byNode[me]/total)
	}
	return shares, known
}
