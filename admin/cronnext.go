package admin

import (
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/wire"
)

// cronNextView keeps the original "next" list (RFC 3339 strings) and adds "fires".
// With jitter (jitterSec > 0), each fire also carries fire_at and jitter_ms; "next" stays the
// nominal times.
func cronNextView(expr string, loc *time.Location, fires []engine.Fire, jitterSec int) map[string]any {
	next := make([]string, len(fires))
	out := make([]wire.CronFire, len(fires))
	for i, f := range fires {
		t := f.At.In(loc)
		next[i] = t.Format(time.RFC3339)
		out[i] = wire.CronFire{At: next[i], Offset: t.Format("-07:00")}
		if f.DST != "" {
			d := f.DST
			out[i].DST = &d
		}
		if jitterSec > 0 {
			ms := f.Jitter.Milliseconds()
			out[i].JitterMS = &ms
			out[i].FireAt = t.Add(f.Jitter).Format(time.RFC3339Nano)
		}
	}
	return map[string]any{"expr": expr, "timezone": loc.String(), "next": next, "fires": out}
}

// timeArg reads an optional RFC 3339 instant or Unix milliseconds; zero when absent.
func timeArg(c *fasthttp.RequestCtx, name string) (time.Time, error) {
	raw := string(c.QueryArgs().Peek(name))
	if raw == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, raw); err == nil {
		return t, nil
	}
	var ms int64
	if _, err := fmt.Sscanf(raw, "%d", &ms); err == nil && fmt.Sprint(ms) == raw {
		return time.UnixMilli(ms), nil
	}
	return time.Time{}, fmt.Errorf("%w: %s: must be an RFC 3339 time or Unix milliseconds, got %q", ErrBadRequest, name, raw)
}

func (s *Server) cronNext(c *fasthttp.RequestCtx) {
	args := c.QueryArgs()
	expr := string(args.Peek("expr"))
	if expr == "" {
		writeErr(c, 400, "expr: is required")
		return
	}
	n, err := intArg(c, "n", 10, 1, 1000)
	if err != nil {
		s.fail(c, err)
		return
	}
	dialect := string(args.Peek("dialect"))
	from, err := timeArg(c, "from")
	if err != nil {
		s.fail(c, err)
		return
	}
	jitter, err := intArg(c, "jitter_sec", 0, 0, engine.MaxJitterSec)
	if err != nil {
		s.fail(c, err)
		return
	}
	task := string(args.Peek("task"))
	fires, loc, err := s.cfg.Engine.API().PreviewFires(expr, string(args.Peek("tz")), dialect, from, n)
	if err != nil {
		s.fail(c, err)
		return
	}
	if err := s.cfg.Engine.API().ApplyJitter(task, jitter, expr, loc.String(), dialect, fires); err != nil {
		s.fail(c, err)
		return
	}
	body := cronNextView(expr, loc, fires, jitter)
	if dialect != "" {
		body["dialect"] = dialect
	}
	if jitter > 0 {
		body["task"], body["jitter_sec"] = task, jitter
	}
	writeJSON(c, 200, body)
}
