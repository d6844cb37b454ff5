// Package admin is axe's HTTP layer: the REST API of SPEC section 10, the web console, the
// health and metrics endpoints, and the front of an HA node (hafront.go). It translates HTTP
// to engine calls and engine errors to HTTP codes (in one place: statusOf); it holds no
// scheduling state of its own and never touches the store except to report readiness and
// list what a backup reads from the database. It builds nothing it serves: the daemon
// (internal/daemon) opens the store, builds the engine and the HA elector, and hands them in;
// admin never imports it.
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
//   - api_console.go and triage.go: the console's listings (runs across tasks, paged
//     history, alerts, triage); console.go: the console itself.
//   - auth.go (tokens, scopes, whoami), origin.go, peersig.go, bodylimit.go, etag.go,
//     sensitive.go: what every request passes through.
//   - metrics.go: /metrics.
//   - shardfront.go: the API of a node that schedules by shard; hafront.go and haforward.go:
//     the front of an HA node.
package admin
