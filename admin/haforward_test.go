package admin_test

import (
	"crypto/tls"
	"database/sql"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/admin"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testpki"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// Tests of the backup forwarding the console's writes to the primary, with two real HA
// nodes on one MariaDB database, a token and a base path, over loopback HTTP.

const fwdToken = "fwd-s3cret-0123456"

// haConsoleNode is an HA node with the token and the console's base path.
func haConsoleNode(t *testing.T, dsn, id string, mod func(*axedaemon.Config)) *daemontest.Daemon {
	t.Helper()
	return daemontest.Start(t, dsn, func(c *axedaemon.Config) {
		c.HA = true
		c.HAMode = axedaemon.HAModePrimary
		c.NodeID = id
		// Leases long enough that a renewal late on a loaded box does not depose the
		// primary mid-test; no test here waits for a takeover by expiry.
		c.LeaseTTL = 10 * time.Second
		c.LeaseRenew = 2 * time.Second
		c.Token = fwdToken
		c.BasePath = consoleBase
		if mod != nil {
			mod(c)
		}
	})
}

// fwdAnswer is one answer of raw: status, the X-Axe-Primary header and the body.
type fwdAnswer struct {
	code    int
	primary string
	body    []byte
}

// fwdCall sends one request to d at path (base path included) with the headers given, and no
// token but what they hold.
func fwdCall(t *testing.T, d *daemontest.Daemon, method, path string, body any, hdr ...string) fwdAnswer {
	t.Helper()
	code, h, data := d.Send(t, method, path, body, false, hdr...)
	return fwdAnswer{code, h.Get(admin.ForwardedHeader), data}
}

// errBody decodes an {"error", "primary"} answer.
func errBody(t *testing.T, a fwdAnswer) (msg, primary string) {
	t.Helper()
	var e struct {
		Error   string  `json:"error"`
		Primary *string `json:"primary"`
	}
	if err := json.Unmarshal(a.body, &e); err != nil || e.Error == "" || e.Primary == nil {
		t.Fatalf("answer %d %s: want {\"error\", \"primary\"} (%v)", a.code, a.body, err)
	}
	return e.Error, *e.Primary
}

// TestHABackupForwardsConsoleWrites: a write marked X-Axe-Forward: primary on the backup is
// done by the primary with the caller's token and actor; unmarked writes and the executor
// protocol keep the backup's 503; a refused token is refused by the backup itself.
func TestHABackupForwardsConsoleWrites(t *testing.T) {
	dsn := persisttest.MySQLSchemaDSN(t)
	a := haConsoleNode(t, dsn, "a", nil)
	a.WaitRole(t, "primary", daemontest.WaitTimeout)
	b := haConsoleNode(t, dsn, "b", nil)
	b.WaitRole(t, "backup", daemontest.WaitTimeout)
	testwait.For(t, daemontest.WaitTimeout, "the backup to name the primary", func() bool {
		_, r := b.Readyz(t, "")
		return r.Primary == a.Base
	})
	api := consoleBase + "/api/v1"
	auth := []string{"Authorization", "Bearer " + fwdToken}
	console := append([]string{admin.ForwardHeader, "primary", "X-Axe-Actor", "alice"}, auth...)
	task := daemontest.Spec("fwd-task", "http://127.0.0.1:1/x", "trigger", "delay", "delay_ms", 3_600_000)

	// Create and pause through the backup.
	ans := fwdCall(t, b, http.MethodPost, api+"/tasks", task, console...)
	if ans.code != http.StatusCreated || ans.primary != a.Base {
		t.Fatalf("create through the backup = %d (%s: %q) %s, want 201 from %s", ans.code, admin.ForwardedHeader, ans.primary, ans.body, a.Base)
	}
	ans = fwdCall(t, b, http.MethodPost, api+"/tasks/fwd-task/pause", map[string]string{"note": "paused from the backup"}, console...)
	if ans.code != http.StatusOK || ans.primary != a.Base {
		t.Fatalf("pause through the backup = %d %s", ans.code, ans.body)
	}
	var v struct {
		Runtime struct {
			State   string `json:"state"`
			Note    string `json:"note"`
			Version int64  `json:"version"`
		} `json:"runtime"`
	}
	getTask := func(d *daemontest.Daemon) {
		t.Helper()
		g := fwdCall(t, d, http.MethodGet, api+"/tasks/fwd-task", nil, auth...)
		if g.code != http.StatusOK || json.Unmarshal(g.body, &v) != nil {
			t.Fatalf("GET fwd-task on %s = %d %s", d.Base, g.code, g.body)
		}
	}
	getTask(a)
	if v.Runtime.State != "PAUSED" || v.Runtime.Note != "paused from the backup" {
		t.Fatalf("the primary holds fwd-task as %+v, want paused with the note", v.Runtime)
	}
	version := v.Runtime.Version

	// A bad body is the primary's 400, passed on as it is.
	bad := daemontest.Spec("fwd-bad", "http://127.0.0.1:1/x", "trigger", "cron", "cron", "not a cron")
	ans = fwdCall(t, b, http.MethodPost, api+"/tasks", bad, console...)
	var e400 struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(ans.body, &e400) != nil || ans.code != http.StatusBadRequest || !strings.Contains(e400.Error, "cron") || ans.primary != a.Base {
		t.Fatalf("a bad create through the backup = %d %s, want the primary's 400 naming cron", ans.code, ans.body)
	}

	// Without the header: the backup's 503 naming the primary, and nothing done.
	ans = fwdCall(t, b, http.MethodPost, api+"/tasks/fwd-task/resume", nil, auth...)
	if msg, primary := errBody(t, ans); ans.code != http.StatusServiceUnavailable || msg != admin.ErrBackup.Error() || primary != a.Base {
		t.Fatalf("an unmarked write on the backup = %d %s, want 503 naming %s", ans.code, ans.body, a.Base)
	}
	// A wrong token: the backup's own 401, and nothing forwarded.
	ans = fwdCall(t, b, http.MethodPost, api+"/tasks/fwd-task/resume", nil, admin.ForwardHeader, "primary", "Authorization", "Bearer wrong")
	if ans.code != http.StatusUnauthorized || ans.primary != "" {
		t.Fatalf("a write with a wrong token on the backup = %d (%q) %s, want the backup's 401", ans.code, ans.primary, ans.body)
	}
	// The executor protocol is never forwarded.
	ans = fwdCall(t, b, http.MethodPost, "/api/v1/executors/heartbeat", map[string]any{"app": "x", "address": "127.0.0.1:1"}, console...)
	if _, primary := errBody(t, ans); ans.code != http.StatusServiceUnavailable || primary != a.Base || ans.primary != "" {
		t.Fatalf("a heartbeat on the backup = %d %s, want 503", ans.code, ans.body)
	}
	getTask(a)
	if v.Runtime.State != "PAUSED" || v.Runtime.Version != version {
		t.Fatalf("after the refused writes fwd-task is %+v, want it unchanged (version %d)", v.Runtime, version)
	}

	// The same actor as a call made on the primary itself.
	ans = fwdCall(t, a, http.MethodPost, api+"/tasks/fwd-task/resume", nil, "X-Axe-Actor", "alice", auth[0], auth[1])
	if ans.code != http.StatusOK || ans.primary != "" {
		t.Fatalf("resume on the primary = %d %s", ans.code, ans.body)
	}
	acts := fwdCall(t, b, http.MethodGet, api+"/tasks/fwd-task/actions", nil, auth...)
	var list struct {
		Actions []model.Action `json:"actions"`
	}
	if acts.code != http.StatusOK || json.Unmarshal(acts.body, &list) != nil {
		t.Fatalf("actions = %d %s", acts.code, acts.body)
	}
	actors := map[string]string{}
	for _, x := range list.Actions {
		actors[x.Action] = x.Actor
	}
	want := "api:" + admin.DefaultTokenName + "/alice"
	if actors["create"] != want || actors["pause"] != want || actors["resume"] != want {
		t.Fatalf("actors %v, want %q for create and pause through the backup as for resume on the primary", actors, want)
	}
}

// TestHABackupForwardWithoutPrimary: with the lease held by a node that left no address, a
// forwarded write is a 503 saying no primary is known; with an address nothing answers at,
// a 502 naming it. Nothing is written either way.
func TestHABackupForwardWithoutPrimary(t *testing.T) {
	dsn := persisttest.MySQLSchemaDSN(t)
	// A first start creates the schema and the lease row; the graceful stop releases it.
	x := haConsoleNode(t, dsn, "x", nil)
	x.WaitRole(t, "primary", daemontest.WaitTimeout)
	if err := x.Stop(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE lease SET holder = 'ghost', epoch = epoch + 1, expiry = NOW(6) + INTERVAL 1 HOUR`); err != nil {
		t.Fatal(err)
	}
	y := haConsoleNode(t, dsn, "y", nil)
	y.WaitRole(t, "backup", daemontest.WaitTimeout)
	api := consoleBase + "/api/v1"
	console := []string{admin.ForwardHeader, "primary", "Authorization", "Bearer " + fwdToken}
	task := daemontest.Spec("fwd-none", "http://127.0.0.1:1/x", "trigger", "manual")

	code, h, body := y.Send(t, http.MethodPost, api+"/tasks", task, false, console...)
	ans := fwdAnswer{code, h.Get(admin.ForwardedHeader), body}
	if msg, primary := errBody(t, ans); ans.code != http.StatusServiceUnavailable || primary != "" || !strings.Contains(msg, "no primary") {
		t.Fatalf("a forwarded write with no primary = %d %s, want 503 saying no primary is known", ans.code, ans.body)
	}
	// A takeover under way is a moment's wait: clients are told to ask again.
	if ra := h.Get("Retry-After"); ra != "1" {
		t.Fatalf("a forwarded write with no primary carries Retry-After %q, want 1", ra)
	}
	code, h, body = y.Send(t, http.MethodPost, api+"/tasks", task, false, console[2:]...)
	if msg, primary := errBody(t, fwdAnswer{code, "", body}); code != http.StatusServiceUnavailable || primary != "" || h.Get("Retry-After") != "1" {
		t.Fatalf("a write with no primary = %d %s %q (Retry-After %q), want 503, no primary, Retry-After 1", code, body, msg, h.Get("Retry-After"))
	}

	// A new holder whose row names an address nothing listens at (a backup reads the
	// holder's address when the holder changes).
	const dead = "http://127.0.0.1:1"
	if _, err := db.Exec(`INSERT INTO nodes (id, advertise, role, instance, started_at, last_seen)
		VALUES ('ghost2', ?, 'primary', 'i', NOW(6), NOW(6))`, dead); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE lease SET holder = 'ghost2', epoch = epoch + 1, expiry = NOW(6) + INTERVAL 1 HOUR`); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, daemontest.WaitTimeout, "the backup to name the ghost primary", func() bool {
		_, r := y.Readyz(t, "")
		return r.Primary == dead
	})
	ans = fwdCall(t, y, http.MethodPost, api+"/tasks", task, console...)
	if msg, primary := errBody(t, ans); ans.code != http.StatusBadGateway || primary != dead || !strings.Contains(msg, "cannot reach the primary at "+dead) {
		t.Fatalf("a forwarded write to a dead primary = %d %s, want 502 naming %s", ans.code, ans.body, dead)
	}
	if n := fwdCall(t, y, http.MethodGet, api+"/tasks/fwd-none", nil, console[2:]...); n.code != http.StatusNotFound {
		t.Fatalf("GET fwd-none = %d %s, want 404: nothing was written", n.code, n.body)
	}
}

