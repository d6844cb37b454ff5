package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/axe-sched/axe/internal/test/jsonkeys"
	"github.com/axe-sched/axe/model"
)

func TestDecodeNamesTheField(t *testing.T) {
	long := strings.Repeat("x", MaxNameBytes+1)
	for _, tc := range []struct {
		name, body, field string
		into              func() interface{ Check() error }
	}{
		{"register repeated key in an unknown member", `{"app":"a","address":"h:1","handlers":["h"],"x":{"k":1,"k":2}}`, "x.k: repeated key", reg},
		{"register version of wrong type", `{"app":"a","address":"h:1","handlers":["h"],"version":"2"}`, "version: must be", reg},
		{"register version 2 without incarnation", `{"app":"a","address":"h:1","handlers":["h"],"version":2}`, "incarnation: is required", reg},
		{"register short incarnation", `{"app":"a","address":"h:1","handlers":["h"],"version":2,"incarnation":"abc"}`, "incarnation: must be", reg},
		{"register incarnation of other characters", `{"app":"a","address":"h:1","handlers":["h"],"incarnation":"0123456789abcdef/"}`, "incarnation: must be", reg},
		{"register trailing data", `{"app":"a","address":"h:1","handlers":["h"]} x`, "trailing data", reg},
		{"register handlers of wrong type", `{"app":"a","address":"h:1","handlers":"h"}`, "handlers: must be", reg},
		{"register no app", `{"address":"h:1","handlers":["h"]}`, "app: is required", reg},
		{"register no address", `{"app":"a","handlers":["h"]}`, "address: is required", reg},
		{"register no handlers", `{"app":"a","address":"h:1"}`, "handlers: at least one", reg},
		{"register empty handler", `{"app":"a","address":"h:1","handlers":[""]}`, "handlers: is required", reg},
		{"register app too long", `{"app":"` + long + `","address":"h:1","handlers":["h"]}`, "app: longer", reg},
		{"register too many handlers", `{"app":"a","address":"h:1","handlers":[` + strings.Repeat(`"h",`, MaxHandlers) + `"h"]}`, "handlers: at most", reg},
		{"heartbeat empty", ``, "invalid JSON", hb},
		{"heartbeat array", `[]`, "must be a JSON object", hb},
		{"heartbeat invalid UTF-8 in an unknown member", "{\"app\":\"a\",\"address\":\"h:1\",\"load\":\"\xff\"}", "invalid UTF-8", hb},
		{"heartbeat lone surrogate in an unknown member", `{"app":"a","address":"h:1","load":"\ud800"}`, "surrogate", hb},
		{"heartbeat bad incarnation", `{"app":"a","address":"h:1","incarnation":"x y"}`, "incarnation: must be", hb},
		{"deregister no app", `{"address":"h:1"}`, "app: is required", dereg},
		{"deregister no address", `{"app":"a"}`, "address: is required", dereg},
		{"deregister bad incarnation", `{"app":"a","address":"h:1","incarnation":7}`, "incarnation: must be string", dereg},
		{"deregister trailing data", `{"app":"a","address":"h:1"} {}`, "trailing data", dereg},
		{"heartbeat negative running", `{"app":"a","address":"h:1","running":-1}`, "running: must not be negative", hb},
		{"heartbeat address too long", `{"app":"a","address":"` + strings.Repeat("a", MaxAddressBytes+1) + `"}`, "address: longer", hb},
		{"result repeated key", `{"ticket":"t","status":"success","status":"failed"}`, "status: repeated key", res},
		{"result trailing data", `{"ticket":"t","status":"success"}{"ticket":"u","status":"failed"}`, "trailing data", res},
		{"result no ticket", `{"status":"success"}`, "ticket: is required", res},
		{"result bad status", `{"ticket":"t","status":"ok"}`, "status: must be success or failed", res},
		{"result output too long", `{"ticket":"t","status":"success","output":"` + strings.Repeat("o", MaxOutputBytes+1) + `"}`, "output: longer", res},
		{"result error too long", `{"ticket":"t","status":"failed","error":"` + strings.Repeat("e", MaxErrorBytes+1) + `"}`, "error: longer", res},
		{"result negative duration", `{"ticket":"t","status":"success","duration_ms":-4}`, "duration_ms", res},
		{"result exit code of wrong type", `{"ticket":"t","status":"success","exit_code":"1"}`, "exit_code: must be", res},
		{"kill repeated key in an unknown member", `{"ticket":"t","force":[{"a":1,"a":1}]}`, "repeated key", kill},
		{"kill no ticket", `{"epoch":1}`, "ticket: is required", kill},
		{"kill negative epoch", `{"ticket":"t","epoch":-1}`, "epoch: must not be negative", kill},
		{"kill shard too high", `{"ticket":"t","epoch":3,"shard":256}`, "shard: must be between 0 and 255, got 256", kill},
		{"kill negative shard", `{"ticket":"t","epoch":3,"shard":-1}`, "shard: must be between 0 and 255, got -1", kill},
		{"kill shard of wrong type", `{"ticket":"t","shard":"7"}`, "shard: must be int", kill},
	} {
		v := tc.into()
		err := DecodeMessage([]byte(tc.body), v)
		if err == nil {
			err = v.Check()
		}
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrMalformed naming %q", tc.name, err, tc.field)
		}
	}
}

