package cron

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hashicorp/cronexpr"
)

// Errors returned by this package. They are wrapped with detail naming the
// problem; test for them with errors.Is.
var (
	// ErrInvalidCron reports an expression that cannot be parsed or can
	// never fire.
	ErrInvalidCron = errors.New("invalid cron expression")
	// ErrInvalidTimezone reports a zone name that is empty, "Local" or not a
	// known IANA name, or a nil location.
	ErrInvalidTimezone = errors.New("invalid time zone")
	// ErrInvalidCount reports a NextN count outside 1..NextNMax.
	ErrInvalidCount = errors.New("invalid fire-time count")
	// ErrInvalidDialect reports a dialect name other than unix or quartz.
	ErrInvalidDialect = errors.New("invalid cron dialect")
	// ErrAmbiguousDay reports an expression whose numeric day of week means
	// one day in unix cron and another in Quartz, given where no dialect was
	// chosen; see CheckAmbiguous.
	ErrAmbiguousDay = errors.New("ambiguous day of week")
)

const (
	// NextNDefault is how many fire times to list when a caller (the
	// cron/next API, the CLI) does not say.
	NextNDefault = 10
	// NextNMax bounds NextN so a single request cannot ask for an unbounded
	// amount of work.
	NextNMax = 1000
	// ExprMaxLen bounds the length of an expression. Real expressions are
	// far shorter; the bound keeps hostile input cheap to reject.
	ExprMaxLen = 1024
	// EveryMin is the shortest @every period; shorter periods would fire
	// faster than cron's one-second resolution.
	EveryMin = time.Second
)

// Schedule is a parsed expression. A Schedule is immutable and safe for
// concurrent use. Its fire times fall on whole seconds. Parse is far costlier
// than Next (tens of microseconds against about one), so callers that handle
// many tasks should keep the Schedule rather than parse again.
type Schedule interface {
	// Next returns the first fire time strictly after `after`, evaluated in
	// loc (nil means UTC) and expressed in loc; the zero time when the
	// schedule never fires again.
	Next(after time.Time, loc *time.Location) time.Time
}

// Parse validates expr in the unix dialect and returns its schedule. Errors
// wrap ErrInvalidCron. The accepted syntax is described in the package
// documentation.
func Parse(expr string) (Schedule, error) {
	return ParseIn(expr, DialectUnix)
}

// ParseIn validates expr in dialect d and returns its schedule. Errors wrap
// ErrInvalidCron, or ErrInvalidDialect for a dialect that is neither unix nor
// quartz.
func ParseIn(expr string, d Dialect) (Schedule, error) {
	if d != DialectUnix && d != DialectQuartz {
		return nil, fmt.Errorf("%w %q (want %q or %q)", ErrInvalidDialect, d, DialectUnix, DialectQuartz)
	}
	if len(expr) > ExprMaxLen {
		return nil, fmt.Errorf("%w: expression is %d bytes long, the limit is %d", ErrInvalidCron, len(expr), ExprMaxLen)
	}
	s := strings.ToLower(strings.TrimSpace(expr))
	if s == "" {
		return nil, fmt.Errorf("%w: expression is empty", ErrInvalidCron)
	}
	if strings.HasPrefix(s, "@") {
		return parseDescriptor(expr, s)
	}
	f := strings.Fields(s)
	if d == DialectQuartz {
		if err := quartzShape(expr, f); err != nil {
			return nil, err
		}
	}
	fields, ok := sevenFields(f)
	if !ok {
		return nil, fmt.Errorf("%w %q: has %d fields, want 5 (min hour dom month dow), 6 (sec first) or 7 (sec first, year last)", ErrInvalidCron, expr, len(f))
	}
	if d == DialectQuartz {
		return compile(expr, fields, &quartzSpecs, false)
	}
	return compile(expr, fields, &fieldSpecs, true)
}

// descriptors maps each @name to its seven-field form.
var descriptors = map[string][fieldCount]string{
	"@yearly":   {"0", "0", "0", "1", "1", "?", "*"},
	"@annually": {"0", "0", "0", "1", "1", "?", "*"},
	"@monthly":  {"0", "0", "0", "1", "*", "?", "*"},
	"@weekly":   {"0", "0", "0", "?", "*", "0", "*"},
	"@daily":    {"0", "0", "0", "*", "*", "?", "*"},
	"@midnight": {"0", "0", "0", "*", "*", "?", "*"},
	"@hourly":   {"0", "0", "*", "*", "*", "?", "*"},
}

