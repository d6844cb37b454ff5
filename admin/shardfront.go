package admin

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/wire"
)

// The API of a node that schedules by shard (scale-out, docs/scale-out.md). Every node
// answers every call:
//
//   - Reads are served from the database, as a backup serves them, and from the node's
//     memory for the shards it schedules.
//   - A write about one task (create, edit, delete, pause, resume, run, kill, backfill) is
//     served by the node that schedules the task's shard, which holds the task in memory and
//     writes it under its shard's fence: a node that does not schedule the shard passes the
//     call on to the one that does (its advertise URL, as the shard's lease names it), once,
//     and answers with its answer. It is never served where the shard is not scheduled: two
//     nodes' copies of a task would decide two fates for it.
//   - An executor's result goes to the node that schedules its run's task, the same way, so
//     that the run in flight there ends it; registrations and heartbeats are written to the
//     database by whichever node takes them, and every node reads the registry from there.
//   - A call over many tasks (a bulk operation, a group's pause or resume, a prune) and a
//     change of the limits every node enforces (rate and concurrency limits) go to every live
//     node, each doing its own shards; the answers are added up. A batch of creates is split
//     by owner.
//
// A call passed on carries RoutedHeader, signed with the cluster's peer key (peersig.go);
// a node that gets one for a shard it does not schedule (the shard moved meanwhile) answers
// 503 with Retry-After rather than passing it on again, so no call goes round in circles.
// A call is passed on by its path and query alone (requestTarget), whatever form the
// caller's request line took.

// RoutedHeader marks a call one node passed on to another; its value is the sender's id.
const RoutedHeader = "X-Axe-Routed"

// ShardsHeader, on a node's answer to a call over many tasks, names the shards it did the
// call for (as ranges): those it scheduled from the call's start to its end.
const ShardsHeader = "X-Axe-Shards"

// ShardRouting configures the API of a node that schedules by shard (ServerConfig.Sharding).
type ShardRouting struct {
	// NodeID is this node's id, as the shard leases name it.
	NodeID string
	// PeerTLS, when not nil, holds the CAs trusted for the other nodes' https advertise
	// URLs. Defaults to nil: the system's trust store.
	PeerTLS *tls.Config
	// PeerToken is the bearer token of the calls this node makes of itself to another (a
	// dependency release, ReleaseElsewhere): a write-scope token every node accepts. Defaults
	// to none, for nodes without tokens.
	PeerToken string
	// PeerSecret is the secret every node of the cluster shares, from which the key that
	// signs the calls between nodes is derived (peersig.go). Required.
	PeerSecret []byte
	// Stopping reports that the node is shutting down: /readyz says not ready.
	Stopping func() bool
}

// ownerRefresh bounds how stale the table of shard owners may be when a call needs an
// owner; a call that finds none, or cannot reach it, reads it again at once.
const ownerRefresh = 500 * time.Millisecond

// shardFront routes the calls of a sharded node.
type shardFront struct {
	s      *Server
	cfg    ShardRouting
	fwd    *fasthttp.Client
	signer *peerSigner

	mu     sync.Mutex
	readAt time.Time
	owner  [model.ShardCount]string // advertise URL of each shard's live holder, "" for none
	mine   [model.ShardCount]bool   // held by this node, as the database judges it
	peers  []string                 // advertise URLs of the other live nodes that hold shards
}

func newShardFront(s *Server, cfg ShardRouting) *shardFront {
	return &shardFront{s: s, cfg: cfg, fwd: newForwardClient(cfg.PeerTLS), signer: newPeerSigner(cfg.PeerSecret)}
}

// table returns the shard owners, read again when older than ownerRefresh or when fresh.
func (f *shardFront) table(ctx context.Context, fresh bool) (owner [model.ShardCount]string, mine [model.ShardCount]bool, peers []string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fresh || time.Since(f.readAt) > ownerRefresh {
		if err := f.readLocked(ctx); err != nil {
			return owner, mine, nil, err
		}
	}
	return f.owner, f.mine, slices.Clone(f.peers), nil
}

