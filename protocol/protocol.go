// Package protocol is the one definition of the executor protocol (docs/protocol.md): the
// paths each side serves, the routing strategy names a task may choose, and the JSON bodies
// the scheduler and an SDK executor exchange. The scheduler's dispatch package (the client
// of the executor endpoints) and the executor package (their server, and the client of the
// scheduler endpoints) both use it, so a renamed field or path cannot drift between them.
//
// It imports nothing of axe. Times are Unix milliseconds; durations carry an _ms suffix.
package protocol

import (
	"encoding/json"
	"strings"
)

// Paths the scheduler serves to executors.
const (
	// PathRegister registers an executor (body Register, answer RegisterAnswer).
	PathRegister = "/api/v1/executors/register"
	// PathHeartbeat keeps a registration alive (body Heartbeat).
	PathHeartbeat = "/api/v1/executors/heartbeat"
	// PathCallback takes the result of one run (body Result, answer CallbackAnswer).
	PathCallback = "/api/v1/callback"
	// PathCallbackBatch takes several results (body ResultBatch, answer CallbackBatchAnswer).
	PathCallbackBatch = "/api/v1/callback/batch"
	// PathDeregister ends a registration: the scheduler sends the executor no new run (body
	// Deregister, answer DeregisterAnswer).
	PathDeregister = "/api/v1/executors/deregister"
)

// SchedulerPaths lists every path the scheduler serves to executors; ExecutorPaths every
// path an executor serves to the scheduler (the docs' tests check each is documented).
var (
	SchedulerPaths = []string{PathRegister, PathHeartbeat, PathDeregister, PathCallback, PathCallbackBatch}
	ExecutorPaths  = []string{PathRun, PathRuns, PathKill, PathBeat}
)

// Version is the protocol version this package speaks (docs/protocol.md, Versions): 2 adds
// tolerant reading, incarnations, incarnation-bound signatures and deregistration. A
// registration without a version is of version 1.
const Version = 2

// Paths an executor serves to the scheduler.
const (
	// PathRun takes one run (body Run).
	PathRun = "/axe/run"
	// PathRuns takes several runs in one call and answers each as PathRun would (body
	// RunBatch, answer RunBatchAnswer).
	PathRuns = "/axe/runs"
	// PathKill cancels a run (body Kill, answer KillAnswer).
	PathKill = "/axe/kill"
	// PathBeat is the executor's own view, for probes (answer Beat).
	PathBeat = "/axe/beat"
)

// Headers a run carries besides its body (also sent to HTTP-callback tasks).
const (
	HeaderTask    = "X-Axe-Task"
	HeaderTicket  = "X-Axe-Ticket"
	HeaderAttempt = "X-Axe-Attempt"
	// HeaderEpoch carries the lease epoch of the scheduler that sent a run or a kill.
	HeaderEpoch = "X-Axe-Epoch"
	// HeaderIncarnation carries, on every signed call to an executor that registered an
	// incarnation, that incarnation; the signature covers it (SignCallV2).
	HeaderIncarnation = "X-Axe-Incarnation"
)

// Routing strategies, chosen per task in callback.route; "" means RouteRoundRobin.
const (
	RouteRoundRobin     = "round_robin"
	RouteRandom         = "random"
	RouteLeastBusy      = "least_busy"
	RouteConsistentHash = "consistent_hash"
	RouteFailover       = "failover"
)

// Routes lists every routing strategy, in the order error messages name them.
var Routes = []string{RouteRoundRobin, RouteRandom, RouteLeastBusy, RouteConsistentHash, RouteFailover}

// ValidRoute reports whether r names a routing strategy; "" (the default) is valid.
func ValidRoute(r string) bool {
	switch r {
	case "", RouteRoundRobin, RouteRandom, RouteLeastBusy, RouteConsistentHash, RouteFailover:
		return true
	}
	return false
}

// RouteList is Routes joined for an error message: "round_robin, random, …".
func RouteList() string { return strings.Join(Routes, ", ") }

// Result statuses an executor reports.
const (
	StatusSuccess = "success"
	StatusFailed  = "failed"
)

// Limits both sides enforce.
const (
	// MaxRunsPerCall is the most runs one PathRuns call may carry.
	MaxRunsPerCall = 1000
	// MaxResultsPerCall is the most results one PathCallbackBatch call may carry.
	MaxResultsPerCall = 1000
)

// Run is the body of PathRun, and of the POST an HTTP-callback task gets (docs/protocol.md,
// "POST /axe/run").
type Run struct {
	Task        string          `json:"task"`
	Handler     string          `json:"handler,omitempty"`
	Group       string          `json:"group"`
	Ticket      string          `json:"ticket"`
	Attempt     int             `json:"attempt"`
	Kind        string          `json:"kind"`
	ScheduledAt int64           `json:"scheduled_at"`
	Deadline    int64           `json:"deadline"`
	Params      json.RawMessage `json:"params,omitempty"`
	// DedupTTLMS tells an executor how long to remember the ticket: the task's longest retry
	// span plus five minutes, so a re-sent run is recognised for as long as it can
	// come. 0 means the executor's default.
	DedupTTLMS int64 `json:"dedup_ttl_ms,omitempty"`
	// Epoch is the lease epoch of the primary that sent the run: an executor refuses one
	// below the highest it has seen. 0 without HA.
	Epoch int64 `json:"epoch,omitempty"`
	// Shard, when present, says that Epoch is the epoch of this shard's lease (scale-out,
	// where every node schedules its shards, each under an epoch of its own): an executor
	// judges it against the highest epoch it has seen of the same shard. Absent, Epoch is the
	// primary's.
	Shard *int `json:"shard,omitempty"`
	// Parallel says the task's runs may overlap (overlap_policy allow_all): an executor runs
	// it beside the task's other runs instead of refusing re-entry.
	Parallel bool `json:"parallel,omitempty"`
}

