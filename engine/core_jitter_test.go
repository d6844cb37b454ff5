package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// TestJitterOffset: the offset is a function of (name, nominal time, bound) alone, within
// [0, bound], 0 without a bound, and spread over the bound rather than stuck at one value.
func TestJitterOffset(t *testing.T) {
	t.Parallel()
	const bound = 30
	base := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC).UnixMilli()
	seen := map[int64]bool{}
	var lo, hi int64 = 1 << 62, -1
	for i := 0; i < 2000; i++ {
		sched := base + int64(i)*60_000
		o := JitterOffset("nightly", sched, bound)
		if o != JitterOffset("nightly", sched, bound) {
			t.Fatalf("offset of %d changed between calls", sched)
		}
		if o < 0 || o > bound*1000 {
			t.Fatalf("offset %d ms outside [0, %d000]", o, bound)
		}
		seen[o] = true
		lo, hi = min(lo, o), max(hi, o)
	}
	if len(seen) < 1500 || lo > 1000 || hi < 29_000 {
		t.Errorf("2000 fires gave %d distinct offsets in [%d, %d] ms; want them spread over [0, 30000]", len(seen), lo, hi)
	}
	if JitterOffset("nightly", base, 0) != 0 || JitterOffset("nightly", base, -5) != 0 {
		t.Error("no bound must give no offset")
	}
	if JitterOffset("nightly", base, bound) == JitterOffset("nightly-2", base, bound) &&
		JitterOffset("a", base, bound) == JitterOffset("b", base, bound) {
		t.Error("the offset does not depend on the task's name")
	}
	// A pinned value: the derivation (SHA-256 of the name's bytes and the time's 8
	// big-endian bytes, first 8 bytes mod bound*1000+1) is what every node, and the preview
	// API, computes; a change to it moves every jittered fire.
	if got := JitterOffset("nightly", base, bound); got != pinnedNightlyOffset {
		t.Errorf("JitterOffset(nightly, %d, 30) = %d, want %d", base, got, pinnedNightlyOffset)
	}
}

// pinnedNightlyOffset is JitterOffset("nightly", 2026-12-03T08:00:00Z, 30), computed
// independently of this code:
// python3: hashlib.sha256(b"nightly" + struct.pack(">q", 1796284800000)), first 8 bytes
// big-endian, mod 30001.
const pinnedNightlyOffset = 12705

// jitterName returns a task name whose offsets at the nominal times ns are each in [lo, hi)
// ms for the bound: the test picks its task so that the instants it checks are apart.
func jitterName(t *testing.T, prefix string, bound int, lo, hi int64, ns ...int64) string {
	t.Helper()
	for i := 0; i < 100000; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		ok := true
		for _, n := range ns {
			if o := JitterOffset(name, n, bound); o < lo || o >= hi {
				ok = false
				break
			}
		}
		if ok {
			return name
		}
	}
	t.Fatal("no task name with such offsets")
	return ""
}

