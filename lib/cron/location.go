package cron

import (
	"fmt"
	"sync"
	"time"

	// Embed the tz database so zones resolve on hosts without zoneinfo
	// (minimal containers, Windows). time.LoadLocation still prefers the
	// system copy when there is one.
	_ "time/tzdata"
)

// locations caches successful loads: time.LoadLocation reads and parses a
// zone file on every call. Only valid names are stored, so the cache is
// bounded by the size of the tz database.
var locations sync.Map // string -> *time.Location

// LoadLocation resolves an IANA zone name such as "Asia/Shanghai" or "UTC".
// It rejects "" and "Local" (which would make a task's fire times depend on
// the machine running the scheduler) and unknown names. Errors wrap
// ErrInvalidTimezone and name the zone.
func LoadLocation(name string) (*time.Location, error) {
	switch name {
	case "":
		return nil, fmt.Errorf("%w: zone name is empty (use an IANA name such as UTC or Asia/Shanghai)", ErrInvalidTimezone)
	case "Local":
		return nil, fmt.Errorf("%w %q: the machine's local zone is not allowed; name an IANA zone", ErrInvalidTimezone, name)
	}
	if loc, ok := locations.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w %q: not a known IANA zone name", ErrInvalidTimezone, name)
	}
	locations.Store(name, loc)
	return loc, nil
}
