package workflows

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/axe-sched/axe/bench/internal/benchkit"
)

func numCPU() int { return runtime.NumCPU() }

func step(name, url string, needs ...string) map[string]any {
	s := map[string]any{"name": name, "callback": map[string]any{"type": "http", "url": url}, "timeout_sec": 120}
	if len(needs) > 0 {
		s["needs"] = needs
	}
	return s
}

// diamondDef is a 10-step diamond: s0, m1…m8 needing s0, s9 needing m1…m8.
func diamondDef(name, url string) map[string]any {
	steps := []any{step("s0", url)}
	var mids []string
	for i := 1; i <= 8; i++ {
		m := fmt.Sprintf("m%d", i)
		mids = append(mids, m)
		steps = append(steps, step(m, url, "s0"))
	}
	steps = append(steps, step("s9", url, mids...))
	return map[string]any{"name": name, "trigger": "manual", "steps": steps}
}

// lead is how long ahead of their due time n one-shot tasks are created.
func lead(n int) time.Duration { return 5*time.Second + time.Duration(n)*400*time.Microsecond }

// baselineBurst creates n one-shot tasks due at one instant and waits for all of them at
// the sink; it returns their due time and the last arrival.
func baselineBurst(ctx context.Context, cfg Config, c *cluster, s *sink, prefix string, n int) (due, last time.Time, err error) {
	return baseline(ctx, cfg, c, s, prefix, n, 0)
}

// baseline creates n one-shot tasks due evenly over span (0: at one instant) and waits for
// all of them at the sink; it returns their first due time and the last arrival.
func baseline(ctx context.Context, cfg Config, c *cluster, s *sink, prefix string, n int, span time.Duration) (due, last time.Time, err error) {
	s.reset()
	due = time.Now().Add(lead(n)).Truncate(time.Millisecond)
	if err := c.createTasks(ctx, prefix, n, due, span, s.url()); err != nil {
		return due, last, err
	}
	if left := time.Until(due); left < 200*time.Millisecond {
		return due, last, fmt.Errorf("creating %d tasks left %s before they were due", n, left)
	}
	time.Sleep(time.Until(due))
	last, err = s.waitCount(ctx, n, cfg.PhaseTimeout)
	return due, last, err
}

func ms(d int64) float64 { return float64(d) / 1e6 }

// percentiles returns p50, p99 and max of xs (ns) in ms.
func percentiles(xs []int64) (p50, p99, mx float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	slices.Sort(xs)
	return ms(benchkit.Percentile(xs, 0.50)), ms(benchkit.Percentile(xs, 0.99)), ms(xs[len(xs)-1])
}

// handoffSpread is how long the handoff phase's spread side takes to answer each step: a
// run's first step within handoffSpread of all runs being in flight, each later one after
// 1 to 3 s, so that the runs stay in flight and their results come in a steady stream.
const handoffSpread = 2 * time.Second