// runOf reads the run of task id at nominal time sched, attempt 1, from the store.
func runOf(t *testing.T, s persist.Store, id, sched int64) (model.Run, bool) {
	t.Helper()
	r, err := s.GetRun(context.Background(), scheduledTicket(id, sched, 1))
	if errors.Is(err, model.ErrRunNotFound) {
		return model.Run{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return *r, true
}

// advanceTo moves clk to at in steps of at most step, letting the engine work in between.
func advanceTo(clk *clock.Fake, at time.Time, step time.Duration) {
	if d := at.Sub(clk.Now()); d > 0 {
		runFor(clk, d, step)
	}
}

// TestJitteredFiresLeaveAtTheirOffset: on the fake clock, a jittered cron fire leaves exactly
// at its nominal time plus its offset, not a millisecond before, and its run is recorded with
// the nominal scheduled_at, the nominal ticket and the offset in its detail. After a restart
// that falls between a fire's nominal time and its offset (past the misfire threshold from
// the nominal time) the new engine arms the same instant: no misfire, no early fire.
func TestJitteredFiresLeaveAtTheirOffset(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		clk := clock.NewFake(time.Now())
		cs.clk = clk
		const bound = 40
		n1 := clk.Now().Truncate(time.Minute).Add(time.Minute)
		n2 := n1.Add(time.Minute)
		// The first offset leaves room to check the instant before it; the second is well
		// past the misfire threshold, so that a restart fits between its nominal time and it.
		name := jitterName(t, "jit", bound, 2_000, 30_000, n1.UnixMilli())
		for off := JitterOffset(name, n2.UnixMilli(), bound); off < 20_000; off = JitterOffset(name, n2.UnixMilli(), bound) {
			name = jitterName(t, name, bound, 2_000, 30_000, n1.UnixMilli())
		}
		off1 := time.Duration(JitterOffset(name, n1.UnixMilli(), bound)) * time.Millisecond
		off2 := time.Duration(JitterOffset(name, n2.UnixMilli(), bound)) * time.Millisecond

		a := startEngine(t, s, withFakeClock(clk))
		spec := httpSpec(name, cs.URL)
		spec.Cron, spec.Timezone, spec.JitterSec = "0 * * * * *", "UTC", bound
		pt := mustCreate(t, a, spec)
		if pt.Def.JitterSec != bound || pt.Runtime.NextTriggerTime != n1.UnixMilli() {
			t.Fatalf("created: jitter %d, next %d; want %d and the nominal %d", pt.Def.JitterSec, pt.Runtime.NextTriggerTime, bound, n1.UnixMilli())
		}
		id := pt.Def.ID

		// Up to a millisecond before nominal + offset: nothing has left.
		advanceTo(clk, n1.Add(off1-time.Millisecond), 500*time.Millisecond)
		waitSettled(t, a)
		if n := len(cs.got(name)); n != 0 {
			t.Fatalf("%d calls before the fire's offset %s", n, off1)
		}
		if _, ok := runOf(t, s, id, n1.UnixMilli()); ok {
			t.Fatal("a fire record before the fire's offset")
		}
		// At it, the fire leaves.
		clk.Advance(time.Millisecond)
		waitFor(t, 10*time.Second, "the first fire", func() bool { return len(cs.got(name)) == 1 })
		waitSettled(t, a)
		c := cs.got(name)[0]
		if c.body.ScheduledAt != n1.UnixMilli() || c.ticket != scheduledTicket(id, n1.UnixMilli(), 1) {
			t.Fatalf("the run sent: scheduled_at %d, ticket %s; want the nominal %d", c.body.ScheduledAt, c.ticket, n1.UnixMilli())
		}
		r, ok := runOf(t, s, id, n1.UnixMilli())
		if !ok {
			t.Fatal("no run row under the nominal ticket")
		}
		if r.ScheduledAt != n1.UnixMilli() || r.DispatchedAt != n1.Add(off1).UnixMilli() ||
			r.Detail != fmt.Sprintf("jitter %d ms", off1.Milliseconds()) || r.Result != model.ResultSuccess {
			t.Fatalf("run row %+v; want scheduled_at %d, dispatched_at %d, detail %q, success",
				r, n1.UnixMilli(), n1.Add(off1).UnixMilli(), fmt.Sprintf("jitter %d ms", off1.Milliseconds()))
		}
		st, err := s.GetTask(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Runtime.NextTriggerTime != n2.UnixMilli() {
			t.Fatalf("next fire stored %d, want the nominal %d", st.Runtime.NextTriggerTime, n2.UnixMilli())
		}

		// Stop before the second fire, restart after its nominal time (past the misfire
		// threshold) and before its offset.
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := a.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
		clk.Advance(n2.Add(MisfireThresholdDefault + 3*time.Second).Sub(clk.Now()))
		b := startEngine(t, s, withFakeClock(clk))
		advanceTo(clk, n2.Add(off2-time.Millisecond), 500*time.Millisecond)
		waitSettled(t, b)
		if n := len(cs.got(name)); n != 1 {
			t.Fatalf("%d calls after the restart and before the second offset %s, want still 1", n, off2)
		}
		clk.Advance(time.Millisecond)
		waitFor(t, 10*time.Second, "the second fire", func() bool { return len(cs.got(name)) == 2 })
		waitSettled(t, b)
		r, ok = runOf(t, s, id, n2.UnixMilli())
		if !ok || r.DispatchedAt != n2.Add(off2).UnixMilli() || r.Detail != fmt.Sprintf("jitter %d ms", off2.Milliseconds()) {
			t.Fatalf("second run %+v (found %v); want dispatched at the nominal %d plus %s", r, ok, n2.UnixMilli(), off2)
		}
		for _, act := range actionNames(t, b, name) {
			if act == ActMisfire {
				t.Fatal("the restart inside the offset was taken for a misfire")
			}
		}
	})
}

// TestJitterMisfireJudgesTheOffset: a fire is late by nominal + offset. Loaded after that
// instant plus the threshold it follows the misfire policy (skip records the skipped run
// under its nominal time), and before it, it does not.
func TestJitterMisfireJudgesTheOffset(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		clk := clock.NewFake(time.Now())
		cs.clk = clk
		const bound = 30
		n1 := clk.Now().Truncate(time.Minute).Add(time.Minute)
		name := jitterName(t, "late", bound, 5_000, 25_000, n1.UnixMilli())
		off1 := time.Duration(JitterOffset(name, n1.UnixMilli(), bound)) * time.Millisecond

		a := startEngine(t, s, withFakeClock(clk))
		spec := httpSpec(name, cs.URL)
		spec.Cron, spec.Timezone, spec.JitterSec, spec.MisfirePolicy = "0 * * * * *", "UTC", bound, model.MisfireSkip
		id := mustCreate(t, a, spec).Def.ID
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		// Down past nominal + offset + threshold: the fire is skipped, recorded at its
		// nominal time, and the next is armed.
		clk.Advance(n1.Add(off1 + MisfireThresholdDefault + time.Second).Sub(clk.Now()))
		b := startEngine(t, s, withFakeClock(clk))
		waitSettled(t, b)
		r, ok := runOf(t, s, id, n1.UnixMilli())
		if !ok || r.Result != model.ResultSkipped || r.ScheduledAt != n1.UnixMilli() {
			t.Fatalf("missed fire's run %+v (found %v); want skipped at the nominal %d", r, ok, n1.UnixMilli())
		}
		st, err := s.GetTask(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if want := n1.Add(time.Minute).UnixMilli(); st.Runtime.NextTriggerTime != want {
			t.Fatalf("next fire %d after the skip, want %d", st.Runtime.NextTriggerTime, want)
		}
		if n := len(cs.got(name)); n != 0 {
			t.Fatalf("%d calls for a skipped fire", n)
		}
	})
}

