package executor

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/protocol"
)

// headerEpoch carries the dispatching scheduler's epoch on every call it makes, the batch and
// kill calls included; a run's body may carry it too, as "epoch". It is the same epoch as the
// body's, the shard's when the body names a shard; a batch whose runs carry different epochs
// comes without it, and each run is judged by its own.
const headerEpoch = "X-Axe-Epoch"

// Epoch fencing (docs/ha.md, "Fencing"). A scheduler running with --ha holds a lease whose epoch
// grows by one at every takeover, and puts it on every run and kill it sends. A deposed primary
// that has not yet noticed (paused, cut off from its database) still carries its old epoch, so once
// the executor has seen a higher one it refuses the old one's runs and kills: the new primary owns
// every run from then on. A run without an epoch (0, a scheduler without --ha) is judged as before;
// it neither raises nor is held to the highest epoch.
//
// In scale-out mode no one lease covers every run: each of the protocol.ShardCount shards has
// a lease of its own, whose epoch grows at its own takeovers, and a run or kill that names its
// shard carries that shard's epoch. Epochs of different shards say nothing about each other
// (shard 7's owner may be at 2 while shard 40's is at 9, both current), so a sharded call is
// judged only against the highest epoch seen of its own shard, and an unsharded one only
// against the highest unsharded epoch, as before.

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

// staleEpoch records epoch, of shard when shard is not nil (else of the single primary), and,
// when it is below the highest seen of the same, returns the 409 that refuses it. A shard is
// in range, as checkRun and protocol.Kill.Check hold it. Callers hold mu.
func (e *Executor) staleEpoch(epoch int64, shard *int) (int, any, bool) {
	if epoch == 0 {
		return 0, nil, false
	}
	if shard == nil {
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
	highest := e.shardEpochs[*shard]
	if epoch < highest {
		e.log.Warn("refused a call of a stale shard epoch", "shard", *shard, "epoch", epoch, "highest", highest)
		return http.StatusConflict, protocol.Error{Error: fmt.Sprintf("stale epoch %d < %d of shard %d", epoch, highest, *shard)}, true
	}
	if epoch > highest {
		if highest != 0 {
			e.log.Info("shard epoch advanced: refusing its runs of older epochs", "shard", *shard, "epoch", epoch, "previous", highest)
		}
		if e.shardEpochs == nil {
			e.shardEpochs = make(map[int]int64)
		}
		e.shardEpochs[*shard] = epoch
	}
	return 0, nil, false
}

// Epoch returns the highest scheduler epoch this executor has seen on a run or a kill that
// names no shard, 0 if none carried one. Sharded epochs are ShardEpoch's.
func (e *Executor) Epoch() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.epoch
}

// ShardEpoch returns the highest epoch this executor has seen on a run or a kill of shard, 0
// if none of that shard carried one (or shard is not one of 0 to protocol.ShardCount-1).
func (e *Executor) ShardEpoch(shard int) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.shardEpochs[shard]
}
