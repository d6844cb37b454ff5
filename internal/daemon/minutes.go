package daemon

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/persist"
)

// minuteSamplePeriod is how often the per-minute counters read the engine's totals; a
// reading also happens on every overview request, so the current minute is always current.
const minuteSamplePeriod = 5 * time.Second

// minuteWindow is how many minutes the overview chart keeps.
const minuteWindow = 60

// minuteKeep is how long the store keeps the per-minute statistics.
const minuteKeep = 24 * time.Hour

// minuteUnsavedMax bounds the minutes kept for a store that cannot be written.
const minuteUnsavedMax = 60

// minuteSeries is the recorder of one engine: it keeps fires and failures per minute for the
// last hour in memory, which the console's overview chart reads (admin.ServerConfig.Minutes)
// instead of the runs table, which has no time index by design.
// Each reading adds what the engine's totals grew by since the last one to the current
// minute's slot. It also records each finished minute in the store (minute_stats, one row
// per node and minute in which anything fired, with the fires' lateness) for the day-long
// chart, which survives a restart; the firing path is not touched, only its totals read.
type minuteSeries struct {
	eng *engine.Engine
	log *slog.Logger

	mu      sync.Mutex
	last    engine.MinuteTotals
	ring    [minuteWindow]minuteCount
	pend    persist.MinuteStat   // the current minute's counts for the store
	unsaved []persist.MinuteStat // finished minutes not yet written

	startOnce, stopOnce sync.Once
	stopc, done         chan struct{}
	discard             atomic.Bool // set by abandon: stop without writing
}

type minuteCount struct {
	minute   int64 // Unix minutes
	fires    uint64
	failures uint64
}

func newMinuteSeries(eng *engine.Engine, log *slog.Logger) *minuteSeries {
	m := &minuteSeries{eng: eng, log: log, stopc: make(chan struct{}), done: make(chan struct{})}
	if eng != nil {
		m.last = eng.API().MinuteTotals()
	}
	return m
}

func (m *minuteSeries) start() {
	m.startOnce.Do(func() {
		go func() {
			defer close(m.done)
			t := time.NewTicker(minuteSamplePeriod)
			defer t.Stop()
			for {
				select {
				case <-m.stopc:
					if m.discard.Load() {
						return
					}
					m.sample(time.Now())
					m.finish()
					m.save()
					return
				case now := <-t.C:
					m.sample(now)
					m.save()
				}
			}
		}()
	})
}

// abandon ends the sampler without writing what it holds: a demoted primary's writes are
// fenced, and a demotion must not wait for the store.
func (m *minuteSeries) abandon() {
	m.discard.Store(true)
	m.stop()
}

// stop ends the sampler, writing the current minute first; harmless twice or without start.
func (m *minuteSeries) stop() {
	m.stopOnce.Do(func() { close(m.stopc) })
	started := true
	m.startOnce.Do(func() { started = false; close(m.done) })
	if started {
		<-m.done
	}
}

func (m *minuteSeries) sample(now time.Time) {
	cur := m.eng.API().MinuteTotals()
	minute := now.Unix() / 60
	m.mu.Lock()
	defer m.mu.Unlock()
	slot := &m.ring[minute%minuteWindow]
	if slot.minute != minute {
		*slot = minuteCount{minute: minute}
	}
	if m.pend.Minute != minute*60_000 {
		m.finishLocked()
		m.pend = persist.MinuteStat{Minute: minute * 60_000, Node: m.eng.API().NodeID()}
	}
	// Totals only grow; a guard keeps a reading that raced an older one from wrapping.
	if cur.Fires >= m.last.Fires {
		slot.fires += cur.Fires - m.last.Fires
		m.pend.Fires += int64(cur.Fires - m.last.Fires)
	}
	if cur.Failures >= m.last.Failures {
		slot.failures += cur.Failures - m.last.Failures
		m.pend.Failures += int64(cur.Failures - m.last.Failures)
	}
	if cur.LateCount >= m.last.LateCount && cur.LateSumMS >= m.last.LateSumMS {
		m.pend.LateCount += cur.LateCount - m.last.LateCount
		m.pend.LateSumMS += cur.LateSumMS - m.last.LateSumMS
	}
	m.last = cur
}

// finish queues the current minute for the store, as it is.
func (m *minuteSeries) finish() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finishLocked()
}

func (m *minuteSeries) finishLocked() {
	p := m.pend
	m.pend = persist.MinuteStat{Minute: p.Minute, Node: p.Node}
	if p.Minute == 0 || (p.Fires == 0 && p.Failures == 0 && p.LateCount == 0) {
		return
	}
	m.unsaved = append(m.unsaved, p)
	if n := len(m.unsaved); n > minuteUnsavedMax {
		m.unsaved = append(m.unsaved[:0], m.unsaved[n-minuteUnsavedMax:]...)
	}
}

// save writes the finished minutes to the store, keeping them for the next try when it
// cannot, and drops the store's minutes older than minuteKeep.
func (m *minuteSeries) save() {
	m.mu.Lock()
	rows := append([]persist.MinuteStat(nil), m.unsaved...)
	m.mu.Unlock()
	if len(rows) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	drop := time.Now().Add(-minuteKeep).UnixMilli()
	if err := m.eng.API().SaveMinutes(ctx, rows, drop); err != nil {
		m.log.Warn("cannot record the minute statistics; will retry", "minutes", len(rows), "error", err)
		return
	}
	m.mu.Lock()
	m.unsaved = m.unsaved[min(len(rows), len(m.unsaved)):]
	m.mu.Unlock()
}

// points returns the last hour, oldest minute first, with the current minute last.
func (m *minuteSeries) points(now time.Time) []admin.MinutePoint {
	m.sample(now)
	cur := now.Unix() / 60
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]admin.MinutePoint, 0, minuteWindow)
	for mn := cur - minuteWindow + 1; mn <= cur; mn++ {
		p := admin.MinutePoint{At: mn * 60_000}
		if s := m.ring[mn%minuteWindow]; s.minute == mn {
			p.Fires, p.Failures = s.fires, s.failures
		}
		out = append(out, p)
	}
	return out
}