// TestJitterAcrossDST: on a spring-forward day in America/New_York, "30 1,2 * * *" fires at
// 01:30 EST and, 02:30 not existing, at 03:00 EDT, half an hour later in real time. Each
// fire leaves at its nominal time plus its own offset, below the bound, in order; the
// schedule's smallest gap there is the half hour, which is what jitter_sec must stay below.
func TestJitterAcrossDST(t *testing.T) {
	t.Parallel()
	ny, err := cron.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	const bound = 1700
	spec := httpSpec("dst-jitter", "http://127.0.0.1:1/")
	spec.Cron, spec.Timezone, spec.JitterSec = "30 1,2 * * *", "America/New_York", bound
	def, err := Normalize(spec, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	tk, err := newTask(&model.Task{Def: def, Runtime: model.Runtime{State: model.StateScheduled}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Store: persisttest.SQLite(t), Clock: clock.NewFake(time.Date(2026, 3, 8, 0, 0, 0, 0, ny))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) }) // never started: frees its pools
	start := time.Date(2026, 3, 8, 0, 0, 0, 0, ny).UnixMilli()
	want := []time.Time{
		time.Date(2026, 3, 8, 1, 30, 0, 0, ny), // EST
		time.Date(2026, 3, 8, 3, 0, 0, 0, ny),  // EDT: the end of the gap 02:30 fell in
		time.Date(2026, 3, 9, 1, 30, 0, 0, ny),
		time.Date(2026, 3, 9, 2, 30, 0, 0, ny),
	}
	if want[1].Sub(want[0]) != 30*time.Minute {
		t.Fatalf("the DST day's gap is %s, want 30m", want[1].Sub(want[0]))
	}
	last, prevAt := start, int64(0)
	for i, w := range want {
		// The engine computes the next cycle just after the previous fire left.
		n, note := e.nextFire(tk, last, max(prevAt, start))
		if n != w.UnixMilli() || note != "" {
			t.Fatalf("fire %d: nominal %s (%q), want %s", i, time.UnixMilli(n).In(ny), note, w)
		}
		at := tk.fireAt(n)
		if off := at - n; off < 0 || off > bound*1000 || off != JitterOffset("dst-jitter", n, bound) {
			t.Fatalf("fire %d: offset %d ms", i, off)
		}
		if at <= prevAt {
			t.Fatalf("fire %d leaves at %s, not after the one before (%s)", i, time.UnixMilli(at).In(ny), time.UnixMilli(prevAt).In(ny))
		}
		last, prevAt = n, at
	}
	// In New York the smallest gap is that half hour; in UTC the same expression's is an hour.
	spec.JitterSec = 1800
	if _, err := Normalize(spec, "UTC"); !isFieldErr(err, "jitter_sec") {
		t.Fatalf("jitter 1800 with a 30-minute DST gap: %v, want a jitter_sec error", err)
	}
	spec.Timezone = "UTC"
	if _, err := Normalize(spec, "UTC"); err != nil {
		t.Fatalf("jitter 1800 in UTC (gaps of 1h and 23h): %v", err)
	}
}

