package wire

import (
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/ratelimit"
)

// ConcurrencyLimitView is one concurrency limit as the API shows it: the stored limit, and how
// many runs count in it and how many fires wait for it on this node (0 on a backup, which
// runs nothing).
type ConcurrencyLimitView struct {
	model.ConcurrencyLimit
	InUse   int `json:"in_use"`
	Waiting int `json:"waiting"`
	// Keys, of a pattern limit (kind key, a name ending in "*"), are the keys it limits that
	// have runs in flight or fires waiting, by key, at most MaxKeysShown of them; KeysInUse
	// counts them all. InUse and Waiting are their sums.
	Keys      []KeyInUse `json:"keys,omitempty"`
	KeysInUse int        `json:"keys_in_use,omitempty"`
}

// MaxKeysShown bounds the keys a pattern limit's view lists.
const MaxKeysShown = 1000

// KeyInUse is one key of a pattern limit in use: its runs in flight (across the cluster on a
// sharded one) and its fires waiting on this node.
type KeyInUse struct {
	Key     string `json:"key"`
	InUse   int    `json:"in_use"`
	Waiting int    `json:"waiting"`
}

// RateLimits is the rate-limit configuration as the API shows and changes it.
type RateLimits struct {
	Global  ratelimit.Limit            `json:"global"`
	Default ratelimit.Limit            `json:"default"`
	PerKey  map[string]ratelimit.Limit `json:"downstreams"`
}

// RateLimitBody changes one bucket: downstream "" is the global one.
type RateLimitBody struct {
	Downstream string  `json:"downstream"`
	Rate       float64 `json:"rate"`
	Burst      int     `json:"burst"`
}

// ConcurrencyLimitBody is the body of PUT /api/v1/concurrency-limits/{kind}/{name}: the runs
// in flight at once; required.
type ConcurrencyLimitBody struct {
	Max *int `json:"max"`
}

// ConcurrencyLimitList is the answer to GET /api/v1/concurrency-limits.
type ConcurrencyLimitList struct {
	Limits []ConcurrencyLimitView `json:"limits"`
}
