package daemon_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/admin"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// peerSecretOf reads the cluster's peer secret from the database, as every node does.
func peerSecretOf(t *testing.T, dsn string) []byte {
	t.Helper()
	st, err := persist.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := st.LeaseState(t.Context(), "cluster/peer-secret")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Held || len(l.Holder) != 64 {
		t.Fatalf("the cluster's peer secret row = %+v, want a held row of 32 random bytes in hex", l)
	}
	return []byte(l.Holder)
}

// notOwner returns a node of ds that does not schedule task's shard.
func notOwner(t *testing.T, ds []*daemontest.Daemon, task string) *daemontest.Daemon {
	t.Helper()
	own := owner(t, ds, task)
	for _, d := range ds {
		if d != own {
			return d
		}
	}
	t.Fatalf("every node schedules %s", task)
	return nil
}

// TestShardsIgnoreNodeHeadersFromClients: the headers one node sends another
// (X-Axe-Routed, X-Axe-Upstreams-Checked) sent by a client with a write token are dropped,
// so the client's call is served as any client's: a batch with a two-task cycle or an
// unknown upstream is refused 400 through every node, and a rate limit or a bulk pause
// reaches every node.
func TestShardsIgnoreNodeHeadersFromClients(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	hook := daemontest.NewHook(t)
	ds := shardNodes(t, dsn, 3, func(c *axedaemon.Config) { c.Token = "write-token-of-every-node-0123456789" })
	node := []string{"X-Axe-Routed", "n9", "X-Axe-Upstreams-Checked", "1"}

	// Each node gets a cycle of two of its own tasks (served there, where the routed header
	// would make it skip the checks) and a cycle across two nodes (split by owner).
	var pairs [][2]string
	var all []string
	for i, d := range ds {
		var mine []string
		var other string
		for k := 0; len(mine) < 2 || other == ""; k++ {
			name := fmt.Sprintf("cyc-%d-%d", i, k)
			if owner(t, ds, name) == d {
				if len(mine) < 2 {
					mine = append(mine, name)
				}
			} else if other == "" {
				other = name
			}
		}
		pairs = append(pairs, [2]string{mine[0], mine[1]}, [2]string{mine[0], other})
		all = append(all, mine[0], mine[1], other)
	}
	for i, d := range ds {
		for _, p := range pairs[2*i : 2*i+2] {
			cycle := []map[string]any{
				daemontest.Spec(p[0], hook.URL("/ok"), "depends_on", []string{p[1]}),
				daemontest.Spec(p[1], hook.URL("/ok"), "depends_on", []string{p[0]}),
			}
			if code, body := d.Call(t, "POST", "/api/v1/tasks/batch", cycle, node...); code != http.StatusBadRequest || !strings.Contains(string(body), "cycle") {
				t.Errorf("node %d: a cycle of %v sent with a node's headers: %d %s, want 400 naming the cycle", i+1, p, code, body)
			}
		}
		orphan := []map[string]any{daemontest.Spec(fmt.Sprintf("orphan-%d", i), hook.URL("/ok"), "depends_on", []string{"nowhere"})}
		if code, body := d.Call(t, "POST", "/api/v1/tasks/batch", orphan, node...); code != http.StatusBadRequest || !strings.Contains(string(body), "nowhere") {
			t.Errorf("node %d: an unknown upstream sent with a node's headers: %d %s, want 400 naming it", i+1, code, body)
		}
	}
	for _, name := range all {
		if code, body := ds[0].Call(t, "GET", "/api/v1/tasks/"+name, nil); code != http.StatusNotFound {
			t.Errorf("%s after the refused batches: %d %s, want 404", name, code, body)
		}
	}

	// A cluster-wide write with the routed header reaches every node.
	ds[0].MustJSON(t, http.StatusOK, "PUT", "/api/v1/ratelimits", map[string]any{"downstream": "billing", "rate": 7}, nil, node...)
	for i, d := range ds {
		if code, body := d.Call(t, "GET", "/api/v1/ratelimits", nil); code != 200 || !strings.Contains(string(body), "billing") {
			t.Errorf("node %d's rate limits after a routed-looking PUT through node 1: %d %s, want billing's", i+1, code, body)
		}
	}
	var names []string
	for i := range 24 {
		name := fmt.Sprintf("grp-%02d", i)
		names = append(names, name)
		ds[i%3].Create(t, daemontest.Spec(name, hook.URL("/ok"), "trigger", "manual", "group", "g"))
	}
	owners := map[string]bool{}
	for _, n := range names {
		owners[owner(t, ds, n).Addr] = true
	}
	if len(owners) != 3 {
		t.Fatalf("the group's tasks are on %d nodes, want 3", len(owners))
	}
	var paused struct {
		Affected int `json:"affected"`
	}
	if code, body := ds[1].Call(t, "POST", "/api/v1/tasks/bulk/pause", map[string]any{"group": "g"}, node...); code != http.StatusOK ||
		json.Unmarshal(body, &paused) != nil || paused.Affected != len(names) {
		t.Errorf("a bulk pause of a group with a node's headers: %d %s, want 200 and the %d tasks of every node", code, body, len(names))
	}
	for _, n := range names {
		if got := ds[2].Get(t, n); got.Runtime.State != model.StatePaused {
			t.Errorf("%s is %s after the bulk pause, want PAUSED", n, got.Runtime.State)
		}
	}

}

