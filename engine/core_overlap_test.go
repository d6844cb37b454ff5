package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
)

// The overlap policies and the catch-up window, rule by rule (core_overlap.go): every row
// is one named case of decideNext or decideCatchup on fixed times, no clock.

func testSpan(tb testing.TB, expr, zone string, jitterSec int) fireSpan {
	tb.Helper()
	s, err := cron.Parse(expr)
	if err != nil {
		tb.Fatal(err)
	}
	loc, err := cron.LoadLocation(zone)
	if err != nil {
		tb.Fatal(err)
	}
	return fireSpan{sched: s, loc: loc, name: "nightly", jitterSec: jitterSec}
}

func utc(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

type nextRow struct {
	name                 string
	expr, zone           string
	overlap, misfire     string
	from, until          int64 // catch-up bounds
	last, now            int64
	wantNext             int64
	wantRecords          []string // substrings of the records' details, in order; nil: none
	wantMisfire, wantEnd bool     // wantEnd: CatchupDone
}

func TestDecideNext(t *testing.T) {
	t.Parallel()
	hourly := "0 * * * *"
	rows := []nextRow{
		{name: "skip: fires due while the run was in flight are skipped, counted and named", expr: hourly,
			overlap: model.OverlapSkip, last: e0, now: e0 + 2*eHr + 30*60*eSec, wantNext: e0 + 3*eHr, wantEnd: true,
			wantRecords: []string{"skip: 2 fire(s) (2026-01-01T11:00:00Z to 2026-01-01T12:00:00Z) due while the run was in flight skipped"}},
		{name: "skip: a run that ended before its next fire records nothing", expr: hourly, overlap: model.OverlapSkip,
			last: e0, now: e0 + 30*60*eSec, wantNext: e0 + eHr, wantEnd: true},
		{name: "skip: a fire due exactly at the end overlapped the run", expr: hourly, overlap: model.OverlapSkip,
			last: e0, now: e0 + eHr, wantNext: e0 + 2*eHr, wantEnd: true,
			wantRecords: []string{"skip: 1 fire(s) (2026-01-01T11:00:00Z) due while"}},
		{name: "buffer_one: the latest runs now with its own time, the earlier ones are skipped", expr: hourly,
			overlap: model.OverlapBufferOne, last: e0, now: e0 + 3*eHr + 60*eSec, wantNext: e0 + 3*eHr, wantEnd: true,
			wantMisfire: true, // a minute late, past the threshold: misfire_policy fire_once runs it
			wantRecords: []string{"buffer_one: the latest fire due while the run was in flight, 2026-01-01T13:00:00Z, runs now; 2 fire(s) (2026-01-01T11:00:00Z to 2026-01-01T12:00:00Z) before it skipped"}},
		{name: "buffer_one is the default (\"\")", expr: hourly, last: e0, now: e0 + eHr + 2*eSec, wantNext: e0 + eHr, wantEnd: true,
			wantRecords: []string{"buffer_one: the latest fire due while the run was in flight, 2026-01-01T11:00:00Z, runs now"}},
		{name: "buffer_one past the threshold under misfire skip skips all (the rule of before)", expr: hourly,
			overlap: model.OverlapBufferOne, misfire: model.MisfireSkip, last: e0, now: e0 + eHr + 60*eSec,
			wantNext: e0 + 2*eHr, wantMisfire: true, wantEnd: true,
			wantRecords: []string{"buffer_one: 1 fire(s) (2026-01-01T11:00:00Z) due while the run was in flight skipped: the latest left more than the misfire threshold ago"}},
		{name: "buffer_all: the oldest runs now, the others wait their turn", expr: hourly,
			overlap: model.OverlapBufferAll, last: e0, now: e0 + 2*eHr + 30*60*eSec, wantNext: e0 + eHr, wantEnd: true,
			wantRecords: []string{"buffer_all: 2 fire(s) due while runs were in flight are buffered (bound 100); the oldest, 2026-01-01T11:00:00Z, runs now"}},
		{name: "buffer_all: the next buffered fire after a buffered run", expr: hourly,
			overlap: model.OverlapBufferAll, last: e0 + eHr, now: e0 + 2*eHr + 31*60*eSec, wantNext: e0 + 2*eHr, wantEnd: true,
			wantRecords: []string{"buffer_all: 1 fire(s) due while runs were in flight are buffered (bound 100); the oldest, 2026-01-01T12:00:00Z"}},
		{name: "buffer_all: beyond the bound of 100 the oldest are skipped and recorded", expr: "@every 1s",
			overlap: model.OverlapBufferAll, last: e0, now: e0 + 150*eSec, wantNext: e0 + 51*eSec, wantEnd: true,
			wantRecords: []string{"buffer_all: 100 fire(s) due while runs were in flight are buffered (bound 100); the oldest, 2026-01-01T10:00:51Z, runs now; 50 fire(s) (2026-01-01T10:00:01Z to 2026-01-01T10:00:50Z) beyond the bound skipped"}},
		{name: "cancel_other: a run that ended with fires due runs the latest (what kill-then-start gives)", expr: hourly,
			overlap: model.OverlapCancelOther, misfire: model.MisfireSkip, last: e0, now: e0 + 2*eHr + 30*60*eSec,
			wantNext: e0 + 2*eHr, wantEnd: true,
			wantRecords: []string{"cancel_other: the latest fire due while the run was in flight, 2026-01-01T12:00:00Z, runs now; 1 fire(s)"}},
		{name: "skip: a day's overrun of an every-second schedule is counted, next is the first not due", expr: "@every 1s",
			overlap: model.OverlapSkip, last: e0, now: e0 + 86400*eSec + 500, wantNext: e0 + 86401*eSec, wantEnd: true,
			wantRecords: []string{"skip: 86400 fire(s) (2026-01-01T10:00:01Z to 2026-01-02T10:00:00Z)"}},
		{name: "skip: beyond the count limit the record says so and the next fire is still exact", expr: "@every 1s",
			overlap: model.OverlapSkip, last: e0, now: e0 + 2*86400*eSec + 500, wantNext: e0 + (2*86400+1)*eSec, wantEnd: true,
			wantRecords: []string{"skip: more than 100000 fire(s) (from 2026-01-01T10:00:01Z)"}},
		{name: "buffer_one: the latest of two days of every-second fires", expr: "@every 1s",
			overlap: model.OverlapBufferOne, last: e0, now: e0 + 2*86400*eSec + 500, wantNext: e0 + 2*86400*eSec,
			wantMisfire: false, wantEnd: true, wantRecords: []string{"runs now; more than 100000 fire(s)"}},

		// The catch-up under way (decideCatchup started it at `until`).
		{name: "catch-up: the next missed fire runs, whatever the overlap policy", expr: hourly, overlap: model.OverlapSkip,
			from: e0 - 2*eHr, until: e0 + 3*eHr, last: e0, now: e0 + 3*eHr + 10*eSec, wantNext: e0 + eHr},
		{name: "catch-up: after the last missed fire it is over and the policy decides", expr: hourly, overlap: model.OverlapSkip,
			from: e0 - 2*eHr, until: e0 + 3*eHr, last: e0 + 3*eHr, now: e0 + 3*eHr + 20*60*eSec, wantNext: e0 + 4*eHr, wantEnd: true},
		{name: "catch-up: fires due during the catch-up are the overlap policy's once it is over", expr: hourly,
			overlap: model.OverlapSkip, from: e0, until: e0 + 2*eHr + 30*60*eSec, last: e0 + 2*eHr, now: e0 + 5*eHr + 60*eSec,
			wantNext: e0 + 6*eHr, wantEnd: true,
			wantRecords: []string{"skip: 3 fire(s) (2026-01-01T13:00:00Z to 2026-01-01T15:00:00Z) due while the run was in flight skipped"}},
		{name: "catch-up after a run taken over: fires older than the window are skipped first", expr: hourly,
			overlap: model.OverlapBufferOne, from: e0 + 3*eHr, until: e0 + 5*eHr + eSec, last: e0, now: e0 + 5*eHr + 30*eSec,
			wantNext:    e0 + 3*eHr,
			wantRecords: []string{"catch-up: 2 fire(s) (2026-01-01T11:00:00Z to 2026-01-01T12:00:00Z) older than the window skipped"}},
		{name: "catch-up: nothing within the window left: the policy decides the fires after it", expr: hourly,
			overlap: model.OverlapBufferAll, from: e0 + 4*eHr + 30*60*eSec, until: e0 + 4*eHr + 40*60*eSec, last: e0,
			now: e0 + 5*eHr + 60*eSec, wantNext: e0 + 5*eHr, wantEnd: true,
			wantRecords: []string{"catch-up: 4 fire(s) (2026-01-01T11:00:00Z to 2026-01-01T14:00:00Z) older than the window skipped",
				"buffer_all: 1 fire(s)"}},

		// DST (Europe/Berlin): the night of 2026-10-25 has two 02:00s, a real hour apart; each
		// is a fire of its own.
		{name: "DST fall-back: the repeated 02:00 is a missed fire of its own in the catch-up", expr: hourly,
			zone: "Europe/Berlin", overlap: model.OverlapSkip, from: utc("2026-10-24T23:30:00Z"), until: utc("2026-10-25T03:30:00Z"),
			last: utc("2026-10-25T00:00:00Z"), now: utc("2026-10-25T03:31:00Z"), wantNext: utc("2026-10-25T01:00:00Z")},
		{name: "DST fall-back: buffer_all buffers both 02:00s, each with its own time", expr: hourly, zone: "Europe/Berlin",
			overlap: model.OverlapBufferAll, last: utc("2026-10-24T23:00:00Z"), now: utc("2026-10-25T01:30:00Z"),
			wantNext: utc("2026-10-25T00:00:00Z"), wantEnd: true,
			wantRecords: []string{"buffer_all: 2 fire(s) due while runs were in flight are buffered (bound 100); the oldest, 2026-10-25T02:00:00+02:00, runs now"}},
		{name: "DST spring-forward: a 02:30 daily fire that does not exist runs at 03:00 CEST, buffered", expr: "30 2 * * *",
			zone: "Europe/Berlin", overlap: model.OverlapSkip, last: utc("2026-03-27T01:30:00Z"), now: utc("2026-03-30T06:00:00Z"),
			wantNext: utc("2026-03-31T00:30:00Z"), wantEnd: true,
			wantRecords: []string{"skip: 3 fire(s) (2026-03-28T02:30:00+01:00 to 2026-03-30T02:30:00+02:00)"}},
	}
	checkNextRows(t, rows, decideNext)
}

// checkNextRows runs each row through decide, decideNext or decideParallel.
func checkNextRows(t *testing.T, rows []nextRow, decide func(nextInput) nextPlan) {
	t.Helper()
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			zone := row.zone
			if zone == "" {
				zone = "UTC"
			}
			misfire := row.misfire
			if misfire == "" {
				misfire = model.MisfireFireOnce
			}
			in := nextInput{Span: testSpan(t, row.expr, zone, 0), Overlap: row.overlap, Misfire: misfire,
				Threshold: 5 * time.Second, CatchupFrom: row.from, CatchupUntil: row.until, Last: row.last, Now: row.now}
			p := decide(in)
			if p.Next != row.wantNext {
				t.Errorf("next = %s, want %s", time.UnixMilli(p.Next).UTC(), time.UnixMilli(row.wantNext).UTC())
			}
			if p.Misfire != row.wantMisfire || p.CatchupDone != row.wantEnd {
				t.Errorf("misfire %v, catch-up done %v; want %v, %v", p.Misfire, p.CatchupDone, row.wantMisfire, row.wantEnd)
			}
			if len(p.Records) != len(row.wantRecords) {
				t.Fatalf("records %+v, want %d", p.Records, len(row.wantRecords))
			}
			for i, w := range row.wantRecords {
				if !strings.Contains(p.Records[i].detail, w) {
					t.Errorf("record %d = %q, want it to contain %q", i, p.Records[i].detail, w)
				}
			}
		})
	}
}

