package admin_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/axe-sched/axe/admin"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/protocol"
)

// TestSchedulerExecutorStatusesAreDocumented makes the scheduler's executor endpoints answer
// each status they can give a well-behaved or a broken executor (not the 503 of a backup,
// documented with failover) and checks that docs/protocol.md, in the endpoint's own section,
// and docs/openapi.yaml, in its responses, name every status seen.
func TestSchedulerExecutorStatusesAreDocumented(t *testing.T) {
	const tok, otherTok = "billing-exec-0123456789", "other-exec-0123456789"
	file := filepath.Join(t.TempDir(), "tokens.json")
	writeTokenFile(t, file, []admin.TokenEntry{
		{Name: "ops", Scope: "write", Token: writeTok},
		{Name: "billing-exec", Scope: "executor", Token: tok, Apps: []string{"billing"}},
		{Name: "other-exec", Scope: "executor", Token: otherTok, Apps: []string{"other"}},
	})
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), func(c *axedaemon.Config) { c.Security.TokenFile = file })
	d.Token = writeTok
	x := newV2Executor(t, tok, incA)
	reg := map[string]any{"app": "billing", "address": x.addr(), "handlers": []string{"charge"}, "auth": "signed", "version": 2, "incarnation": incA}
	d.Create(t, map[string]any{"name": "charge", "trigger": "manual", "timeout_sec": 60,
		"callback": map[string]any{"type": "executor", "app": "billing", "handler": "charge"}})

	seen := map[string]map[int]bool{}
	call := func(path string, body any, hdr ...string) {
		t.Helper()
		code, _, _ := d.Send(t, "POST", path, body, false, hdr...)
		if seen[path] == nil {
			seen[path] = map[int]bool{}
		}
		seen[path][code] = true
	}
	own, other := bearer(tok), bearer(otherTok)
	hb := map[string]any{"app": "billing", "address": x.addr(), "incarnation": incA}
	for _, p := range protocol.SchedulerPaths {
		call(p, `{"app":`, own...)                                                // 400
		call(p, `{}`)                                                             // 401
		code, _ := oversized(t, d.Addr, "POST", p, protocol.MaxResultBodyBytes+1) // 413
		seen[p][code] = true
	}
	call(protocol.PathHeartbeat, hb, own...)   // 404: not registered yet
	call(protocol.PathRegister, reg, other...) // 403
	call(protocol.PathRegister, reg, own...)   // 200
	call(protocol.PathHeartbeat, hb, other...) // 403
	call(protocol.PathHeartbeat, hb, own...)   // 200
	ticket := d.RunNow(t, "charge", nil)
	testwait.For(t, 20*time.Second, "the run at the executor", func() bool { return len(x.runsOf(ticket)) == 1 })
	res := map[string]any{"ticket": ticket, "task": "charge", "app": "billing", "address": x.addr(), "status": "success"}
	call(protocol.PathCallback, res, other...)                                                                      // 403
	call(protocol.PathCallback, map[string]any{"ticket": "no-such", "app": "billing", "status": "success"}, own...) // 404
	call(protocol.PathCallback, res, own...)                                                                        // 200
	res["status"] = "failed"
	call(protocol.PathCallback, res, own...)                                        // 409
	call(protocol.PathCallbackBatch, map[string]any{"results": []any{res}}, own...) // 200 (an item of 409)
	call(protocol.PathDeregister, hb, other...)                                     // 403
	call(protocol.PathDeregister, hb, own...)                                       // 200

	for _, want := range []struct {
		path  string
		codes []int
	}{
		{protocol.PathRegister, []int{200, 400, 401, 403, 413}},
		{protocol.PathHeartbeat, []int{200, 400, 401, 403, 404, 413}},
		{protocol.PathDeregister, []int{200, 400, 401, 403, 413}},
		{protocol.PathCallback, []int{200, 400, 401, 403, 404, 409, 413}},
		{protocol.PathCallbackBatch, []int{200, 400, 401, 413}},
	} {
		for _, c := range want.codes {
			if !seen[want.path][c] {
				t.Errorf("%s never answered %d: the test no longer makes it (seen %v)", want.path, c, seen[want.path])
			}
		}
	}

	raw, err := os.ReadFile(filepath.Join("..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(raw)
	var api struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	oa, err := os.ReadFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(oa, &api); err != nil {
		t.Fatal(err)
	}
	for path, codes := range seen {
		head := "### `POST " + path + "`"
		start := strings.Index(md, head)
		if start < 0 {
			t.Errorf("docs/protocol.md has no section %s", head)
			continue
		}
		section := md[start+len(head):]
		if next := strings.Index(section, "\n#"); next >= 0 {
			section = section[:next]
		}
		for code := range codes {
			if !regexp.MustCompile("`" + strconv.Itoa(code) + "[ `]").MatchString(section) {
				t.Errorf("docs/protocol.md, POST %s, does not name status %d, which it answers", path, code)
			}
			post, _ := api.Paths[path]["post"].(map[string]any)
			responses, _ := post["responses"].(map[string]any)
			if _, ok := responses[strconv.Itoa(code)]; !ok {
				t.Errorf("docs/openapi.yaml, POST %s, does not list status %d, which it answers", path, code)
			}
		}
	}
}
