package cron

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Field positions in the normalised seven-field form.
const (
	fieldSecond = iota
	fieldMinute
	fieldHour
	fieldDom
	fieldMonth
	fieldDow
	fieldYear
	fieldCount
)

// yearMin and yearMax are the years cronexpr can represent; a schedule has
// no fire time outside them.
const (
	yearMin = 1970
	yearMax = 2099
)

// fieldSpec describes one field. Values are validated here rather than left
// to cronexpr because cronexpr accepts some inputs (reversed ranges, empty
// lists) that make its Next panic or loop, and because axe must know the hour
// set (to pick the DST rule) and the month and year sets (to expand L-n).
type fieldSpec struct {
	name string
	// min and max bound single values.
	min, max int
	// starMax is the end of the range * covers; it differs from max only for
	// day-of-week, where 7 is an alias of Sunday (0).
	starMax int
	names   map[string]int
	// offset is subtracted from a value to give the internal number: 1 for
	// Quartz's day-of-week (1 = SUN), 0 elsewhere. Internally every day of
	// the week is numbered the Unix way, 0 = SUN.
	offset int
	// wrapSpan is set in the quartz dialect: a reversed range a-b runs from
	// a up to the field's end and on from its start to b, as Quartz's
	// CronExpression does. It is the number of values in the field.
	wrapSpan int
	// quartz marks the fields of the quartz dialect, which read names the
	// way Quartz's CronExpression does (see quartzNames).
	quartz bool
}

var (
	monthNames = map[string]int{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
		"january": 1, "february": 2, "march": 3, "april": 4, "june": 6, "july": 7,
		"august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
	}
	dowNames = map[string]int{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
		"sunday": 0, "monday": 1, "tuesday": 2, "wednesday": 3, "thursday": 4,
		"friday": 5, "saturday": 6,
	}
	quartzDowNames = map[string]int{
		"sun": 1, "mon": 2, "tue": 3, "wed": 4, "thu": 5, "fri": 6, "sat": 7,
		"sunday": 1, "monday": 2, "tuesday": 3, "wednesday": 4, "thursday": 5,
		"friday": 6, "saturday": 7,
	}

	fieldSpecs = [fieldCount]fieldSpec{
		fieldSecond: {name: "second", min: 0, max: 59, starMax: 59},
		fieldMinute: {name: "minute", min: 0, max: 59, starMax: 59},
		fieldHour:   {name: "hour", min: 0, max: 23, starMax: 23},
		fieldDom:    {name: "day-of-month", min: 1, max: 31, starMax: 31},
		fieldMonth:  {name: "month", min: 1, max: 12, starMax: 12, names: monthNames},
		fieldDow:    {name: "day-of-week", min: 0, max: 7, starMax: 6, names: dowNames},
		fieldYear:   {name: "year", min: yearMin, max: yearMax, starMax: yearMax},
	}

	// quartzSpecs are the fields of the quartz dialect: days of the week
	// are 1 (SUN) to 7 (SAT), and reversed ranges wrap (years excepted).
	quartzSpecs = func() [fieldCount]fieldSpec {
		q := fieldSpecs
		spans := [fieldCount]int{60, 60, 24, 31, 12, 7, 0}
		for i := range q {
			q[i].wrapSpan = spans[i]
			q[i].quartz = true
		}
		q[fieldDow] = fieldSpec{name: "day-of-week", min: 1, max: 7, starMax: 7,
			names: quartzDowNames, offset: 1, wrapSpan: 7, quartz: true}
		return q
	}()
)

// field is one parsed field.
type field struct {
	// all is set by * or ?. For day-of-month and day-of-week it also means
	// "unrestricted", which changes how the two combine.
	all bool
	// values holds the plain values, sorted and unique; day-of-week 7 is
	// folded into 0.
	values []int
	// special holds Quartz items in the form cronexpr reads: "l", "lw",
	// "15w" (day-of-month), "5l", "5#3" (day-of-week).
	special []string
	// lastMinus holds n for each day-of-month item L-n. cronexpr has no L-n,
	// so compile expands it per month length.
	lastMinus []int
}

