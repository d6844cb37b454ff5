package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/axe-sched/axe/model"
)

// compiled is one version of a definition, checked, with its steps indexed.
type compiled struct {
	def   model.WorkflowDef
	order []int          // steps so that each comes after its needs
	index map[string]int // step name → index in def.Steps
	down  [][]int        // step index → the steps that need it
}

func compile(d *model.WorkflowDef) (*compiled, error) {
	order, err := Normalize(d)
	if err != nil {
		return nil, err
	}
	c := &compiled{def: *d, order: order, index: make(map[string]int, len(d.Steps)), down: make([][]int, len(d.Steps))}
	for i, s := range d.Steps {
		c.index[s.Name] = i
	}
	for i, s := range d.Steps {
		for _, n := range s.Needs {
			c.down[c.index[n]] = append(c.down[c.index[n]], i)
		}
	}
	return c, nil
}

// descendants returns step i and every step that follows it.
func (c *compiled) descendants(i int) []int {
	seen := make([]bool, len(c.def.Steps))
	var out []int
	var walk func(int)
	walk = func(j int) {
		if seen[j] {
			return
		}
		seen[j] = true
		out = append(out, j)
		for _, k := range c.down[j] {
			walk(k)
		}
	}
	walk(i)
	return out
}

// item is one item of a step (the only one without a fan-out): its newest attempt.
type item struct {
	attempt  int    // the attempt of the newest row; 0: none yet
	try      int    // the first attempt of the item's current try (retry_count counts from it)
	state    string // that row's state; "" with no row; stepPending when a rerun reset it
	output   json.RawMessage
	err      string
	ticket   string
	endedAt  int64
	starting bool  // a start is being written
	retryAt  int64 // a failed attempt's retry is due then (Unix ms); 0: none
}

// stepPending is the state of a row a rerun writes: the item (or, at index -1, the whole
// step) runs again from that attempt. Stored, so that a restart keeps the rerun.
const stepPending = "pending"

// levelIndex is the index of a step's own rows (not an item's): how its fan-out resolved
// ("running" with Items), that it was skipped, failed to resolve, was reset, or was marked
// succeeded by an operator (with its output).
const levelIndex = -1

// stepState is a step within one run.
type stepState struct {
	base     int    // the first attempt of the step's current try; items' rows below it are of an older one
	level    string // the state of the step's own row of this try; "" for none
	levelOut json.RawMessage
	levelErr string
	items    []item // resolved: one per item
	resolved bool
	fan      []json.RawMessage // a fan-out's items, once resolved here
	reqHead  []byte            // the request's shared part (startItem), once made
}

// terminal reports whether the step has ended, and whether it succeeded.
func (s *stepState) terminal() (ended, ok bool) {
	switch s.level {
	case model.StepSkipped, model.StepFailed, model.StepCancelled:
		return true, false
	case model.StepSucceeded:
		return true, true
	}
	if !s.resolved {
		return false, false
	}
	all := true
	for i := range s.items {
		it := &s.items[i]
		if it.starting {
			// A retry being written keeps its failed attempt's state until it lands: the
			// step has not ended, whatever that state says (a sibling's end that advances
			// the run meanwhile must neither skip the steps after it nor end the run).
			return false, false
		}
		switch it.state {
		case model.StepSucceeded:
		case model.StepFailed, model.StepCancelled:
			if it.retryAt > 0 {
				return false, false
			}
			all = false
		default:
			return false, false
		}
	}
	return true, all
}

// allCancelled reports whether every item that did not succeed was cancelled (killed).
func (s *stepState) allCancelled() bool {
	any := false
	for _, it := range s.items {
		switch it.state {
		case model.StepSucceeded:
		case model.StepCancelled:
			any = true
		default:
			return false
		}
	}
	return any
}

// succeeded reports whether the step ended succeeded.
func (s *stepState) succeeded() bool { e, ok := s.terminal(); return e && ok }

