package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"time"

	"github.com/fasthttp/router"
	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/ha"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/wire"
)

// This file is the HTTP face of a primary/backup node (docs/ha.md): the front server that routes
// each request to the API of the node's current role. The roles themselves (the lease loop, the
// engine of each term, promotion and demotion) are the daemon's (internal/daemon); the front only
// asks an HANode what the role is now.
//
// Between terms a backup serves the read API from the database through an engine that is
// never started, and answers writes and the executor protocol with 503 naming the primary.

// ErrBackup is the error of a write or executor-protocol call on a backup.
var ErrBackup = errors.New("this node is a backup")

// HATerm is the API serving one role: the primary's engine of one epoch, or the backup's
// reader (Primary false), whose engine is never started.
type HATerm struct {
	Primary bool
	Epoch   int64
	Engine  *engine.Engine
	// Handler serves the term's API: Server.Handler of a server built for Engine.
	Handler fasthttp.RequestHandler
}

// HANode is what the front asks the daemon on every request. Its methods are called from
// many goroutines at once and must not block.
type HANode interface {
	// Term is the term serving now; never nil.
	Term() *HATerm
	// Lease is the elector's view of the lease; ok is false while the node still claims its
	// id, before it is a backup of anything.
	Lease() (st ha.Status, ok bool)
	// Promoting reports a promotion under way: the node is not ready.
	Promoting() bool
	// Stopping reports that shutdown began: the node is not ready.
	Stopping() bool
}

// HAFrontConfig configures Server.ServeHA.
type HAFrontConfig struct {
	// Node answers for the role. Required.
	Node HANode
	// NodeID names this node in /readyz.
	NodeID string
	// PeerTLS, when not nil, holds the CAs trusted for an https primary that the console's
	// writes are forwarded to (haforward.go). Defaults to nil: the system's trust store.
	PeerTLS *tls.Config
}

// haFront is the root handler of an HA node.
type haFront struct {
	s    *Server
	cfg  HAFrontConfig
	node HANode
	fwd  *fasthttp.Client // forwards the console's writes to the primary (haforward.go)
}

// ServeHA makes s the front of an HA node: /readyz answers for the node's role, and every
// other request goes to the API of cfg.Node's current term, or on a backup to the executor
// registry from the database, the console's writes forwarded to the primary and the 503
// naming the primary. Call it before Start.
func (s *Server) ServeHA(cfg HAFrontConfig) {
	f := &haFront{s: s, cfg: cfg, node: cfg.Node, fwd: newForwardClient(cfg.PeerTLS)}
	s.srv.Handler = s.guardRequests(f.handle())
}

// Handler is the server's API handler, for the front of an HA node to route a term's
// requests to.
func (s *Server) Handler() fasthttp.RequestHandler { return s.srv.Handler }

// handle is the HA node's root handler: /readyz, and on a backup the executor registry
// from the database, the console's writes forwarded to the primary (haforward.go) and the
// 503 naming the primary for every other write and the executor protocol; then the current
// term's API.
func (f *haFront) handle() fasthttp.RequestHandler {
	front := f.s
	base := front.cfg.BasePath
	// api is the path under /api/ with the base path taken off, or "" outside the API. The
	// executor protocol is at the root whatever the base path.
	api := func(c *fasthttp.RequestCtx) string {
		p := string(c.Request.URI().PathOriginal()) // as the router matches it (routePath)
		if base != "" && strings.HasPrefix(p, base+"/api/") {
			return p[len(base):]
		}
		if strings.HasPrefix(p, "/api/") {
			return p
		}
		return ""
	}
	backupOnly := front.authed(func(c *fasthttp.RequestCtx) {
		p := api(c)
		if c.IsGet() && p == "/api/v1/executors" {
			f.backupExecutors(c)
			return
		}
		st, _ := f.node.Lease()
		primary := st.Leader
		if wantsForward(c) && !isExecutorProtocol(string(c.Request.URI().PathOriginal())) {
			f.forward(c, primary)
			return
		}
		if primary == "" {
			// No primary yet (a takeover under way): a moment's wait, not a refusal.
			c.Response.Header.Set("Retry-After", "1")
		}
		writeJSON(c, fasthttp.StatusServiceUnavailable, wire.BackupAnswer{Error: ErrBackup.Error(), Primary: primary})
	})
	return func(c *fasthttp.RequestCtx) {
		if string(c.Path()) == "/readyz" {
			f.readyz(c)
			return
		}
		t := f.node.Term()
		_, leased := f.node.Lease()
		p := api(c)
		if !t.Primary && leased && p != "" && (!c.IsGet() && !c.IsHead() || p == "/api/v1/executors") {
			backupOnly(c)
			return
		}
		if !t.Primary && !leased && p != "" && !c.IsGet() {
			// Still claiming the node id: not a backup of anything yet; ask again in a moment.
			c.Response.Header.Set("Retry-After", "1")
			writeJSON(c, fasthttp.StatusServiceUnavailable, wire.BackupAnswer{Error: ErrBackup.Error()})
			return
		}
		t.Handler(c)
	}
}

