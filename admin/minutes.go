package admin

import (
	"sync"
	"time"

	"github.com/axe-sched/axe/engine"
)

// minuteSamplePeriod is how often the per-minute counters read the engine's totals; a
// reading also happens on every overview request, so the current minute is always current.
const minuteSamplePeriod = 5 * time.Second

// minuteWindow is how many minutes the overview chart keeps.
const minuteWindow = 60

// minuteSeries keeps fires and failures per minute for the last hour in memory: the
// overview chart reads it instead of the runs table, which has no time index by design.
// Each reading adds what the engine's totals grew by since the last one to the current
// minute's slot.
type minuteSeries struct {
	eng *engine.Engine

	mu   sync.Mutex
	last engine.Counts
	ring [minuteWindow]minuteCount

	startOnce, stopOnce sync.Once
	stopc, done         chan struct{}
}

type minuteCount struct {
	minute   int64 // Unix minutes
	fires    uint64
	failures uint64
}

// MinutePoint is one minute of the overview chart.
type MinutePoint struct {
	At       int64  `json:"at"` // the minute's start, Unix ms
	Fires    uint64 `json:"fires"`
	Failures uint64 `json:"failures"`
}

func newMinuteSeries(eng *engine.Engine) *minuteSeries {
	m := &minuteSeries{eng: eng, stopc: make(chan struct{}), done: make(chan struct{})}
	if eng != nil {
		m.last = eng.Totals()
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
					return
				case now := <-t.C:
					m.sample(now)
				}
			}
		}()
	})
}

// stop ends the sampler; harmless twice or without start.
func (m *minuteSeries) stop() {
	m.stopOnce.Do(func() { close(m.stopc) })
	started := true
	m.startOnce.Do(func() { started = false; close(m.done) })
	if started {
		<-m.done
	}
}

func (m *minuteSeries) sample(now time.Time) {
	cur := m.eng.Totals()
	minute := now.Unix() / 60
	m.mu.Lock()
	defer m.mu.Unlock()
	slot := &m.ring[minute%minuteWindow]
	if slot.minute != minute {
		*slot = minuteCount{minute: minute}
	}
	// Totals only grow; a guard keeps a reading that raced an older one from wrapping.
	if cur.Fires >= m.last.Fires {
		slot.fires += cur.Fires - m.last.Fires
	}
	if cur.Failures >= m.last.Failures {
		slot.failures += cur.Failures - m.last.Failures
	}
	m.last = cur
}

// points returns the last hour, oldest minute first, with the current minute last.
func (m *minuteSeries) points(now time.Time) []MinutePoint {
	m.sample(now)
	cur := now.Unix() / 60
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]MinutePoint, 0, minuteWindow)
	for mn := cur - minuteWindow + 1; mn <= cur; mn++ {
		p := MinutePoint{At: mn * 60_000}
		if s := m.ring[mn%minuteWindow]; s.minute == mn {
			p.Fires, p.Failures = s.fires, s.failures
		}
		out = append(out, p)
	}
	return out
}