// output is the step's output as its downstream steps see it: an item's output, or for a
// fan-out the array of its items' outputs in item order (the fan-in); an operator's when
// marked succeeded.
func (s *stepState) output(fanout bool) json.RawMessage {
	if s.level == model.StepSucceeded {
		if len(s.levelOut) == 0 {
			return json.RawMessage("null")
		}
		return s.levelOut
	}
	if !fanout {
		if len(s.items) == 0 || len(s.items[0].output) == 0 {
			return json.RawMessage("null")
		}
		return s.items[0].output
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range s.items {
		if i > 0 {
			b.WriteByte(',')
		}
		if len(s.items[i].output) == 0 {
			b.WriteString("null")
		} else {
			b.Write(s.items[i].output)
		}
	}
	b.WriteByte(']')
	return b.Bytes()
}

// maxAttempt is the highest attempt of the step's rows known.
func (s *stepState) maxAttempt() int {
	m := s.base
	for _, it := range s.items {
		m = max(m, it.attempt)
	}
	return m
}

// apply folds a run's stored step rows (ordered by step, index, attempt) into states.
func apply(c *compiled, rows []model.StepRun) []stepState {
	steps := make([]stepState, len(c.def.Steps))
	for i := range steps {
		steps[i].base = 1
	}
	// The step's own rows first: the newest decides the try.
	for _, r := range rows {
		i, ok := c.index[r.Step]
		if !ok || r.Index != levelIndex {
			continue
		}
		st := &steps[i]
		if r.Attempt < st.base && st.level != "" {
			continue
		}
		st.base, st.level, st.levelOut, st.levelErr = r.Attempt, r.State, r.Output, r.Error
		st.resolved = false
		st.items = nil
		if r.State == model.StepRunning && r.Items >= 0 {
			st.resolved = true
			st.items = make([]item, r.Items)
		}
	}
	for _, r := range rows {
		i, ok := c.index[r.Step]
		if !ok || r.Index < 0 {
			continue
		}
		st := &steps[i]
		if r.Attempt < st.base {
			continue // of an older try
		}
		if st.level == model.StepSkipped || st.level == model.StepFailed || st.level == model.StepSucceeded || st.level == model.StepCancelled {
			if r.Attempt <= st.base {
				continue
			}
		}
		if !st.resolved {
			if c.def.Steps[i].FanOut != "" {
				continue // an item row without its resolution: cannot be, skip it
			}
			st.resolved, st.items = true, make([]item, 1)
			if st.level == stepPending {
				st.level = ""
			}
		}
		if r.Index >= len(st.items) {
			continue
		}
		it := &st.items[r.Index]
		if r.Attempt < it.attempt {
			continue
		}
		try := it.try
		if try == 0 || r.State == stepPending {
			try = r.Attempt
		}
		*it = item{attempt: r.Attempt, try: try, state: r.State, output: r.Output, err: r.Error, ticket: r.Ticket, endedAt: r.EndedAt}
	}
	return steps
}

// Ticket names one attempt of one item of one step of a run: w<run>.<step>.<item>.<attempt>.
// Run ids hold no ".", so it parses back from both ends whatever the step's name holds.
func Ticket(run, step string, idx, attempt int) string {
	return "w" + run + "." + step + "." + strconv.Itoa(idx) + "." + strconv.Itoa(attempt)
}

// ParseTicket is Ticket's inverse; ok is false for any other ticket.
func ParseTicket(t string) (run, step string, idx, attempt int, ok bool) {
	if !strings.HasPrefix(t, "w") {
		return
	}
	rest := t[1:]
	dot := strings.IndexByte(rest, '.')
	if dot <= 0 {
		return
	}
	run, rest = rest[:dot], rest[dot+1:]
	j := strings.LastIndexByte(rest, '.')
	if j < 0 {
		return
	}
	a, err := strconv.Atoi(rest[j+1:])
	if err != nil || a < 0 {
		return
	}
	rest = rest[:j]
	k := strings.LastIndexByte(rest, '.')
	if k <= 0 {
		return
	}
	i, err := strconv.Atoi(rest[k+1:])
	if err != nil || i < 0 {
		return
	}
	return run, rest[:k], i, a, true
}

// fanItems resolves a fan-out's items: an array under key of the run's params or of an
// upstream's output.
func fanItems(src string, params json.RawMessage, outputs func(step string) (json.RawMessage, bool)) ([]json.RawMessage, error) {
	from, key, _ := strings.Cut(src, ".")
	var doc json.RawMessage
	if from == "params" {
		doc = params
	} else {
		out, ok := outputs(from)
		if !ok {
			return nil, fmt.Errorf("fan_out %s: step %s did not succeed", src, from)
		}
		doc = out
	}
	var top map[string]json.RawMessage
	if len(doc) == 0 || json.Unmarshal(doc, &top) != nil {
		return nil, fmt.Errorf("fan_out %s: %s is not a JSON object", src, from)
	}
	v, ok := top[key]
	if !ok {
		return nil, fmt.Errorf("fan_out %s: %s has no key %q", src, from, key)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, fmt.Errorf("fan_out %s: %s.%s is not a JSON array", src, from, key)
	}
	if len(items) > FanOutMax {
		return nil, fmt.Errorf("fan_out %s: %d items, at most %d", src, len(items), FanOutMax)
	}
	return items, nil
}

// outputJSON makes what a step attempt gave back its stored output: JSON as it is, any
// other text as a JSON string, nothing as no output.
func outputJSON(s string) json.RawMessage {
	t := strings.TrimSpace(s)
	if t == "" {
		return nil
	}
	if json.Valid([]byte(t)) {
		return json.RawMessage(t)
	}
	b, _ := json.Marshal(s)
	return b
}
