package wire

import "github.com/axe-sched/axe/model"

// ExecutorRegistration is the body of POST /api/v1/executors/register.
type ExecutorRegistration struct {
	App      string   `json:"app"`
	Address  string   `json:"address"`
	Protocol string   `json:"protocol"`
	Handlers []string `json:"handlers"`
	// Auth is protocol.AuthSigned for an executor that verifies signed calls.
	Auth string `json:"auth"`
	// Version is the protocol version the executor speaks (0: 1), and Incarnation the id
	// of its process, which calls to it are signed for ("" for a version 1 executor).
	Version     int    `json:"version"`
	Incarnation string `json:"incarnation"`
	// Token is the bearer token the executor presented with the registration ("" for
	// none); the dispatch key of a signed executor is derived from it. Never decoded.
	Token string `json:"-"`
}

// ExecutorView is a registered executor with the runs this scheduler has in flight on it.
type ExecutorView struct {
	model.Executor
	Inflight int64 `json:"inflight"`
}