func runHandoff(ctx context.Context, cfg Config) ([]Result, error) {
	n := cfg.HandoffRuns
	s, err := startSink(0)
	if err != nil {
		return nil, err
	}
	defer s.close()
	c, err := startCluster(ctx, cfg, "handoff", 1, false)
	if err != nil {
		return nil, err
	}
	defer c.close()
	wait := c.profile("handoff-"+cfg.Store, cfg.ProfileSeconds)
	defer wait()

	lateness := func(span time.Duration, prefix string) ([]int64, error) {
		if _, _, err := baseline(ctx, cfg, c, s, prefix, n, span); err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		var late []int64
		for _, r := range s.receipts() {
			late = append(late, r.at-r.scheduled*1e6)
		}
		return late, nil
	}
	// handoffs runs n runs of the chain steps, every run's first step held until all n
	// arrived, and returns each hand-off: a downstream's request arrival minus its
	// upstream's answer, for the same run id.
	handoffs := func(name string, steps []string, spread time.Duration, delays map[string][2]time.Duration) ([]int64, map[string]int, error) {
		s.reset()
		var defs []any
		for i, st := range steps {
			if i == 0 {
				defs = append(defs, step(st, s.url()))
			} else {
				defs = append(defs, step(st, s.url(), steps[i-1]))
			}
		}
		if err := c.createWorkflow(ctx, map[string]any{"name": name, "trigger": "manual", "steps": defs}); err != nil {
			return nil, nil, err
		}
		s.holdFor(steps[0], n, 5*time.Second, spread, delays)
		ids, err := c.startRuns(ctx, []string{name}, n, cfg.Concurrency)
		if err != nil {
			return nil, nil, err
		}
		if _, err := s.waitCount(ctx, len(steps)*n, cfg.PhaseTimeout); err != nil {
			return nil, nil, err
		}
		states, err := c.waitRunsEnded(ctx, ids, cfg.PhaseTimeout)
		if err != nil {
			return nil, states, err
		}
		type key struct{ run, step string }
		recs := s.receipts()
		byKey := make(map[key]receipt, len(recs))
		for _, r := range recs {
			byKey[key{r.runID, r.step}] = r
		}
		var out []int64
		for _, id := range ids {
			for i := 1; i < len(steps); i++ {
				up, ok1 := byKey[key{id, steps[i-1]}]
				down, ok2 := byKey[key{id, steps[i]}]
				if ok1 && ok2 {
					out = append(out, down.at-up.answeredAt)
				}
			}
		}
		if dup := duplicates(recs); dup > 0 || states["succeeded"] != n || len(out) != n*(len(steps)-1) {
			return out, states, fmt.Errorf("%s: %d hand-offs measured, runs %v, %d duplicate tickets, for %d runs", name, len(out), states, dup, n)
		}
		return out, states, nil
	}

	// Burst: every run's a answered at the same instant, n results at once.
	lateBurst, err := lateness(0, "hb")
	if err != nil {
		return nil, err
	}
	burst, states, err := handoffs("burst", []string{"a", "b"}, 0, nil)
	if err != nil {
		return nil, err
	}
	held := s.held.Load()
	// Spread: n runs in flight, their steps taking 1 to 3 s.
	lateSpread, err := lateness(handoffSpread, "hs")
	if err != nil {
		return nil, err
	}
	spread, states2, err := handoffs("spread", []string{"a", "b", "c", "d"}, handoffSpread,
		map[string][2]time.Duration{"b": {time.Second, 3 * time.Second}, "c": {time.Second, 3 * time.Second}})
	if err != nil {
		return nil, err
	}
	b50, b99, bmax := percentiles(burst)
	l50, l99, lmax := percentiles(lateBurst)
	s50, s99, smax := percentiles(spread)
	m50, m99, mmax := percentiles(lateSpread)
	return []Result{
		{Phase: PhaseHandoff, Store: cfg.Store,
			Size:     fmt.Sprintf("%d runs a→b, all %d a's answered at once", n, held),
			Baseline: fmt.Sprintf("%d one-shot tasks due at once", n),
			Metric:   "p99 ms", Workflow: b99, Base: l99, Ratio: b99 / l99, Target: "p99 ≤ 20 ms", Met: b99 <= 20,
			Detail: fmt.Sprintf("burst: hand-off p50 %.1f ms, p99 %.1f ms, max %.1f ms; baseline lateness p50 %.1f ms, p99 %.1f ms, max %.1f ms; runs %v; duplicate tickets 0",
				b50, b99, bmax, l50, l99, lmax, states)},
		{Phase: PhaseHandoff, Store: cfg.Store,
			Size:     fmt.Sprintf("%d runs a→b→c→d in flight, steps taking 0–2 s (a), 1–3 s (b, c)", n),
			Baseline: fmt.Sprintf("%d one-shot tasks due over %s", n, handoffSpread),
			Metric:   "p99 ms", Workflow: s99, Base: m99, Ratio: s99 / m99, Target: "p99 ≤ 20 ms", Met: s99 <= 20,
			Detail: fmt.Sprintf("spread: %d hand-offs p50 %.1f ms, p99 %.1f ms, max %.1f ms; baseline lateness p50 %.1f ms, p99 %.1f ms, max %.1f ms; runs %v; duplicate tickets 0",
				len(spread), s50, s99, smax, m50, m99, mmax, states2)},
	}, nil
}

