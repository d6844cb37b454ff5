package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/protocol"

	"github.com/axe-sched/axe/internal/test/jsonkeys"
)

func TestDecodeRun(t *testing.T) {
	r, err := decodeRun([]byte(`{"ticket":"t-1","task":"nightly","handler":"backup","attempt":2,
		"scheduled_at":1700000000000,"deadline":1700000300000,"params":{"dir":"/etc"},
		"dedup_ttl_ms":900000,"group":"ops","kind":"cron"}`))
	if err != nil {
		t.Fatal(err)
	}
	run := handlerRun(r)
	if run.Ticket != "t-1" || run.Task != "nightly" || run.Handler != "backup" || run.Attempt != 2 ||
		!run.ScheduledAt.Equal(time.UnixMilli(1700000000000)) || !run.Deadline.Equal(time.UnixMilli(1700000300000)) ||
		string(run.Params) != `{"dir":"/etc"}` {
		t.Errorf("run = %+v", run)
	}
	if ttl := dedupTTL(r, time.Minute); ttl != 15*time.Minute {
		t.Errorf("dedup TTL = %v", ttl)
	}

	r, err = decodeRun([]byte(`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","params":null}`))
	if err != nil {
		t.Fatal(err)
	}
	run = handlerRun(r)
	if run.Params != nil || !run.Deadline.IsZero() || !run.ScheduledAt.IsZero() || dedupTTL(r, time.Minute) != time.Minute {
		t.Errorf("minimal run = %+v, ttl %v", run, dedupTTL(r, time.Minute))
	}

	for body, field := range map[string]string{
		`{"attempt":1,"deadline":0,"task":"a","handler":"h"}`:                                                        "ticket",
		`{"attempt":1,"deadline":0,"ticket":"t","handler":"h"}`:                                                      "task",
		`{"attempt":1,"ticket":"t","task":"a"}`:                                                                      "deadline: is required",
		`{"attempt":1,"deadline":0,"ticket":"` + strings.Repeat("x", 257) + `","task":"a","handler":"h"}`:            "ticket",
		`{"deadline":0,"ticket":"t","task":"a","handler":"h","attempt":-1}`:                                          "attempt",
		`{"attempt":1,"ticket":"t","task":"a","handler":"h","deadline":-5}`:                                          "deadline",
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","scheduled_at":-5}`:                         "scheduled_at",
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","dedup_ttl_ms":99999999999999}`:             "dedup_ttl_ms",
		`{"attempt":1,"deadline":0,"ticket":1,"task":"a","handler":"h"}`:                                             "ticket: must be string",
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","future_field":{"a":1,"a":2}}`:              "future_field.a: repeated key",
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h"}{}`:                                         "trailing data",
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","kind":"` + strings.Repeat("k", 300) + `"}`: "kind",
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","epoch":3,"shard":256}`:                     "shard: must be between 0 and 255, got 256",
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","shard":-1}`:                                "shard: must be between 0 and 255, got -1",
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","shard":"7"}`:                               "shard: must be int",
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","shard":1.5}`:                               "shard",
		`null`: "attempt: is required",
		``:     "invalid JSON",
	} {
		_, err := decodeRun([]byte(body))
		if !errors.Is(err, ErrInvalidRun) || !strings.Contains(err.Error(), field) {
			t.Errorf("decodeRun(%.40s) = %v, want ErrInvalidRun naming %s", body, err, field)
		}
	}
}

