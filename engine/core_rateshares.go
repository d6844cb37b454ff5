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

import (
	"context"
	"sort"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

const (
	// rateExchange is how often a node writes its demand and reads the others'.
	rateExchange = 250 * time.Millisecond
	// rateDemandTTL is how long a node's row is heeded: a few exchanges, so that one slow
	// write does not drop a node from the count, and a dead node's share is reclaimed soon.
	rateDemandTTL = time.Second
	// rateShareFloor is the part of a downstream's rate the nodes that want none of it keep
	// between them: at most 5% of a rate is idle on nodes without demand.
	rateShareFloor = 0.05
	// rateDemandKeys bounds the downstreams a node writes each exchange (the busiest; the
	// others keep the share by shards).
	rateDemandKeys = 1000
	// rateNodesKey is the row under which each node writes its share by shards every
	// exchange: no downstream or rate key is named so (keys hold no spaces).
	rateNodesKey = " nodes"
)

// rateShares is the demand exchange of a sharded node: a service of its own, started with
// the engine's loops when the engine is sharded and its store keeps demand.
type rateShares struct {
	e     *Engine
	st    persist.DemandStore
	last  time.Time
	known map[string]bool // the downstreams some node wanted at the last exchange (loop only)

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
	return &rateShares{e: e, st: st, known: map[string]bool{}}
}

func (r *rateShares) loop(ctx context.Context) {
	defer r.e.loopsWG.Done()
	t := r.e.cfg.Clock.NewTicker(rateExchange)
	defer t.Stop()
	r.last = r.e.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		r.exchange(ctx)
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
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	rows, err := r.st.ExchangeDemand(cctx, e.cfg.NodeID, mine, now.UnixMilli(), rateDemandTTL.Milliseconds())
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("cannot exchange rate demand; the shares stay as they were", "error", err)
		}
		return
	}
	shares, known := demandShares(rows, e.cfg.NodeID)
	r.known = known
	if err := e.gate.lim.SetKeyShares(shares); err != nil {
		e.log.Error("cannot set the rate shares", "error", err)
		return
	}
	select {
	case e.gate.wake <- struct{}{}: // a larger share may let buffered fires go
	default:
	}
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