func parseDescriptor(expr, s string) (Schedule, error) {
	f := strings.Fields(s)
	if f[0] == "@every" {
		var phase int64
		switch {
		case len(f) == 4 && f[2] == "from":
			// The anchor is read from the original text: RFC 3339 wants an
			// upper-case T and Z.
			at, err := time.Parse(time.RFC3339, strings.ToUpper(strings.Fields(expr)[3]))
			if err != nil {
				return nil, fmt.Errorf("%w %q: @every anchor %q is not an RFC 3339 time such as 2026-12-01T08:00:05Z", ErrInvalidCron, expr, strings.Fields(expr)[3])
			}
			if at.Nanosecond() != 0 {
				return nil, fmt.Errorf("%w %q: @every anchor %s is not on a whole second", ErrInvalidCron, expr, at.Format(time.RFC3339Nano))
			}
			phase = at.Unix()
		case len(f) != 2:
			return nil, fmt.Errorf("%w %q: @every takes exactly one duration, optionally \"from\" an anchor time, e.g. @every 30s or @every 1h from 2026-12-01T08:00:05Z", ErrInvalidCron, expr)
		}
		d, err := time.ParseDuration(f[1])
		if err != nil {
			return nil, fmt.Errorf("%w %q: @every duration %q is not a Go duration such as 30s or 1h30m", ErrInvalidCron, expr, f[1])
		}
		if d < EveryMin {
			return nil, fmt.Errorf("%w %q: @every duration %s is shorter than %s", ErrInvalidCron, expr, d, EveryMin)
		}
		if d%time.Second != 0 {
			return nil, fmt.Errorf("%w %q: @every duration %s is not a whole number of seconds", ErrInvalidCron, expr, d)
		}
		period := int64(d / time.Second)
		// Keep the phase in [0, period) so Next's arithmetic cannot overflow
		// for any representable anchor.
		phase %= period
		if phase < 0 {
			phase += period
		}
		return everySchedule{expr: expr, period: period, phase: phase}, nil
	}
	fields, ok := descriptors[f[0]]
	if !ok {
		return nil, fmt.Errorf("%w %q: unknown descriptor %s (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every)", ErrInvalidCron, expr, f[0])
	}
	if len(f) != 1 {
		return nil, fmt.Errorf("%w %q: descriptor %s takes no arguments", ErrInvalidCron, expr, f[0])
	}
	return compile(expr, fields, &fieldSpecs, true)
}

// neverRef is where Parse starts its "can this ever fire" check: just before
// the first representable year, so every representable instant is covered
// and the result does not depend on the current date.
var neverRef = time.Date(yearMin-1, 12, 31, 23, 59, 59, 0, time.UTC)

// monthClass groups months with the same last day, to expand L-n into a
// literal day. February is split by leap year.
type monthClass struct {
	months  []int
	lastDay int
	leap    int // 0: any year, 1: leap years only, -1: other years only
}

var monthClasses = []monthClass{
	{months: []int{1, 3, 5, 7, 8, 10, 12}, lastDay: 31},
	{months: []int{4, 6, 9, 11}, lastDay: 30},
	{months: []int{2}, lastDay: 29, leap: 1},
	{months: []int{2}, lastDay: 28, leap: -1},
}

// noDay is a day-of-month that cronexpr ignores in months shorter than 31
// days. It stands in for an L-n that falls before the 1st, keeping the field
// restricted so the day-of-month/day-of-week "or" still works.
const noDay = 31

