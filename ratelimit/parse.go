package ratelimit

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseLimit reads a limit written as "RATE" or "RATE:BURST", tokens per second, as flags
// take it: "100" is 100/s with a burst of 100, "100:10" is 100/s with a burst of 10, "0" or
// "" is unlimited.
func ParseLimit(s string) (Limit, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Limit{}, nil
	}
	rateText, burstText, hasBurst := strings.Cut(s, ":")
	rate, err := strconv.ParseFloat(rateText, 64)
	if err != nil {
		return Limit{}, fmt.Errorf("%w: rate %q is not a number", ErrInvalidRate, rateText)
	}
	if rate < 0 {
		return Limit{}, fmt.Errorf("%w: rate must be >= 0, got %s", ErrInvalidRate, rateText)
	}
	l := Limit{Rate: rate}
	switch {
	case hasBurst:
		b, err := strconv.Atoi(burstText)
		if err != nil {
			return Limit{}, fmt.Errorf("%w: burst %q is not an integer", ErrInvalidBurst, burstText)
		}
		l.Burst = b
	case rate >= 1:
		l.Burst = int(rate)
	default:
		l.Burst = 1
	}
	if err := l.Validate(); err != nil {
		return Limit{}, err
	}
	return l, nil
}