// TestDecideParallel: under allow_all the next fire is decided when a fire leaves, and no run
// in flight ever holds one back.
func TestDecideParallel(t *testing.T) {
	t.Parallel()
	hourly := "0 * * * *"
	checkNextRows(t, []nextRow{
		{name: "the schedule's next fire, whatever is in flight", expr: hourly, overlap: model.OverlapAllowAll,
			last: e0, now: e0 + eSec, wantNext: e0 + eHr, wantEnd: true},
		{name: "a fire the scheduler was late for still runs, with its own time, and records nothing", expr: hourly,
			overlap: model.OverlapAllowAll, last: e0, now: e0 + 2*eHr + 30*60*eSec, wantNext: e0 + eHr, wantEnd: true},
		{name: "misfire_policy skip does not drop a fire due while runs are in flight", expr: hourly,
			overlap: model.OverlapAllowAll, misfire: model.MisfireSkip, last: e0, now: e0 + 3*eHr, wantNext: e0 + eHr, wantEnd: true},
		{name: "catch-up: the next missed fire leaves at once", expr: hourly, overlap: model.OverlapAllowAll,
			from: e0 - 3*eHr, until: e0 + 2*eHr + 60*eSec, last: e0, now: e0 + 2*eHr + 61*eSec, wantNext: e0 + eHr,
			wantEnd: false},
		{name: "catch-up: fires older than the window are skipped and recorded", expr: hourly, overlap: model.OverlapAllowAll,
			from: e0 - 2*eHr, until: e0 + 60*eSec, last: e0 - 5*eHr, now: e0 + 61*eSec, wantNext: e0 - 2*eHr,
			wantRecords: []string{"catch-up: 2 fire(s) (2026-01-01T06:00:00Z to 2026-01-01T07:00:00Z) older than the window skipped"}},
		{name: "catch-up over: the schedule's next fire", expr: hourly, overlap: model.OverlapAllowAll,
			from: e0 - 3*eHr, until: e0 + 60*eSec, last: e0, now: e0 + 61*eSec, wantNext: e0 + eHr, wantEnd: true},
		{name: "DST fall-back in Berlin: both 02:00 fires of the repeated hour run", expr: hourly, zone: "Europe/Berlin",
			overlap: model.OverlapAllowAll, last: utc("2026-10-25T00:00:00Z"), now: utc("2026-10-25T00:00:01Z"),
			wantNext: utc("2026-10-25T01:00:00Z"), wantEnd: true},
	}, decideParallel)
}