func (f *shardFront) readLocked(ctx context.Context) error {
	st := f.s.cfg.Store
	nodes, err := st.ListNodes(ctx)
	if err != nil {
		return fmt.Errorf("cannot read the nodes: %w", err)
	}
	leases, err := st.ShardLeases(ctx)
	if err != nil {
		return fmt.Errorf("cannot read the shard leases: %w", err)
	}
	adv := map[string]string{}
	for _, n := range nodes {
		if n.Role != persist.RoleStopped {
			adv[n.ID] = n.Advertise
		}
	}
	var owner [model.ShardCount]string
	var mine [model.ShardCount]bool
	holders := map[string]bool{}
	for _, l := range leases {
		if !l.Held {
			continue
		}
		mine[l.Shard] = l.Holder == f.cfg.NodeID
		owner[l.Shard] = adv[l.Holder]
		if l.Holder != f.cfg.NodeID && adv[l.Holder] != "" {
			holders[adv[l.Holder]] = true
		}
	}
	peers := make([]string, 0, len(holders))
	for u := range holders {
		peers = append(peers, u)
	}
	slices.Sort(peers)
	f.owner, f.mine, f.peers, f.readAt = owner, mine, peers, time.Now()
	return nil
}

// moving answers a call about shard, which no node can serve right now (it moves between
// nodes, or its owner is not known), with 503 and Retry-After: 1.
func moving(c *fasthttp.RequestCtx, shard int, why string) {
	c.Response.Header.Set("Retry-After", "1")
	writeErr(c, fasthttp.StatusServiceUnavailable,
		fmt.Sprintf("shard %d of this task %s; try again: %s", shard, why, model.ErrShardNotHeld))
}

