// Package ratelimit owns axe's dispatch rate limits: one token bucket per
// downstream (an executor app or a callback host) and one global bucket in front of all
// of them.
//
// axe never drops a run because of a limit; a run over the rate is only late. So the
// API does not just say yes or no: Take either takes a token or says how long until one
// will be there, and the dispatcher parks the run in its buffer queue for that long.
// The buffer queue, the choice of key for a run and the metrics about waits belong to
// the dispatcher, not to this package.
//
// It must not import other axe packages, and it never reads the wall clock except
// through the injected Clock, so tests advance a fake clock and never sleep.
//
// # Bucket arithmetic
//
// A limited bucket with rate r and burst b accrues one token every interval
// I = ceil(1e9/r) nanoseconds and holds at most b tokens. Rounding I up to a whole
// nanosecond keeps every bucket at or below its configured rate; the difference only
// shows above about a million tokens per second, far beyond any downstream we call.
//
// Instead of a token count the bucket keeps fullAt, the instant it will be full again
// if nobody takes. At time now it holds b - max(0, fullAt-now)/I tokens. A take moves
// fullAt to max(fullAt, now)+I and is allowed when that lands at most b×I after now;
// when it is not, the excess is exactly the wait until a token is there. Everything is
// whole nanoseconds, so a steady rate adds up exactly (100/s for 10 s is 1000 tokens,
// never 999) and the result does not depend on how often anyone asks.
package ratelimit
