package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestNodeHeadersFromClients replays issue 41's first finding against real `axe serve`
// processes with a write token: a single node on SQLite and three nodes of a sharded
// cluster on MariaDB. The headers one node sends another (X-Axe-Routed,
// X-Axe-Upstreams-Checked) sent by the client are not believed: on every node a batch of a
// two-task cycle, through the node that schedules both tasks, and one with an unknown
// upstream are refused 400 and create nothing, and a rate limit set through one node of the
// cluster reaches all three. A forged X-Axe-Peer-Signature is refused 403 by a sharded node.
func TestNodeHeadersFromClients(t *testing.T) {
	t.Parallel()
	const token = "node-headers-write-token-0123456789"
	h := newHook(t)
	hook := h.srv.URL + "/ok"
	auth := "Bearer " + token
	node := []string{"Authorization", auth, "X-Axe-Routed", "n9", "X-Axe-Upstreams-Checked", "1"}

	dir := t.TempDir()
	single := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+dir+"/axe.db", "--token", token)
	dsn := persisttest.MySQLSchemaDSN(t)
	var sharded []*serveProc
	for i := range 3 {
		sharded = append(sharded, startServe(t, t.TempDir(), nil, "--addr", "127.0.0.1:0", "--db", dsn, "--token", token,
			"--ha", "--node-id", fmt.Sprintf("n%d", i+1), "--lease-ttl", "3s", "--lease-renew", "1s"))
	}
	held := make([]model.ShardSet, len(sharded))
	testwait.For(t, waitTimeout*3, "the three nodes to share the shards", func() bool {
		total := 0
		for i, p := range sharded {
			code, body := send(t, "GET", p.url+"/readyz", nil)
			var r struct {
				Status string `json:"status"`
				Shards string `json:"shards"`
			}
			if code != 200 || json.Unmarshal([]byte(body), &r) != nil || r.Status != "ready" {
				return false
			}
			set, err := model.ParseShardSet(r.Shards)
			if err != nil || set.Len() == 0 {
				return false
			}
			held[i], total = set, total+set.Len()
		}
		return total == model.ShardCount
	})

	spec := func(name string, upstreams ...string) map[string]any {
		return map[string]any{"name": name, "trigger": "dependency", "depends_on": upstreams, "callback": map[string]any{"url": hook}}
	}
	for i, p := range append([]*serveProc{single}, sharded...) {
		// Two names the node schedules itself (every name on the single node).
		var mine []string
		for k := 0; len(mine) < 2; k++ {
			name := fmt.Sprintf("cyc-%d-%d", i, k)
			if i == 0 || held[i-1].Has(model.ShardOf(name)) {
				mine = append(mine, name)
			}
		}
		code, body := send(t, "POST", p.url+"/api/v1/tasks/batch", []any{spec(mine[0], mine[1]), spec(mine[1], mine[0])}, node...)
		want(t, fmt.Sprintf("node %d: a cycle sent with a node's headers", i), code, body, 400, "cycle")
		code, body = send(t, "POST", p.url+"/api/v1/tasks/batch", []any{spec(fmt.Sprintf("orphan-%d", i), "nowhere")}, node...)
		want(t, fmt.Sprintf("node %d: an unknown upstream sent with a node's headers", i), code, body, 400, "nowhere")
		code, body = send(t, "GET", p.url+"/api/v1/tasks", nil, "Authorization", auth)
		want(t, fmt.Sprintf("node %d: the tasks after the refused batches", i), code, body, 200, `"count":0`)
	}

	code, body := send(t, "PUT", sharded[0].url+"/api/v1/ratelimits", `{"downstream":"billing","rate":7}`, node...)
	want(t, "a rate limit sent with a node's headers", code, body, 200, "")
	for i, p := range sharded {
		code, body := send(t, "GET", p.url+"/api/v1/ratelimits", nil, "Authorization", auth)
		want(t, fmt.Sprintf("node %d's rate limits", i+1), code, body, 200, "billing")
	}

	forged := append(append([]string{}, node...), "X-Axe-Peer-Signature", "t=1,body=00,sig=00")
	code, body = send(t, "POST", sharded[1].url+"/api/v1/tasks/batch", []any{spec("forged-a", "forged-b"), spec("forged-b", "forged-a")}, forged...)
	want(t, "a batch with a forged peer signature", code, body, 403, "X-Axe-Peer-Signature")
	code, body = send(t, "GET", sharded[2].url+"/api/v1/tasks", nil, "Authorization", auth)
	if code != 200 || strings.Contains(body, "forged") || strings.Contains(body, "cyc-") {
		t.Errorf("the cluster's tasks after the refused batches: %d %.300s, want none of them", code, body)
	}
}
