package engine

import (
	"errors"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/model"
)

// checkCallback refuses, at create and update, an HTTP callback whose URL the outbound guard
// (Config.Dispatch.Guard) refuses. The dispatcher judges the resolved address again at every
// dial, so this check is the early, named error, not the only one.
func (e *API) checkCallback(def *model.TaskDef) error {
	g := e.cfg.Dispatch.Guard
	if g == nil || def.Callback.Type != model.CallbackHTTP {
		return nil
	}
	if err := g.CheckURL(def.Callback.URL); err != nil {
		if errors.Is(err, dispatch.ErrRefusedTarget) {
			return fieldErr("callback.url", "%v", err)
		}
		return fieldErr("callback.url", "must be an absolute http:// or https:// URL: %v", err)
	}
	return nil
}