// route serves c here when this node schedules shard (results also while it takes the
// shard over or hands it over: held), and otherwise passes it on to the shard's owner.
func (f *shardFront) route(c *fasthttp.RequestCtx, shard int, held bool, next fasthttp.RequestHandler) {
	h, ready := f.s.cfg.Engine.API().Ownership().State(shard)
	if ready || (held && h) {
		next(c)
		return
	}
	if routed(c) {
		moving(c, shard, "is not scheduled by the node it was passed on to")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The table read within ownerRefresh serves; a shard it says no other node holds is
	// looked up again at once, in case it moved since.
	owner, mine, _, err := f.table(ctx, false)
	if err == nil && (owner[shard] == "" || mine[shard]) {
		owner, mine, _, err = f.table(ctx, true)
	}
	switch {
	case err != nil:
		writeErr(c, fasthttp.StatusServiceUnavailable, "cannot find the owner of the task's shard: "+err.Error())
	case mine[shard] || h:
		moving(c, shard, "is being taken over or handed over by this node")
	case owner[shard] == "":
		moving(c, shard, "has no live owner (a node is taking it over)")
	default:
		f.pass(c, owner[shard], c.Request.Body())
	}
}

// pass sends c on to the node at base (an advertise URL) with body, marked routed, and
// copies its answer back.
func (f *shardFront) pass(c *fasthttp.RequestCtx, base string, body []byte) {
	status, hdr, resp, err := f.call(c, base, requestTarget(c), body)
	if err != nil {
		// 502 and no Retry-After: the owner may have served the call before its answer was
		// lost, so it is not made again by itself (a run-now would run twice).
		f.s.log.Warn("cannot pass a call on to the shard's owner", "owner", base, "path", string(c.Path()), "error", err)
		writeErr(c, fasthttp.StatusBadGateway, fmt.Sprintf("cannot reach the node that schedules this task's shard at %s, and cannot tell whether it served the call: %v", base, err))
		f.mu.Lock()
		f.readAt = time.Time{} // read the owners again at the next call
		f.mu.Unlock()
		return
	}
	c.Response.SetStatusCode(status)
	hdr.VisitAll(func(k, v []byte) {
		switch string(k) {
		case fasthttp.HeaderContentType, "Retry-After", ShardsHeader:
			c.Response.Header.SetBytesKV(k, v)
		}
	})
	c.Response.Header.Set(ForwardedHeader, base)
	c.Response.SetBody(resp)
}

// call makes c's call (its method, uri and headers) of the node at base with body, marked
// routed, and returns the answer. It reads c: on the handler's goroutine only; calls made
// side by side take a snapshot first (outgoing).
func (f *shardFront) call(c *fasthttp.RequestCtx, base, uri string, body []byte) (int, *fasthttp.ResponseHeader, []byte, error) {
	return f.outgoing(c).call(base, uri, body)
}

// outgoingCall is the header of a call to be passed on, taken from the request once: the
// calls a handler makes of several nodes at once read only it, never the request, which the
// handler may change meanwhile.
type outgoingCall struct {
	f   *shardFront
	hdr fasthttp.RequestHeader
}

// outgoing snapshots c's header as every call passed on carries it: c's own, less what
// judges a browser's request (this node judged it), marked routed, with the caller's address.
func (f *shardFront) outgoing(c *fasthttp.RequestCtx, extra ...string) *outgoingCall {
	o := &outgoingCall{f: f}
	c.Request.Header.CopyTo(&o.hdr)
	for _, h := range []string{ForwardHeader, "Origin", "Sec-Fetch-Site", "Sec-Fetch-Mode", "Sec-Fetch-Dest", "Sec-Fetch-User",
		fasthttp.HeaderContentLength, fasthttp.HeaderTransferEncoding} {
		o.hdr.Del(h)
	}
	for _, h := range peerHeaders {
		o.hdr.Del(h)
	}
	o.hdr.Set(RoutedHeader, f.cfg.NodeID)
	o.hdr.Set("X-Forwarded-For", c.RemoteIP().String())
	if principalOf(c) == nil && len(c.Request.Header.Peek("X-Axe-Actor")) == 0 {
		o.hdr.Set("X-Axe-Actor", c.RemoteIP().String())
	}
	for i := 0; i+1 < len(extra); i += 2 {
		o.hdr.Set(extra[i], extra[i+1])
	}
	return o
}

// call makes the call of o of the node at base, at uri with body, and returns the answer.
// Safe for calls side by side.
func (o *outgoingCall) call(base, uri string, body []byte) (int, *fasthttp.ResponseHeader, []byte, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return 0, nil, nil, fmt.Errorf("advertise URL %q is not an http(s) URL", base)
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	o.hdr.CopyTo(&req.Header)
	full := strings.TrimRight(base, "/") + uri
	req.SetRequestURI(full)
	req.SetBody(body)
	o.f.signer.sign(req, targetOf(full), body)
	if err := o.f.fwd.DoTimeout(req, resp, forwardTimeout); err != nil {
		return 0, nil, nil, err
	}
	var hdr fasthttp.ResponseHeader
	resp.Header.CopyTo(&hdr)
	return resp.StatusCode(), &hdr, append([]byte(nil), resp.Body()...), nil
}

// byTask routes a call about the task its path names ({name}).
func (s *Server) byTask(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if s.shards == nil {
		return next
	}
	return func(c *fasthttp.RequestCtx) { s.shards.route(c, model.ShardOf(param(c, "name")), false, next) }
}

// byBodyName routes a create by the name its body gives; a body that does not say is served
// here, where it is refused as it would be anywhere.
func (s *Server) byBodyName(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if s.shards == nil {
		return next
	}
	return func(c *fasthttp.RequestCtx) {
		var b struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(c.PostBody(), &b) != nil || b.Name == "" {
			next(c)
			return
		}
		s.shards.route(c, model.ShardOf(b.Name), false, next)
	}
}

// resultShard is the shard of the task of an executor's result: the one it names, else its
// run's as the database has it (-1 when unknown: served here, where it is refused as
// unknown).
func (s *Server) resultShard(ctx context.Context, rep protocol.Result) int {
	if rep.Task != "" {
		return model.ShardOf(rep.Task)
	}
	run, err := s.cfg.Store.GetRun(ctx, rep.Ticket)
	if err != nil {
		return -1
	}
	return model.ShardOf(run.TaskName)
}

// routeCallback routes an executor's result to the node whose run it ends.
func (s *Server) routeCallback(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if s.shards == nil {
		return next
	}
	return func(c *fasthttp.RequestCtx) {
		var rep protocol.Result
		if json.Unmarshal(c.PostBody(), &rep) != nil || rep.Ticket == "" {
			next(c) // refused there, as malformed
			return
		}
		ctx, cancel := reqCtx(c)
		defer cancel()
		n := s.resultShard(ctx, rep)
		if n < 0 {
			next(c)
			return
		}
		s.shards.route(c, n, true, next)
	}
}

// routeCallbackBatch serves the results of a batch whose runs are this node's and passes the
// others on to their owners, one call per owner, answering each result as its owner did.
func (s *Server) routeCallbackBatch(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if s.shards == nil {
		return next
	}
	return func(c *fasthttp.RequestCtx) {
		var batch struct {
			Results []json.RawMessage `json:"results"`
		}
		if json.Unmarshal(c.PostBody(), &batch) != nil || len(batch.Results) == 0 || routed(c) {
			next(c)
			return
		}
		ctx, cancel := reqCtx(c)
		defer cancel()
		eng := s.cfg.Engine
		local := make([]int, 0, len(batch.Results))
		remote := map[int][]int{} // shard → indexes
		for i, raw := range batch.Results {
			var rep protocol.Result
			n := -1
			if json.Unmarshal(raw, &rep) == nil && rep.Ticket != "" {
				n = s.resultShard(ctx, rep)
			}
			if held, _ := eng.API().Ownership().State(n); n < 0 || held {
				local = append(local, i)
				continue
			}
			remote[n] = append(remote[n], i)
		}
		if len(remote) == 0 {
			next(c)
			return
		}
		out := make([]protocol.CallbackItem, len(batch.Results))
		owner, mine, _, err := s.shards.table(ctx, true)
		byOwner := map[string][]int{}
		for n, idx := range remote {
			switch {
			case err != nil:
				for _, i := range idx {
					out[i] = protocol.CallbackItem{Status: fasthttp.StatusServiceUnavailable, Error: "cannot find the owner of the run's shard: " + err.Error()}
				}
			case owner[n] == "" || mine[n]:
				for _, i := range idx {
					out[i] = protocol.CallbackItem{Status: fasthttp.StatusServiceUnavailable,
						Error: fmt.Sprintf("shard %d of the run's task is moving between nodes; send it again: %s", n, model.ErrShardNotHeld)}
				}
			default:
				byOwner[owner[n]] = append(byOwner[owner[n]], idx...)
			}
		}
		var wg sync.WaitGroup
		o, uri := s.shards.outgoing(c), requestTarget(c)
		for base, idx := range byOwner {
			slices.Sort(idx)
			wg.Add(1)
			go func() {
				defer wg.Done()
				passResults(o, base, uri, batch.Results, idx, out)
			}()
		}
		if len(local) > 0 {
			// This node's part is served by the handler itself, on a body of its results only.
			sub := subBatch(batch.Results, local)
			status, body := s.serveLocal(c, sub, next)
			var ans struct {
				Results []protocol.CallbackItem `json:"results"`
			}
			if status == 200 && json.Unmarshal(body, &ans) == nil && len(ans.Results) == len(local) {
				for k, i := range local {
					out[i] = ans.Results[k]
				}
			} else {
				for _, i := range local {
					out[i] = protocol.CallbackItem{Status: status, Error: errorText(body)}
				}
			}
		}
		wg.Wait()
		writeJSON(c, 200, map[string]any{"results": out})
	}
}

// passResults passes the results idx of a batch on to the node at base (o's call, at uri) and
// fills their items.
func passResults(o *outgoingCall, base, uri string, all []json.RawMessage, idx []int, out []protocol.CallbackItem) {
	status, _, body, err := o.call(base, uri, subBatch(all, idx))
	var ans struct {
		Results []protocol.CallbackItem `json:"results"`
	}
	switch {
	case err != nil:
		for _, i := range idx {
			out[i] = protocol.CallbackItem{Status: fasthttp.StatusServiceUnavailable, Error: fmt.Sprintf("cannot reach the run's owner at %s: %v", base, err)}
		}
	case status == 200 && json.Unmarshal(body, &ans) == nil && len(ans.Results) == len(idx):
		for k, i := range idx {
			out[i] = ans.Results[k]
		}
	default:
		for _, i := range idx {
			out[i] = protocol.CallbackItem{Status: status, Error: errorText(body)}
		}
	}
}

// subBatch is the body of a result batch holding the results idx of all.
func subBatch(all []json.RawMessage, idx []int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"results":[`)
	for k, i := range idx {
		if k > 0 {
			b.WriteByte(',')
		}
		b.Write(all[i])
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// serveLocal runs next on c with body in place of c's, and returns what it answered,
// leaving c's response empty for the caller to write.
func (s *Server) serveLocal(c *fasthttp.RequestCtx, body []byte, next fasthttp.RequestHandler) (int, []byte) {
	saved := append([]byte(nil), c.Request.Body()...)
	c.Request.SetBody(body)
	next(c)
	status, out := c.Response.StatusCode(), append([]byte(nil), c.Response.Body()...)
	c.Response.Reset()
	c.Request.SetBody(saved)
	return status, out
}

// errorText is the "error" of an answer's body, or the body itself.
func errorText(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(body))
}

// fanOut serves a call over many tasks (or over every node's configuration) on every live
// node that holds shards, each doing its own (its answer's ShardsHeader names them), and
// answers with the sum of the numeric fields sum names over their answers, the other
// fields as this node answered. When a node fails, that is the answer, with what the
// others did; when the shards done do not cover every shard (one moved between nodes
// meanwhile, or has no live owner), 503: try again. With none of sum, the call changes
// what every node enforces (a limit), and the shards are not counted.
func (s *Server) fanOut(next fasthttp.RequestHandler, sum ...string) fasthttp.RequestHandler {
	if s.shards == nil {
		return next
	}
	counted := len(sum) > 0
	return func(c *fasthttp.RequestCtx) {
		eng := s.cfg.Engine
		if routed(c) {
			before := eng.API().Ownership().Ready()
			next(c)
			if counted {
				done := before
				after := eng.API().Ownership().Ready()
				for i := range done {
					done[i] &= after[i]
				}
				c.Response.Header.Set(ShardsHeader, done.String())
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, peers, err := s.shards.table(ctx, true)
		cancel()
		if err != nil {
			writeErr(c, fasthttp.StatusServiceUnavailable, "cannot read the cluster's nodes: "+err.Error())
			return
		}
		body := append([]byte(nil), c.Request.Body()...)
		type answer struct {
			base   string
			status int
			body   []byte
			shards string
			err    error
		}
		answers := make([]answer, len(peers))
		var wg sync.WaitGroup
		o, uri := s.shards.outgoing(c), requestTarget(c)
		for i, base := range peers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, hdr, resp, err := o.call(base, uri, body)
				a := answer{base: base, status: status, body: resp, err: err}
				if hdr != nil {
					a.shards = string(hdr.Peek(ShardsHeader))
				}
				answers[i] = a
			}()
		}
		before := eng.API().Ownership().Ready()
		next(c)
		after := eng.API().Ownership().Ready()
		wg.Wait()
		done := before
		for i := range done {
			done[i] &= after[i]
		}
		status, local := c.Response.StatusCode(), append([]byte(nil), c.Response.Body()...)
		if status >= 400 && status < 500 {
			// Refused here for what it asks (a bad selector, a limit refused): the others
			// judge it alike, and this answer says why.
			return
		}
		merged := map[string]any{}
		if json.Unmarshal(local, &merged) != nil {
			merged = map[string]any{}
		}
		var failed []string
		for _, a := range answers {
			switch {
			case a.err != nil:
				failed = append(failed, fmt.Sprintf("%s: %v", a.base, a.err))
				continue
			case a.status < 200 || a.status > 299:
				failed = append(failed, fmt.Sprintf("%s: %d %s", a.base, a.status, errorText(a.body)))
			}
			var m map[string]any
			if json.Unmarshal(a.body, &m) == nil {
				for _, k := range sum {
					merged[k] = number(merged[k]) + number(m[k])
				}
				if counted {
					concatLists(merged, m) // e.g. the tasks a group's resume left paused
				}
			}
			if set, err := model.ParseShardSet(a.shards); err == nil {
				for i := range done {
					done[i] |= set[i]
				}
			}
		}
		if status >= 200 && status <= 299 && len(failed) == 0 && (!counted || done == model.AllShards()) {
			c.Response.Reset()
			writeJSON(c, status, merged)
			return
		}
		c.Response.Reset()
		// No Retry-After: part of the call was done, and a bulk run made again would run
		// those tasks twice; the caller decides.
		msg := "not every node did the call"
		if status < 200 || status > 299 {
			failed = append([]string{fmt.Sprintf("this node: %d %s", status, errorText(local))}, failed...)
		}
		if len(failed) > 0 {
			msg += ": " + strings.Join(failed, "; ")
		}
		if counted && done != model.AllShards() {
			var missed model.ShardSet
			for n := range model.ShardCount {
				if !done.Has(n) {
					missed.Add(n)
				}
			}
			msg += fmt.Sprintf("; shards %s were moving between nodes and were not done", missed)
		}
		merged["error"] = msg + " (what was done is counted; the call may be made again)"
		writeJSON(c, fasthttp.StatusServiceUnavailable, merged)
	}
}

// number reads a JSON number decoded into an any, 0 for anything else.
func number(v any) float64 {
	f, _ := v.(float64)
	return f
}

// releaseDependents is POST /api/v1/cluster/release {"upstream": NAME}: another node recorded
// the success of an upstream whose dependents this node schedules (engine.Dependents.Release).
func (s *Server) releaseDependents(c *fasthttp.RequestCtx) {
	var b struct {
		Upstream string `json:"upstream"`
	}
	if err := decodeStrict(c, &b); err != nil {
		s.fail(c, err)
		return
	}
	if b.Upstream == "" {
		writeErr(c, fasthttp.StatusBadRequest, "upstream: is required")
		return
	}
	ctx, cancel := reqCtx(c)
	defer cancel()
	if err := s.cfg.Engine.API().Dependents().Release(ctx, b.Upstream); err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, 200, map[string]bool{"ok": true})
}

// ReleaseElsewhere asks the node that schedules shard to release the dependents of upstream
// in it (engine.Config.ReleaseElsewhere), in the background; a call that fails is left to
// that node's own sweep of its waiting dependents.
func (s *Server) ReleaseElsewhere(shard int, upstream string) {
	f := s.shards
	if f == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		owner, mine, _, err := f.table(ctx, false)
		if err != nil || owner[shard] == "" || mine[shard] {
			return
		}
		body, _ := json.Marshal(map[string]string{"upstream": upstream})
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		full := strings.TrimRight(owner[shard], "/") + s.cfg.BasePath + "/api/v1/cluster/release"
		req.SetRequestURI(full)
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json")
		req.Header.Set(RoutedHeader, f.cfg.NodeID)
		req.Header.Set("X-Axe-Actor", "node:"+f.cfg.NodeID)
		if f.cfg.PeerToken != "" {
			req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+f.cfg.PeerToken)
		}
		req.SetBody(body)
		f.signer.sign(req, targetOf(full), body)
		if err := f.fwd.DoTimeout(req, resp, 10*time.Second); err != nil || resp.StatusCode() != 200 {
			s.log.Warn("cannot ask the owner of a shard to release the dependents of an upstream; its sweep will",
				"shard", shard, "owner", owner[shard], "upstream", upstream, "status", resp.StatusCode(), "error", err)
		}
	}()
}

// shardReadyz is /readyz on a sharded node: ready while the store answers, the engine runs
// and its writes land; its role is "owner" while it schedules shards, else "idle".
func (s *Server) shardReadyz(c *fasthttp.RequestCtx) {
	eng := s.cfg.Engine
	ans := readyzJSON{Status: "ready", Role: RoleIdle, Node: s.shards.cfg.NodeID}
	var held, notServing model.ShardSet
	ready := eng.API().Ownership().Ready()
	for _, f := range eng.API().Ownership().Held() {
		held.Add(f.Shard)
		if !ready.Has(f.Shard) {
			notServing.Add(f.Shard)
		}
		ans.Epoch = max(ans.Epoch, f.Epoch)
	}
	if held.Len() > 0 {
		ans.Role = RoleOwner
	}
	ans.Shards, ans.NotServing = held.String(), notServing.String()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	switch err := s.cfg.Store.Ping(ctx); {
	case err != nil:
		ans.Status, ans.Error = "not_ready", "store unreachable: "+err.Error()
	case s.shards.cfg.Stopping != nil && s.shards.cfg.Stopping():
		ans.Status, ans.Error = "not_ready", "shutting down"
	case !eng.API().Running():
		ans.Status, ans.Error = "not_ready", "engine not running"
	default:
		if err := eng.API().WriteStalled(); err != nil {
			ans.Status, ans.Error = "not_ready", err.Error()
		}
	}
	code := fasthttp.StatusOK
	if ans.Status != "ready" {
		code = fasthttp.StatusServiceUnavailable
	}
	writeJSON(c, code, ans)
}

// splitBatch is POST /api/v1/tasks/batch on a sharded node: the items are checked here as a
// whole (each decodes and is valid, names are unique, every upstream is an item or a task,
// no cycle; with on_conflict=error no name is taken), so that a batch refused is refused
// before any of it is written; then each owner gets the items of its shards in one call,
// with the upstreams already checked. Should an owner still refuse its part (a name taken
// meanwhile, its shard moved), the answer is that refusal, naming the items, and says which
// parts were created.
func (s *Server) splitBatch(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if s.shards == nil {
		return next
	}
	return func(c *fasthttp.RequestCtx) {
		if routed(c) {
			next(c)
			return
		}
		onConflict := string(c.QueryArgs().Peek("on_conflict"))
		ct := string(c.Request.Header.ContentType())
		ndjson := strings.HasPrefix(strings.TrimSpace(strings.ToLower(ct)), ndjsonType)
		raws, err := splitBatchItems(batchBody(c), ndjson)
		if err != nil {
			var tl *errTooLarge
			if errors.As(err, &tl) {
				c.SetConnectionClose()
				writeErr(c, fasthttp.StatusRequestEntityTooLarge, tl.msg)
				return
			}
			s.fail(c, err)
			return
		}
		specs := make([]*wire.TaskSpec, len(raws))
		var bad []engine.ItemError
		for i, raw := range raws {
			spec, err := engine.DecodeTaskSpec(raw)
			if err != nil {
				bad = append(bad, engine.ItemError{Index: i, Err: err})
				continue
			}
			specs[i] = spec
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.cfg.Engine.API().CheckTasks(ctx, specs, onConflict); err != nil {
			s.failBatch(c, bad, err)
			return
		}
		if len(bad) > 0 {
			s.writeBatchError(c, fasthttp.StatusBadRequest, bad)
			return
		}
		type result struct {
			idx    []int
			status int
			body   []byte
			err    error
		}
		eng := s.cfg.Engine
		who := actor(c)
		o, uri := s.shards.outgoing(c, upstreamsCheckedHeader, "1", fasthttp.HeaderContentType, "application/json"), requestTarget(c)
		var total wire.BatchResult
		var failures []string
		var items []wire.BatchItemError
		created := 0
		// Rounds: a part its node refused because the part's shard moved (503: refused before
		// anything of it was written) is split again over the owners read afresh, until
		// batchRerouteFor has passed; every other answer is final. A shard moving while a
		// cluster settles is no failure of the caller's batch.
		pending := make([]int, len(specs))
		for i := range pending {
			pending[i] = i
		}
		reroute := time.Now().Add(batchRerouteFor)
		for round := 0; len(pending) > 0; round++ {
			if round > 0 {
				time.Sleep(batchRerouteWait)
			}
			last := time.Now().After(reroute)
			owner, _, _, err := s.shards.table(ctx, true)
			if err != nil {
				if !last {
					continue
				}
				if created == 0 && len(items) == 0 && len(failures) == 0 {
					writeErr(c, fasthttp.StatusServiceUnavailable, "cannot read the shards' owners: "+err.Error())
					return
				}
				failures = append(failures, fmt.Sprintf("items %v: cannot read the shards' owners: %v", pending, err))
				break
			}
			parts := map[string][]int{}
			var homeless []int
			for _, i := range pending {
				n := model.ShardOf(specs[i].Name)
				switch _, ready := eng.API().Ownership().State(n); {
				case ready:
					parts[""] = append(parts[""], i)
				case owner[n] == "":
					homeless = append(homeless, i)
				default:
					parts[owner[n]] = append(parts[owner[n]], i)
				}
			}
			if len(homeless) > 0 && !last {
				continue // nothing sent this round: the shards settle first
			}
			if len(homeless) > 0 && created == 0 && len(items) == 0 && len(failures) == 0 {
				c.Response.Header.Set("Retry-After", "1")
				writeErr(c, fasthttp.StatusServiceUnavailable, fmt.Sprintf("%d item(s) are in shards moving between nodes (item %d first); nothing was created: try again: %s",
					len(homeless), homeless[0], model.ErrShardNotHeld))
				return
			}
			if len(homeless) > 0 {
				failures = append(failures, fmt.Sprintf("items %v: in shards moving between nodes: %s", homeless, model.ErrShardNotHeld))
			}
			results := make(chan result, len(parts))
			for base, idx := range parts {
				body := arrayOf(raws, idx)
				if base == "" {
					go func() {
						res, err := eng.API().CreateTasks(ctx, pick(specs, idx), onConflict, who, engine.UpstreamsChecked())
						b, _ := json.Marshal(res)
						status := 200
						if err != nil {
							status, b = s.batchErrorBody(c, err, idx)
						}
						results <- result{idx: idx, status: status, body: b}
					}()
					continue
				}
				go func() {
					status, _, b, err := o.call(base, uri, body)
					results <- result{idx: idx, status: status, body: b, err: err}
				}()
			}
			pending = pending[:0:0]
			for range parts {
				r := <-results
				if r.err == nil && r.status == 200 {
					var res wire.BatchResult
					if json.Unmarshal(r.body, &res) == nil {
						total.Created += res.Created
						total.Skipped += res.Skipped
						total.Replaced += res.Replaced
					}
					created += len(r.idx)
					continue
				}
				if r.err != nil {
					failures = append(failures, fmt.Sprintf("items %v: %v", r.idx, r.err))
					continue
				}
				if r.status == fasthttp.StatusServiceUnavailable && !last {
					pending = append(pending, r.idx...) // refused whole: its shard moved
					continue
				}
				var be wire.BatchRefusal
				if json.Unmarshal(r.body, &be) == nil && len(be.Errors) > 0 {
					for _, it := range be.Errors {
						if it.Index >= 0 && it.Index < len(r.idx) {
							items = append(items, wire.BatchItemError{Index: r.idx[it.Index], Error: it.Error})
						}
					}
					continue
				}
				failures = append(failures, fmt.Sprintf("items %v: %d %s", r.idx, r.status, errorText(r.body)))
			}
			slices.Sort(pending)
		}
		if len(failures) == 0 && len(items) == 0 {
			writeJSON(c, 200, total)
			return
		}
		slices.SortFunc(items, func(a, b wire.BatchItemError) int { return a.Index - b.Index })
		msg := fmt.Sprintf("%d of %d items were created by the nodes that schedule them; the others were not", created, len(specs))
		if len(failures) > 0 {
			msg += ": " + strings.Join(failures, "; ")
		}
		c.Response.Header.Set("Retry-After", "1")
		writeJSON(c, fasthttp.StatusConflict, wire.BatchRefusal{Error: msg, Errors: items, Created: total.Created,
			Skipped: total.Skipped, Replaced: total.Replaced})
	}
}

// batchRerouteFor bounds how long a sharded node's batch create keeps routing again the
// parts refused because their shard moved (a cluster settling, a node leaving), and
// batchRerouteWait is the pause between rounds: about a renew interval's look at the leases.
const (
	batchRerouteFor  = 20 * time.Second
	batchRerouteWait = 250 * time.Millisecond
)

// upstreamsCheckedHeader marks a part of a batch whose upstreams the node that split it
// checked against the whole batch; only a call another node signed may carry it
// (peersig.go).
const upstreamsCheckedHeader = "X-Axe-Upstreams-Checked"

// batchErrorBody is the status and body CreateTasks' error is answered with for the items
// idx of a batch (as createBatch answers it, indexes into the part).
func (s *Server) batchErrorBody(c *fasthttp.RequestCtx, err error, idx []int) (int, []byte) {
	var be *engine.BatchError
	if errors.As(err, &be) {
		out := wire.BatchRefusal{Error: err.Error()}
		for _, it := range be.Items {
			out.Errors = append(out.Errors, wire.BatchItemError{Index: it.Index, Error: it.Err.Error()})
		}
		b, _ := json.Marshal(out)
		return fasthttp.StatusConflict, b
	}
	code, msg := s.errorOf(c, err)
	b, _ := json.Marshal(map[string]string{"error": msg})
	return code, b
}

// pick returns specs[i] for each i of idx.
func pick(specs []*wire.TaskSpec, idx []int) []*wire.TaskSpec {
	out := make([]*wire.TaskSpec, len(idx))
	for k, i := range idx {
		out[k] = specs[i]
	}
	return out
}

// arrayOf is a JSON array of the items idx of raws.
func arrayOf(raws [][]byte, idx []int) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for k, i := range idx {
		if k > 0 {
			b.WriteByte(',')
		}
		b.Write(raws[i])
	}
	b.WriteByte(']')
	return b.Bytes()
}