func runDiamond(ctx context.Context, cfg Config) ([]Result, error) {
	runs := cfg.DiamondRuns
	steps := 10 * runs
	s, err := startSink(0)
	if err != nil {
		return nil, err
	}
	defer s.close()
	c, err := startCluster(ctx, cfg, "diamond", 1, false)
	if err != nil {
		return nil, err
	}
	defer c.close()

	due, last, err := baselineBurst(ctx, cfg, c, s, "d", steps)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	baseRate := float64(steps) / last.Sub(due).Seconds()
	baseDup := duplicates(s.receipts())
	cfg.Logger.Info("diamond baseline", "tasks", steps, "rate", baseRate)

	s.reset()
	if err := c.createWorkflow(ctx, diamondDef("diamond", s.url())); err != nil {
		return nil, err
	}
	wait := c.profile("diamond-"+cfg.Store, cfg.ProfileSeconds)
	defer wait()
	t0 := time.Now()
	cpu0 := c.cpu()
	ids, err := c.startRuns(ctx, []string{"diamond"}, runs, cfg.Concurrency)
	if err != nil {
		return nil, err
	}
	asked := time.Since(t0)
	last, err = s.waitCount(ctx, steps, cfg.PhaseTimeout)
	if err != nil {
		return nil, err
	}
	cpu := c.cpu() - cpu0
	rate := float64(steps) / last.Sub(t0).Seconds()
	states, err := c.waitRunsEnded(ctx, ids, cfg.PhaseTimeout)
	if err != nil {
		return nil, err
	}
	res := Result{Phase: PhaseDiamond, Store: cfg.Store,
		Size:     fmt.Sprintf("%d runs × 10 steps (%d run requests retried after a deadlock)", runs, c.deadlocks.Load()),
		Baseline: fmt.Sprintf("%d one-shot tasks due at once", steps),
		Metric:   "steps/s", Workflow: rate, Base: baseRate, Ratio: rate / baseRate, Target: "≥ 0.5×", Met: rate/baseRate >= 0.5,
		Detail: fmt.Sprintf("%d runs asked in %s (%.0f runs/s), last step %s after the first ask; daemon CPU %.0f µs a step; runs %v; duplicate tickets %d (baseline %d)",
			runs, asked.Round(time.Millisecond), float64(runs)/asked.Seconds(), last.Sub(t0).Round(time.Millisecond),
			float64(cpu.Microseconds())/float64(steps), states, duplicates(s.receipts()), baseDup)}
	if states["succeeded"] != runs {
		return []Result{res}, fmt.Errorf("runs ended %v, want %d succeeded", states, runs)
	}
	return []Result{res}, nil
}