// compile validates seven lower-cased fields and builds the schedule.
// specs are the dialect's fields; the fields they produce number days of the
// week the Unix way whatever the dialect. cronDays applies cron's rule for
// combining the two day fields (see dayRule); the quartz dialect needs none,
// since one of its day fields is always ?.
func compile(expr string, raw [fieldCount]string, specs *[fieldCount]fieldSpec, cronDays bool) (Schedule, error) {
	var fs [fieldCount]field
	for i, spec := range specs {
		f, err := spec.parse(raw[i])
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrInvalidCron, expr, err)
		}
		fs[i] = f
	}

	var texts [][fieldCount]string
	var base [fieldCount]string
	for i, f := range fs {
		base[i] = f.text()
	}
	var dowFilter *field
	if cronDays {
		dowFilter = dayRule(raw, fs, &base)
	}
	dom := fs[fieldDom]
	if len(dom.lastMinus) == 0 {
		texts = append(texts, base)
	} else {
		// One cronexpr expression per month length, with each L-n replaced by
		// the day it names in those months; the schedule fires at the
		// earliest of them.
		months := fs[fieldMonth].set(fieldSpecs[fieldMonth])
		years := fs[fieldYear].set(fieldSpecs[fieldYear])
		for _, class := range monthClasses {
			m := intersect(months, class.months)
			y := filterLeap(years, class.leap)
			if len(m) == 0 || len(y) == 0 {
				continue
			}
			var days []int
			for _, n := range dom.lastMinus {
				if d := class.lastDay - n; d >= 1 {
					days = append(days, d)
				}
			}
			if len(days) == 0 {
				days = []int{noDay}
			}
			t := base
			t[fieldDom] = dom.text(days...)
			t[fieldMonth] = field{values: m}.text()
			if class.leap != 0 {
				t[fieldYear] = field{values: y}.text()
			}
			texts = append(texts, t)
		}
	}

	s := &cronSchedule{expr: expr, dow: dowFilter}
	for _, t := range texts {
		e, err := cronexpr.Parse(strings.Join(t[:], " "))
		if err != nil {
			// The fields were validated above, so this is a gap between that
			// validation and cronexpr's; report it rather than panic.
			return nil, fmt.Errorf("%w %q: %w", ErrInvalidCron, expr, err)
		}
		s.parts = append(s.parts, e)
	}
	hours := fs[fieldHour]
	s.realTime = hours.all || len(hours.values) == 24
	if s.nextWall(neverRef).IsZero() {
		return nil, fmt.Errorf("%w %q: never fires (no matching date between %d and %d)", ErrInvalidCron, expr, yearMin, yearMax)
	}
	return s, nil
}

// dayRule applies cron's rule for the two day fields to the cronexpr texts
// in base, and returns the day-of-week field to filter matches with when both
// must match, or nil. The rule is Vixie cron's and cronie's (entry.c marks a
// day field "star" when its text starts with *, cron.c's find_jobs then
// matches): when either day field starts with * (or ?, which axe reads as *),
// a day must match both fields; otherwise it must match either. So
// "0 12 */2 * MON" is the odd-numbered days that are Mondays, and
// "0 12 1-31/2 * MON" the odd-numbered days and every Monday. cronexpr knows
// only "either" (and a bare * as unrestricted), so "both" with two restricted
// fields matches the day of month with cronexpr and the day of week here.
func dayRule(raw [fieldCount]string, fs [fieldCount]field, base *[fieldCount]string) *field {
	dom, dow := fs[fieldDom], fs[fieldDow]
	starred := func(s string) bool { return s != "" && (s[0] == '*' || s[0] == '?') }
	if starred(raw[fieldDom]) || starred(raw[fieldDow]) {
		if dom.all || dow.all {
			// One field covers every day; the other alone decides, which is
			// what cronexpr does with an unrestricted field.
			return nil
		}
		base[fieldDow] = "*"
		return &dow
	}
	if dom.all || dow.all {
		// A * later in a list ("5,*"): the field covers every day and neither
		// starts with *, so either matching means every day matches.
		base[fieldDom], base[fieldDow] = "*", "*"
	}
	return nil
}

func intersect(a, b []int) []int {
	var out []int
	for _, v := range a {
		for _, w := range b {
			if v == w {
				out = append(out, v)
			}
		}
	}
	return out
}

func filterLeap(years []int, leap int) []int {
	if leap == 0 {
		return years
	}
	var out []int
	for _, y := range years {
		isLeap := y%4 == 0 && (y%100 != 0 || y%400 == 0)
		if isLeap == (leap > 0) {
			out = append(out, y)
		}
	}
	return out
}

// cronSchedule is a field-based expression.
type cronSchedule struct {
	expr string
	// parts are matched with cronexpr in "wall space": a wall-clock reading
	// encoded as the same fields in UTC, where no DST exists. Next maps the
	// result back to loc. Usually one part; L-n needs one per month length.
	parts []*cronexpr.Expression
	// realTime is set when the hour field covers every hour; see the package
	// documentation for why that changes the DST rule.
	realTime bool
	// dow, when set, is a day-of-week field a match must also satisfy: cron's
	// "both day fields" case, which the parts (day of week left *) do not
	// check (see dayRule).
	dow *field
}

// String returns the expression as given to Parse.
func (s *cronSchedule) String() string { return s.expr }