// httpsConsoleNode is haConsoleNode serving its API over HTTPS with a certificate of ca,
// trusting ca for the other nodes when peerCA is set. Its test client trusts ca.
func httpsConsoleNode(t *testing.T, dsn, id string, ca *testpki.CA, peerCA bool) *daemontest.Daemon {
	t.Helper()
	pair := ca.Server(t, "node-"+id)
	d := haConsoleNode(t, dsn, id, func(c *axedaemon.Config) {
		c.Security.TLSCert, c.Security.TLSKey = pair.CertFile, pair.KeyFile
		if peerCA {
			c.Security.PeerCA = ca.File
		}
	})
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
	t.Cleanup(tr.CloseIdleConnections)
	d.Base = "https://" + d.Addr
	d.HTTP = &http.Client{Timeout: 30 * time.Second, Transport: tr}
	return d
}

// TestHABackupForwardsToAnHTTPSPrimary: nodes serving HTTPS with certificates of a private
// CA advertise https:// URLs by default, and a backup given the CA (PeerCA) forwards the
// console's writes to the primary over TLS. A backup without it answers 502 with the
// certificate error and the write is not done.
func TestHABackupForwardsToAnHTTPSPrimary(t *testing.T) {
	dsn := persisttest.MySQLSchemaDSN(t)
	ca := testpki.NewCA(t, t.TempDir(), "private-ca")
	a := httpsConsoleNode(t, dsn, "a", ca, true)
	a.WaitRole(t, "primary", daemontest.WaitTimeout)
	b := httpsConsoleNode(t, dsn, "b", ca, true)
	b.WaitRole(t, "backup", daemontest.WaitTimeout)
	if !strings.HasPrefix(a.Base, "https://") {
		t.Fatalf("a.Base = %s", a.Base)
	}
	testwait.For(t, daemontest.WaitTimeout, "the backup to name the primary's https URL", func() bool {
		_, r := b.Readyz(t, "")
		return r.Primary == a.Base
	})
	api := consoleBase + "/api/v1"
	auth := []string{"Authorization", "Bearer " + fwdToken}
	console := append([]string{admin.ForwardHeader, "primary"}, auth...)

	ans := fwdCall(t, b, http.MethodPost, api+"/tasks", daemontest.Spec("tls-fwd", "http://127.0.0.1:1/x", "trigger", "manual"), console...)
	if ans.code != http.StatusCreated || ans.primary != a.Base {
		t.Fatalf("create through the backup = %d (%s: %q) %s, want 201 from %s", ans.code, admin.ForwardedHeader, ans.primary, ans.body, a.Base)
	}
	if g := fwdCall(t, a, http.MethodGet, api+"/tasks/tls-fwd", nil, auth...); g.code != http.StatusOK {
		t.Fatalf("GET tls-fwd on the primary = %d %s", g.code, g.body)
	}

	c := httpsConsoleNode(t, dsn, "c", ca, false)
	c.WaitRole(t, "backup", daemontest.WaitTimeout)
	testwait.For(t, daemontest.WaitTimeout, "the second backup to name the primary", func() bool {
		_, r := c.Readyz(t, "")
		return r.Primary == a.Base
	})
	ans = fwdCall(t, c, http.MethodPost, api+"/tasks", daemontest.Spec("tls-unforwarded", "http://127.0.0.1:1/x", "trigger", "manual"), console...)
	if msg, primary := errBody(t, ans); ans.code != http.StatusBadGateway || primary != a.Base || !strings.Contains(msg, "certificate") {
		t.Fatalf("a forward without the CA = %d %s, want 502 naming the certificate error", ans.code, ans.body)
	}
	if g := fwdCall(t, a, http.MethodGet, api+"/tasks/tls-unforwarded", nil, auth...); g.code != http.StatusNotFound {
		t.Fatalf("GET tls-unforwarded on the primary = %d %s, want 404", g.code, g.body)
	}
}