func runFanOut(ctx context.Context, cfg Config) ([]Result, error) {
	n := cfg.FanOutItems
	s, err := startSink(n)
	if err != nil {
		return nil, err
	}
	defer s.close()

	// Baseline, on a daemon of its own.
	bc, err := startCluster(ctx, cfg, "fanout-base", 1, false)
	if err != nil {
		return nil, err
	}
	baseRSS0, _ := bc.nodes[0].memory()
	due, last, err := baselineBurst(ctx, cfg, bc, s, "f", n)
	_, basePeak := bc.nodes[0].memory()
	bc.close()
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	baseTook := last.Sub(due)

	s.reset()
	c, err := startCluster(ctx, cfg, "fanout", 1, false)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.createWorkflow(ctx, map[string]any{"name": "fanout", "trigger": "manual", "steps": []any{
		step("split", s.url()),
		func() map[string]any {
			m := step("each", s.url(), "split")
			m["fan_out"], m["parallelism"] = "split.items", 1000
			return m
		}(),
		step("join", s.url(), "each"),
	}}); err != nil {
		return nil, err
	}
	rss0, _ := c.nodes[0].memory()
	wait := c.profile("fanout-"+cfg.Store, cfg.ProfileSeconds)
	defer wait()
	t0 := time.Now()
	ids, err := c.startRuns(ctx, []string{"fanout"}, 1, 1)
	if err != nil {
		return nil, err
	}
	last, err = s.waitCount(ctx, n+2, cfg.PhaseTimeout)
	if err != nil {
		return nil, err
	}
	took := last.Sub(t0)
	_, peak := c.nodes[0].memory()
	states, err := c.waitRunsEnded(ctx, ids, cfg.PhaseTimeout)
	if err != nil {
		return nil, err
	}
	_, peakEnd := c.nodes[0].memory()
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	detail := fmt.Sprintf("fan-out: split to join's request %s, daemon RSS %.0f MB before, peak %.0f MB (%.0f MB when the run ended); baseline: %d tasks drained %s after their due time, RSS %.0f MB before, peak %.0f MB; run %v; duplicate tickets %d",
		took.Round(time.Millisecond), mb(rss0), mb(peak), mb(peakEnd), n, baseTook.Round(time.Millisecond), mb(baseRSS0), mb(basePeak), states, duplicates(s.receipts()))
	res := []Result{
		{Phase: PhaseFanOut, Store: cfg.Store, Size: fmt.Sprintf("1 run, %d-way fan-out and fan-in", n),
			Baseline: fmt.Sprintf("%d one-shot tasks due at once", n), Metric: "time s",
			Workflow: took.Seconds(), Base: baseTook.Seconds(), Ratio: took.Seconds() / baseTook.Seconds(), Target: "(none)", Met: true, Detail: detail},
		{Phase: PhaseFanOut, Store: cfg.Store, Size: fmt.Sprintf("1 run, %d-way fan-out and fan-in", n),
			Baseline: fmt.Sprintf("%d one-shot tasks due at once", n), Metric: "peak RSS MB",
			Workflow: mb(max(peak, peakEnd)), Base: mb(basePeak), Ratio: float64(max(peak, peakEnd)) / float64(basePeak), Target: "(none)", Met: true},
	}
	if states["succeeded"] != 1 {
		return res, fmt.Errorf("the fan-out run ended %v", states)
	}
	return res, nil
}