// set returns the values the field covers, with * expanded.
func (f field) set(spec fieldSpec) []int {
	if !f.all {
		return f.values
	}
	out := make([]int, 0, spec.starMax-spec.min+1)
	for v := spec.min; v <= spec.starMax; v++ {
		out = append(out, v)
	}
	return out
}

// text renders the field for cronexpr. extraDays are literal days added to a
// day-of-month field (the L-n expansion).
func (f field) text(extraDays ...int) string {
	if f.all {
		return "*"
	}
	vals := f.values
	if len(extraDays) > 0 {
		vals = append(slices.Clone(vals), extraDays...)
		slices.Sort(vals)
		vals = slices.Compact(vals)
	}
	items := progressions(vals)
	items = append(items, f.special...)
	return strings.Join(items, ",")
}

// progressions writes sorted values as few list items as a greedy split into
// arithmetic progressions allows ("0-55/5" rather than twelve numbers).
// cronexpr matches every list item against several regular expressions, so
// short lists make Parse faster (about 1.7x for "*/5 * * * *").
func progressions(vals []int) []string {
	var items []string
	for i := 0; i < len(vals); {
		j := i // vals[i..j] is the progression that starts at i
		if i+2 < len(vals) {
			step := vals[i+1] - vals[i]
			for j+1 < len(vals) && vals[j+1]-vals[j] == step {
				j++
			}
		}
		switch {
		case j-i < 2: // one or two values are no shorter as a range
			items = append(items, strconv.Itoa(vals[i]))
			j = i
		case vals[i+1]-vals[i] == 1:
			items = append(items, fmt.Sprintf("%d-%d", vals[i], vals[j]))
		default:
			items = append(items, fmt.Sprintf("%d-%d/%d", vals[i], vals[j], vals[i+1]-vals[i]))
		}
		i = j + 1
	}
	return items
}

// parse parses one lower-cased field.
func (spec fieldSpec) parse(s string) (field, error) {
	var f field
	seen := make(map[int]bool)
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return field{}, fmt.Errorf("%s field %q has an empty list item", spec.name, s)
		}
		if item == "*" || item == "?" {
			f.all = true
			continue
		}
		if item == "l" && spec.offset > 0 {
			// Quartz: L alone in day-of-week is the week's last day, SAT.
			seen[spec.max] = true
			continue
		}
		if ok, err := spec.parseSpecial(item, &f); ok || err != nil {
			if err != nil {
				return field{}, err
			}
			continue
		}
		if spec.quartz && spec.names != nil && isLetter(item[0]) {
			lo, hi, err := spec.quartzNames(item)
			if err != nil {
				return field{}, err
			}
			for v := lo; v <= hi; v++ {
				seen[spec.unwrap(v)] = true
			}
			continue
		}
		lo, hi, step, err := spec.parseRange(item)
		if err != nil {
			return field{}, err
		}
		for v := lo; v <= hi; v += step {
			seen[spec.unwrap(v)] = true
		}
	}
	if spec.max > spec.starMax && seen[spec.max] {
		// Day-of-week 7 is Sunday again; keep one number for it.
		delete(seen, spec.max)
		seen[spec.min] = true
	}
	if f.all {
		// cronexpr treats a field holding any * as unrestricted; do the same
		// and drop the other items, which were still validated above.
		return field{all: true}, nil
	}
	for v := range seen {
		f.values = append(f.values, v-spec.offset)
	}
	slices.Sort(f.values)
	slices.Sort(f.special)
	f.special = slices.Compact(f.special)
	slices.Sort(f.lastMinus)
	f.lastMinus = slices.Compact(f.lastMinus)
	return f, nil
}