// FuzzDecodeRun feeds arbitrary bodies to the /axe/run decoder: it must never panic, must
// refuse with ErrInvalidRun, and whatever it accepts must satisfy the protocol's invariants and
// survive a re-encode unchanged.
func FuzzDecodeRun(f *testing.F) {
	for _, seed := range []string{
		`{"ticket":"t-1","task":"nightly","handler":"backup","attempt":1,"scheduled_at":1700000000000,"deadline":1700000300000,"params":{"a":[1,2]},"dedup_ttl_ms":600000}`,
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","params":null}`,
		`{"deadline":0,"ticket":"t","task":"a","handler":"h","params":"x","attempt":9223372036854775807}`,
		`{"attempt":1,"ticket":"\u00e9\ud800","task":"a","handler":"h","deadline":1e3}`,
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","dedup_ttl_ms":2592000000}`,
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","epoch":5,"shard":7}`,
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","shard":0}`, `{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","shard":null}`,
		`{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","epoch":2,"shard":256}`,
		`[]`, `null`, `{}`, `{"ticket":`, "\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeRun(body)
		if err != nil {
			if !errors.Is(err, ErrInvalidRun) {
				t.Fatalf("error %v does not wrap ErrInvalidRun", err)
			}
			return
		}
		// The handler is optional (a run without one is answered 404 unknown handler).
		if r.Ticket == "" || r.Task == "" ||
			len(r.Ticket) > maxNameLen || len(r.Task) > maxNameLen || len(r.Handler) > maxNameLen {
			t.Fatalf("accepted bad names: %+v", r)
		}
		if r.Attempt < 1 || r.ScheduledAt < 0 || r.Deadline < 0 || r.DedupTTLMS < 0 || r.Epoch < 0 {
			t.Fatalf("accepted negative numbers: %+v", r)
		}
		if r.Shard != nil && (*r.Shard < 0 || *r.Shard >= protocol.ShardCount) {
			t.Fatalf("accepted shard %d", *r.Shard)
		}
		if ttl := dedupTTL(r, DedupTTLDefault); ttl <= 0 || ttl > maxDedupTTL {
			t.Fatalf("dedup TTL %v out of range", ttl)
		}
		if r.Params != nil && !json.Valid(r.Params) {
			t.Fatalf("accepted invalid params %q", r.Params)
		}
		run := handlerRun(r)
		if run.Deadline.IsZero() != (r.Deadline == 0) || (r.Deadline > 0 && run.Deadline.UnixMilli() != r.Deadline) {
			t.Fatalf("deadline %d became %v", r.Deadline, run.Deadline)
		}

		again, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("cannot re-encode %+v: %v", r, err)
		}
		r2, err := decodeRun(again)
		if err != nil {
			t.Fatalf("re-encoded run %s refused: %v", again, err)
		}
		if r2.Ticket != r.Ticket || r2.Task != r.Task || r2.Handler != r.Handler || r2.Attempt != r.Attempt ||
			r2.ScheduledAt != r.ScheduledAt || r2.Deadline != r.Deadline || r2.DedupTTLMS != r.DedupTTLMS ||
			r2.Epoch != r.Epoch || !reflect.DeepEqual(r2.Shard, r.Shard) ||
			!bytes.Equal(canonical(t, r2.Params), canonical(t, r.Params)) {
			t.Fatalf("round trip changed the run:\n%+v\n%+v", r, r2)
		}
	})
}

func canonical(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	if raw == nil {
		return nil
	}
	// Decoded and encoded again rather than compacted: json.Marshal writes a RawMessage with
	// HTML-safe escapes ("&" as "\u0026"), so the same value may come back in other bytes.
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("cannot decode %q: %v", raw, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("cannot encode %q: %v", raw, err)
	}
	return out
}

