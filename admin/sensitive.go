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
	if len(spec.Params) == 0 || !bytes.Contains(spec.Params, []byte(SensitiveMask)) {
		return
	}
	cur, err := s.cfg.Engine.GetTask(ctx, name)
	if err != nil || len(cur.Def.SensitiveParams) == 0 {
		return
	}
	var in, old map[string]json.RawMessage
	if json.Unmarshal(spec.Params, &in) != nil || json.Unmarshal(cur.Def.Params, &old) != nil {
		return
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
		spec.Params = b
	}
}

// maskDef masks a definition's sensitive params for a read.
func maskDef(d *model.TaskDef) { d.Params = maskParams(d.Params, d.SensitiveParams) }
