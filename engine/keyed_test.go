package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/ratelimit"
	"github.com/axe-sched/axe/wheel"
	"github.com/axe-sched/axe/wire"
)

// TestKeyedConcurrencyLimit: one pattern limit tenant:* of 2 and tasks keyed
// tenant:{params.t.id} (a nested path) for three tenants, six tasks each, all due at once,
// each run 300 ms on a real endpoint. Each tenant's runs never overlap more than 2 (tenant c,
// which has a limit of its own of 1, never more than 1), every task runs once, the runs that
// waited name their tenant's key, and the limit's view lists the keys in use while they run
// and none after.
func TestKeyedConcurrencyLimit(t *testing.T) {
	t.Parallel()
	ep := newSlowEndpoint(t, 300*time.Millisecond)
	s := persisttest.SQLite(t)
	e := startEngine(t, s)
	ctx := context.Background()
	if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitKey, "tenant:*", 2, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitKey, "tenant:c", 1, "test"); err != nil {
		t.Fatal(err)
	}
	tenants := []string{"a", "b", "c"}
	const per = 6
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	for i := range per * len(tenants) {
		spec := httpSpec(fmt.Sprintf("kt-%d", i), ep.URL)
		spec.Trigger, spec.RunAt = model.TriggerDelay, at.Format(time.RFC3339)
		spec.ConcurrencyKey = "tenant:{params.t.id}"
		spec.Params = json.RawMessage(fmt.Sprintf(`{"t":{"id":%q}}`, tenants[i%len(tenants)]))
		mustCreate(t, e, spec)
	}
	sawKeys := 0
	waitFor(t, 60*time.Second, "every run ended", func() bool {
		if v, err := e.API().ConcurrencyLimit(ctx, model.LimitKey, "tenant:*"); err == nil {
			sawKeys = max(sawKeys, v.KeysInUse)
			for _, k := range v.Keys {
				if !strings.HasPrefix(k.Key, "tenant:") || k.Key == "tenant:c" {
					t.Errorf("the pattern lists key %q, which is not its own", k.Key)
				}
				if k.InUse > 2 {
					t.Errorf("key %s has %d runs in flight, limit 2", k.Key, k.InUse)
				}
			}
		}
		runs := allRuns(groupRuns(t, s, "kt", per*len(tenants)))
		return len(runs) == per*len(tenants) && maxEnded(runs)
	})
	if sawKeys < 1 {
		t.Errorf("the pattern's view never listed a key in use")
	}
	runs := groupRuns(t, s, "kt", per*len(tenants))
	byTenant := map[string][]model.Run{}
	for i := range per * len(tenants) {
		name := fmt.Sprintf("kt-%d", i)
		if len(runs[name]) != 1 || runs[name][0].Result != model.ResultSuccess {
			t.Errorf("%s: runs %+v, want one success", name, runs[name])
			continue
		}
		byTenant[tenants[i%len(tenants)]] = append(byTenant[tenants[i%len(tenants)]], runs[name][0])
	}
	for tn, rs := range byTenant {
		limit := 2
		if tn == "c" {
			limit = 1
		}
		if got := maxOverlap(rs); got > limit {
			t.Errorf("tenant %s: %d runs at once, limit %d", tn, got, limit)
		}
		waited := 0
		for _, r := range rs {
			if strings.Contains(r.Detail, "for concurrency limit key tenant:"+tn+" ") {
				waited++
			}
		}
		if waited < per-limit {
			t.Errorf("tenant %s: %d runs say they waited for key tenant:%s, want at least %d", tn, waited, tn, per-limit)
		}
	}
	v, err := e.API().ConcurrencyLimit(ctx, model.LimitKey, "tenant:*")
	if err != nil || v.InUse != 0 || v.Waiting != 0 || len(v.Keys) != 0 || v.Max != 2 {
		t.Errorf("pattern after the runs: %+v, %v", v, err)
	}
}