// isExecutorProtocol reports the executor protocol's paths (at the root, never under the
// base path): executors talk to the primary themselves and are never forwarded.
func isExecutorProtocol(path string) bool {
	return strings.HasPrefix(path, "/api/v1/executors/") || path == protocol.PathCallback || path == protocol.PathCallbackBatch
}

// backupExecutors lists the executor registry from the database: a backup has none in
// memory.
func (f *haFront) backupExecutors(c *fasthttp.RequestCtx) {
	ctx, cancel := reqCtx(c)
	defer cancel()
	list, err := f.s.cfg.Store.ListExecutors(ctx)
	if err != nil {
		writeErr(c, fasthttp.StatusInternalServerError, err.Error())
		return
	}
	if list == nil {
		list = []model.Executor{}
	}
	writeJSON(c, 200, map[string]any{"executors": list, "count": len(list)})
}

// readyzJSON is /readyz's answer on an HA node (docs/ha.md, "The backup").
type readyzJSON struct {
	Status  string `json:"status"` // "ready" or "not_ready"
	Role    string `json:"role"`   // "primary" or "backup"
	Epoch   int64  `json:"epoch"`
	Node    string `json:"node"`
	Primary string `json:"primary"` // the primary's advertise URL; "" when none is known
	// Shards are the shards this node schedules, as ranges: all of them on the primary,
	// none on a backup (docs/scale-out.md).
	Shards string `json:"shards"`
	// NotServing are the shards of Shards whose API calls this node does not serve yet, or
	// no longer: being recovered after a take, or being handed over; omitted when none.
	NotServing string `json:"not_serving,omitempty"`
	Error      string `json:"error,omitempty"`
}