func isFieldErr(err error, field string) bool {
	var fe *FieldError
	return errors.As(err, &fe) && fe.Field == field
}

// TestJitterValidation: jitter_sec is 0..MaxJitterSec, cron only, and below the schedule's
// smallest gap between fires; every refusal names the field.
func TestJitterValidation(t *testing.T) {
	t.Parallel()
	base := func() *wire.TaskSpec {
		s := httpSpec("v", "http://127.0.0.1:1/")
		s.Cron, s.Timezone = "0 3 * * *", "UTC"
		return s
	}
	bad := map[string]func(*wire.TaskSpec){
		"negative":         func(s *wire.TaskSpec) { s.JitterSec = -1 },
		"over 3600":        func(s *wire.TaskSpec) { s.JitterSec = MaxJitterSec + 1 },
		"every minute, 60": func(s *wire.TaskSpec) { s.Cron, s.JitterSec = "*/1 * * * *", 60 },
		"every 5 min, 300": func(s *wire.TaskSpec) { s.Cron, s.JitterSec = "*/5 * * * *", 300 },
		"minutes 0,1":      func(s *wire.TaskSpec) { s.Cron, s.JitterSec = "0,1 * * * *", 60 },
		"every second":     func(s *wire.TaskSpec) { s.Cron, s.JitterSec = "* * * * * *", 1 },
		"@every 30s":       func(s *wire.TaskSpec) { s.Cron, s.JitterSec = "@every 30s", 30 },
		"delay":            func(s *wire.TaskSpec) { s.Cron, s.DelayMS, s.JitterSec = "", ptr(int64(1000)), 10 },
		"manual":           func(s *wire.TaskSpec) { s.Cron, s.Trigger, s.JitterSec = "", model.TriggerManual, 10 },
	}
	for what, f := range bad {
		s := base()
		f(s)
		if _, err := Normalize(s, "UTC"); !isFieldErr(err, "jitter_sec") {
			t.Errorf("%s: error %v, want a FieldError naming jitter_sec", what, err)
		} else if !strings.Contains(err.Error(), "jitter_sec") {
			t.Errorf("%s: message %q does not name jitter_sec", what, err)
		}
	}
	good := map[string]func(*wire.TaskSpec){
		"none":             func(s *wire.TaskSpec) {},
		"daily, 3600":      func(s *wire.TaskSpec) { s.JitterSec = MaxJitterSec },
		"every minute, 59": func(s *wire.TaskSpec) { s.Cron, s.JitterSec = "*/1 * * * *", 59 },
		"@every 30s, 29":   func(s *wire.TaskSpec) { s.Cron, s.JitterSec = "@every 30s", 29 },
		"yearly, 3600":     func(s *wire.TaskSpec) { s.Cron, s.JitterSec = "0 0 1 1 *", 3600 },
		"delay, 0":         func(s *wire.TaskSpec) { s.Cron, s.DelayMS = "", ptr(int64(1000)) },
	}
	for what, f := range good {
		s := base()
		f(s)
		d, err := Normalize(s, "UTC")
		if err != nil || d.JitterSec != s.JitterSec {
			t.Errorf("%s: jitter %d, error %v", what, d.JitterSec, err)
		}
	}
}
