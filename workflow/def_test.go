package workflow

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/axe-sched/axe/model"
)

// FuzzParseTicket: every ticket Ticket makes parses back to what made it, whatever the
// step's name holds, and ParseTicket never panics on any string.
func FuzzParseTicket(f *testing.F) {
	f.Add("m0123456789abcdef", "clean", 0, 1)
	f.Add("t00ff", "a.b.c", 9999, 20)
	f.Add("x", "1", 3, 0)
	f.Fuzz(func(t *testing.T, run, step string, idx, attempt int) {
		_, _, _, _, _ = ParseTicket(run + "." + step) // any string: no panic
		if run == "" || strings.ContainsAny(run, ".") || step == "" || idx < 0 || attempt < 0 {
			return
		}
		r, s, i, a, ok := ParseTicket(Ticket(run, step, idx, attempt))
		if !ok || r != run || s != step || i != idx || a != attempt {
			t.Fatalf("Ticket(%q, %q, %d, %d) parsed back as %q %q %d %d %v", run, step, idx, attempt, r, s, i, a, ok)
		}
	})
}

// FuzzNormalize: any definition decodes and checks without a panic; one it accepts has an
// order in which every step comes after its needs, and it is accepted again unchanged.
func FuzzNormalize(f *testing.F) {
	f.Add(`{"name":"w","steps":[{"name":"a","callback":{"type":"http","url":"http://x/"}},{"name":"b","needs":["a"],"fan_out":"a.items","callback":{"type":"http","url":"http://x/"}}]}`)
	f.Add(`{"name":"w","steps":[{"name":"a","needs":["b"],"callback":{"type":"http","url":"http://x/"}},{"name":"b","needs":["a"],"callback":{"type":"http","url":"http://x/"}}]}`)
	f.Add(`{"name":"w","trigger":"cron","cron":"0 2 * * *","params":{"days":[1]},"steps":[{"name":"a","fan_out":"params.days","callback":{"type":"executor","app":"e","handler":"h"}}]}`)
	f.Fuzz(func(t *testing.T, raw string) {
		var d model.WorkflowDef
		if json.Unmarshal([]byte(raw), &d) != nil {
			return
		}
		order, err := Normalize(&d)
		if err != nil {
			return
		}
		pos := make(map[string]int, len(order))
		for p, i := range order {
			pos[d.Steps[i].Name] = p
		}
		if len(order) != len(d.Steps) {
			t.Fatalf("order %v of %d steps", order, len(d.Steps))
		}
		for _, s := range d.Steps {
			for _, n := range s.Needs {
				if pos[n] >= pos[s.Name] {
					t.Fatalf("step %s ordered before its need %s", s.Name, n)
				}
			}
		}
		again := d
		again.Steps = slices.Clone(d.Steps)
		if _, err := Normalize(&again); err != nil {
			t.Fatalf("an accepted definition is refused the second time: %v", err)
		}
	})
}

// TestRandomDAGs: random DAGs (edges only from a lower to a higher index, shuffled) are
// accepted with a valid order; adding one edge back closes a cycle that is refused naming
// steps on it.
func TestRandomDAGs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 1 + r.IntN(30)
		steps := make([]model.WorkflowStep, n)
		for i := range steps {
			steps[i] = model.WorkflowStep{Name: fmt.Sprintf("s%d", i), Callback: model.Callback{Type: "http", URL: "http://x/"}}
			for j := 0; j < i; j++ {
				if r.IntN(4) == 0 {
					steps[i].Needs = append(steps[i].Needs, steps[j].Name)
				}
			}
		}
		r.Shuffle(n, func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
		d := model.WorkflowDef{Name: "w", Steps: steps}
		c, err := compile(&d)
		if err != nil {
			t.Fatalf("trial %d: a DAG refused: %v", trial, err)
		}
		done := map[string]bool{}
		for _, i := range c.order {
			for _, need := range d.Steps[i].Needs {
				if !done[need] {
					t.Fatalf("trial %d: %s before its need %s", trial, d.Steps[i].Name, need)
				}
			}
			done[d.Steps[i].Name] = true
		}
		// A back edge: the step with an incoming edge needs one of its descendants.
		for i := range d.Steps {
			if len(d.Steps[i].Needs) == 0 {
				continue
			}
			up := c.index[d.Steps[i].Needs[0]]
			cyc := d
			cyc.Steps = slices.Clone(d.Steps)
			cyc.Steps[up].Needs = append(slices.Clone(cyc.Steps[up].Needs), d.Steps[i].Name)
			if _, err := compile(&cyc); err == nil || !strings.Contains(err.Error(), "cycle") {
				t.Fatalf("trial %d: a cycle accepted (%v)", trial, err)
			}
			break
		}
	}
}