func TestDecideCatchup(t *testing.T) {
	t.Parallel()
	hourly := "0 * * * *"
	rows := []struct {
		name        string
		expr, zone  string
		window      int
		due, now    int64
		wantNext    int64
		wantCatchup bool // the catch-up's bounds are set (from = now - window, until = now)
		wantDetail  string
	}{
		{name: "fires within the window run from the oldest; older ones are skipped", expr: hourly, window: 3 * 3600,
			due: e0, now: e0 + 5*eHr + 30*eSec, wantNext: e0 + 3*eHr, wantCatchup: true,
			wantDetail: "catch-up window 10800 s: 3 fire(s) (2026-01-01T10:00:00Z to 2026-01-01T12:00:00Z) older than the window skipped; 3 fire(s) (2026-01-01T13:00:00Z to 2026-01-01T15:00:00Z) missed within it run one after another, oldest first"},
		{name: "a window over the whole outage runs every missed fire", expr: hourly, window: 86400,
			due: e0, now: e0 + 5*eHr + 30*eSec, wantNext: e0, wantCatchup: true,
			wantDetail: "catch-up window 86400 s: 6 fire(s) (2026-01-01T10:00:00Z to 2026-01-01T15:00:00Z) missed within it"},
		{name: "a window shorter than the gap skips every missed fire (window 0 + skip = skip)", expr: hourly, window: 10,
			due: e0, now: e0 + 5*eHr + 30*eSec, wantNext: e0 + 6*eHr,
			wantDetail: "catch-up window 10 s: 6 fire(s) (2026-01-01T10:00:00Z to 2026-01-01T15:00:00Z) older than the window skipped"},
		{name: "nothing missed: the due fire is ahead", expr: hourly, window: 600, due: e0 + eHr, now: e0 + 30*60*eSec,
			wantNext: e0 + eHr, wantDetail: "no fire missed"},
		{name: "a day's window on an every-second schedule after two days down: only the next fire is computed", expr: "@every 1s",
			window: 86400, due: e0, now: e0 + 172800*eSec, wantNext: e0 + 86400*eSec, wantCatchup: true,
			wantDetail: "86400 fire(s) (2026-01-01T10:00:00Z to 2026-01-02T09:59:59Z) older than the window skipped; 86401 fire(s) (2026-01-02T10:00:00Z to 2026-01-03T10:00:00Z) missed within it"},
		{name: "DST fall-back: an outage over Berlin's night of two 02:00s catches up on both", expr: hourly,
			zone: "Europe/Berlin", window: 4 * 3600, due: utc("2026-10-24T23:00:00Z"), now: utc("2026-10-25T03:30:00Z"),
			wantNext: utc("2026-10-25T00:00:00Z"), wantCatchup: true,
			wantDetail: "1 fire(s) (2026-10-25T01:00:00+02:00) older than the window skipped; 4 fire(s) (2026-10-25T02:00:00+02:00 to 2026-10-25T04:00:00+01:00) missed within it"},
		{name: "DST spring-forward: the 02:30 that does not exist is missed at 03:00 CEST", expr: "30 2 * * *",
			zone: "Europe/Berlin", window: 2 * 86400, due: utc("2026-03-29T01:00:00Z"), now: utc("2026-03-30T12:00:00Z"),
			wantNext: utc("2026-03-29T01:00:00Z"), wantCatchup: true,
			wantDetail: "2 fire(s) (2026-03-29T03:00:00+02:00 to 2026-03-30T02:30:00+02:00) missed within it"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			zone := row.zone
			if zone == "" {
				zone = "UTC"
			}
			p := decideCatchup(catchupInput{Span: testSpan(t, row.expr, zone, 0), WindowSec: row.window, Due: row.due, Now: row.now})
			if p.Next != row.wantNext {
				t.Errorf("next = %s, want %s", time.UnixMilli(p.Next).UTC(), time.UnixMilli(row.wantNext).UTC())
			}
			var wantFrom, wantUntil int64
			if row.wantCatchup {
				wantFrom, wantUntil = row.now-int64(row.window)*1000, row.now
			}
			if p.CatchupFrom != wantFrom || p.CatchupUntil != wantUntil {
				t.Errorf("bounds %d..%d, want %d..%d", p.CatchupFrom, p.CatchupUntil, wantFrom, wantUntil)
			}
			if !strings.Contains(p.Detail, row.wantDetail) {
				t.Errorf("detail = %q, want it to contain %q", p.Detail, row.wantDetail)
			}
		})
	}
}

