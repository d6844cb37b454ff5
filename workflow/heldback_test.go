package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestHeldBackStepIsSentByTheNextOwner: two sharded engines on one store, each with its own
// workflow service. Engine a runs a workflow's first step; as the step's endpoint takes it,
// a's shard gate stays closed from the send of the second step's first item on (a renewal
// overdue; the step fans out over the first one's output, one item at a time), so a records
// that attempt and then holds it back unsent, marked so in its run row. a drops the shard and b takes it at the next epoch: b's workflow service makes the
// attempt's call again from the run's rows, and b sends it once under its fire record (same
// ticket), with the params a built for it (the first step's output among its inputs, the
// item and its index), then runs the second item. The workflow run succeeds. Before, b recorded the attempt lost and the run failed.
func TestHeldBackStepIsSentByTheNextOwner(t *testing.T) {
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		var allow atomic.Int64 // asks of a's gate still answered open
		allow.Store(1 << 40)
		var mu sync.Mutex
		calls := map[string][]json.RawMessage{} // step → the params of each call, in order
		tickets := map[string][]string{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body struct {
				Ticket string          `json:"ticket"`
				Params json.RawMessage `json:"params"`
			}
			raw, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(raw, &body)
			var p struct {
				Step string `json:"step"`
			}
			_ = json.Unmarshal(body.Params, &p)
			mu.Lock()
			calls[p.Step] = append(calls[p.Step], body.Params)
			tickets[p.Step] = append(tickets[p.Step], body.Ticket)
			mu.Unlock()
			if p.Step == "first" {
				allow.Store(1) // the second step's start: its record commits; its send is held back
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"path": "/data/%s.parquet", "items": [10, 20]}`, p.Step)
		}))
		t.Cleanup(srv.Close)
		got := func(step string) ([]json.RawMessage, []string) {
			mu.Lock()
			defer mu.Unlock()
			return append([]json.RawMessage(nil), calls[step]...), append([]string(nil), tickets[step]...)
		}

		newNode := func(gate func(int, int64) error) (*engine.Engine, *Service) {
			e, err := engine.New(engine.Config{Store: s, Sharded: true, ShardGate: gate, Window: 10 * time.Second, LoadInterval: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			svc := New(Config{Engine: e.API(), Store: s, Poll: 50 * time.Millisecond})
			if err := e.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if err := svc.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = svc.Stop(sctx)
				if err := e.Stop(sctx); err != nil {
					t.Errorf("stop: %v", err)
				}
			})
			return e, svc
		}
		a, wa := newNode(func(int, int64) error {
			if allow.Add(-1) >= 0 {
				return nil
			}
			return fmt.Errorf("renewal overdue: %w", model.ErrLeaseDeadline)
		})
		b, wb := newNode(nil)
		const name = "heldwf"
		shard := model.ShardOf(name)
		take := func(e *engine.Engine, holder string, ttl time.Duration) {
			t.Helper()
			got, err := s.(persist.ShardStore).TakeShards(ctx, holder, []int{shard}, ttl)
			if err != nil || len(got) != 1 {
				t.Fatalf("TakeShards(%s) = %d, %v", holder, len(got), err)
			}
			if err := e.API().Ownership().Gain(ctx, []persist.ShardFence{{Shard: got[0].Shard, Epoch: got[0].Epoch}}, nil); err != nil {
				t.Fatalf("Gain(%s): %v", holder, err)
			}
		}
		take(a, "a", time.Second)

		cb := model.Callback{Type: model.CallbackHTTP, URL: srv.URL + "/step"}
		if _, err := wa.Create(ctx, model.WorkflowDef{Name: name, Trigger: model.TriggerManual, Params: json.RawMessage(`{"day":"2026-12-06"}`),
			Steps: []model.WorkflowStep{
				{Name: "first", Callback: cb},
				{Name: "second", Needs: []string{"first"}, FanOut: "first.items", Parallelism: 1, Callback: cb},
			}}, "test"); err != nil {
			t.Fatal(err)
		}
		wr, _, err := wa.RunNow(ctx, name, nil, "", "test")
		if err != nil {
			t.Fatal(err)
		}
		ticket := Ticket(wr.ID, "second", 0, 1)
		waitUntil(t, 20*time.Second, "the second step's attempt recorded held back", func() bool {
			run, err := s.GetRun(ctx, ticket)
			return err == nil && run.Result == model.ResultRunning && strings.Contains(run.Detail, "held back unsent")
		})
		if p, _ := got("second"); len(p) != 0 {
			t.Fatalf("the held-back attempt reached its endpoint %d times before the hand-over", len(p))
		}
		var set model.ShardSet
		set.Add(shard)
		a.API().Ownership().Drop(set)
		time.Sleep(1100 * time.Millisecond) // a's lease runs out: it was not renewed
		take(b, "b", time.Minute)

		waitUntil(t, 20*time.Second, "the workflow run to end", func() bool {
			r, _, err := s.GetWorkflowRun(ctx, wr.ID)
			return err == nil && r.State != model.WorkflowRunning
		})
		r, rows, err := s.GetWorkflowRun(ctx, wr.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != model.WorkflowSucceeded {
			t.Errorf("the workflow run ended %s (%s), want succeeded; step rows %+v", r.State, r.Error, rows)
		}
		params, sent := got("second")
		if len(sent) != 2 || sent[0] != ticket || sent[1] != Ticket(wr.ID, "second", 1, 1) {
			t.Fatalf("the second step's items were sent as %v, want %s once, then its second item", sent, ticket)
		}
		first, _ := got("first")
		head, _ := json.Marshal(stepRequest{Workflow: name, RunID: wr.ID, Step: "second", ScheduledAt: wr.ScheduledAt,
			Params: json.RawMessage(`{"day":"2026-12-06"}`), Inputs: map[string]json.RawMessage{"first": json.RawMessage(`{"path": "/data/first.parquet", "items": [10, 20]}`)}})
		want := string(head[:len(head)-1]) + `,"index":0,"items":2,"item":10}`
		if string(params[0]) != want {
			t.Errorf("the second step was sent with params\n%s\nwant\n%s\n(the first step's were %s)", params[0], want, first)
		}
		run, err := s.GetRun(ctx, ticket)
		if err != nil || run.Result != model.ResultSuccess || run.Attempt != 1 {
			t.Errorf("the held-back attempt's run = %+v, %v; want success at attempt 1", run, err)
		}
		acts, err := s.ListActions(ctx, run.TaskID, 100)
		if err != nil {
			t.Fatal(err)
		}
		refired := false
		for _, a := range acts {
			refired = refired || (a.Action == engine.ActRefireHeld && a.Ticket == ticket)
		}
		if !refired {
			t.Errorf("no %s action for %s; actions %+v", engine.ActRefireHeld, ticket, acts)
		}
		_ = wb
	})
}

// waitUntil polls cond until it holds, failing the test after timeout: a generous bound on
// a loaded machine, never a measure.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = testwait.Scale(timeout)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