// TestShardsCheckPeerSignatures: a call whose X-Axe-Peer-Signature does not hold (another
// key, another body, garbled, signed an hour ago, a replay) is refused 403 and changes
// nothing; one signed with the cluster's key is believed as another node's: a call passed on
// to a node without the task's shard is not passed on again.
func TestShardsCheckPeerSignatures(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	hook := daemontest.NewHook(t)
	ds := shardNodes(t, dsn, 2, nil)
	secret := peerSecretOf(t, dsn)
	task := "signed"
	ds[0].Create(t, daemontest.Spec(task, hook.URL("/ok"), "trigger", "manual"))
	ds[0].MustJSON(t, http.StatusOK, "POST", "/api/v1/tasks/"+task+"/pause", map[string]any{}, nil)
	via := notOwner(t, ds, task)
	target := "/api/v1/tasks/" + task + "/resume"
	body := `{}`
	sign := func(key []byte, body string) string {
		return admin.PeerSignature(key, time.Now(), "POST", target, "n9", "", []byte(body))
	}
	good := sign(secret, body)
	refused := []struct {
		what, body, sig string
	}{
		{"a signature of another key", body, sign([]byte(strings.Repeat("0", 64)), body)},
		{"a signature of another body", `{"note":"x"}`, good},
		{"a garbled signature", body, "t=1,body=00,sig=zz"},
		{"a signature of an hour ago", body, admin.PeerSignature(secret, time.Now().Add(-time.Hour), "POST", target, "n9", "", []byte(body))},
	}
	for _, r := range refused {
		code, _, got := via.Send(t, "POST", target, r.body, true, "X-Axe-Routed", "n9", "X-Axe-Peer-Signature", r.sig)
		if code != http.StatusForbidden || !strings.Contains(string(got), "X-Axe-Peer-Signature") {
			t.Errorf("%s: %d %s, want 403 naming X-Axe-Peer-Signature", r.what, code, got)
		}
	}
	// Signed by the cluster's key, a call passed on to a node without the shard is not
	// passed on again, and the same signed call is taken once.
	code, hdr, got := via.Send(t, "POST", target, body, true, "X-Axe-Routed", "n9", "X-Axe-Peer-Signature", good)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(string(got), "shard") {
		t.Errorf("a signed routed resume on a node without the shard: %d %s, want 503 with Retry-After", code, got)
	}
	code, _, got = via.Send(t, "POST", target, body, true, "X-Axe-Routed", "n9", "X-Axe-Peer-Signature", good)
	if code != http.StatusForbidden || !strings.Contains(string(got), "replay") {
		t.Errorf("the same signed call again: %d %s, want 403 naming a replay", code, got)
	}
	if g := ds[0].Get(t, task); g.Runtime.State != model.StatePaused {
		t.Errorf("%s is %s after the refused calls, want PAUSED still", task, g.Runtime.State)
	}
}