// TestKeyTemplateRefused: a key template that is wrong is refused at create, naming the
// field and why, and nothing is created; a manual task's template is rendered at run-now,
// which refuses params that do not render it (400 on params, nothing written) and counts a
// run of params that do in its rendered key.
func TestKeyTemplateRefused(t *testing.T) {
	t.Parallel()
	cs := newCallbackServer(t)
	cs.hang = make(chan struct{})
	s := persisttest.SQLite(t)
	e := startEngine(t, s)
	ctx := context.Background()
	var fe *FieldError
	for _, c := range []struct {
		key, params, want string
	}{
		{"tenant:{params.tenant_id", `{"tenant_id":"a"}`, "has no '}'"},
		{"tenant:{tenant_id}", `{"tenant_id":"a"}`, "{params.PATH}"},
		{"tenant:{params.tenant_id}", `{"other":"a"}`, "params.tenant_id is missing"},
		{"tenant:{params.tenant_id}", ``, "params.tenant_id is missing"},
		{"tenant:{params.tenant_id}", `{"tenant_id":{"x":1}}`, "not a string, number or boolean"},
		{"tenant:{params.tenant_id}", `{"tenant_id":"two words"}`, "characters a key cannot hold"},
	} {
		spec := httpSpec("kr", cs.URL)
		spec.Cron, spec.ConcurrencyKey = "@every 1h", c.key
		if c.params != "" {
			spec.Params = json.RawMessage(c.params)
		}
		_, err := e.API().CreateTask(ctx, spec, "test")
		if !errors.As(err, &fe) || fe.Field != "concurrency_key" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("create with key %q params %s: %v, want a FieldError on concurrency_key saying %q", c.key, c.params, err, c.want)
		}
	}
	if _, err := s.GetTask(ctx, "kr"); !errors.Is(err, model.ErrTaskNotFound) {
		t.Fatalf("a refused create left the task: %v", err)
	}
	if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitKey, "tenant:*", 1, "test"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"ten ant:*", "*x", "tenant:**"} {
		if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitKey, bad, 1, "test"); !errors.As(err, &fe) || fe.Field != "name" {
			t.Errorf("SetConcurrencyLimit(key, %q) = %v, want a FieldError on name", bad, err)
		}
	}
	if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitGroup, "etl*", 1, "test"); !errors.As(err, &fe) || fe.Field != "name" {
		t.Errorf("a group pattern: %v, want a FieldError on name (patterns are of keys)", err)
	}
	manual := httpSpec("km", cs.URL)
	manual.Trigger, manual.ConcurrencyKey = model.TriggerManual, "tenant:{params.tenant_id}"
	mustCreate(t, e, manual)
	if _, err := e.API().RunNow(ctx, "km", nil, "test"); !errors.As(err, &fe) || fe.Field != "params" || !strings.Contains(err.Error(), "params.tenant_id is missing") {
		t.Fatalf("run-now without the param: %v, want a FieldError on params", err)
	}
	pt, _ := s.GetTask(ctx, "km")
	if runs, _ := s.ListRuns(ctx, pt.Def.ID, 10); len(runs) != 0 {
		t.Fatalf("a refused run-now left runs %+v", runs)
	}
	if _, err := e.API().RunNow(ctx, "km", json.RawMessage(`{"tenant_id":"x1"}`), "test"); err != nil {
		t.Fatal(err)
	}
	// x1's one slot is taken: a second run of x1 is refused, one of x2 goes.
	if _, err := e.API().RunNow(ctx, "km", json.RawMessage(`{"tenant_id":"x1"}`), "test"); !errors.Is(err, ErrConcurrencyLimit) || !strings.Contains(err.Error(), "key tenant:x1 is full") {
		t.Fatalf("second run-now of x1: %v, want ErrConcurrencyLimit on key tenant:x1", err)
	}
	if _, err := e.API().RunNow(ctx, "km", json.RawMessage(`{"tenant_id":"x2"}`), "test"); err != nil {
		t.Fatalf("run-now of x2 beside x1: %v", err)
	}
	v, err := e.API().ConcurrencyLimit(ctx, model.LimitKey, "tenant:*")
	if err != nil || v.InUse != 2 || v.KeysInUse != 2 || len(v.Keys) != 2 || v.Keys[0] != (wire.KeyInUse{Key: "tenant:x1", InUse: 1}) {
		t.Errorf("pattern with x1 and x2 in flight: %+v, %v", v, err)
	}
	cs.release()
}

