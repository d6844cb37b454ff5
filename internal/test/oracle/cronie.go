// Package oracle reads the reference tables that tests hold axe's cron readings to: fire
// times computed by the real programs axe must agree with (cronie's crond, see
// lib/cron/testdata/cronie/README.md). It is for tests only and imports nothing of axe.
package oracle

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"
)

// CronieCase is one line of lib/cron/testdata/cronie/expected.tsv.
type CronieCase struct {
	Line int
	// DaemonZone is crond's own zone (its TZ).
	DaemonZone string
	Start      time.Time
	// Env holds the environment lines written above the job line, in order.
	Env []string
	// Schedule is the job line without its command: five fields or a descriptor.
	Schedule string
	// Refused is set when crond did not load the line.
	Refused bool
	// Fires are the first fire times after Start (up to five), empty when the line loads
	// but never fires within cronie's horizon.
	Fires []time.Time
}

// Zone is the zone crond reads the line in: the last CRON_TZ above it, else its own.
func (c CronieCase) Zone() string {
	zone := c.DaemonZone
	for _, e := range c.Env {
		if v, ok := strings.CutPrefix(e, "CRON_TZ="); ok {
			zone = v
		}
	}
	return zone
}

// LoadCronie reads expected.tsv.
func LoadCronie(path string) ([]CronieCase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []CronieCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) != 5 {
			return nil, fmt.Errorf("%s:%d: %d columns, want 5", path, n, len(cols))
		}
		start, err := time.Parse(time.RFC3339, cols[1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		c := CronieCase{Line: n, DaemonZone: cols[0], Start: start, Schedule: cols[3]}
		if cols[2] != "-" {
			for _, e := range strings.Split(cols[2], ";") {
				c.Env = append(c.Env, strings.TrimSpace(e))
			}
		}
		switch cols[4] {
		case "refused":
			c.Refused = true
		case "none":
		default:
			for _, s := range strings.Split(cols[4], ",") {
				t, err := time.Parse(time.RFC3339, s)
				if err != nil {
					return nil, fmt.Errorf("%s:%d: %w", path, n, err)
				}
				c.Fires = append(c.Fires, t)
			}
		}
		out = append(out, c)
	}
	return out, sc.Err()
}