// The receivers of the executor protocol skip a member they do not know (a field a newer
// peer adds), reading the known ones as if it were not there, while Decode (the REST API's)
// still refuses it.
func TestDecodeMessageSkipsUnknownMembers(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		into       func() interface{ Check() error }
		want       any
	}{
		{"register", `{"app":"a","address":"h:1","handlers":["h"],"secret":"x","labels":{"zone":"b","n":[1,{"x":null}]}}`, reg,
			&Register{App: "a", Address: "h:1", Handlers: []string{"h"}}},
		{"register v2", `{"app":"a","address":"h:1","handlers":["h"],"version":2,"incarnation":"0123456789abcdef0123456789abcdef","later":true}`, reg,
			&Register{App: "a", Address: "h:1", Handlers: []string{"h"}, Version: 2, Incarnation: "0123456789abcdef0123456789abcdef"}},
		{"heartbeat", `{"load":3.5,"app":"a","address":"h:1","running":2}`, hb, &Heartbeat{App: "a", Address: "h:1", Running: 2}},
		{"deregister", `{"app":"a","address":"h:1","reason":"shutdown"}`, dereg, &Deregister{App: "a", Address: "h:1"}},
		{"result", `{"ticket":"t","status":"success","exit":0,"host":{"cpu":1}}`, res, &Result{Ticket: "t", Status: "success"}},
		{"kill", `{"ticket":"t","force":true}`, kill, &Kill{Ticket: "t"}},
	} {
		v := tc.into()
		if err := DecodeMessage([]byte(tc.body), v); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if err := v.Check(); err != nil {
			t.Errorf("%s: Check: %v", tc.name, err)
		}
		if !reflect.DeepEqual(v, tc.want) {
			t.Errorf("%s: decoded %+v, want %+v", tc.name, v, tc.want)
		}
		if err := Decode([]byte(tc.body), tc.into()); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: strict Decode: %v, want an unknown field", tc.name, err)
		}
	}
}