// parseRange parses "v", "a-b", "*/n", "v/n" and "a-b/n" into an inclusive
// range and a step.
func (spec fieldSpec) parseRange(item string) (lo, hi, step int, err error) {
	base, stepText, hasStep := strings.Cut(item, "/")
	step = 1
	if hasStep {
		step, err = spec.parseStep(stepText)
		if err != nil {
			return 0, 0, 0, err
		}
	}
	if base == "*" || base == "?" {
		return spec.min, spec.starMax, step, nil
	}
	first, last, isRange := strings.Cut(base, "-")
	lo, err = spec.value(first)
	if err != nil {
		return 0, 0, 0, err
	}
	switch {
	case isRange:
		if spec.quartz && last != "" && isLetter(last[0]) {
			// Quartz refuses a range from a number to a name (2-FRI).
			return 0, 0, 0, fmt.Errorf("%s range %q mixes a number and a name, which Quartz refuses; write both ends as numbers or both as names", spec.name, base)
		}
		hi, err = spec.value(last)
		if err != nil {
			return 0, 0, 0, err
		}
		if hi == spec.min && lo > hi && spec.max > spec.starMax {
			// A day-of-week range may end on Sunday: SAT-SUN is 6-7. SUN-SUN
			// (0-0) is Sunday alone, not 0-7.
			hi = spec.max
		}
		if lo > hi && spec.wrapSpan > 0 {
			// Quartz: FRI-MON is FRI, SAT, SUN, MON; unwrap maps the values
			// past the end back to the start.
			hi += spec.wrapSpan
		} else if lo > hi {
			return 0, 0, 0, fmt.Errorf("%s range %q is reversed (wrap-around ranges are not supported)", spec.name, base)
		}
	case hasStep:
		// "5/15" runs from 5 to the end of the field.
		hi = max(lo, spec.starMax)
	default:
		hi = lo
	}
	return lo, hi, step, nil
}