// TestConcGateLiveKeys: a pattern limit's live keys are bounded by MaxLiveKeys: with that
// many keys in flight, a run of one more key is refused (tryAcquire) and a fire of one waits
// (offer), one of a live key still goes; when a key's last run ends the waiter is admitted.
// A key's own limit is not the pattern's, and lifting the pattern leaves its keys unlimited.
func TestConcGateLiveKeys(t *testing.T) {
	t.Parallel()
	g := newConcGate(clock.NewFake(time.Unix(1_700_000_000, 0)))
	g.setMax(limitRef{model.LimitKey, "t:*"}, 2)
	slots := make([]concSlot, 0, MaxLiveKeys)
	for i := range MaxLiveKeys {
		sl, _, _, _, ok := g.tryAcquire("g", fmt.Sprintf("t:%d", i))
		if !ok {
			t.Fatalf("key %d of %d refused", i, MaxLiveKeys)
		}
		slots = append(slots, sl)
	}
	if _, full, _, _, ok := g.tryAcquire("g", "t:new"); ok || full != (limitRef{model.LimitKey, "t:new"}) {
		t.Fatalf("key %d: ok %v (%v), want refused past the bound", MaxLiveKeys+1, ok, full)
	}
	if _, _, _, _, ok := g.tryAcquire("g", "t:0"); !ok {
		t.Fatal("a second run of a live key refused")
	}
	if _, _, _, _, ok := g.tryAcquire("g", "t:0"); ok {
		t.Fatal("a third run of t:0 taken, the pattern's max is 2")
	}
	if _, _, _, _, ok := g.tryAcquire("g", "other"); !ok {
		t.Fatal("a key outside the pattern refused")
	}
	ent := &wheel.Entry[*task]{When: 100, Key: 1, Priority: 2}
	if _, ok := g.offer(1, ent, "g", "t:new"); ok {
		t.Fatal("a fire of a new key went past the bound")
	}
	if ents, _, _ := g.drain(); len(ents) != 0 {
		t.Fatalf("drain admitted %d past the bound", len(ents))
	}
	g.release(slots[5]) // t:5 has no run in flight any more
	ents, adms, _ := g.drain()
	if len(ents) != 1 || ents[0] != ent || adms[0].slot.key != "t:new" {
		t.Fatalf("after a key went idle, drain admitted %v, want the waiter of t:new", ents)
	}
	g.mu.Lock()
	live := g.live["t:*"]
	g.mu.Unlock()
	if live != MaxLiveKeys {
		t.Fatalf("live keys %d, want %d", live, MaxLiveKeys)
	}
	g.setMax(limitRef{model.LimitKey, "t:*"}, 0)
	for range 3 {
		if _, _, _, _, ok := g.tryAcquire("g", "t:1"); !ok {
			t.Fatal("a key of a lifted pattern is still limited")
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.live) != 0 {
		t.Fatalf("live keys of a lifted pattern still counted: %v", g.live)
	}
}

// TestShardedKeyedLimitAcrossEngines: two sharded engines on one store, each with half the
// shards, keep a pattern limit tenant:* of 2 for each tenant separately: tasks keyed
// tenant:{params.tenant} of two tenants, on both engines, each tenant's own downstream never
// has more than 2 runs at once, every task runs once, the slot rows are the rendered keys'
// (locked through the pattern's row), and every row is gone at the end.
func TestShardedKeyedLimitAcrossEngines(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		down := map[string]*busyServer{"a": newBusyServer(t, 150*time.Millisecond), "b": newBusyServer(t, 150*time.Millisecond)}
		a, b := startEngine(t, s, sharded), startEngine(t, s, sharded)
		takeFor(t, s, a, "a", shardRange(0, 127), time.Minute)
		takeFor(t, s, b, "b", shardRange(128, 255), time.Minute)
		for _, e := range []*Engine{a, b} {
			if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitKey, "tenant:*", 2, "test"); err != nil {
				t.Fatal(err)
			}
		}
		names := map[*Engine][]string{a: namesIn("kl", 0, 127, 10), b: namesIn("kl", 128, 255, 10)}
		for e, ns := range names {
			for i, n := range ns {
				tn := []string{"a", "b"}[i%2]
				spec := httpSpec(n, down[tn].URL+"/hook")
				spec.DelayMS = ptr(int64(300))
				spec.ConcurrencyKey = "tenant:{params.tenant}"
				spec.Params = json.RawMessage(`{"tenant":"` + tn + `"}`)
				mustCreate(t, e, spec)
			}
		}
		rowsSeen := map[string]int{}
		waitFor(t, 60*time.Second, "every task to run", func() bool {
			n, err := s.(persist.SlotStore).CountSlots(ctx)
			if err == nil {
				for r, c := range n {
					rowsSeen[r.Name] = max(rowsSeen[r.Name], c)
				}
			}
			_, ca := down["a"].stats()
			_, cb := down["b"].stats()
			return len(ca)+len(cb) == 20
		})
		waitSettled(t, a)
		waitSettled(t, b)
		for tn, bs := range down {
			most, calls := bs.stats()
			if most > 2 {
				t.Errorf("tenant %s's downstream had %d runs at once, over the limit of 2", tn, most)
			}
			for n, c := range calls {
				if c != 1 {
					t.Errorf("%s ran %d times, want once", n, c)
				}
			}
		}
		if rowsSeen["tenant:a"] == 0 || rowsSeen["tenant:b"] == 0 {
			t.Errorf("no slot rows seen of a tenant's key: %v", rowsSeen)
		}
		for name, most := range rowsSeen {
			if name != "tenant:a" && name != "tenant:b" || most > 2 {
				t.Errorf("slot rows of %q: at most %d at once; want only tenant:a and tenant:b, at most 2 each", name, most)
			}
		}
		for _, k := range []string{"tenant:a", "tenant:b"} {
			ref := persist.SlotRef{Kind: model.LimitKey, Name: k}
			waitFor(t, 10*time.Second, "every slot row to go", func() bool { return slotsHeld(t, s, ref) == 0 })
		}
		v, err := a.API().ConcurrencyLimit(ctx, model.LimitKey, "tenant:*")
		if err != nil || v.InUse != 0 || v.Max != 2 {
			t.Errorf("the pattern after every run ended = %+v, %v", v, err)
		}
		t.Logf("rows seen at once per key: %v", rowsSeen)
	})
}

