package benchkit

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Percentile returns the nearest-rank p-quantile (0 <= p <= 1) of sorted, or 0 when it is
// empty.
func Percentile[T int64 | float64](sorted []T, p float64) T {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)) + 0.5)
	i = min(max(i-1, 0), len(sorted)-1)
	return sorted[i]
}

// Summary is the spread of repeated measurements of one figure.
type Summary struct {
	N                int
	Median, Min, Max float64
}

// Summarize returns the median, min and max of xs.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Summary{N: len(s), Median: med, Min: s[0], Max: s[len(s)-1]}
}

// Format renders the summary with verb (e.g. "%.0f") as "median (min–max)", or just the
// value when there was one measurement.
func (s Summary) Format(verb string) string {
	if s.N <= 1 {
		return fmt.Sprintf(verb, s.Median)
	}
	return fmt.Sprintf(verb+" ("+verb+"–"+verb+")", s.Median, s.Min, s.Max)
}

// Table is a small aligned text table for b.Log and reports.
type Table struct {
	rows [][]string
}

// NewTable starts a table with its header row.
func NewTable(header ...string) *Table { return &Table{rows: [][]string{header}} }

// Row appends a row.
func (t *Table) Row(cells ...string) { t.rows = append(t.rows, cells) }

// String renders the table with columns separated by two spaces.
func (t *Table) String() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, r := range t.rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	_ = w.Flush()
	return b.String()
}

// Series collects the measurements of named figures over repeated runs, in the order the
// figures were first recorded.
type Series struct {
	names []string
	vals  map[string][]float64
}

// Add records one measurement of figure name.
func (s *Series) Add(name string, v float64) {
	if s.vals == nil {
		s.vals = make(map[string][]float64)
	}
	if _, ok := s.vals[name]; !ok {
		s.names = append(s.names, name)
	}
	s.vals[name] = append(s.vals[name], v)
}

// Summary returns the spread of figure name.
func (s *Series) Summary(name string) Summary { return Summarize(s.vals[name]) }

// Table renders every figure as a row: name, runs, median, min, max.
func (s *Series) Table() string {
	t := NewTable("figure", "runs", "median", "min", "max")
	for _, n := range s.names {
		m := s.Summary(n)
		t.Row(n, fmt.Sprint(m.N), Num(m.Median), Num(m.Min), Num(m.Max))
	}
	return t.String()
}

// Num renders a measurement with as many decimals as its size deserves: 123456, 12.3, 1.23.
func Num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100 || v == 0:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 0.01:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
}
