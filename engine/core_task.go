package engine

import (
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
)

// task is a task held in memory: armed in the wheel, running, or being operated on.
// Every field is guarded by mu.
type task struct {
	mu sync.Mutex

	id  int64
	def *model.TaskDef // replaced, never mutated, so a snapshot can leave the lock
	// shard is the task's shard (model.ShardOf of its name, which never changes), and sepoch
	// the epoch at which this engine held it when this copy went into memory (0 on an engine
	// that is not sharded). Both are set before the copy is shared and never change, so they
	// are read without mu (core_shards.go).
	shard  uint8
	sepoch int64
	sched  cron.Schedule // nil unless trigger cron
	loc    *time.Location

	// rt is the newest runtime the engine decided. rt.Version is the version of the last
	// write submitted to the writer, which may not be durable yet (pending > 0).
	rt model.Runtime

	residency // in memory: armed, held, stale, evicted (core_residency.go)

	// outbox holds the groups decided under mu and not yet submitted, in decision order;
	// flushing is set while one caller submits them (core_submit.go, flush).
	outbox   []outgoing
	flushing bool

	// releasedBy names the upstream runs that released a dependency fire, for its run row.
	releasedBy string
	// retryOf is the fire time (ms) of the cron fire whose retries are under way, or 0: a
	// retry's run is scheduled at its own due time, and the next cycle must count the fires
	// missed since the original one (complete). Not persisted: after a restart mid-retry, or
	// once the task has left memory while it waits for a retry beyond the window, the next
	// cycle counts from the retry's time, and the fires between are a backfill's to run
	// (periodicFloor), never the schedule's.
	retryOf int64
	// catchupFrom and catchupUntil bound the catch-up under way (core_overlap.go), or are 0:
	// the fires meant to leave by catchupUntil (when the task was taken up after downtime or
	// resumed) are missed ones and run one by one; those of nominal time before catchupFrom
	// are older than the window. Not persisted, and need not be: the catch-up's progress is
	// the runtime's due time, and a scheduler that takes the task up again starts the
	// catch-up again from it (adopt, takeOverRun).
	catchupFrom, catchupUntil int64
	// catchupFollow, during the catch-up of a shard's hand-over (handOverCatchup), is the
	// instant up to which the catch-up's end follows the clock: the fires that come due
	// while it runs join it. 0 otherwise. Not persisted, as the catch-up's bounds are not.
	catchupFollow int64
	// keys is the concurrency key of def rendered over its params (core_keys.go).
	keys keyCache
}

func newTask(pt *model.Task) (*task, error) {
	def := pt.Def
	internDef(&def)
	t := &task{id: def.ID, def: &def, rt: pt.Runtime, shard: uint8(model.ShardOf(def.Name))}
	t.rt.TaskID = def.ID
	if err := t.compile(); err != nil {
		return nil, err
	}
	return t, nil
}

// compile parses the schedule and zone of t.def.
func (t *task) compile() error {
	loc, err := cron.LoadLocation(t.def.Timezone)
	if err != nil {
		return fmt.Errorf("cannot load zone of task %q: %w", t.def.Name, err)
	}
	t.loc = loc
	t.sched = nil
	if t.def.Trigger == model.TriggerCron {
		s, err := parseCached(t.def.Cron, t.def.CronDialect)
		if err != nil {
			return fmt.Errorf("cannot parse cron of task %q: %w", t.def.Name, err)
		}
		t.sched = s
	}
	return nil
}

// scheduleKey is a cached schedule's expression and dialect.
type scheduleKey struct{ expr, dialect string }

// scheduleCache keeps parsed cron schedules by expression and dialect. Parsing costs tens of
// microseconds while a million tasks typically share a few thousand expressions, so the
// window loader would otherwise spend most of its time parsing. Schedules are safe for
// concurrent use, so tasks share them.
var scheduleCache = func() *lru.Cache[scheduleKey, cron.Schedule] {
	c, err := lru.New[scheduleKey, cron.Schedule](16384)
	if err != nil {
		panic(err)
	}
	return c
}()

// parseCached parses expr in dialect; "" is unix (rows stored before dialects existed).
func parseCached(expr, dialect string) (cron.Schedule, error) {
	if dialect == "" {
		dialect = string(cron.DialectUnix)
	}
	key := scheduleKey{expr, dialect}
	if s, ok := scheduleCache.Get(key); ok {
		return s, nil
	}
	s, err := cron.ParseIn(expr, cron.Dialect(dialect))
	if err != nil {
		return nil, err
	}
	scheduleCache.Add(key, s)
	return s, nil
}