// TestCatchupPacesOneFireAtATime walks a catch-up from its start to its end through
// decideNext, as the ends of its runs do: every missed fire within the window runs once, in
// order, and the fire after the catch-up is the overlap policy's.
func TestCatchupPacesOneFireAtATime(t *testing.T) {
	t.Parallel()
	span := testSpan(t, "*/10 * * * *", "America/New_York", 0)
	// An outage over New York's spring-forward night (2026-03-08 02:00 EST → 03:00 EDT).
	due, now := utc("2026-03-08T05:00:00Z"), utc("2026-03-08T08:05:00Z")
	c := decideCatchup(catchupInput{Span: span, WindowSec: 2 * 3600, Due: due, Now: now})
	var ran []int64
	next := c.Next
	for i := 0; i < 100 && next != 0; i++ {
		p := decideNext(nextInput{Span: span, Overlap: model.OverlapSkip, Misfire: model.MisfireFireOnce, Threshold: 5 * time.Second,
			CatchupFrom: c.CatchupFrom, CatchupUntil: c.CatchupUntil, Last: next, Now: now + int64(i+1)*1000})
		ran = append(ran, next)
		if p.CatchupDone {
			if p.Next != utc("2026-03-08T08:10:00Z") {
				t.Errorf("the fire after the catch-up = %s", time.UnixMilli(p.Next).UTC())
			}
			break
		}
		next = p.Next
	}
	// From 06:05Z (now - 2 h) to 08:00Z: 12 fires, ten minutes apart in real time across the
	// jump of the wall clock.
	if len(ran) != 12 || ran[0] != utc("2026-03-08T06:10:00Z") || ran[11] != utc("2026-03-08T08:00:00Z") {
		t.Fatalf("ran %d fires: %v", len(ran), ran)
	}
	for i := 1; i < len(ran); i++ {
		if ran[i]-ran[i-1] != 10*60*eSec {
			t.Errorf("fire %d at %s follows %s", i, time.UnixMilli(ran[i]).UTC(), time.UnixMilli(ran[i-1]).UTC())
		}
	}
}