// A run is read tolerantly too, and its required fields are told apart from zero ones.
func TestDecodeRun(t *testing.T) {
	r, err := DecodeRun([]byte(`{"task":"t","ticket":"k","attempt":1,"deadline":0,"future":{"a":[1]},"params":null}`))
	if err != nil {
		t.Fatalf("a run with an unknown field: %v", err)
	}
	if want := (Run{Task: "t", Ticket: "k", Attempt: 1}); !reflect.DeepEqual(r, want) {
		t.Errorf("decoded %+v, want %+v", r, want)
	}
	full := `{"task":"t","handler":"h","group":"g","ticket":"k","attempt":3,"kind":"manual","scheduled_at":5,"deadline":9,` +
		`"params":{"a":1},"dedup_ttl_ms":7,"epoch":4,"shard":2,"parallel":true}`
	r, err = DecodeRun([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := json.Marshal(r); string(again) != full {
		t.Errorf("every field read: re-encoded %s, want %s", again, full)
	}
	for body, field := range map[string]string{
		`{"ticket":"k","attempt":1,"deadline":0}`:                                                                    "task: is required",
		`{"task":"t","attempt":1,"deadline":0}`:                                                                      "ticket: is required",
		`{"task":"t","ticket":"k","deadline":0}`:                                                                     "attempt: is required",
		`{"task":"t","ticket":"k","attempt":0,"deadline":0}`:                                                         "attempt: must be 1 or more",
		`{"task":"t","ticket":"k","attempt":1}`:                                                                      "deadline: is required",
		`{"task":"t","ticket":"k","attempt":1,"deadline":-1}`:                                                        "deadline: must not be negative",
		`{"task":"t","ticket":"k","attempt":"1","deadline":0}`:                                                       "attempt: must be int",
		`{"task":"t","ticket":"k","attempt":1,"deadline":0,"shard":256}`:                                             "shard: must be between",
		`{"task":"t","ticket":"k","attempt":1,"deadline":0,"task":"u"}`:                                              "task: repeated key",
		`{"task":"t","ticket":"k","attempt":1,"deadline":0} {}`:                                                      "trailing data",
		`{"task":"t","ticket":"k","attempt":1,"deadline":0,"x":{"y":1,"y":2}}`:                                       "x.y: repeated key",
		`{"task":"t","ticket":"k","attempt":1,"deadline":0,"handler":"` + strings.Repeat("h", MaxNameBytes+1) + `"}`: "handler: longer",
	} {
		if _, err := DecodeRun([]byte(body)); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want %q", body, err, field)
		}
	}
	runs, errs, err := DecodeRunBatch([]byte(`{"runs":[{"task":"t","ticket":"a","attempt":1,"deadline":0,"new":1},` +
		`{"task":"t","ticket":"b","deadline":0},7],"more":"x"}`))
	if err != nil || len(runs) != 3 || errs[0] != nil || runs[0].Ticket != "a" ||
		errs[1] == nil || !strings.Contains(errs[1].Error(), "attempt: is required") || errs[2] == nil {
		t.Errorf("batch: %+v %v %v", runs, errs, err)
	}
	if _, _, err := DecodeRunBatch([]byte(`{"runs":[]}`)); err == nil {
		t.Errorf("an empty batch was taken")
	}
}

// TestShardCountIsTheModels holds ShardCount, which this package spells again because it
// imports nothing of axe, to the number of shards the scheduler splits its tasks into.
func TestShardCountIsTheModels(t *testing.T) {
	if ShardCount != model.ShardCount {
		t.Fatalf("protocol.ShardCount = %d, model.ShardCount = %d: a run of a valid shard would be refused, or one out of range accepted", ShardCount, model.ShardCount)
	}
}

func reg() interface{ Check() error }   { return new(Register) }
func hb() interface{ Check() error }    { return new(Heartbeat) }
func res() interface{ Check() error }   { return new(Result) }
func kill() interface{ Check() error }  { return new(Kill) }
func dereg() interface{ Check() error } { return new(Deregister) }

func TestDecodeResultBatchRefusesOnlyTheBadResult(t *testing.T) {
	results, errs, err := DecodeResultBatch([]byte(`{"results":[{"ticket":"a","status":"success"},
		{"ticket":"b","status":5},7,{"status":"failed"},{"ticket":"c","status":"failed","extra":1}],"more":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 5 || errs[0] != nil || results[0].Ticket != "a" || errs[4] != nil || results[4].Ticket != "c" {
		t.Fatalf("results %+v, errors %v", results, errs)
	}
	for i, want := range []string{"", "status: must be string", "must be a JSON object", "ticket: is required"} {
		if i > 0 && (errs[i] == nil || !strings.Contains(errs[i].Error(), want)) {
			t.Errorf("result %d: %v, want naming %q", i, errs[i], want)
		}
	}
	for body, want := range map[string]string{
		`{"results":[]}`: "results: is required",
		`{"results":[{"ticket":"a","status":"success"}],"more":1,"more":2}`: "more: repeated key",
		`{"results":[{"ticket":"a","status":"success"}]} 1`:                 "trailing data",
		`{"results":[` + strings.Repeat(`{},`, MaxResultsPerCall) + `{}]}`:  "results: at most",
	} {
		if _, _, err := DecodeResultBatch([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.60s: %v, want naming %q", body, err, want)
		}
	}
}

// FuzzDecodeMessages feeds arbitrary bodies to the scheduler's decoders of the executor
// protocol (register, heartbeat, result, result batch): none panics, every refusal is
// ErrMalformed, and what is accepted passes its Check, re-encodes, and decodes again to the
// same message.
func FuzzDecodeMessages(f *testing.F) {
	for _, seed := range []string{
		`{"app":"billing","address":"10.0.0.5:7071","protocol":"http","handlers":["invoice","refund"]}`,
		`{"app":"billing","address":"10.0.0.5:7071","running":3}`,
		`{"ticket":"12-1700000000000-0","task":"t","app":"a","address":"h:1","status":"failed","error":"boom","output":"…","exit_code":2,"started_at":1,"ended_at":2,"duration_ms":1}`,
		`{"results":[{"ticket":"a","status":"success"},{"ticket":"b","status":"maybe"}]}`,
		`{"ticket":"t","status":"success"} {}`, `{"ticket":"t","status":"success","x":1}`,
		`{"Ticket":"t","STATUS":"success"}`, `{"handlers":[null]}`, `{"running":1e400}`,
		`{"ticket":"t","epoch":5,"shard":7}`, `{"ticket":"t","shard":255}`, `{"ticket":"t","shard":256}`,
		`{"ticket":"t","shard":-1}`, `{"ticket":"t","shard":null}`,
		`[]`, `null`, `{}`, ``, "\xff", `{"results":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, into := range []func() interface{ Check() error }{reg, hb, res, kill, dereg} {
			v := into()
			err := DecodeMessage(body, v)
			if err == nil {
				err = v.Check()
			}
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("%T: error %v is not ErrMalformed", v, err)
				}
				continue
			}
			again, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%T: cannot re-encode %+v: %v", v, v, err)
			}
			w := into()
			if err := DecodeMessage(again, w); err != nil {
				t.Fatalf("%T: re-encoded %s refused: %v", v, again, err)
			}
			if err := w.Check(); err != nil {
				t.Fatalf("%T: re-encoded %s fails its check: %v", v, again, err)
			}
			if b, _ := json.Marshal(w); string(b) != string(again) {
				t.Fatalf("%T: round trip changed %s into %s", v, again, b)
			}
		}
		results, errs, err := DecodeResultBatch(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("batch: error %v is not ErrMalformed", err)
			}
			return
		}
		if len(results) == 0 || len(results) > MaxResultsPerCall || len(errs) != len(results) {
			t.Fatalf("batch: %d results, %d errors", len(results), len(errs))
		}
		for i, e := range errs {
			if e != nil && !errors.Is(e, ErrMalformed) {
				t.Fatalf("batch result %d: %v is not ErrMalformed", i, e)
			}
			if e == nil {
				if err := results[i].Check(); err != nil {
					t.Fatalf("batch result %d accepted but fails its check: %v", i, err)
				}
			}
		}
	})
}