// RunBatch is the body of PathRuns. Each element is a Run; the executor decodes them one by
// one when the whole does not decode, so that one malformed run refuses only itself.
type RunBatch struct {
	Runs []json.RawMessage `json:"runs"`
}

// RunAnswer answers one run of a PathRuns call with the status and body PathRun would have
// answered for it alone.
type RunAnswer struct {
	Code int             `json:"code"`
	Body json.RawMessage `json:"body"`
}

// RunBatchAnswer is the answer to PathRuns: one item per run, in order.
type RunBatchAnswer struct {
	Results []RunAnswer `json:"results"`
}

// Accepted answers an admitted run (202).
type Accepted struct {
	Accepted  bool `json:"accepted"`
	Duplicate bool `json:"duplicate,omitempty"`
}

// Finished answers a ticket that already finished on the executor and is still remembered
// (200); the executor re-sends its result.
type Finished struct {
	Duplicate bool   `json:"duplicate"`
	Status    string `json:"status"`
	Error     string `json:"error"`
}

// Kill is the body of PathKill.
type Kill struct {
	Ticket string `json:"ticket"`
	// Epoch is the lease epoch of the scheduler that sent the kill, as on a run.
	Epoch int64 `json:"epoch,omitempty"`
	// Shard is the shard whose lease Epoch is, as on a run.
	Shard *int `json:"shard,omitempty"`
}

// KillAnswer answers a kill of a running ticket (200).
type KillAnswer struct {
	Killed bool `json:"killed"`
}

// Beat answers PathBeat.
type Beat struct {
	App      string   `json:"app"`
	Running  int      `json:"running"`
	Handlers []string `json:"handlers"`
}

// Register is the body of PathRegister. An executor is identified by (App, Address).
type Register struct {
	App     string `json:"app"`
	Address string `json:"address"`
	// Protocol is the scheme the scheduler dials Address with: ProtocolHTTP (also when
	// empty, as executors that predate TLS send it) or ProtocolHTTPS.
	Protocol string   `json:"protocol"`
	Handlers []string `json:"handlers"`
	// Auth is AuthSigned when the executor verifies the scheduler's signed calls; empty
	// (executors that predate it) asks for the scheduler's legacy bearer token.
	Auth string `json:"auth,omitempty"`
	// Version is the protocol version the executor speaks: Version for this package; 0
	// (absent) is version 1.
	Version int `json:"version,omitempty"`
	// Incarnation is a random id the executor makes once per process start
	// (NewIncarnation): the scheduler signs its calls for this incarnation only, so a call
	// captured before a restart is refused after it. "" (absent): an executor of version 1.
	Incarnation string `json:"incarnation,omitempty"`
}

// Register.Protocol values: the scheme of the executor's endpoints.
const (
	ProtocolHTTP  = "http"
	ProtocolHTTPS = "https"
)

// RegisterAnswer is the scheduler's answer to a registration (200).
type RegisterAnswer struct {
	HeartbeatIntervalMS int64 `json:"heartbeat_interval_ms"`
	LostAfterMS         int64 `json:"lost_after_ms"`
	// Version is the scheduler's protocol version (absent from a scheduler of version 1).
	Version int `json:"version,omitempty"`
}

// Heartbeat is the body of PathHeartbeat. Running counts the runs accepted and not yet
// finished on the executor, for least-busy routing.
type Heartbeat struct {
	App     string `json:"app"`
	Address string `json:"address"`
	Running int    `json:"running"`
	// Incarnation is the executor's current incarnation: one other than the registered one
	// is answered 404, and the executor registers again.
	Incarnation string `json:"incarnation,omitempty"`
}

// Deregister is the body of PathDeregister: the executor (App, Address) stops taking runs.
// Incarnation, when set, must be the registered one for the call to take effect (an old
// process's late deregistration does not end its successor's registration).
type Deregister struct {
	App         string `json:"app"`
	Address     string `json:"address"`
	Incarnation string `json:"incarnation,omitempty"`
}

// DeregisterAnswer answers PathDeregister (200), also when the executor was not registered.
type DeregisterAnswer struct {
	OK bool `json:"ok"`
}

// Result is the body of PathCallback: an executor's result for a ticket.
type Result struct {
	Ticket     string `json:"ticket"`
	Task       string `json:"task"`
	App        string `json:"app"`
	Address    string `json:"address"`
	Status     string `json:"status"` // StatusSuccess or StatusFailed
	Error      string `json:"error"`
	Output     string `json:"output"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	StartedAt  int64  `json:"started_at"`
	EndedAt    int64  `json:"ended_at"`
	DurationMS int64  `json:"duration_ms"`
}

// CallbackAnswer is the scheduler's acknowledgement of a result (200).
type CallbackAnswer struct {
	OK        bool `json:"ok"`
	Duplicate bool `json:"duplicate,omitempty"`
}

// ResultBatch is the body of PathCallbackBatch.
type ResultBatch struct {
	Results []Result `json:"results"`
}

// CallbackItem answers one result of a PathCallbackBatch call with what PathCallback would
// have answered for it alone: the status, and the duplicate flag or the error.
type CallbackItem struct {
	Status    int    `json:"status"`
	OK        bool   `json:"ok,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     string `json:"error,omitempty"`
}

// CallbackBatchAnswer is the answer to PathCallbackBatch: one item per result, in order.
type CallbackBatchAnswer struct {
	Results []CallbackItem `json:"results"`
}

// Error is every error body, on both sides.
type Error struct {
	Error string `json:"error"`
}
