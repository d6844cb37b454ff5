package executor

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/protocol"
)

// headerEpoch carries the dispatching scheduler's epoch on every call it makes, the batch and
// kill calls included; a run's body may carry it too, as "epoch".
const headerEpoch = "X-Axe-Epoch"

// Epoch fencing (R8.3). A scheduler running with --ha holds a lease whose epoch grows by one
// at every takeover, and puts it on every run and kill it sends. A deposed primary that has
// not yet noticed (paused, cut off from its database) still carries its old epoch, so once
// the executor has seen a higher one it refuses the old one's runs and kills: the new primary
// owns every run from then on. A run without an epoch (0, a scheduler without --ha) is judged
// as before; it neither raises nor is held to the highest epoch.

// requestEpoch returns the epoch a call carries: the body's when it has one, else the
// X-Axe-Epoch header's, else 0. A malformed header, or one that contradicts the body, is an
// ErrInvalidRun, as for the other X-Axe-* headers.
func requestEpoch(h *fasthttp.RequestHeader, body int64) (int64, error) {
	raw := h.Peek(headerEpoch)
	if len(raw) == 0 {
		return body, nil
	}
	epoch, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || epoch < 0 {
		return 0, fmt.Errorf("%w: header %s must be a non-negative integer, got %q", ErrInvalidRun, headerEpoch, raw)
	}
	if body != 0 && body != epoch {
		return 0, fmt.Errorf("%w: header %s is %q but the body says %d", ErrInvalidRun, headerEpoch, raw, body)
	}
	return epoch, nil
}

// staleEpoch records epoch and, when it is below the highest seen, returns the 409 that
// refuses it. Callers hold mu.
func (e *Executor) staleEpoch(epoch int64) (int, any, bool) {
	if epoch == 0 {
		return 0, nil, false
	}
	if epoch < e.epoch {
		e.log.Warn("refused a call of a stale scheduler epoch", "epoch", epoch, "highest", e.epoch)
		return http.StatusConflict, protocol.Error{Error: fmt.Sprintf("stale epoch %d < %d", epoch, e.epoch)}, true
	}
	if epoch > e.epoch {
		if e.epoch != 0 {
			e.log.Info("scheduler epoch advanced: refusing runs of older epochs", "epoch", epoch, "previous", e.epoch)
		}
		e.epoch = epoch
	}
	return 0, nil, false
}

// Epoch returns the highest scheduler epoch this executor has seen on a run or a kill, 0 if
// none carried one.
func (e *Executor) Epoch() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.epoch
}