// TestLargestResultFitsItsBody: a result with the largest output and error, of the bytes JSON
// escapes the longest (six bytes each), fits MaxResultBodyBytes, and decodes to a result that
// passes its check.
func TestLargestResultFitsItsBody(t *testing.T) {
	code := 3
	r := Result{Ticket: strings.Repeat("t", MaxNameBytes), Task: strings.Repeat("k", MaxNameBytes),
		App: strings.Repeat("a", MaxNameBytes), Address: strings.Repeat("h", MaxAddressBytes),
		Status: StatusFailed, Output: strings.Repeat("\x00", MaxOutputBytes), Error: strings.Repeat("<", MaxErrorBytes),
		ExitCode: &code, StartedAt: 1 << 62, EndedAt: 1 << 62, DurationMS: 1 << 62}
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > MaxResultBodyBytes {
		t.Fatalf("the largest result is %d bytes of JSON, over MaxResultBodyBytes (%d)", len(body), MaxResultBodyBytes)
	}
	var back Result
	if err := Decode(body, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.Check(); err != nil {
		t.Fatalf("the largest result fails its check: %v", err)
	}
	batch, _ := json.Marshal(ResultBatch{Results: []Result{r}})
	if len(batch) > MaxResultBodyBytes {
		t.Fatalf("a batch of the largest result is %d bytes, over MaxResultBodyBytes", len(batch))
	}
}

// FuzzDecodeResultBatch: the one-pass decoding of a result batch judges every result as
// decoding each alone does, and refuses the same envelopes with the same error; a body that
// repeats a key anywhere is refused whole both ways.
func FuzzDecodeResultBatch(f *testing.F) {
	for _, seed := range []string{
		`{"results":[{"ticket":"a","status":"success"},{"ticket":"b","status":"failed","error":"x"}]}`,
		`{"results":[{"ticket":"a","status":"success"},{"ticket":"b","status":"maybe"}]}`,
		`{"results":[{"ticket":"a","status":"success"},null,7,"x",{"ticket":"c","status":"success","extra":1}]}`,
		`{"results":[{"ticket":"a","status":"success","duration_ms":"2"},{"ticket":"b","status":"success"}]}`,
		`{"results":[{"ticket":"a","status":"success"}],"other":1}`,
		`{"results":[{"ticket":"a"}],"RESULTS":[{"status":"success"}]}`,
		`{"results":[]}`, `{"results":null}`, `{}`, `[]`, `null`, `{"results":[`, "\xff",
		`{"results":[{"ticket":"a","status":"success"}]} {}`,
		`{"results":[{"ticket":"a","status":"success","ticket":"b"}]}`,
		`{"results":[],"results":[{"ticket":"a","status":"success"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		results, errs, err := DecodeResultBatch(body)
		each, eachErrs, eachErr := decodeResultBatchEach(body)
		if jsonkeys.Repeated(body) && (err == nil || eachErr == nil) {
			t.Fatalf("a body repeating a key: one pass %v, each alone %v; want both refused", err, eachErr)
		}
		if fmt.Sprint(err) != fmt.Sprint(eachErr) || len(results) != len(each) || len(errs) != len(eachErrs) {
			t.Fatalf("one pass: %d results, %v; each alone: %d results, %v", len(results), err, len(each), eachErr)
		}
		for i := range results {
			if fmt.Sprint(errs[i]) != fmt.Sprint(eachErrs[i]) {
				t.Fatalf("result %d: one pass %v; each alone %v", i, errs[i], eachErrs[i])
			}
			if errs[i] == nil && !reflect.DeepEqual(results[i], each[i]) {
				t.Fatalf("result %d: one pass %+v; each alone %+v", i, results[i], each[i])
			}
		}
	})
}

var sinkResults []Result

// BenchmarkDecodeResultBatch measures the decoding of a batch of 64 results: in one pass
// (DecodeResultBatch, what a well-formed batch takes) and result by result
// (decodeResultBatchEach, what a batch holding a malformed result takes), in the same run.
func BenchmarkDecodeResultBatch(b *testing.B) {
	var body strings.Builder
	body.WriteString(`{"results":[`)
	for i := range 64 {
		if i > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"ticket":"%d-1700000000000-0","task":"monthly-invoice-%d","app":"billing",`+
			`"address":"10.0.0.5:7071","status":"success","output":"ok","started_at":1700000000001,`+
			`"ended_at":1700000000004,"duration_ms":3}`, 1000+i, i)
	}
	body.WriteString(`]}`)
	for _, c := range []struct {
		name   string
		decode func([]byte) ([]Result, []error, error)
	}{{"one-pass", DecodeResultBatch}, {"each", decodeResultBatchEach}} {
		b.Run("mode="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(body.Len()))
			for b.Loop() {
				rs, errs, err := c.decode([]byte(body.String()))
				if err != nil || len(rs) != 64 || errs[63] != nil {
					b.Fatalf("decode = %d results, %v", len(rs), err)
				}
				sinkResults = rs
			}
		})
	}
}
