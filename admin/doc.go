// Package admin is axe's HTTP layer. It translates HTTP to engine calls and engine errors to
// HTTP codes (in one place: statusOf) and holds no scheduling state of its own. It builds
// nothing it serves: the daemon (internal/daemon) opens the store, builds the engine and the
// HA loops, and hands them in; admin never imports it.
//
//   - Routes (server.go, routes): the REST API under <base>/api/v1 (docs/openapi.yaml) with
//     its handlers spread by resource (below), /healthz, /readyz and /metrics. Around them:
//     tokens and scopes (auth.go), body limits (bodylimit.go), the browser origin check
//     (origin.go), ETags (etag.go) and the masking of sensitive params (sensitive.go).
//   - The console (console.go): ES modules and CSS embedded in the binary, served under
//     <base>/ui/, reading the same API.
//   - The sharded front (shardfront.go), under --ha in shards mode: every node answers every
//     call; a write about one task, or a run's result or kill, is passed on once to the node
//     that schedules the task's shard, and a call over many tasks goes to every live node.
//     Calls between nodes are signed with the cluster's peer key (peersig.go).
//   - The primary/backup front (hafront.go), under --ha-mode primary: routes each request to
//     the API of the node's current term; a backup serves reads from the database and answers
//     writes with 503 naming the primary, except the console's writes, which it passes on to
//     the primary (haforward.go).
//
// It reads the store directly only to report readiness, to list a backup's executors and the
// nodes table, and to find a run's task by its ticket when routing a call on a sharded node.
//
// Where things are:
//
//   - server.go: ServerConfig and its defaults, the Server type, NewServer, Start/Stop, and
//     the route table (routes), the one place that names every endpoint and its handler;
//     authed and routePath.
//   - errors.go: the sentinel errors, the error→status mapping (statusOf, errorOf, fail) and
//     the answer writers (writeJSON, writeErr).
//   - request.go: what handlers read from a request: path parameters (param), query
//     integers (intArg), bodies (decodeOptional, decodeStrict), the caller (actor), the
//     request context (reqCtx), and the generic ?limit= list handler (list).
//   - health.go: /readyz of a node that does not shard (shardfront.go has the sharded one).
//   - tasks.go: task CRUD, list, pause/resume, run-now and kill, and the task view (taskView).
//   - runs.go: GET /runs/{ticket}; runkill.go: killing one run.
//   - executors.go: the executor protocol (register, heartbeat, deregister, callback and
//     callback batch) and GET /executors.
//   - groups.go: pausing and resuming a group; batch.go: batch creates, bulk operations
//     and prune; backfill.go: backfills.
//   - ratelimits.go: the rate limits per downstream; conclimits.go: the concurrency limits.
//   - cronnext.go: the cron preview, GET /cron/next.
//   - workflows.go: the REST paths of package workflow's service.
//   - api_console.go and triage.go: the console's listings (runs across tasks, paged
//     history, alerts, triage); console.go: the console itself.
//   - auth.go (tokens, scopes, whoami), origin.go, peersig.go, bodylimit.go, etag.go,
//     sensitive.go: what every request passes through.
//   - metrics.go: /metrics.
//   - shardfront.go: the API of a node that schedules by shard; hafront.go and haforward.go:
//     the front of an HA node.
package admin