// absoluteForm sends a request whose target is in absolute form (http://addr/path) to addr
// over a raw connection, with hdr (pairs) and a JSON body of {}, and returns the answer.
func absoluteForm(t *testing.T, addr, path string, hdr ...string) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	var b strings.Builder
	b.WriteString("POST http://" + addr + path + " HTTP/1.1\r\nHost: " + addr + "\r\n")
	for i := 0; i+1 < len(hdr); i += 2 {
		b.WriteString(hdr[i] + ": " + hdr[i+1] + "\r\n")
	}
	b.WriteString("Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, got
}

// TestShardsPassOnAnAbsoluteFormTarget: a request whose target is in absolute form
// ("POST http://host/api/v1/tasks/x/pause HTTP/1.1") sent to a node that does not schedule
// the task is passed on to its owner by its path and query, and served there.
func TestShardsPassOnAnAbsoluteFormTarget(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	hook := daemontest.NewHook(t)
	ds := shardNodes(t, dsn, 2, nil)
	const task = "absolute"
	ds[0].Create(t, daemontest.Spec(task, hook.URL("/ok"), "trigger", "manual"))
	via := notOwner(t, ds, task)
	if code, got := absoluteForm(t, via.Addr, "/api/v1/tasks/"+task+"/pause?x=1"); code != http.StatusOK {
		t.Fatalf("an absolute-form pause through a node without the shard: %d %s, want 200 from the owner", code, got)
	}
	if g := ds[1].Get(t, task); g.Runtime.State != model.StatePaused {
		t.Errorf("%s is %s after the absolute-form pause, want PAUSED", task, g.Runtime.State)
	}
}

// TestHABackupForwardsAnAbsoluteFormTarget: a console write in absolute form to a backup is
// forwarded to the primary by its path and query, and served there.
func TestHABackupForwardsAnAbsoluteFormTarget(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	hook := daemontest.NewHook(t)
	a := daemontest.HANode(t, dsn, "a", 3*time.Second, time.Second)
	a.WaitRole(t, "primary", daemontest.WaitTimeout)
	b := daemontest.HANode(t, dsn, "b", 3*time.Second, time.Second)
	b.WaitRole(t, "backup", daemontest.WaitTimeout)
	const task = "absolute"
	a.Create(t, daemontest.Spec(task, hook.URL("/ok"), "trigger", "manual"))
	// A backup that sees no live primary lease (a renewal late on a loaded machine) answers
	// 503 with Retry-After, and a client asks again, as the Go client does.
	var code int
	var got []byte
	testwait.For(t, daemontest.WaitTimeout, "an answer other than 503 from the backup", func() bool {
		code, got = absoluteForm(t, b.Addr, "/api/v1/tasks/"+task+"/pause?x=1", "X-Axe-Forward", "primary")
		return code != http.StatusServiceUnavailable
	})
	if code != http.StatusOK {
		t.Fatalf("an absolute-form pause forwarded by the backup: %d %s, want 200 from the primary", code, got)
	}
	if g := a.Get(t, task); g.Runtime.State != model.StatePaused {
		t.Errorf("%s is %s after the absolute-form pause, want PAUSED", task, g.Runtime.State)
	}
}

// TestShardsClusterRoles: GET /api/v1/cluster of three nodes that schedule by shard calls
// each of them what its /readyz calls it: an owner of its shards, not a backup.
func TestShardsClusterRoles(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	ds := shardNodes(t, dsn, 3, nil)
	var v struct {
		Mode  string `json:"mode"`
		Nodes []struct {
			ID     string `json:"id"`
			Role   string `json:"role"`
			Shards string `json:"shards"`
		} `json:"nodes"`
	}
	for _, d := range ds {
		d.MustJSON(t, http.StatusOK, "GET", "/api/v1/cluster", nil, &v)
		if v.Mode != "sharded" || len(v.Nodes) != 3 {
			raw, _ := json.Marshal(v)
			t.Fatalf("the cluster through %s = %s, want three nodes, sharded", d.Addr, raw)
		}
		for _, n := range v.Nodes {
			var r daemontest.Readyz
			for _, e := range ds {
				if _, rr := e.Readyz(t, ""); rr.Node == n.ID {
					r = rr
				}
			}
			if n.Role != "owner" || n.Role != r.Role || n.Shards != r.Shards {
				t.Errorf("node %s in the cluster view: role %q shards %q; its /readyz: role %q shards %q; want owner alike",
					n.ID, n.Role, n.Shards, r.Role, r.Shards)
			}
		}
	}
}