// nextWall returns the earliest matching wall time strictly after w (at
// one-second resolution), or zero if none exists by yearMax.
func (s *cronSchedule) nextWall(w time.Time) time.Time {
	if w.Before(neverRef) {
		// cronexpr treats a zero input as "no answer"; nothing matches
		// before yearMin anyway.
		w = neverRef
	}
	for {
		var best time.Time
		for _, p := range s.parts {
			// cronexpr's Next writes scratch state into the Expression, so work
			// on a copy: that keeps a Schedule safe for concurrent use without a
			// lock on the hot path.
			e := *p
			c := e.Next(w)
			if !c.IsZero() && (best.IsZero() || c.Before(best)) {
				best = c
			}
		}
		if best.IsZero() || s.dow == nil || s.dow.matchDay(best) {
			return best
		}
		// The day of month matched but not the day of week: go on from the
		// last second of that day. A day-of-month set meets every weekday
		// within a few years, so this ends quickly.
		w = time.Date(best.Year(), best.Month(), best.Day(), 23, 59, 59, 0, time.UTC)
	}
}

// earliestFire is an instant before which no expression can fire in any
// zone: 1970-01-01 00:00 wall time is never earlier than this. Searches that
// start earlier start here, so they do not walk centuries of transitions.
var earliestFire = time.Date(yearMin-1, 12, 30, 0, 0, 0, 0, time.UTC)

// Next implements Schedule.
func (s *cronSchedule) Next(after time.Time, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	if after.Before(earliestFire) {
		after = earliestFire
	}
	if s.realTime {
		return s.nextRealTime(after, loc)
	}
	return s.nextWallClock(after, loc)
}

// nextRealTime walks the zone's constant-offset periods from after: within
// one period wall time is real time plus a fixed offset, so the first match
// in wall space is the first real instant whose wall clock matches.
func (s *cronSchedule) nextRealTime(after time.Time, loc *time.Location) time.Time {
	from, inclusive := after, false
	for {
		t := from.In(loc)
		_, off := t.Zone()
		end := zoneEnd(t)
		w := toWall(from, off)
		if inclusive {
			// nextWall is strictly after; step back so `from` itself counts.
			w = w.Add(-time.Nanosecond)
		}
		c := s.nextWall(w)
		if c.IsZero() {
			return time.Time{}
		}
		r := fromWall(c, off).In(loc)
		if end.IsZero() || r.Before(end) {
			return r
		}
		// The match lies past this period, where the offset differs; search
		// again from the start of the next period.
		from, inclusive = end, true
	}
}

// nextWallClock searches in wall space and maps each match to the instant it
// fires at (see resolveWall).
func (s *cronSchedule) nextWallClock(after time.Time, loc *time.Location) time.Time {
	t := after.In(loc)
	_, off := t.Zone()
	w := toWall(after, off)
	for {
		c := s.nextWall(w)
		if c.IsZero() {
			return time.Time{}
		}
		r := resolveWall(c, loc)
		if r.After(after) {
			return r
		}
		// The wall time c first occurred at or before `after`: `after` is in
		// the second pass of a repeated hour, and the wall times between c
		// and after's reading in r's offset (within r's period) first
		// occurred no later than `after` either. Skip them in one step.
		w = c
		_, rOff := r.Zone()
		limit := toWall(after, rOff)
		if end := zoneEnd(r); !end.IsZero() {
			limit = minTime(limit, toWall(end, rOff).Add(-time.Nanosecond))
		}
		if limit.After(w) {
			w = limit
		}
	}
}

// transitionMargin is larger than any change of UTC offset in the tz
// database (Pacific/Apia skipped a whole day in 2011). A wall time further
// than this from a transition occurs exactly once.
const transitionMargin = 48 * time.Hour

// resolveWall returns the instant at which the wall time c (encoded in UTC)
// fires in loc: its first occurrence, or, when c falls in a spring-forward
// gap, the instant the gap ends.
func resolveWall(c time.Time, loc *time.Location) time.Time {
	t := time.Date(c.Year(), c.Month(), c.Day(), c.Hour(), c.Minute(), c.Second(), 0, loc)
	start, _ := t.ZoneBounds()
	end := zoneEnd(t)
	if (start.IsZero() || t.Sub(start) > transitionMargin) && (end.IsZero() || end.Sub(t) > transitionMargin) {
		return t
	}
	// Near a transition time.Date may pick either occurrence, or normalise a
	// missing time either way, so try the offsets of this period and its
	// neighbours and keep the earliest instant that really reads c.
	_, off := t.Zone()
	offsets := []int{off}
	if !start.IsZero() {
		_, o := start.Add(-time.Nanosecond).Zone()
		offsets = append(offsets, o)
	}
	if !end.IsZero() {
		_, o := end.Zone()
		offsets = append(offsets, o)
	}
	var best time.Time
	for _, o := range offsets {
		r := fromWall(c, o).In(loc)
		if _, ro := r.Zone(); ro != o {
			continue // c read with offset o lands outside o's period
		}
		if best.IsZero() || r.Before(best) {
			best = r
		}
	}
	if !best.IsZero() {
		return best
	}
	// No instant reads c: it is inside a gap, which ends at the transition
	// next to t. time.Date put t on one side of it.
	if toWall(t, off).After(c) && !start.IsZero() {
		return start
	}
	if !end.IsZero() {
		return end
	}
	return t // unreachable: a gap needs a transition
}

