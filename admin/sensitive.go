package admin

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/wire"
)

// SensitiveMask replaces the value of each sensitive params key in API and console reads.
const SensitiveMask = "***"

// maskParams returns params with the values of the given top-level keys replaced by
// SensitiveMask. Params that are not a JSON object have no keys to mask and pass through.
func maskParams(params json.RawMessage, keys []string) json.RawMessage {
	if len(keys) == 0 || len(params) == 0 {
		return params
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(params, &obj); err != nil {
		return params
	}
	mask, _ := json.Marshal(SensitiveMask)
	changed := false
	for _, k := range keys {
		if _, ok := obj[k]; ok {
			obj[k] = mask
			changed = true
		}
	}
	if !changed {
		return params
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return params
	}
	return out
}

// unmaskSpec puts the stored values back where an update sends SensitiveMask for a
// sensitive key, so that saving a definition read through the API keeps its secrets.
func (s *Server) unmaskSpec(ctx context.Context, name string, spec *wire.TaskSpec) {
	spec.Params = s.unmaskParams(ctx, name, spec.Params)
}

// unmaskParams returns params with the task's stored value put back for each sensitive key
// whose value is SensitiveMask: a definition read through the API and saved, or a run-now
// sent with the task's params as the console pre-fills them, keeps the secrets.
func (s *Server) unmaskParams(ctx context.Context, name string, params json.RawMessage) json.RawMessage {
	if len(params) == 0 || !bytes.Contains(params, []byte(SensitiveMask)) {
		return params
	}
	cur, err := s.cfg.Engine.API().GetTask(ctx, name)
	if err != nil || len(cur.Def.SensitiveParams) == 0 {
		return params
	}
	var in, old map[string]json.RawMessage
	if json.Unmarshal(params, &in) != nil || json.Unmarshal(cur.Def.Params, &old) != nil {
		return params
	}
	mask, _ := json.Marshal(SensitiveMask)
	for _, k := range cur.Def.SensitiveParams {
		if v, ok := in[k]; ok && bytes.Equal(bytes.TrimSpace(v), mask) {
			if prev, ok := old[k]; ok {
				in[k] = prev
			}
		}
	}
	if b, err := json.Marshal(in); err == nil {
		return b
	}
	return params
}

// maskRunParams masks the params stored on a run (a run-now's) by its task's sensitive keys
// as they are now. When the task cannot be read the params are left out: a read never shows
// a value it cannot tell is not secret.
func (s *Server) maskRunParams(ctx context.Context, run *model.Run) {
	if run.Params == "" {
		return
	}
	t, err := s.cfg.Engine.API().GetTask(ctx, run.TaskName)
	if err != nil || t.Def.ID != run.TaskID {
		run.Params = ""
		return
	}
	run.Params = model.RunParams(maskParams(json.RawMessage(run.Params), t.Def.SensitiveParams))
}

// maskDef masks a definition's sensitive params for a read.
func maskDef(d *model.TaskDef) { d.Params = maskParams(d.Params, d.SensitiveParams) }