// quartzNames reads an item of the quartz dialect's month or day-of-week
// field that starts with a name, as Quartz 2.3's CronExpression does: a name,
// or a range of two names, and a step after either is ignored (MON-FRI/2 is
// Monday to Friday, JAN/3 is January alone). Quartz also ignores anything
// else after a name, and refuses a range of a name and a number; the quartz
// dialect refuses both, naming the item. It returns the range, lo > hi never
// (a reversed range wraps as elsewhere in the dialect).
func (spec fieldSpec) quartzNames(item string) (lo, hi int, err error) {
	base, step, hasStep := strings.Cut(item, "/")
	if hasStep {
		if _, ok := smallInt(step); !ok {
			return 0, 0, fmt.Errorf("%s step %q must be a number", spec.name, step)
		}
	}
	first, last, isRange := strings.Cut(base, "-")
	lo, ok := spec.names[first]
	if !ok {
		return 0, 0, fmt.Errorf("%s value %q is not a number%s", spec.name, first, spec.nameHint())
	}
	if !isRange {
		return lo, lo, nil
	}
	if len(first) > 3 {
		// Quartz reads three letters and then looks for '-': MONDAY-FRIDAY is
		// Monday alone there, surely not what was meant.
		return 0, 0, fmt.Errorf("%s range %q: Quartz reads only the first three letters of %s before a range; write %s-%s", spec.name, base, first, strings.ToUpper(first[:3]), strings.ToUpper(last[:min(3, len(last))]))
	}
	hi, ok = spec.names[last]
	if !ok {
		if _, num := smallInt(last); num {
			return 0, 0, fmt.Errorf("%s range %q mixes a name and a number, which Quartz refuses; write both ends as names or both as numbers", spec.name, base)
		}
		return 0, 0, fmt.Errorf("%s value %q is not a number%s", spec.name, last, spec.nameHint())
	}
	if lo > hi {
		hi += spec.wrapSpan
	}
	return lo, hi, nil
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' }

// unwrap maps a value of a wrapped range back into the field: past the end
// it continues from the start (hour 25 is 1, day-of-week 9 is 2 = MON).
func (spec fieldSpec) unwrap(v int) int {
	if v <= spec.max || spec.wrapSpan == 0 {
		return v
	}
	return v - spec.wrapSpan
}

// day returns the internal (0 = SUN) number of day-of-week value d.
func (spec fieldSpec) day(d int) int {
	if spec.offset > 0 {
		return d - spec.offset
	}
	return d % 7
}

// parseStep parses the n of "/n". It must be at least 1 and no wider than
// the field, so "*/60" in the minute field is an error rather than a
// schedule that fires once an hour by accident.
func (spec fieldSpec) parseStep(s string) (int, error) {
	limit := spec.starMax - spec.min
	n, ok := smallInt(s)
	if !ok || n < 1 || n > limit {
		return 0, fmt.Errorf("%s step %q must be a number from 1 to %d", spec.name, s, limit)
	}
	return n, nil
}

// value parses a number or a name and checks its range.
func (spec fieldSpec) value(s string) (int, error) {
	if v, ok := spec.names[s]; ok {
		return v, nil
	}
	n, ok := smallInt(s)
	if !ok {
		return 0, fmt.Errorf("%s value %q is not a number%s", spec.name, s, spec.nameHint())
	}
	if n < spec.min || n > spec.max {
		return 0, fmt.Errorf("%s value %d is out of range %d-%d", spec.name, n, spec.min, spec.max)
	}
	return n, nil
}

func (spec fieldSpec) nameHint() string {
	switch spec.name {
	case "month":
		return " or month name"
	case "day-of-week":
		return " or day name"
	}
	return ""
}

// parseSpecial recognises the Quartz items L, LW, L-n, nW (day-of-month) and
// nL, n#k (day-of-week). It reports false when item is none of them.
func (spec fieldSpec) parseSpecial(item string, f *field) (bool, error) {
	switch spec.name {
	case "day-of-month":
		switch {
		case item == "l" || item == "lw":
			f.special = append(f.special, item)
			return true, nil
		case strings.HasPrefix(item, "l-"):
			n, ok := smallInt(item[2:])
			if !ok || n < 1 || n > 30 {
				return true, fmt.Errorf("day-of-month item %q: L-n needs n from 1 to 30", item)
			}
			f.lastMinus = append(f.lastMinus, n)
			return true, nil
		case strings.HasSuffix(item, "w"):
			d, err := spec.value(item[:len(item)-1])
			if err != nil {
				return true, fmt.Errorf("day-of-month item %q: %w", item, err)
			}
			f.special = append(f.special, strconv.Itoa(d)+"w")
			return true, nil
		}
	case "day-of-week":
		if day, nth, ok := strings.Cut(item, "#"); ok {
			d, err := spec.value(day)
			if err != nil {
				return true, fmt.Errorf("day-of-week item %q: %w", item, err)
			}
			n, ok := smallInt(nth)
			if !ok || n < 1 || n > 5 {
				return true, fmt.Errorf("day-of-week item %q: the week after # must be 1 to 5", item)
			}
			f.special = append(f.special, fmt.Sprintf("%d#%d", spec.day(d), n))
			return true, nil
		}
		if day, ok := strings.CutSuffix(item, "l"); ok {
			d, err := spec.value(day)
			if err != nil {
				return true, fmt.Errorf("day-of-week item %q: %w", item, err)
			}
			f.special = append(f.special, fmt.Sprintf("%dl", spec.day(d)))
			return true, nil
		}
	}
	return false, nil
}

// smallInt parses an unsigned decimal of at most four digits; longer inputs
// are never valid in any field and are refused before strconv sees them.
func smallInt(s string) (int, bool) {
	if s == "" || len(s) > 4 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// matchDay reports whether the date of t (wall time encoded in UTC) matches
// day-of-week field f: a plain weekday, or a special item (5l, 5#3).
func (f *field) matchDay(t time.Time) bool {
	wd := int(t.Weekday())
	if slices.Contains(f.values, wd) {
		return true
	}
	days := time.Date(t.Year(), t.Month()+1, 0, 0, 0, 0, 0, time.UTC).Day()
	for _, sp := range f.special {
		day, nth, isNth := strings.Cut(sp, "#")
		if !isNth {
			day = strings.TrimSuffix(sp, "l")
		}
		d, _ := strconv.Atoi(day)
		if d%7 != wd {
			continue
		}
		if isNth {
			if n, _ := strconv.Atoi(nth); (t.Day()-1)/7 == n-1 {
				return true
			}
		} else if t.Day()+7 > days {
			return true
		}
	}
	return false
}