// TestKeyedRateLimit: tasks whose rate_key is tenant:{params.tenant} take their tokens from
// their tenant's bucket of the pattern tenant:* (2 a second, burst 1), not their
// downstream's: each tenant's five fires, due at once, reach the endpoint over at least
// (5 − 1) / 2 s, and the runs that waited name their tenant's key. A rate_key the task's
// params do not render is refused at create.
func TestKeyedRateLimit(t *testing.T) {
	t.Parallel()
	cs := newCallbackServer(t)
	s := persisttest.SQLite(t)
	e := startEngine(t, s)
	ctx := context.Background()
	if err := e.API().SetRateLimit(ctx, "tenant:*", ratelimit.Limit{Rate: 2, Burst: 1}, "test"); err != nil {
		t.Fatal(err)
	}
	if got := e.API().RateLimits().PerKey["tenant:*"]; got != (ratelimit.Limit{Rate: 2, Burst: 1}) {
		t.Fatalf("the pattern's limit reads %v", got)
	}
	bad := httpSpec("rk-bad", cs.URL)
	bad.Cron, bad.RateKey, bad.Params = "@every 1h", "tenant:{params.tenant}", json.RawMessage(`{}`)
	var fe *FieldError
	if _, err := e.API().CreateTask(ctx, bad, "test"); !errors.As(err, &fe) || fe.Field != "rate_key" {
		t.Fatalf("create with a rate_key its params do not render: %v, want a FieldError on rate_key", err)
	}
	const per = 5
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	for i := range 2 * per {
		spec := httpSpec(fmt.Sprintf("rk-%d", i), cs.URL)
		spec.Trigger, spec.RunAt = model.TriggerDelay, at.Format(time.RFC3339)
		spec.RateKey = "tenant:{params.tenant}"
		spec.Params = json.RawMessage(fmt.Sprintf(`{"tenant":"t%d"}`, i%2))
		mustCreate(t, e, spec)
	}
	waitFor(t, 60*time.Second, "every run ended", func() bool {
		runs := allRuns(groupRuns(t, s, "rk", 2*per))
		return len(runs) == 2*per && maxEnded(runs)
	})
	runs := groupRuns(t, s, "rk", 2*per)
	for tn := range 2 {
		var first, last int64
		waited := 0
		for i := tn; i < 2*per; i += 2 {
			rs := runs[fmt.Sprintf("rk-%d", i)]
			if len(rs) != 1 {
				t.Fatalf("rk-%d ran %d times", i, len(rs))
			}
			d := rs[0].DispatchedAt
			if first == 0 || d < first {
				first = d
			}
			last = max(last, d)
			if strings.Contains(rs[0].Detail, fmt.Sprintf("for rate limit tenant:t%d", tn)) {
				waited++
			}
		}
		if span := time.Duration(last-first) * time.Millisecond; span < 1800*time.Millisecond {
			t.Errorf("tenant t%d's %d fires went out over %s, faster than 2 a second", tn, per, span)
		}
		if waited < per-1 {
			t.Errorf("tenant t%d: %d runs say they waited for rate limit tenant:t%d, want %d", tn, waited, tn, per-1)
		}
	}
}

