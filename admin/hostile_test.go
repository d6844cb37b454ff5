package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/rawhttp"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
)

// hostileCase is one malformed request: what it must be answered with, and a word the error
// must contain (the field it is about).
type hostileCase struct {
	name   string
	method string
	path   string
	body   any // string bodies are sent raw
	hdr    []string
	status int
	field  string
}

func hostileCases(hookURL string) []hostileCase {
	task := func(kv ...any) map[string]any {
		m := map[string]any{"name": "evil", "trigger": "manual", "callback": map[string]any{"type": "http", "url": hookURL}}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
				continue
			}
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	cb := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	const post, put, get = http.MethodPost, http.MethodPut, http.MethodGet
	long := strings.Repeat("n", 300)
	return []hostileCase{
		// Task bodies that are not JSON objects.
		{"create: empty body", post, "/api/v1/tasks", "", nil, 400, "JSON"},
		{"create: not JSON", post, "/api/v1/tasks", "name=evil", nil, 400, "JSON"},
		{"create: array", post, "/api/v1/tasks", `[{"name":"evil"}]`, nil, 400, "JSON"},
		{"create: truncated", post, "/api/v1/tasks", `{"name":"evil","trigger":"manual"`, nil, 400, "JSON"},
		{"create: trailing data", post, "/api/v1/tasks", `{"name":"evil","trigger":"manual","callback":{"url":"` + hookURL + `"}} {}`, nil, 400, "JSON"},
		{"create: unknown field", post, "/api/v1/tasks", task("command", "rm -rf /"), nil, 400, "command"},
		{"create: unknown callback field", post, "/api/v1/tasks", task("callback", cb("type", "http", "url", hookURL, "method", "GET")), nil, 400, "method"},
		{"create: name of wrong type", post, "/api/v1/tasks", task("name", 42), nil, 400, "name"},
		// Names.
		{"create: no name", post, "/api/v1/tasks", task("name", nil), nil, 400, "name"},
		{"create: empty name", post, "/api/v1/tasks", task("name", ""), nil, 400, "name"},
		{"create: name with slash", post, "/api/v1/tasks", task("name", "a/b"), nil, 400, "name"},
		{"create: name with space", post, "/api/v1/tasks", task("name", "a b"), nil, 400, "name"},
		{"create: name too long", post, "/api/v1/tasks", task("name", long), nil, 400, "name"},
		{"create: name with NUL", post, "/api/v1/tasks", task("name", "a\x00b"), nil, 400, "name"},
		{"create: group with space", post, "/api/v1/tasks", task("group", "a b"), nil, 400, "group"},
		{"create: group too long", post, "/api/v1/tasks", task("group", long), nil, 400, "group"},
		// Triggers.
		{"create: unknown trigger", post, "/api/v1/tasks", task("trigger", "sometimes"), nil, 400, "trigger"},
		{"create: cron without expression", post, "/api/v1/tasks", task("trigger", "cron"), nil, 400, "cron"},
		{"create: bad cron", post, "/api/v1/tasks", task("trigger", "cron", "cron", "61 * * * *"), nil, 400, "cron"},
		{"create: cron of 2 fields", post, "/api/v1/tasks", task("trigger", "cron", "cron", "* *"), nil, 400, "cron"},
		{"create: cron too long", post, "/api/v1/tasks", task("trigger", "cron", "cron", strings.Repeat("1,", 400)+"1 * * * *"), nil, 400, "cron"},
		{"create: cron with manual", post, "/api/v1/tasks", task("cron", "* * * * *"), nil, 400, "cron"},
		{"create: negative delay", post, "/api/v1/tasks", task("trigger", "delay", "delay_ms", -5), nil, 400, "delay_ms"},
		{"create: delay of wrong type", post, "/api/v1/tasks", task("trigger", "delay", "delay_ms", "soon"), nil, 400, "delay_ms"},
		{"create: dependency on nothing", post, "/api/v1/tasks", task("trigger", "dependency"), nil, 400, "depends_on"},
		{"create: dependency on unknown", post, "/api/v1/tasks", task("trigger", "dependency", "depends_on", []string{"ghost"}), nil, 400, "depends_on"},
		{"create: bad depends_mode", post, "/api/v1/tasks", task("trigger", "dependency", "depends_on", []string{"seed"}, "depends_mode", "most"), nil, 400, "depends_mode"},
		{"create: depends on itself", post, "/api/v1/tasks", task("trigger", "dependency", "depends_on", []string{"evil"}), nil, 400, "depends_on"},
		// Zones and numbers.
		{"create: unknown zone", post, "/api/v1/tasks", task("timezone", "Mars/Olympus"), nil, 400, "timezone"},
		{"create: zone path traversal", post, "/api/v1/tasks", task("timezone", "../../etc/passwd"), nil, 400, "timezone"},
		{"create: timeout 0", post, "/api/v1/tasks", task("timeout_sec", 0), nil, 400, "timeout_sec"},
		{"create: timeout huge", post, "/api/v1/tasks", task("timeout_sec", 1<<40), nil, 400, "timeout_sec"},
		{"create: timeout fractional", post, "/api/v1/tasks", task("timeout_sec", 1.5), nil, 400, "timeout_sec"},
		{"create: retries negative", post, "/api/v1/tasks", task("retry_count", -1), nil, 400, "retry_count"},
		{"create: retries huge", post, "/api/v1/tasks", task("retry_count", 1000000), nil, 400, "retry_count"},
		{"create: retry interval 0", post, "/api/v1/tasks", task("retry_interval_sec", 0), nil, 400, "retry_interval_sec"},
		{"create: priority 5", post, "/api/v1/tasks", task("priority", 5), nil, 400, "priority"},
		{"create: priority -1", post, "/api/v1/tasks", task("priority", -1), nil, 400, "priority"},
		{"create: bad misfire policy", post, "/api/v1/tasks", task("misfire_policy", "panic"), nil, 400, "misfire_policy"},
		{"create: paused of wrong type", post, "/api/v1/tasks", task("paused", "yes"), nil, 400, "paused"},
		// Callbacks.
		{"create: no callback", post, "/api/v1/tasks", task("callback", nil), nil, 400, "callback"},
		{"create: callback ftp", post, "/api/v1/tasks", task("callback", cb("type", "http", "url", "ftp://x/y")), nil, 400, "callback.url"},
		{"create: callback relative", post, "/api/v1/tasks", task("callback", cb("type", "http", "url", "/jobs")), nil, 400, "callback.url"},
		{"create: callback metadata", post, "/api/v1/tasks", task("callback", cb("type", "http", "url", "http://169.254.169.254/latest/")), nil, 400, "callback.url"},
		{"create: callback type unknown", post, "/api/v1/tasks", task("callback", cb("type", "grpc", "url", hookURL)), nil, 400, "callback.type"},
		{"create: executor without app", post, "/api/v1/tasks", task("callback", cb("type", "executor", "handler", "h")), nil, 400, "callback.app"},
		{"create: executor without handler", post, "/api/v1/tasks", task("callback", cb("type", "executor", "app", "a")), nil, 400, "callback.handler"},
		{"create: executor bad route", post, "/api/v1/tasks", task("callback", cb("type", "executor", "app", "a", "handler", "h", "route", "sticky")), nil, 400, "callback.route"},
		{"create: http with app", post, "/api/v1/tasks", task("callback", cb("type", "http", "url", hookURL, "app", "a")), nil, 400, "callback"},
		// A callback URL whose request target holds a byte a request line cannot carry.
		{"create: callback url space in query", post, "/api/v1/tasks", task("callback", cb("type", "http", "url", hookURL+"?a=b HTTP/1.1 X-Injected: yes")), nil, 400, "callback.url"},
		{"create: callback url space in path", post, "/api/v1/tasks", task("callback", cb("type", "http", "url", hookURL+"/x y")), nil, 400, "callback.url"},
		{"create: callback url CRLF", post, "/api/v1/tasks", task("callback", cb("type", "http", "url", hookURL+"?a=b\r\nX-Injected: yes")), nil, 400, "callback.url"},
		{"create: callback url tab", post, "/api/v1/tasks", task("callback", cb("type", "http", "url", hookURL+"/x\ty")), nil, 400, "callback.url"},
		{"create: callback url not ASCII", post, "/api/v1/tasks", task("callback", cb("type", "http", "url", hookURL+"/café")), nil, 400, "callback.url"},
		{"update: callback url space in query", put, "/api/v1/tasks/seed", task("name", "seed", "callback", cb("type", "http", "url", hookURL+"?a=b c")), nil, 400, "callback.url"},
		// Params.
		{"create: params too large", post, "/api/v1/tasks", task("params", map[string]string{"x": strings.Repeat("p", 70<<10)}), nil, 400, "params"},
		// Existing names and state.
		{"create: name taken", post, "/api/v1/tasks", task("name", "seed"), nil, 409, "seed"},
		{"update: unknown task", put, "/api/v1/tasks/ghost", task("name", "ghost"), nil, 404, "ghost"},
		{"update: rename", put, "/api/v1/tasks/seed", task("name", "other"), nil, 400, "name"},
		{"update: change trigger", put, "/api/v1/tasks/seed", task("name", "seed", "trigger", "delay", "delay_ms", 1000), nil, 400, "trigger"},
		{"update: bad priority", put, "/api/v1/tasks/seed", task("name", "seed", "priority", 9), nil, 400, "priority"},
		{"update: not JSON", put, "/api/v1/tasks/seed", "{", nil, 400, "JSON"},
		{"delete: unknown task", http.MethodDelete, "/api/v1/tasks/ghost", nil, nil, 404, "ghost"},
		// Operations.
		{"pause: unknown task", post, "/api/v1/tasks/ghost/pause", nil, nil, 404, "ghost"},
		{"pause: note of wrong type", post, "/api/v1/tasks/seed/pause", `{"note": 5}`, nil, 400, "note"},
		{"pause: unknown field", post, "/api/v1/tasks/seed/pause", `{"reason": "x"}`, nil, 400, "reason"},
		{"resume: unknown field", post, "/api/v1/tasks/seed/resume", `{"when": "now"}`, nil, 400, "when"},
		{"run: params not JSON object", post, "/api/v1/tasks/seed/run", `{"params": }`, nil, 400, "JSON"},
		{"run: unknown field", post, "/api/v1/tasks/seed/run", `{"parameters": {}}`, nil, 400, "parameters"},
		{"run: unknown task", post, "/api/v1/tasks/ghost/run", nil, nil, 404, "ghost"},
		{"kill: nothing running", post, "/api/v1/tasks/seed/kill", nil, nil, 409, "no run in flight"},
		{"kill: unknown field", post, "/api/v1/tasks/seed/kill", `{"why": "x"}`, nil, 400, "why"},
		{"kill: reason too long", post, "/api/v1/tasks/seed/kill", `{"reason": "` + strings.Repeat("r", 1100) + `"}`, nil, 400, "reason"},
		{"run kill: unknown ticket", post, "/api/v1/runs/ghost-ticket/kill", nil, nil, 404, "ghost-ticket"},
		{"run kill: reason of wrong type", post, "/api/v1/runs/ghost-ticket/kill", `{"reason": 5}`, nil, 400, "reason"},
		{"group pause: unknown field", post, "/api/v1/groups/g/pause", `{"force": true}`, nil, 400, "force"},
		// Lists and previews.
		{"list: bad state", get, "/api/v1/tasks?state=DONE", nil, nil, 400, "state"},
		{"list: bad limit", get, "/api/v1/tasks?limit=-3", nil, nil, 400, "limit"},
		{"list: huge limit", get, "/api/v1/tasks?limit=99999999", nil, nil, 400, "limit"},
		{"runs: bad limit", get, "/api/v1/tasks/seed/runs?limit=abc", nil, nil, 400, "limit"},
		{"run: unknown ticket", get, "/api/v1/runs/nope", nil, nil, 404, "nope"},
		{"alerts: kind not a kind", get, "/api/v1/alerts?kind=executor_lost%27%20OR%201=1", nil, nil, 400, "kind"},
		{"alerts: empty kind in a list", get, "/api/v1/alerts?kind=executor_lost,,refused_result", nil, nil, 400, "kind"},
		{"alerts: 40 kinds", get, "/api/v1/alerts?kind=" + strings.TrimSuffix(strings.Repeat("a,", 40), ","), nil, nil, 400, "kind"},
		{"alerts: counts not 0 or 1", get, "/api/v1/alerts?counts=yes", nil, nil, 400, "counts"},
		{"alerts: unknown task", get, "/api/v1/alerts?task=ghost", nil, nil, 404, "ghost"},
		{"cron next: no expr", get, "/api/v1/cron/next", nil, nil, 400, "expr"},
		{"cron next: bad expr", get, "/api/v1/cron/next?expr=banana", nil, nil, 400, "expr"},
		{"cron next: bad zone", get, "/api/v1/cron/next?expr=*+*+*+*+*&tz=Nowhere/City", nil, nil, 400, "tz"},
		{"cron next: n too large", get, "/api/v1/cron/next?expr=*+*+*+*+*&n=100000", nil, nil, 400, "n"},
		{"cron next: n zero", get, "/api/v1/cron/next?expr=*+*+*+*+*&n=0", nil, nil, 400, "n"},
		// Rate limits.
		{"ratelimit: negative rate", put, "/api/v1/ratelimits", `{"downstream":"x","rate":-1}`, nil, 400, "rate"},
		{"ratelimit: bad burst", put, "/api/v1/ratelimits", `{"downstream":"x","rate":10,"burst":-4}`, nil, 400, "burst"},
		{"ratelimit: unknown field", put, "/api/v1/ratelimits", `{"downstream":"x","qps":10}`, nil, 400, "qps"},
		// The executor protocol.
		{"register: no app", post, "/api/v1/executors/register", `{"address":"127.0.0.1:1","handlers":["h"]}`, nil, 400, "app"},
		{"register: bad address", post, "/api/v1/executors/register", `{"app":"a","address":"http://x/y","handlers":["h"]}`, nil, 400, "address"},
		{"register: no handlers", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:1"}`, nil, 400, "handlers"},
		{"register: not JSON", post, "/api/v1/executors/register", `app=a`, nil, 400, "JSON"},
		{"register: metadata address", post, "/api/v1/executors/register", `{"app":"a","address":"169.254.169.254:80","handlers":["h"]}`, nil, 400, "address"},
		{"register: wildcard IPv4, port 0", post, "/api/v1/executors/register", `{"app":"a","address":"0.0.0.0:0","handlers":["h"]}`, nil, 400, "address"},
		{"register: wildcard IPv6, port 0", post, "/api/v1/executors/register", `{"app":"a","address":"[::]:0","handlers":["h"]}`, nil, 400, "address"},
		{"register: wildcard host", post, "/api/v1/executors/register", `{"app":"a","address":"0.0.0.0:9100","handlers":["h"]}`, nil, 400, "address"},
		{"register: user info", post, "/api/v1/executors/register", `{"app":"a","address":"user@host:9100","handlers":["h"]}`, nil, 400, "address"},
		{"register: fragment", post, "/api/v1/executors/register", `{"app":"a","address":"host#f:9100","handlers":["h"]}`, nil, 400, "address"},
		{"register: query", post, "/api/v1/executors/register", `{"app":"a","address":"host?x=1:9100","handlers":["h"]}`, nil, 400, "address"},
		{"register: port out of range", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:99999","handlers":["h"]}`, nil, 400, "address"},
		{"register: port 0", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:0","handlers":["h"]}`, nil, 400, "address"},
		{"register: no port", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1","handlers":["h"]}`, nil, 400, "address"},
		{"register: mapped metadata address", post, "/api/v1/executors/register", `{"app":"a","address":"[::ffff:169.254.169.254]:80","handlers":["h"]}`, nil, 400, "address"},
		{"heartbeat: no address", post, "/api/v1/executors/heartbeat", `{"app":"a"}`, nil, 400, "address"},
		{"heartbeat: unknown executor", post, "/api/v1/executors/heartbeat", `{"app":"a","address":"127.0.0.1:9"}`, nil, 404, "executor"},
		{"result: no ticket", post, "/api/v1/callback", `{"status":"success"}`, nil, 400, "ticket"},
		{"result: bad status", post, "/api/v1/callback", `{"ticket":"1-1-0","status":"maybe"}`, nil, 400, "status"},
		{"result: unknown ticket", post, "/api/v1/callback", `{"ticket":"999-1-0","status":"success"}`, nil, 404, "999-1-0"},
		{"result batch: not JSON", post, "/api/v1/callback/batch", `{"results": [}`, nil, 400, "JSON"},
		// The executor protocol: members it does not know are skipped (tolerant reading), but
		// repeated keys and invalid UTF-8 anywhere, trailing data, types and sizes are not.
		{"register: repeated key in an unknown member", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:1","handlers":["h"],"admin":{"x":1,"x":2}}`, nil, 400, "admin.x: repeated key"},
		{"register: repeated known key", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:1","handlers":["h"],"app":"b"}`, nil, 400, "app: repeated key"},
		{"register: version of wrong type", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:1","handlers":["h"],"version":"2"}`, nil, 400, "version"},
		{"register: version 2 without incarnation", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:1","handlers":["h"],"version":2}`, nil, 400, "incarnation"},
		{"register: malformed incarnation", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:1","handlers":["h"],"version":2,"incarnation":"../../etc"}`, nil, 400, "incarnation"},
		{"register: trailing data", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:1","handlers":["h"]} {"app":"b"}`, nil, 400, "trailing"},
		{"register: handlers of wrong type", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:1","handlers":"h"}`, nil, 400, "handlers"},
		{"register: too many handlers", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:1","handlers":[` + strings.Repeat(`"h",`, 1000) + `"h"]}`, nil, 400, "handlers"},
		{"register: app too long", post, "/api/v1/executors/register", `{"app":"` + long + `","address":"127.0.0.1:1","handlers":["h"]}`, nil, 400, "app"},
		{"register: array", post, "/api/v1/executors/register", `[{"app":"a"}]`, nil, 400, "JSON object"},
		{"heartbeat: invalid UTF-8 in an unknown member", post, "/api/v1/executors/heartbeat", "{\"app\":\"a\",\"address\":\"127.0.0.1:9\",\"cpu\":\"\xff\"}", nil, 400, "UTF-8"},
		{"heartbeat: malformed incarnation", post, "/api/v1/executors/heartbeat", `{"app":"a","address":"127.0.0.1:9","incarnation":"x"}`, nil, 400, "incarnation"},
		{"deregister: no app", post, "/api/v1/executors/deregister", `{"address":"127.0.0.1:9"}`, nil, 400, "app"},
		{"deregister: no address", post, "/api/v1/executors/deregister", `{"app":"a"}`, nil, 400, "address"},
		{"deregister: trailing data", post, "/api/v1/executors/deregister", `{"app":"a","address":"127.0.0.1:9"} 1`, nil, 400, "trailing"},
		{"deregister: incarnation of wrong type", post, "/api/v1/executors/deregister", `{"app":"a","address":"127.0.0.1:9","incarnation":5}`, nil, 400, "incarnation"},
		{"deregister: repeated key", post, "/api/v1/executors/deregister", `{"app":"a","address":"127.0.0.1:9","app":"b"}`, nil, 400, "app: repeated key"},
		{"deregister: body over its limit", post, "/api/v1/executors/deregister", protocol.MaxHeartbeatBodyBytes + 1, nil, 413, "4 KiB"},
		{"heartbeat: trailing data", post, "/api/v1/executors/heartbeat", `{"app":"a","address":"127.0.0.1:9"}]`, nil, 400, "trailing"},
		{"heartbeat: negative running", post, "/api/v1/executors/heartbeat", `{"app":"a","address":"127.0.0.1:9","running":-2}`, nil, 400, "running"},
		{"heartbeat: no app", post, "/api/v1/executors/heartbeat", `{"address":"127.0.0.1:9"}`, nil, 400, "app"},
		{"heartbeat: empty body", post, "/api/v1/executors/heartbeat", ``, nil, 400, "JSON"},
		{"result: lone surrogate in an unknown member", post, "/api/v1/callback", `{"ticket":"999-1-0","status":"success","result":"\udc00"}`, nil, 400, "surrogate"},
		{"result: trailing data", post, "/api/v1/callback", `{"ticket":"999-1-0","status":"success"}{"ticket":"999-1-0","status":"failed"}`, nil, 400, "trailing"},
		{"result: exit code of wrong type", post, "/api/v1/callback", `{"ticket":"999-1-0","status":"failed","exit_code":"1"}`, nil, 400, "exit_code"},
		{"result: negative duration", post, "/api/v1/callback", `{"ticket":"999-1-0","status":"success","duration_ms":-1}`, nil, 400, "duration_ms"},
		{"result: output too long", post, "/api/v1/callback", `{"ticket":"999-1-0","status":"success","output":"` + strings.Repeat("o", protocol.MaxOutputBytes+1) + `"}`, nil, 400, "output"},
		{"result: error too long", post, "/api/v1/callback", `{"ticket":"999-1-0","status":"failed","error":"` + strings.Repeat("e", protocol.MaxErrorBytes+1) + `"}`, nil, 400, "error"},
		{"result: ticket too long", post, "/api/v1/callback", `{"ticket":"` + strings.Repeat("t", 300) + `","status":"success"}`, nil, 400, "ticket"},
		{"result batch: repeated key in an unknown member", post, "/api/v1/callback/batch", `{"results":[{"ticket":"999-1-0","status":"success"}],"force":{"a":1,"a":1}}`, nil, 400, "force.a: repeated key"},
		{"result batch: trailing data", post, "/api/v1/callback/batch", `{"results":[{"ticket":"999-1-0","status":"success"}]} []`, nil, 400, "trailing"},
		{"result batch: empty", post, "/api/v1/callback/batch", `{"results":[]}`, nil, 400, "results"},
		{"result batch: too many", post, "/api/v1/callback/batch", `{"results":[` + strings.Repeat(`{"ticket":"999-1-0","status":"success"},`, 1000) + `{"ticket":"999-1-0","status":"success"}]}`, nil, 400, "results"},
		{"batch: a value after the array", post, "/api/v1/tasks/batch", `[{"name":"evil","trigger":"manual"}]0`, nil, 400, "trailing"},
		// Body limits per endpoint (the body is the size announced; only its start is sent).
		{"register: body over its limit", post, "/api/v1/executors/register", protocol.MaxRegisterBodyBytes + 1, nil, 413, "512 KiB"},
		{"heartbeat: body over its limit", post, "/api/v1/executors/heartbeat", protocol.MaxHeartbeatBodyBytes + 1, nil, 413, "4 KiB"},
		{"result: body over its limit", post, "/api/v1/callback", protocol.MaxResultBodyBytes + 1, nil, 413, "8 MiB"},
		{"result batch: body over its limit", post, "/api/v1/callback/batch", protocol.MaxResultBodyBytes + 1, nil, 413, "8 MiB"},
		{"pause: note body over its limit", post, "/api/v1/tasks/seed/pause", admin.NoteMaxBytes + 1, nil, 413, "16 KiB"},
		{"group resume: body over its limit", post, "/api/v1/groups/g/resume", admin.NoteMaxBytes + 1, nil, 413, "16 KiB"},
		{"update: body over its limit", put, "/api/v1/tasks/seed", admin.TaskMaxBodyBytes + 1, nil, 413, "256 KiB"},
		{"run: body over its limit", post, "/api/v1/tasks/seed/run", admin.RunNowMaxBodyBytes + 1, nil, 413, "128 KiB"},
		{"kill: body over its limit", post, "/api/v1/tasks/seed/kill", admin.NoBodyMaxBytes + 1, nil, 413, "no body"},
		{"ratelimit: body over its limit", put, "/api/v1/ratelimits", admin.SmallBodyMaxBytes + 1, nil, 413, "4 KiB"},
		{"bulk: body over its limit", post, "/api/v1/tasks/bulk/pause", admin.BulkMaxBodyBytes + 1, nil, 413, "16 MiB"},
		// Strict JSON on every endpoint: no key twice, at any depth; UTF-8 only; keys as spelled.
		{"create: repeated key", post, "/api/v1/tasks", `{"name":"evil","name":"seed","trigger":"manual","callback":{"url":"` + hookURL + `"}}`, nil, 400, "name: repeated key"},
		{"create: repeated nested key", post, "/api/v1/tasks", `{"name":"evil","trigger":"manual","callback":{"url":"` + hookURL + `","url":"http://169.254.169.254/"}}`, nil, 400, "callback.url: repeated key"},
		{"create: repeated key in params", post, "/api/v1/tasks", `{"name":"evil","trigger":"manual","callback":{"url":"` + hookURL + `"},"params":{"a":1,"a":2}}`, nil, 400, "params.a: repeated key"},
		{"create: params not UTF-8", post, "/api/v1/tasks", `{"name":"evil","trigger":"manual","callback":{"url":"` + hookURL + `"},"params":{"a":"` + "\xff\xfe" + `"}}`, nil, 400, "params.a: invalid UTF-8"},
		{"create: params with a surrogate's bytes", post, "/api/v1/tasks", `{"name":"evil","trigger":"manual","callback":{"url":"` + hookURL + `"},"params":["` + "\xed\xa0\x80" + `"]}`, nil, 400, "params[0]: invalid UTF-8"},
		{"create: params with a lone surrogate escape", post, "/api/v1/tasks", `{"name":"evil","trigger":"manual","callback":{"url":"` + hookURL + `"},"params":{"a":"\udc00x"}}`, nil, 400, "params.a: a lone UTF-16 surrogate"},
		{"create: name not UTF-8", post, "/api/v1/tasks", `{"name":"ev` + "\xc3" + `il","trigger":"manual","callback":{"url":"` + hookURL + `"}}`, nil, 400, "name: invalid UTF-8"},
		{"create: a key of another case", post, "/api/v1/tasks", `{"Name":"evil","trigger":"manual","callback":{"url":"` + hookURL + `"}}`, nil, 400, "Name: unknown field"},
		{"update: repeated key", put, "/api/v1/tasks/seed", `{"name":"seed","trigger":"manual","trigger":"cron","callback":{"url":"` + hookURL + `"}}`, nil, 400, "trigger: repeated key"},
		{"batch: repeated key in an item", post, "/api/v1/tasks/batch", `[{"name":"evil","name":"evil2","trigger":"manual","callback":{"url":"` + hookURL + `"}}]`, nil, 400, "item 0"},
		{"bulk: repeated key", post, "/api/v1/tasks/bulk/delete", `{"names":["ghost"],"names":["seed"]}`, nil, 400, "names: repeated key"},
		{"run: repeated key", post, "/api/v1/tasks/seed/run", `{"params":{},"params":{"x":1}}`, nil, 400, "params: repeated key"},
		{"pause: repeated key", post, "/api/v1/tasks/seed/pause", `{"note":"a","note":"b"}`, nil, 400, "note: repeated key"},
		{"ratelimit: repeated key", put, "/api/v1/ratelimits", `{"downstream":"x","rate":1,"rate":1000000000}`, nil, 400, "rate: repeated key"},
		{"prune: repeated key", post, "/api/v1/prune", `{"before":"3650d","before":"0s"}`, nil, 400, "before: repeated key"},
		{"register: repeated key", post, "/api/v1/executors/register", `{"app":"a","address":"127.0.0.1:1","handlers":["h"],"app":"b"}`, nil, 400, "app: repeated key"},
		{"heartbeat: repeated key", post, "/api/v1/executors/heartbeat", `{"app":"a","address":"127.0.0.1:9","address":"127.0.0.1:8"}`, nil, 400, "address: repeated key"},
		{"result: repeated key", post, "/api/v1/callback", `{"ticket":"999-1-0","status":"success","status":"failed"}`, nil, 400, "status: repeated key"},
		{"result batch: repeated key", post, "/api/v1/callback/batch", `{"results":[{"ticket":"999-1-0","status":"success","ticket":"1-1-0"}]}`, nil, 400, "results[0].ticket: repeated key"},
		// What the store could refuse, refused by name before it reaches the writer.
		{"create: callback url over 8000 bytes", post, "/api/v1/tasks", task("callback", cb("url", "http://h/"+strings.Repeat("u", 8000))), nil, 400, "callback.url"},
		{"create: callback url over its column", post, "/api/v1/tasks", task("callback", cb("url", "http://h/"+strings.Repeat("u", 70_000))), nil, 400, "callback.url"},
		{"create: sensitive params over their column", post, "/api/v1/tasks", task("sensitive_params", longKeys(32, 128)), nil, 400, "sensitive_params"},
		{"create: zone over its column", post, "/api/v1/tasks", task("timezone", "Asia/"+strings.Repeat("./", 40)+"Shanghai"), nil, 400, "timezone"},
		{"create: handler of markup", post, "/api/v1/tasks", task("callback", cb("type", "executor", "app", "a", "handler", "<script>")), nil, 400, "callback.handler"},
		{"run: params over 64 KiB", post, "/api/v1/tasks/seed/run", map[string]any{"params": map[string]string{"x": strings.Repeat("p", 70<<10)}}, nil, 400, "params"},
		{"register: handlers over their column", post, "/api/v1/executors/register", map[string]any{"app": "a", "address": "127.0.0.1:1", "handlers": longKeys(1000, 100)}, nil, 400, "handlers"},
		{"ratelimit: downstream of 3,900 characters", put, "/api/v1/ratelimits", map[string]any{"downstream": strings.Repeat("d", 3900), "rate": 5}, nil, 400, "downstream"},
		{"ratelimit: downstream of markup", put, "/api/v1/ratelimits", map[string]any{"downstream": "<script>alert(1)</script>", "rate": 5}, nil, 400, "downstream"},
		{"ratelimit: rate 1e300", put, "/api/v1/ratelimits", `{"downstream":"x","rate":1e300}`, nil, 400, "rate"},
		{"ratelimit: burst huge", put, "/api/v1/ratelimits", `{"downstream":"x","rate":10,"burst":1000000000}`, nil, 400, "burst"},
		// Browsers: another site's page writing through the visitor's browser, a name of
		// the attacker's rebound to this address.
		{"create: text/plain", post, "/api/v1/tasks", task(), []string{"Content-Type", "text/plain"}, 415, "Content-Type"},
		{"create: form", post, "/api/v1/tasks", task(), []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "Content-Type"},
		{"create: ndjson outside the batch endpoint", post, "/api/v1/tasks", task(), []string{"Content-Type", "application/x-ndjson"}, 415, "Content-Type"},
		{"create: text/plain from another origin", post, "/api/v1/tasks", task("trigger", "cron", "cron", "* * * * *"), []string{"Content-Type", "text/plain", "Origin", "http://evil.example"}, 403, "Origin"},
		{"create: null origin", post, "/api/v1/tasks", task(), []string{"Origin", "null"}, 403, "Origin"},
		{"create: cross-site fetch", post, "/api/v1/tasks", task(), []string{"Sec-Fetch-Site", "cross-site", "Origin", hookURL}, 403, "Sec-Fetch-Site"},
		{"create: same-site fetch from another port", post, "/api/v1/tasks", task(), []string{"Sec-Fetch-Site", "same-site"}, 403, "Sec-Fetch-Site"},
		{"run: cross-site, no body", post, "/api/v1/tasks/seed/run", nil, []string{"Sec-Fetch-Site", "cross-site"}, 403, "Sec-Fetch-Site"},
		{"kill: another origin", post, "/api/v1/tasks/seed/kill", nil, []string{"Origin", "http://evil.example"}, 403, "Origin"},
		{"delete: another origin", http.MethodDelete, "/api/v1/tasks/seed", nil, []string{"Origin", "https://evil.example"}, 403, "Origin"},
		{"ratelimit: another origin", put, "/api/v1/ratelimits", `{"downstream":"x","rate":1}`, []string{"Origin", "http://127.0.0.1:1"}, 403, "Origin"},
		{"list: rebound host", get, "/api/v1/tasks", nil, []string{"Host", "rebind.attacker.example"}, 403, "host"},
		{"get: rebound host with a port", get, "/api/v1/tasks/seed", nil, []string{"Host", "rebind.attacker.example:7070"}, 403, "host"},
		{"console: rebound host", get, "/", nil, []string{"Host", "localhost.attacker.example"}, 403, "host"},
		{"metrics: rebound host", get, "/metrics", nil, []string{"Host", "rebind.attacker.example"}, 403, "host"},
		{"create: rebound host", post, "/api/v1/tasks", task(), []string{"Host", "rebind.attacker.example"}, 403, "host"},
		// Paths: parameters decoded once, the way the router reads them.
		{"get: encoded slash", get, "/api/v1/tasks/seed%2F..%2Fghost", nil, nil, 404, "seed/../ghost"},
		{"update: encoded dot-dots to the result endpoint", put, "/api/v1/tasks/x%2F..%2F..%2Fcallback", task("name", "x/../../callback"), nil, 400, "name"},
		{"delete: encoded dot-dots", http.MethodDelete, "/api/v1/tasks/..%2Fseed", nil, nil, 404, "../seed"},
		// The headers only a node of a sharded cluster sends another: a single node believes
		// none of them, so a batch sent with them is checked in full.
		{"batch: a cycle with a node's headers", post, "/api/v1/tasks/batch", []any{
			task("name", "cyc-a", "trigger", "dependency", "depends_on", []string{"cyc-b"}),
			task("name", "cyc-b", "trigger", "dependency", "depends_on", []string{"cyc-a"})},
			[]string{"X-Axe-Routed", "n2", "X-Axe-Upstreams-Checked", "1"}, 400, "cycle"},
		{"batch: an unknown upstream with a node's headers", post, "/api/v1/tasks/batch", []any{
			task("name", "orphan", "trigger", "dependency", "depends_on", []string{"nowhere"})},
			[]string{"X-Axe-Routed", "n2", "X-Axe-Upstreams-Checked", "1"}, 400, "nowhere"},
		{"batch: a cycle with a forged peer signature", post, "/api/v1/tasks/batch", []any{
			task("name", "cyc-a", "trigger", "dependency", "depends_on", []string{"cyc-b"}),
			task("name", "cyc-b", "trigger", "dependency", "depends_on", []string{"cyc-a"})},
			[]string{"X-Axe-Routed", "n2", "X-Axe-Upstreams-Checked", "1", "X-Axe-Peer-Signature", "t=1,body=00,sig=00"}, 400, "cycle"},
		// Backfill times: Unix 0 is a backfill's "no fire time".
		{"backfill: from the Unix epoch", post, "/api/v1/tasks/seed/backfill", `{"from":"1970-01-01T00:00:00Z","to":"1970-01-01T01:00:00Z"}`, nil, 400, "from: must be after 1970"},
		{"backfill: a range before the Unix epoch", post, "/api/v1/tasks/seed/backfill", `{"from":"1969-12-31T00:00:00Z","to":"1969-12-31T01:00:00Z"}`, nil, 400, "from: must be after 1970"},
		// Sizes and methods.
		{"create: body over the limit", post, "/api/v1/tasks", nil, nil, 413, "limit"},
		{"unknown endpoint", get, "/api/v1/nothing", nil, nil, 404, "endpoint"},
		{"wrong method", http.MethodPatch, "/api/v1/tasks/seed", `{}`, nil, 405, "method"},
	}
}

// longKeys returns n distinct names of size bytes each.
func longKeys(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		id := fmt.Sprintf("-%d", i)
		out[i] = strings.Repeat("k", size-len(id)) + id
	}
	return out
}

// snapshot is everything a malformed request could have changed, read from the store.
func storeSnapshot(t *testing.T, store persist.Store) string {
	t.Helper()
	ctx := t.Context()
	var b strings.Builder
	tasks, err := store.ListTasks(ctx, persist.TaskFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		tk.Runtime.Version = 0 // compared below through the version itself
		raw, _ := json.Marshal(tk)
		fmt.Fprintf(&b, "task %s\n", raw)
		acts, err := store.ListActions(ctx, tk.Def.ID, 1000)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "actions %d\n", len(acts))
		runs, err := store.ListRuns(ctx, tk.Def.ID, 1000)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "runs %d\n", len(runs))
	}
	execs, err := store.ListExecutors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(execs)
	fmt.Fprintf(&b, "executors %s\n", raw)
	full, err := store.ListTasks(ctx, persist.TaskFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range full {
		fmt.Fprintf(&b, "version %s %d\n", tk.Def.Name, tk.Runtime.Version)
	}
	return b.String()
}

// TestHostileRequests sends malformed requests to every endpoint and checks, for each, the
// status, that the error names what is wrong, and that the store did not change.
func TestHostileRequests(t *testing.T) {
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		h := daemontest.NewHook(t)
		d := daemontest.Start(t, dsn, nil)
		d.Create(t, daemontest.Spec("seed", h.URL("/ok"), "trigger", "manual"))
		store, err := persist.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		before := storeSnapshot(t, store)
		cases := hostileCases(h.URL("/ok"))
		if len(cases) < 60 {
			t.Fatalf("only %d cases", len(cases))
		}
		for _, c := range cases {
			var code int
			var body []byte
			if c.status == http.StatusRequestEntityTooLarge {
				size, _ := c.body.(int)
				code, body = oversized(t, d.Addr, c.method, c.path, size)
			} else {
				code, body = d.Call(t, c.method, c.path, c.body, c.hdr...)
			}
			if code != c.status {
				t.Errorf("%s: %s %s answered %d %s, want %d", c.name, c.method, c.path, code, clip(body), c.status)
				continue
			}
			var e struct {
				Error  string `json:"error"`
				Errors []struct {
					Error string `json:"error"`
				} `json:"errors"` // a batch's, one per item refused
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
				t.Errorf("%s: body %s is not {\"error\": …}", c.name, clip(body))
				continue
			}
			named := strings.Contains(e.Error, c.field)
			for _, it := range e.Errors {
				named = named || strings.Contains(it.Error, c.field)
			}
			if c.field != "" && !named {
				t.Errorf("%s: error %q (items %+v) does not name %q", c.name, e.Error, e.Errors, c.field)
			}
		}
		if after := storeSnapshot(t, store); after != before {
			t.Errorf("malformed requests changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		t.Logf("%d malformed requests, store unchanged", len(cases))
	})
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// oversized announces a body of size bytes (0: just over the default limit of 1 MiB) and
// sends at most its first 64 KiB: the server must answer 413 before reading (let alone
// decoding) the rest.
func oversized(t *testing.T, addr, method, path string, size int) (int, []byte) {
	t.Helper()
	if size == 0 {
		size = admin.MaxRequestBodyDefault + 1
	}
	code, body, err := rawhttp.Do(addr, rawhttp.Request{Method: method, Path: path,
		Header: []string{"Content-Type: application/json"}, Announce: size,
		Send: []byte(`{"name":"` + strings.Repeat("x", 64<<10))[:min(size-1, 64<<10)]}, 10*time.Second)
	if err != nil {
		t.Fatalf("no answer to an oversized body: %v", err)
	}
	return code, body
}
