package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"

	"github.com/axe-sched/axe/model"
)

// Jitter (docs/design.md, "Jitter"; the bound's validation is in api_jitter.go): a cron task with
// jitter_sec > 0 fires each nominal fire time late by an offset in [0, jitter_sec] seconds that is
// a function of the task's name and that nominal time alone. Every node, before and after a restart
// or a failover, computes the same offset, so the fire is armed at the same instant wherever it is
// armed. The offset moves only when the fire leaves: the run keeps its nominal time as scheduled_at
// and in its ticket, so the fire record (docs/ha.md, "The fire record"), recovery's open fires and
// the misfire policy's skipped runs all still name the nominal fire. What it moves, it moves
// everywhere: the wheel entry, the lateness of a fire, and the misfire decision, which judges the
// time a fire was meant to leave (nominal plus offset), not its nominal time.

// MaxJitterSec bounds jitter_sec: an hour. A longer spread is a different schedule, which the
// cron expression says better.
const MaxJitterSec = 3600

// JitterOffset is the delay, in milliseconds, of the fire of the task named name at the
// nominal time sched (Unix ms) for a bound of jitterSec seconds: the first 8 bytes of
// SHA-256 over the name's bytes followed by sched as 8 big-endian bytes, read as a
// big-endian unsigned integer, modulo jitterSec*1000+1. So 0 <= offset <= jitterSec*1000,
// and 0 when jitterSec <= 0.
func JitterOffset(name string, sched int64, jitterSec int) int64 {
	if jitterSec <= 0 {
		return 0
	}
	h := sha256.New()
	h.Write([]byte(name))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(sched))
	h.Write(b[:])
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return int64(binary.BigEndian.Uint64(sum[:8]) % uint64(jitterSec*1000+1))
}

// jitterOf is the offset of t's fire due at its nominal time due. Only a cron task's
// scheduled fires are jittered: a retry is already delayed by its own backoff, and the other
// triggers' fire times are an operator's explicit instant. Caller holds t.mu.
func (t *task) jitterOf(state model.State, due int64) int64 {
	if t.def.JitterSec <= 0 || t.def.Trigger != model.TriggerCron || state != model.StateScheduled {
		return 0
	}
	return JitterOffset(t.def.Name, due, t.def.JitterSec)
}

// jitterDetail is the note a jittered fire's run row carries.
func jitterDetail(ms int64) string { return "jitter " + strconv.FormatInt(ms, 10) + " ms" }

// runJitter is the jitter of a run of def that has left: that of a cron task's first attempt
// (a retry is not jittered).
func runJitter(def *model.TaskDef, run model.Run) int64 {
	if run.Kind != model.RunScheduled || run.Attempt != 1 || def.Trigger != model.TriggerCron {
		return 0
	}
	return JitterOffset(def.Name, run.ScheduledAt, def.JitterSec)
}

// fireAt is when t's scheduled cron fire of nominal time n leaves: n plus its jitter.
func (t *task) fireAt(n int64) int64 {
	return n + t.jitterOf(model.StateScheduled, n)
}