// readyz answers 200 when the node is ready in its role; with ?role=primary only when it is
// also the primary that dispatches (for a load balancer or a keepalived check).
func (f *haFront) readyz(c *fasthttp.RequestCtx) {
	t := f.node.Term()
	ans := readyzJSON{Status: "ready", Role: persist.RoleBackup, Node: f.cfg.NodeID}
	if t.Primary {
		ans.Role, ans.Shards = persist.RolePrimary, allShards
	}
	st, leased := f.node.Lease()
	if leased {
		ans.Epoch, ans.Primary = st.Epoch, st.Leader
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	switch err := f.s.cfg.Store.Ping(ctx); {
	case err != nil:
		ans.Status, ans.Error = "not_ready", "store unreachable: "+err.Error()
	case f.node.Stopping():
		ans.Status, ans.Error = "not_ready", "shutting down"
	case !leased:
		ans.Status, ans.Error = "not_ready", "claiming the node id"
	case f.node.Promoting():
		ans.Status, ans.Error = "not_ready", "promotion in progress"
	case t.Primary && !t.Engine.API().Running():
		ans.Status, ans.Error = "not_ready", "engine stopping"
	case t.Primary:
		if err := t.Engine.API().WriteStalled(); err != nil {
			ans.Status, ans.Error = "not_ready", err.Error()
		}
	}
	code := fasthttp.StatusOK
	if ans.Status != "ready" || (string(c.QueryArgs().Peek("role")) == persist.RolePrimary && ans.Role != persist.RolePrimary) {
		code = fasthttp.StatusServiceUnavailable
	}
	writeJSON(c, code, ans)
}

// nodeJSON is one row of GET /api/v1/nodes.
type nodeJSON struct {
	ID        string `json:"id"`
	Advertise string `json:"advertise"`
	Role      string `json:"role"`
	LastSeen  int64  `json:"last_seen"` // Unix ms, by the database's clock
	AgeMS     int64  `json:"age_ms"`    // how long ago, by the database's clock
}

// haRoutes registers the HA read endpoints: GET /api/v1/nodes lists the nodes table (every
// node of an --ha database, its role and when it was last seen), for the console and
// operators. Without --ha the list is empty.
func (s *Server) haRoutes(api *router.Group) {
	api.GET("/nodes", s.authed(func(c *fasthttp.RequestCtx) {
		ctx, cancel := reqCtx(c)
		defer cancel()
		nodes, err := s.cfg.Store.ListNodes(ctx)
		if err != nil {
			s.fail(c, err)
			return
		}
		out := make([]nodeJSON, 0, len(nodes))
		for _, n := range nodes {
			out = append(out, nodeJSON{ID: n.ID, Advertise: n.Advertise, Role: n.Role, LastSeen: n.LastSeen, AgeMS: n.Age.Milliseconds()})
		}
		writeJSON(c, 200, map[string]any{"nodes": out, "count": len(out)})
	}))
	api.GET("/cluster", s.authed(func(c *fasthttp.RequestCtx) {
		ctx, cancel := reqCtx(c)
		defer cancel()
		view, err := clusterOf(ctx, s.cfg.Store)
		if err != nil {
			s.fail(c, err)
			return
		}
		writeJSON(c, 200, view)
	}))
}

// allShards is every shard as ranges: what a single node and a primary schedule.
var allShards = model.AllShards().String()

// Roles of a node that schedules by shard, in its /readyz and in GET /api/v1/cluster.
const (
	// RoleOwner: the node schedules the shards it holds.
	RoleOwner = ha.RoleOwner
	// RoleIdle: the node holds no shard right now (it has just started, or the others hold
	// them all); it serves the API and passes every write on.
	RoleIdle = "idle"
)

// Modes of GET /api/v1/cluster.
const (
	// ClusterSingle: no node holds a lease; one process schedules every task (no --ha).
	ClusterSingle = "single"
	// ClusterPrimaryBackup: the primary's lease is held; its holder schedules every shard
	// under the lease's epoch.
	ClusterPrimaryBackup = "primary-backup"
	// ClusterSharded: nodes hold shard leases; each schedules the shards it holds.
	ClusterSharded = "sharded"
)

// clusterJSON is GET /api/v1/cluster: who schedules which shards, as the database judges
// it now (docs/scale-out.md).
type clusterJSON struct {
	Mode       string `json:"mode"`
	ShardCount int    `json:"shard_count"`
	// Unowned are the shards no live lease covers, as ranges ("" when none): their tasks
	// fire once a node takes them.
	Unowned string             `json:"unowned"`
	Nodes   []clusterNodeJSON  `json:"nodes"`
	Shards  []clusterShardJSON `json:"shards"`
}

type clusterNodeJSON struct {
	nodeJSON
	// Shards are the shards this node holds, as ranges; ShardsHeld their number.
	Shards     string `json:"shards"`
	ShardsHeld int    `json:"shards_held"`
	// Epochs are the lowest and highest epoch of those shards (one epoch on a primary).
	EpochMin int64 `json:"epoch_min,omitempty"`
	EpochMax int64 `json:"epoch_max,omitempty"`
}

type clusterShardJSON struct {
	Shard       int    `json:"shard"`
	Holder      string `json:"holder"`
	Epoch       int64  `json:"epoch"`
	Held        bool   `json:"held"`
	RemainingMS int64  `json:"remaining_ms"`
}

// clusterOf reads the nodes, the primary's lease and the shard leases.
func clusterOf(ctx context.Context, st persist.Store) (clusterJSON, error) {
	nodes, err := st.ListNodes(ctx)
	if err != nil {
		return clusterJSON{}, err
	}
	primary, err := st.LeaseState(ctx, ha.LeaseNameDefault)
	if err != nil {
		return clusterJSON{}, err
	}
	leases, err := st.ShardLeases(ctx)
	if err != nil {
		return clusterJSON{}, err
	}
	out := clusterJSON{Mode: ClusterSingle, ShardCount: model.ShardCount, Nodes: []clusterNodeJSON{}, Shards: []clusterShardJSON{}}
	type holding struct {
		set      model.ShardSet
		min, max int64
	}
	held := map[string]*holding{}
	add := func(holder string, shard int, epoch int64) {
		h := held[holder]
		if h == nil {
			h = &holding{min: epoch, max: epoch}
			held[holder] = h
		}
		h.set.Add(shard)
		h.min, h.max = min(h.min, epoch), max(h.max, epoch)
	}
	var owned model.ShardSet
	for _, l := range leases {
		out.Shards = append(out.Shards, clusterShardJSON{Shard: l.Shard, Holder: l.Holder, Epoch: l.Epoch, Held: l.Held,
			RemainingMS: max(0, l.Remaining.Milliseconds())})
		if l.Held {
			out.Mode = ClusterSharded
			add(l.Holder, l.Shard, l.Epoch)
			owned.Add(l.Shard)
		}
	}
	if out.Mode == ClusterSingle && primary.Held {
		out.Mode = ClusterPrimaryBackup
		for n := range model.ShardCount {
			add(primary.Holder, n, primary.Epoch)
		}
		owned = model.AllShards()
	}
	if out.Mode != ClusterSingle {
		var unowned model.ShardSet
		for n := range model.ShardCount {
			if !owned.Has(n) {
				unowned.Add(n)
			}
		}
		out.Unowned = unowned.String()
	}
	for _, n := range nodes {
		cn := clusterNodeJSON{nodeJSON: nodeJSON{ID: n.ID, Advertise: n.Advertise, Role: n.Role, LastSeen: n.LastSeen, AgeMS: n.Age.Milliseconds()}}
		h := held[n.ID]
		if h != nil {
			cn.Shards, cn.ShardsHeld, cn.EpochMin, cn.EpochMax = h.set.String(), h.set.Len(), h.min, h.max
		}
		if out.Mode == ClusterSharded && n.Role != persist.RoleStopped {
			// Every node of a sharded cluster schedules: its role is what its /readyz says,
			// read from the leases it holds now. The nodes table's role is written by the
			// node a renewal after it takes or drops shards, and calls a node that has just
			// taken its share a backup.
			cn.Role = RoleIdle
			if h != nil {
				cn.Role = RoleOwner
			}
		}
		out.Nodes = append(out.Nodes, cn)
	}
	return out, nil
}