// TestApplyRerunRows: the rows a run leaves through a failure, a rerun from the failed steps
// and a mark fold into the states the service acts on.
func TestApplyRerunRows(t *testing.T) {
	d := model.WorkflowDef{Name: "w", Steps: []model.WorkflowStep{
		{Name: "a", Callback: model.Callback{Type: "http", URL: "http://x/"}},
		{Name: "f", Needs: []string{"a"}, FanOut: "a.items", Callback: model.Callback{Type: "http", URL: "http://x/"}},
		{Name: "z", Needs: []string{"f"}, Callback: model.Callback{Type: "http", URL: "http://x/"}},
	}}
	c, err := compile(&d)
	if err != nil {
		t.Fatal(err)
	}
	rows := []model.StepRun{
		{Step: "a", Index: 0, Attempt: 1, State: model.StepSucceeded, Output: json.RawMessage(`{"items":[1,2]}`)},
		{Step: "f", Index: levelIndex, Attempt: 1, State: model.StepRunning, Items: 2},
		{Step: "f", Index: 0, Attempt: 1, State: model.StepSucceeded, Output: json.RawMessage(`10`)},
		{Step: "f", Index: 1, Attempt: 1, State: model.StepFailed},
		{Step: "z", Index: levelIndex, Attempt: 1, State: model.StepSkipped},
	}
	st := apply(c, rows)
	if ended, ok := st[1].terminal(); !ended || ok {
		t.Fatalf("f with a failed item: ended %v ok %v", ended, ok)
	}
	if st[2].level != model.StepSkipped {
		t.Fatalf("z: %+v", st[2])
	}
	// A rerun from the failed steps: f's failed item pending at attempt 2, z reset.
	rs := &runState{run: model.WorkflowRun{ID: "r"}, c: c, steps: st}
	reset := rs.resetRows([]int{1, 2}, true)
	if len(reset) != 2 || reset[0].Index != 1 || reset[0].Attempt != 2 || reset[1].Index != levelIndex || reset[1].Attempt != 2 {
		t.Fatalf("reset rows %+v", reset)
	}
	for i := range reset {
		reset[i].Step = []string{"f", "z"}[i]
	}
	st = apply(c, append(rows, reset...))
	if st[1].items[0].state != model.StepSucceeded || st[1].items[1].state != stepPending || st[1].items[1].attempt != 2 {
		t.Fatalf("f after the rerun: %+v", st[1].items)
	}
	if ended, _ := st[2].terminal(); ended || st[2].resolved {
		t.Fatalf("z after the rerun should wait to run again: %+v", st[2])
	}
	// The retried item succeeds: f's fan-in is both outputs in item order.
	st = apply(c, append(append(rows, reset...), model.StepRun{Step: "f", Index: 1, Attempt: 2, State: model.StepSucceeded, Output: json.RawMessage(`20`)}))
	if !st[1].succeeded() || string(st[1].output(true)) != "[10,20]" {
		t.Fatalf("f's fan-in: %s", st[1].output(true))
	}
}

// TestJitterOf: a fire's delay is within [0, jitter), the same for the same name and time,
// and spread over the range across fire times.
func TestJitterOf(t *testing.T) {
	seen := map[int64]bool{}
	for at := int64(0); at < 1000*60_000; at += 60_000 {
		j := jitterOf("orders", at, 30_000)
		if j < 0 || j >= 30_000 || j != jitterOf("orders", at, 30_000) {
			t.Fatalf("jitter %d at %d", j, at)
		}
		seen[j/3000] = true
	}
	if len(seen) < 10 {
		t.Fatalf("jitter falls in %d of 10 tenths of its range", len(seen))
	}
	if jitterOf("orders", 5, 0) != 0 {
		t.Fatal("no jitter asked, some given")
	}
}

// TestRetryBeingWrittenIsNotAnEnd: an item whose failed attempt's retry is being written
// (starting) keeps its step open, so a sibling's end that advances the run meanwhile
// neither decides the steps after it (a skip) nor ends the run failed; once the retry's
// start lands, or it is given up, the step ends as its items say.
func TestRetryBeingWrittenIsNotAnEnd(t *testing.T) {
	d := model.WorkflowDef{Name: "w", Steps: []model.WorkflowStep{
		{Name: "a", Callback: model.Callback{Type: "http", URL: "http://x/"}, RetryCount: 1},
		{Name: "b", Callback: model.Callback{Type: "http", URL: "http://x/"}},
		{Name: "d", Needs: []string{"a", "b"}, Callback: model.Callback{Type: "http", URL: "http://x/"}},
	}}
	c, err := compile(&d)
	if err != nil {
		t.Fatal(err)
	}
	rs := &runState{run: model.WorkflowRun{ID: "r", State: model.WorkflowRunning}, c: c, steps: apply(c, []model.StepRun{
		{Step: "a", Index: 0, Attempt: 1, State: model.StepFailed, EndedAt: 1000},
		{Step: "b", Index: 0, Attempt: 1, State: model.StepSucceeded},
	})}
	rs.armRetries()
	it := &rs.steps[0].items[0]
	if it.retryAt != 1000 {
		t.Fatalf("a's retry at %d, want 1000", it.retryAt)
	}
	// advance takes the retry: starting, its retry time cleared, the failed row still its state.
	it.starting, it.retryAt = true, 0
	if ended, _ := rs.steps[0].terminal(); ended {
		t.Fatal("a reads ended while its retry is being written")
	}
	if _, decided := rs.condition(2); decided {
		t.Fatal("d's condition decided while a's retry is being written")
	}
	if end := rs.endState(); end != "" {
		t.Fatalf("the run would end %s while a's retry is being written", end)
	}
	it.starting = false // the retry could not start and was given up: a failed
	if ended, ok := rs.steps[0].terminal(); !ended || ok {
		t.Fatalf("a after its retry was given up: ended %v ok %v", ended, ok)
	}
}