func runCPU(ctx context.Context, cfg Config) ([]Result, error) {
	cfg.Store = StoreMySQL
	runs := cfg.CPURuns
	steps := 10 * runs
	s, err := startSink(0)
	if err != nil {
		return nil, err
	}
	defer s.close()
	type point struct{ wf, base float64 } // µs a step, µs a fire
	var pts []point
	var out []Result
	for _, nodes := range []int{1, 3} {
		c, err := startCluster(ctx, cfg, fmt.Sprintf("cpu%d", nodes), nodes, true)
		if err != nil {
			return out, err
		}
		p, detail, err := func() (point, string, error) {
			defer c.close()
			var names []string
			for i := range 16 {
				name := fmt.Sprintf("d%02d", i)
				names = append(names, name)
				if err := c.createWorkflow(ctx, diamondDef(name, s.url())); err != nil {
					return point{}, "", err
				}
			}
			// Idle CPU (lease renewals, polls), which both sides include.
			i0, it := c.cpu(), time.Now()
			time.Sleep(3 * time.Second)
			idle := float64(c.cpu()-i0) / time.Since(it).Seconds() // ns of CPU per second

			due := time.Now().Add(lead(steps)).Truncate(time.Millisecond)
			s.reset()
			if err := c.createTasks(ctx, fmt.Sprintf("c%d", nodes), steps, due, 0, s.url()); err != nil {
				return point{}, "", err
			}
			time.Sleep(time.Until(due.Add(-50 * time.Millisecond)))
			b0, bt := c.cpu(), time.Now()
			// A baseline that does not drain is reported, and the workflow side still runs.
			_, baseErr := s.waitCount(ctx, steps, cfg.PhaseTimeout)
			if baseErr != nil {
				baseErr = fmt.Errorf("baseline: %w", baseErr)
				cfg.Logger.Warn("the baseline did not drain; the workflow side runs all the same", "nodes", nodes, "err", baseErr)
			}
			time.Sleep(time.Second) // the results' writes
			base := float64(c.cpu() - b0)
			baseTook := time.Since(bt) - time.Second
			baseCount := int(s.count.Load())

			s.reset()
			wait := c.profile(fmt.Sprintf("cpu-%dnodes", nodes), cfg.ProfileSeconds)
			defer wait()
			w0, wt := c.cpu(), time.Now()
			ids, err := c.startRuns(ctx, names, runs, cfg.Concurrency)
			if err != nil {
				return point{}, "", err
			}
			// A run that failed (a step lost in a shard's move) sends no more steps: the side
			// ends when every step arrived or none did for 20 s, and counts what arrived.
			last, got, err := s.waitSettled(ctx, steps, 20*time.Second, cfg.PhaseTimeout)
			if err != nil {
				return point{}, "", err
			}
			time.Sleep(time.Second)
			// The quiet wait's idle CPU after the last step (and its writes) is taken out.
			after := max(time.Since(last)-time.Second, 0)
			wf := float64(c.cpu()-w0) - idle*after.Seconds()
			wfTook := last.Sub(wt)
			states, err := c.waitRunsEnded(ctx, ids, cfg.PhaseTimeout)
			if err != nil {
				return point{}, "", err
			}
			p := point{wf: wf / 1e3 / float64(max(got, 1)), base: base / 1e3 / float64(max(baseCount, 1))}
			detail := fmt.Sprintf("%d node(s), idle %.0f ms CPU/s (included in both): workflows %.0f µs a step (%d of %d steps in %s, %d run requests retried after a deadlock), tasks %.0f µs a fire (%d of %d in %s); runs %v; duplicate tickets %d",
				nodes, idle/1e6, p.wf, got, steps, wfTook.Round(time.Millisecond), c.deadlocks.Load(), p.base, baseCount, steps, baseTook.Round(time.Millisecond), states, duplicates(s.receipts()))
			if baseErr != nil {
				return p, detail, baseErr
			}
			if states["succeeded"] != runs {
				return p, detail, fmt.Errorf("runs ended %v, want %d succeeded", states, runs)
			}
			return p, detail, nil
		}()
		pts = append(pts, p)
		out = append(out, Result{Phase: PhaseCPU, Store: fmt.Sprintf("mysql, %d node(s)", nodes),
			Size: fmt.Sprintf("%d runs × 10 steps over 16 workflows", runs), Baseline: fmt.Sprintf("%d one-shot tasks", steps),
			Metric: "CPU µs a step", Workflow: p.wf, Base: p.base, Ratio: p.wf / p.base, Target: "—", Detail: detail})
		if err != nil {
			return out, err
		}
	}
	// Flat: 3 nodes' CPU a step within 1.5× of 1 node's (relative to the tasks' own growth).
	growth, baseGrowth := pts[1].wf/pts[0].wf, pts[1].base/pts[0].base
	out[1].Target = "flat over nodes: 3 ÷ 1 node ≤ 1.5× the tasks' own"
	out[1].Met = growth <= 1.5*baseGrowth
	out[1].Detail += fmt.Sprintf("; 3 nodes ÷ 1 node: workflows %.2f, tasks %.2f", growth, baseGrowth)
	return out, nil
}