func TestTailKeepsRuneBoundaries(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"0123456789", 4, "6789"},
		{"aé", 1, ""},   // é is two bytes: cutting inside it drops it
		{"aéb", 2, "b"}, // the cut lands on é's second byte
		{"aéb", 3, "éb"},
	} {
		if got := tail(tc.in, tc.limit); got != tc.want {
			t.Errorf("tail(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
}

// FuzzDecodeRuns feeds arbitrary bodies to the /axe/runs decoder: it must never panic, must
// refuse with ErrInvalidRun, whatever it accepts holds 1 to protocol.MaxRunsPerCall runs, each judged
// with ErrInvalidRun when refused, and the one-pass decoding must judge every run as
// decoding each alone does. (Where the body repeats its "runs" key, encoding/json merges the
// repeats into the elements it already decoded, so the two may differ there; the scheduler
// never sends that.)
func FuzzDecodeRuns(f *testing.F) {
	for _, seed := range []string{
		`{"runs":[{"attempt":1,"deadline":0,"ticket":"t-1","task":"a","handler":"h"},{"attempt":1,"deadline":0,"ticket":"t-2","task":"b","handler":"h"}]}`,
		`{"runs":[{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h"},null,7,"x"]}`,
		`{"runs":[{"deadline":0,"ticket":"t","task":"a","handler":"h","attempt":"2"},{"attempt":1,"deadline":0,"ticket":"u","task":"a","handler":"h"}]}`,
		`{"runs":[{"deadline":0,"ticket":"t","task":"a","handler":"h","attempt":-1}],"other":1}`,
		`{"runs":[{"ticket":"a"}],"RUNS":[{"attempt":1,"deadline":0,"task":"b","handler":"h"}]}`,
		`{"runs":[{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","epoch":5,"shard":7},{"attempt":1,"deadline":0,"ticket":"u","task":"b","handler":"h","epoch":2,"shard":40}]}`,
		`{"runs":[{"attempt":1,"deadline":0,"ticket":"t","task":"a","handler":"h","shard":256},{"attempt":1,"deadline":0,"ticket":"u","task":"b","handler":"h","shard":"1"}]}`,
		`{"runs":[]}`, `{"runs":null}`, `{}`, `[]`, `null`, `{"runs":[`, "\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		runs, err := decodeRuns(body)
		each, eachErr := decodeRunsEach(body)
		if err != nil {
			if !errors.Is(err, ErrInvalidRun) {
				t.Fatalf("error %v does not wrap ErrInvalidRun", err)
			}
		} else {
			if len(runs) == 0 || len(runs) > protocol.MaxRunsPerCall {
				t.Fatalf("accepted %d runs", len(runs))
			}
			for i, run := range runs {
				if run.err != nil && !errors.Is(run.err, ErrInvalidRun) {
					t.Fatalf("run %d: error %v does not wrap ErrInvalidRun", i, run.err)
				}
			}
		}
		if jsonkeys.Count(body, "runs") > 1 {
			return
		}
		if (err == nil) != (eachErr == nil) || len(runs) != len(each) {
			t.Fatalf("one pass: %d runs, %v; each alone: %d runs, %v", len(runs), err, len(each), eachErr)
		}
		for i := range runs {
			if !reflect.DeepEqual(runs[i].req, each[i].req) || fmt.Sprint(runs[i].err) != fmt.Sprint(each[i].err) {
				t.Fatalf("run %d: one pass %+v, %v; each alone %+v, %v", i, runs[i].req, runs[i].err, each[i].req, each[i].err)
			}
		}
	})
}

// FuzzDecodeKill feeds arbitrary bodies to the /axe/kill decoder: it never panics, and what it
// accepts has a ticket within bounds, no negative epoch, no shard out of 0 to
// protocol.ShardCount-1, and re-encodes to a body it accepts again unchanged.
func FuzzDecodeKill(f *testing.F) {
	for _, seed := range []string{
		`{"ticket":"t-1"}`, `{"ticket":"t-1","epoch":3}`, `{"ticket":"t","epoch":-1}`,
		`{"ticket":"t","signal":9}`, `{"ticket":"t"} []`, `{"TICKET":"t"}`, `{}`, `[]`, `null`, "\xff",
		`{"ticket":"t","epoch":5,"shard":7}`, `{"ticket":"t","shard":255}`, `{"ticket":"t","shard":256}`,
		`{"ticket":"t","shard":-1}`, `{"ticket":"t","shard":null}`, `{"ticket":"t","shard":"7"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		k, err := decodeKill(body)
		if err != nil {
			if len(body) <= protocol.MaxKillBodyBytes && !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("error %v is not protocol.ErrMalformed", err)
			}
			return
		}
		if k.Ticket == "" || len(k.Ticket) > protocol.MaxNameBytes || k.Epoch < 0 ||
			(k.Shard != nil && (*k.Shard < 0 || *k.Shard >= protocol.ShardCount)) {
			t.Fatalf("accepted %+v", k)
		}
		again, _ := json.Marshal(k)
		k2, err := decodeKill(again)
		// DeepEqual, not ==: Shard is a pointer, which decoding again points elsewhere.
		if err != nil || !reflect.DeepEqual(k2, k) {
			t.Fatalf("re-encoded kill %s: %+v, %v", again, k2, err)
		}
	})
}