// zoneEnd returns the end of t's constant-offset period, as t.ZoneBounds
// does, or the zero time when the offset never changes again.
//
// Past the last transition in a zone's table Go derives the bounds from the
// zone's TZ rule, counting every year as 365 days; on 31 December of a leap
// year it reports an end that is not after t (Go 1.26, e.g. New York on
// 2040-12-31). Searching from such an end would never advance, so in that
// case zoneEnd looks an hour ahead: an unchanged offset there makes that hour
// a safe, if short, period (no zone changes its offset twice within an
// hour); a changed one is located to the second by bisection.
func zoneEnd(t time.Time) time.Time {
	_, end := t.ZoneBounds()
	if end.IsZero() || end.After(t) {
		return end
	}
	loc := t.Location()
	offsetAt := func(sec int64) int {
		_, off := time.Unix(sec, 0).In(loc).Zone()
		return off
	}
	// Transitions fall on whole seconds, so t's second has t's offset.
	lo, hi := t.Unix(), t.Unix()+3600
	off := offsetAt(lo)
	if offsetAt(hi) == off {
		return time.Unix(hi, 0).In(loc)
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if offsetAt(mid) == off {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Unix(hi, 0).In(loc)
}

// toWall encodes t's wall clock at UTC offset off (seconds) as a UTC time.
func toWall(t time.Time, off int) time.Time {
	return t.UTC().Add(time.Duration(off) * time.Second)
}

// fromWall is the inverse of toWall.
func fromWall(w time.Time, off int) time.Time {
	return w.Add(-time.Duration(off) * time.Second)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// everySchedule is "@every d [from anchor]": the instants a whole number of
// periods away from the anchor, the Unix epoch by default.
type everySchedule struct {
	expr   string
	period int64 // seconds, >= 1
	phase  int64 // seconds, the anchor modulo period: 0 <= phase < period
}

// String returns the expression as given to Parse.
func (e everySchedule) String() string { return e.expr }

// Next implements Schedule. The zone only sets the location of the result.
func (e everySchedule) Next(after time.Time, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	// Unix() floors, so sec <= after < sec+1 and the next multiple above sec
	// is strictly after `after`.
	sec := after.Unix() - e.phase
	k := sec / e.period
	if sec%e.period != 0 && sec < 0 {
		k-- // floor division
	}
	if k >= (math.MaxInt64-e.phase)/e.period {
		return time.Time{} // the next multiple is not representable
	}
	return time.Unix((k+1)*e.period+e.phase, 0).In(loc)
}

// NextN parses expr in the unix dialect and returns its next n fire times
// strictly after `after`, evaluated in and expressed in loc. It returns fewer
// than n when the schedule stops firing. Errors wrap ErrInvalidCron,
// ErrInvalidTimezone (nil loc) or ErrInvalidCount (n outside 1..NextNMax).
func NextN(expr string, loc *time.Location, after time.Time, n int) ([]time.Time, error) {
	return NextNIn(expr, DialectUnix, loc, after, n)
}

// NextNIn is NextN for an expression in dialect d.
func NextNIn(expr string, d Dialect, loc *time.Location, after time.Time, n int) ([]time.Time, error) {
	if loc == nil {
		return nil, fmt.Errorf("%w: no location given", ErrInvalidTimezone)
	}
	if n < 1 || n > NextNMax {
		return nil, fmt.Errorf("%w: %d is outside 1..%d", ErrInvalidCount, n, NextNMax)
	}
	s, err := ParseIn(expr, d)
	if err != nil {
		return nil, err
	}
	out := make([]time.Time, 0, n)
	t := after
	for len(out) < n {
		t = s.Next(t, loc)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out, nil
}

// sevenFields spreads an expression's 5 (minute first), 6 (second first) or 7 (second first,
// year last) fields over the seven the parser reads; ok is false for another count.
func sevenFields(f []string) (fields [fieldCount]string, ok bool) {
	switch len(f) {
	case 5:
		return [fieldCount]string{"0", f[0], f[1], f[2], f[3], f[4], "*"}, true
	case 6:
		return [fieldCount]string{f[0], f[1], f[2], f[3], f[4], f[5], "*"}, true
	case 7:
		copy(fields[:], f)
		return fields, true
	}
	return fields, false
}
