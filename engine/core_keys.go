package engine

// Keyed limits (docs/design.md, "Keyed limits"): the concurrency key a run counts in is its
// task's concurrency_key rendered over the run's params (model.RenderKey). A fire's run has
// its task's params, so its key is rendered once per definition and kept (keyCache); a
// run-now given params and a workflow step render their own.

import (
	"encoding/json"

	"github.com/axe-sched/axe/model"
)

// keyCache is the concurrency key of a task's definition rendered over its params, kept with
// the definition it was rendered from (a definition is replaced, never mutated).
type keyCache struct {
	of  *model.TaskDef
	key string
	err error
	// The rate key (rateKey), rendered from the definition rateOf.
	rateOf *model.TaskDef
	rate   string
}

// concKey returns the key the runs of t's definition with its own params count in. A key
// that cannot be rendered (which Normalize refuses for every task that fires with its own
// params) counts in the key named by the template's text itself, so that it is limited as
// one key by a pattern that matches it, never run unlimited; keyNote says so in the run's
// detail. Caller holds t.mu.
func (t *task) concKey() string {
	k := t.def.ConcurrencyKey
	if !model.IsKeyTemplate(k) {
		return k
	}
	if t.keys.of != t.def {
		t.keys.of = t.def
		t.keys.key, t.keys.err = model.RenderKey(k, t.def.Params)
	}
	if t.keys.err != nil {
		return k
	}
	return t.keys.key
}

// keyNote is the run detail's note when t's key could not be rendered, or "". Caller holds
// t.mu, after concKey.
func (t *task) keyNote() string {
	if !model.IsKeyTemplate(t.def.ConcurrencyKey) || t.keys.of != t.def || t.keys.err == nil {
		return ""
	}
	return "concurrency key not rendered (" + t.keys.err.Error() + "): counted in key " + t.def.ConcurrencyKey
}

// runKey returns the key of run of t: rendered over the params it was given, or t's own
// (concKey). Caller holds t.mu.
func (t *task) runKey(run model.Run) string {
	if run.Params == "" || !model.IsKeyTemplate(t.def.ConcurrencyKey) {
		return t.concKey()
	}
	k, err := model.RenderKey(t.def.ConcurrencyKey, json.RawMessage(run.Params))
	if err != nil {
		return t.def.ConcurrencyKey
	}
	return k
}

// rateKey returns the key of the rate limit the runs of t's definition with its own params
// take a token of: its rate_key rendered, or its downstream (rateKeyOf). Caller holds t.mu.
func (t *task) rateKey() string {
	if t.keys.rateOf != t.def {
		t.keys.rateOf = t.def
		t.keys.rate = rateKeyOf(t.def, t.def.Params)
	}
	return t.keys.rate
}

// rateKeyOf is the rate key of a run of def with params: its rate_key rendered over them,
// its downstream when it has none. A template they do not render (refused at create for a
// task's own params, at run-now and at a step's start for theirs) keeps its text as the key,
// which a pattern limit matching it limits as one key.
func rateKeyOf(def *model.TaskDef, params json.RawMessage) string {
	if def.RateKey == "" {
		return downstreamOf(def)
	}
	k, err := model.RenderKey(def.RateKey, params)
	if err != nil {
		return def.RateKey
	}
	return k
}
