package cron

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"
)

// leapEveZone names a synthetic zone for tests. Its rule (UTC+1 from the last
// Sunday of December, 23:00, to 1 January, 00:30) makes Go's offsets change
// at 2041-01-01T00:00Z, within an hour of a leap-year New Year's Eve on
// which time.ZoneBounds reports a period end that is not after the time
// asked about. It is the one case where zoneEnd must bisect.
const leapEveZone = "Test/LeapEve"

var leapEve = sync.OnceValues(func() (*time.Location, error) {
	return time.LoadLocationFromTZData(leapEveZone, tzif("STD0DST-1,M12.5.0/23,J1/0:30"))
})

// tzif builds a TZif version 2 file with one transition (at the epoch, to
// UTC+0) and the given POSIX TZ footer, which governs all later times.
func tzif(footer string) []byte {
	var b []byte
	header := func() {
		b = append(b, "TZif2"...)
		b = append(b, make([]byte, 15)...)
		for _, n := range []uint32{0, 0, 0, 1, 2, 8} { // isut, isstd, leap, time, type, char counts
			b = binary.BigEndian.AppendUint32(b, n)
		}
	}
	body := func() {
		b = append(b, 0)                      // the transition switches to type 0
		b = append(b, 0, 0, 0, 0, 0, 0)       // type 0: UTC+0, not DST, "STD"
		b = append(b, 0, 0, 0x0e, 0x10, 1, 4) // type 1: UTC+1 (3600 s), DST, "DST"
		b = append(b, "STD\x00DST\x00"...)
	}
	header()
	b = binary.BigEndian.AppendUint32(b, 0) // version 1 block: 32-bit times
	body()
	header()
	b = binary.BigEndian.AppendUint64(b, 0) // version 2 block: 64-bit times
	body()
	return append(b, "\n"+footer+"\n"...)
}

// TestZoneEnd checks the period end that replaces time.ZoneBounds' where
// that is wrong: it is after t, the offset is the same from t up to it, and
// it is exact when the offset changes within the hour.
func TestZoneEnd(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", leapEveZone, "UTC"} {
		loc := mustLoc(t, zone)
		for _, at := range []string{
			"2040-12-30T22:59:59Z", "2040-12-31T00:00:00Z", "2040-12-31T13:14:15Z", "2040-12-31T23:10:00Z",
			"2040-12-31T23:30:00Z", "2040-12-31T23:59:59Z", "2026-11-01T05:59:59Z", "2090-03-12T06:00:00Z",
		} {
			from := mustTime(t, at).In(loc)
			end := zoneEnd(from)
			if end.IsZero() {
				if zone != "UTC" {
					t.Fatalf("%s at %s: no period end", zone, at)
				}
				continue
			}
			if !end.After(from) {
				t.Fatalf("%s at %s: period end %s is not after it", zone, at, end)
			}
			_, off := from.Zone()
			for u := from; u.Before(end) && u.Sub(from) < 48*time.Hour; u = u.Add(time.Second) {
				if _, o := u.Zone(); o != off {
					t.Fatalf("%s at %s: offset changes at %s, before the period end %s", zone, at, u, end)
				}
			}
			if _, o := end.Zone(); o != off && end.Sub(from) <= time.Hour {
				// A real change: the end must be exactly where it happens.
				if _, before := end.Add(-time.Second).Zone(); before != off {
					t.Fatalf("%s at %s: period end %s is late", zone, at, end)
				}
			}
		}
	}
	// The bisection really ran: Go's own bounds are wrong here.
	loc := mustLoc(t, leapEveZone)
	from := mustTime(t, "2040-12-31T23:30:00Z").In(loc)
	if _, end := from.ZoneBounds(); end.After(from) {
		t.Skipf("time.ZoneBounds is correct here now (%s); zoneEnd's workaround is no longer exercised", end)
	}
	if got, want := zoneEnd(from), mustTime(t, "2041-01-01T00:00:00Z"); !got.Equal(want) {
		t.Fatalf("zoneEnd(%s) = %s, want %s", from, got, want)
	}
}