// span is the fires of t's schedule (core_overlap.go).
func (t *task) span() fireSpan {
	return fireSpan{sched: t.sched, loc: t.loc, name: t.def.Name, jitterSec: t.def.JitterSec}
}

// catchupWindow is t's catch-up window in seconds, 0 when it has none: only cron tasks
// catch up.
func (t *task) catchupWindow() int {
	if t.def.Trigger != model.TriggerCron || t.sched == nil {
		return 0
	}
	return t.def.CatchupWindowSec
}

// catchupBound is the end of the catch-up under way for a decision at now: catchupUntil,
// or now itself up to catchupFollow while a hand-over's catch-up follows the clock
// (handOverCatchup). Caller holds t.mu.
func (t *task) catchupBound(now int64) int64 {
	if t.catchupUntil > 0 && t.catchupFollow > 0 {
		return max(t.catchupUntil, min(now, t.catchupFollow))
	}
	return t.catchupUntil
}

// clearCatchup ends the catch-up under way.
func (t *task) clearCatchup() { t.catchupFrom, t.catchupUntil, t.catchupFollow = 0, 0, 0 }

// nextCron returns the first cron fire strictly after `after` (ms), or 0 when none.
func (t *task) nextCron(after int64) int64 {
	return cronAfter(t.sched, t.loc, after)
}

// interned holds one copy of strings many tasks repeat (groups, zones, cron expressions,
// callback URLs and apps). Rows read from the store carry fresh copies of each; a million
// tasks loaded into the window would otherwise hold a million copies of "Asia/Shanghai".
var interned = struct {
	sync.Mutex
	m map[string]string
}{m: make(map[string]string)}

// internLimit bounds the table: past it, strings are kept as they come.
const internLimit = 1 << 16

func intern(s string) string {
	if s == "" {
		return s
	}
	interned.Lock()
	defer interned.Unlock()
	if v, ok := interned.m[s]; ok {
		return v
	}
	if len(interned.m) < internLimit {
		interned.m[s] = s
	}
	return s
}

func internDef(d *model.TaskDef) {
	d.Group, d.Trigger, d.Cron, d.Timezone = intern(d.Group), intern(d.Trigger), intern(d.Cron), intern(d.Timezone)
	d.MisfirePolicy, d.DependsMode = intern(d.MisfirePolicy), intern(d.DependsMode)
	d.CronDialect, d.OverlapPolicy = intern(d.CronDialect), intern(d.OverlapPolicy)
	cb := &d.Callback
	cb.Type, cb.URL, cb.App, cb.Handler, cb.Route = intern(cb.Type), intern(cb.URL), intern(cb.App), intern(cb.Handler), intern(cb.Route)
}

// taskMapStripes spreads the map over independent locks: consumers, the writer's callbacks
// and API calls look tasks up concurrently, and one lock over a million entries would
// serialise them.
const taskMapStripes = 64

type taskMap struct {
	stripes [taskMapStripes]struct {
		mu sync.Mutex
		m  map[int64]*task
	}
}

func (m *taskMap) init() {
	for i := range m.stripes {
		m.stripes[i].m = make(map[int64]*task)
	}
}

func (m *taskMap) stripe(id int64) *struct {
	mu sync.Mutex
	m  map[int64]*task
} {
	return &m.stripes[uint64(id)%taskMapStripes]
}

func (m *taskMap) get(id int64) *task {
	s := m.stripe(id)
	s.mu.Lock()
	t := s.m[id]
	s.mu.Unlock()
	return t
}

// insertIfAbsent stores t unless a task with its id is present; it reports whether it did.
func (m *taskMap) insertIfAbsent(t *task) bool {
	s := m.stripe(t.id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[t.id]; ok {
		return false
	}
	s.m[t.id] = t
	return true
}

// remove deletes t if it is the task stored under its id.
func (m *taskMap) remove(t *task) {
	s := m.stripe(t.id)
	s.mu.Lock()
	if s.m[t.id] == t {
		delete(s.m, t.id)
	}
	s.mu.Unlock()
}

// all returns the tasks in the map that keep says to keep.
func (m *taskMap) all(keep func(*task) bool) []*task {
	var out []*task
	for i := range m.stripes {
		s := &m.stripes[i]
		s.mu.Lock()
		for _, t := range s.m {
			if keep(t) {
				out = append(out, t)
			}
		}
		s.mu.Unlock()
	}
	return out
}

func (m *taskMap) len() int {
	n := 0
	for i := range m.stripes {
		s := &m.stripes[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
