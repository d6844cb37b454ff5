package cron

import (
	"testing"
	"time"

	"github.com/hashicorp/cronexpr"
)

var sinkTime time.Time

var sinkSchedule Schedule

// BenchmarkNext measures Next per mode and zone. The baseline is cronexpr's
// own Next on the same expression in UTC, which axe wraps: the difference is
// the cost of the DST handling and the concurrency-safe copy.
func BenchmarkNext(b *testing.B) {
	ny := mustLoc(b, "America/New_York")
	after := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		expr string
		loc  *time.Location
	}{
		{"expr=every5m/zone=UTC", "0 */5 * * * *", time.UTC},
		{"expr=every5m/zone=New_York", "0 */5 * * * *", ny},
		{"expr=daily0230/zone=UTC", "0 30 2 * * ?", time.UTC},
		{"expr=daily0230/zone=New_York", "0 30 2 * * ?", ny},
		{"expr=lastMinus3/zone=New_York", "0 0 9 L-3 * ?", ny},
		{"expr=everyDuration/zone=New_York", "@every 30s", ny},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s, err := Parse(c.expr)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			t := after
			for b.Loop() {
				t = s.Next(t, c.loc)
				if t.Year() > 2090 {
					t = after
				}
			}
			sinkTime = t
		})
	}
	for _, c := range []struct{ name, expr string }{
		{"baseline=cronexpr/expr=every5m/zone=UTC", "0 0 */5 * * * *"},
		{"baseline=cronexpr/expr=daily0230/zone=UTC", "0 30 2 * * ? *"},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := cronexpr.MustParse(c.expr)
			b.ReportAllocs()
			t := after
			for b.Loop() {
				t = e.Next(t)
				if t.Year() > 2090 {
					t = after
				}
			}
			sinkTime = t
		})
	}
}

// BenchmarkParse measures Parse, including the never-fires check.
func BenchmarkParse(b *testing.B) {
	for _, c := range []struct{ name, expr string }{
		{"expr=five", "*/5 * * * *"},
		{"expr=quartz", "0 15 10 ? * MON-FRI 2026-2030"},
		{"expr=lastMinus3", "0 0 9 L-3 * ?"},
		{"expr=every", "@every 1h30m"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s, err := Parse(c.expr)
				if err != nil {
					b.Fatal(err)
				}
				sinkSchedule = s
			}
		})
	}
}
