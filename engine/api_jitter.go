package engine

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
)

// The validation of a task's jitter_sec (core_jitter.go holds the offset and its use).

// Bounds of the look-ahead over which the smallest gap between a schedule's fires is taken.
// A year sees every DST transition of a zone; ten thousand fires is a week of a once-a-minute
// schedule, whose gaps repeat daily, and stops a once-a-second one after a few milliseconds.
const (
	gapLookAhead = 366 * 24 * time.Hour
	gapMaxFires  = 10000
)

// gapKey names a schedule in a zone, for gapCache.
type gapKey struct{ expr, dialect, zone string }

// gapCache keeps the smallest gap by schedule and zone: a batch of ten thousand tasks with
// one expression computes it once.
var gapCache = func() *lru.Cache[gapKey, time.Duration] {
	c, err := lru.New[gapKey, time.Duration](4096)
	if err != nil {
		panic(err)
	}
	return c
}()

// minFireGap is the smallest time between two consecutive fires of s in loc over the
// look-ahead from from (0 when it fires at most once in it).
func minFireGap(s cron.Schedule, loc *time.Location, from time.Time) time.Duration {
	end := from.Add(gapLookAhead)
	prev := s.Next(from, loc)
	var gap time.Duration
	for i := 0; i < gapMaxFires && !prev.IsZero() && prev.Before(end); i++ {
		n := s.Next(prev, loc)
		if n.IsZero() {
			break
		}
		if d := n.Sub(prev); gap == 0 || d < gap {
			gap = d
		}
		prev = n
	}
	return gap
}

// checkJitter validates def's jitter_sec against its bound and its schedule: it must be
// below the smallest gap between two fires (over the look-ahead from from, in the task's
// zone), so that each fire leaves before the next one's nominal time and the offsets never
// reorder fires.
func checkJitter(def *model.TaskDef, from time.Time) error {
	j := def.JitterSec
	if j < 0 || j > MaxJitterSec {
		return fieldErr("jitter_sec", "must be 0..%d seconds (0: none), got %d", MaxJitterSec, j)
	}
	if j == 0 {
		return nil
	}
	if def.Trigger != model.TriggerCron {
		return fieldErr("jitter_sec", "is only valid with trigger cron")
	}
	key := gapKey{def.Cron, def.CronDialect, def.Timezone}
	gap, ok := gapCache.Get(key)
	if !ok {
		s, err := parseCached(def.Cron, def.CronDialect)
		if err != nil {
			return fieldErr("cron", "%v", err)
		}
		loc, err := cron.LoadLocation(def.Timezone)
		if err != nil {
			return fieldErr("timezone", "unknown zone %q", def.Timezone)
		}
		gap = minFireGap(s, loc, from)
		gapCache.Add(key, gap)
	}
	if gap > 0 && time.Duration(j)*time.Second >= gap {
		return fieldErr("jitter_sec", "must be below the smallest gap between the schedule's fires (%s in %s), got %d",
			gap, def.Timezone, j)
	}
	return nil
}