// TestKeyNotRenderedAtFire: a stored task whose key template its params do not render (the
// API refuses one; a row written otherwise) still counts in a key, the template's own text,
// which the pattern tenant:* limits as one key, and its run's detail says why: it never runs
// unlimited, and the outcome is recorded.
func TestKeyNotRenderedAtFire(t *testing.T) {
	t.Parallel()
	cs := newCallbackServer(t)
	cs.hang = make(chan struct{})
	s := persisttest.SQLite(t)
	ctx := context.Background()
	for i := range 2 {
		spec := httpSpec(fmt.Sprintf("kn-%d", i), cs.URL)
		spec.Trigger, spec.DelayMS = model.TriggerDelay, ptr(int64(1500))
		def, err := Normalize(spec, "UTC")
		if err != nil {
			t.Fatal(err)
		}
		def.ConcurrencyKey, def.Params = "tenant:{params.tenant}", json.RawMessage(`{"other":1}`)
		def.CreatedAt, def.UpdatedAt = time.Now().UnixMilli(), time.Now().UnixMilli()
		rt := &model.Runtime{State: model.StateScheduled, NextTriggerTime: time.Now().Add(1500 * time.Millisecond).UnixMilli(), Version: 1}
		if err := s.CreateTask(ctx, &def, rt); err != nil {
			t.Fatal(err)
		}
	}
	e := startEngine(t, s)
	if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitKey, "tenant:*", 1, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "one run in flight, one waiting, in the template's own key", func() bool {
		v, err := e.API().ConcurrencyLimit(ctx, model.LimitKey, "tenant:*")
		return err == nil && len(v.Keys) == 1 && v.Keys[0].Key == "tenant:{params.tenant}" && v.Keys[0].InUse == 1 && v.Keys[0].Waiting == 1
	})
	cs.release()
	waitFor(t, 30*time.Second, "both runs ended", func() bool {
		runs := allRuns(groupRuns(t, s, "kn", 2))
		return len(runs) == 2 && maxEnded(runs)
	})
	for _, r := range allRuns(groupRuns(t, s, "kn", 2)) {
		if !strings.Contains(r.Detail, "concurrency key not rendered (key template: params.tenant is missing): counted in key tenant:{params.tenant}") {
			t.Errorf("run of %s: detail %q does not say its key was not rendered", r.TaskName, r.Detail)
		}
	}
}
