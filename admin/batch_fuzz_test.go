package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/wire"
)

// FuzzDecodeBatch feeds arbitrary bodies to the batch decoder, as a JSON array and as NDJSON:
// it never panics; a refused body is a bad request or over a limit; an accepted one gives one
// entry per item, nil exactly where an item error names that index, in order; and the items
// of an accepted array, written one a line, decode as NDJSON to the same judgement.
func FuzzDecodeBatch(f *testing.F) {
	for _, seed := range []string{
		`[{"name":"a","trigger":"manual","callback":{"type":"http","url":"http://x/"}}]`,
		`[{"name":"a"},{"bogus":1},7,null,{"name":"b","trigger":"cron","cron":"* * * * *"}]`,
		"{\"name\":\"a\"}\n{\"name\":\"b\"}\n", `[]`, `[`, `[{}] x`, `{}`, `null`, "\xff", `[[]]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ndjson := range []bool{false, true} {
			specs, bad, err := decodeBatch(bytes.NewReader(body), ndjson)
			if err != nil {
				var tl *errTooLarge
				if !errors.Is(err, ErrBadRequest) && !errors.As(err, &tl) {
					t.Fatalf("ndjson=%v: error %v is neither a bad request nor a limit", ndjson, err)
				}
				continue
			}
			checkItems(t, specs, bad)
			if ndjson || len(specs) == 0 {
				continue
			}
			// The same items, one a line.
			lines, ok := arrayLines(body)
			if !ok {
				continue
			}
			specs2, bad2, err := decodeBatch(strings.NewReader(lines), true)
			if err != nil || len(specs2) != len(specs) || len(bad2) != len(bad) {
				t.Fatalf("as NDJSON %q: %d specs, %d bad, %v; as an array %d specs, %d bad", lines, len(specs2), len(bad2), err, len(specs), len(bad))
			}
		}
	})
}

func checkItems(t *testing.T, specs []*wire.TaskSpec, bad []engine.ItemError) {
	t.Helper()
	if len(specs) > BatchMaxTasks {
		t.Fatalf("%d specs, over the limit", len(specs))
	}
	next := 0
	for i, s := range specs {
		isBad := next < len(bad) && bad[next].Index == i
		if isBad {
			if bad[next].Err == nil {
				t.Fatalf("item %d is refused without an error", i)
			}
			next++
		}
		if (s == nil) != isBad {
			t.Fatalf("item %d: spec %v, refused %v", i, s != nil, isBad)
		}
	}
	if next != len(bad) {
		t.Fatalf("item errors %v beyond the %d items, or out of order", bad, len(specs))
	}
}

// arrayLines rewrites a JSON array body as NDJSON, one compacted item a line.
func arrayLines(body []byte) (string, bool) {
	var items []json.RawMessage
	if err := json.Unmarshal(body, &items); err != nil {
		return "", false
	}
	var b strings.Builder
	for _, it := range items {
		var c bytes.Buffer
		if err := json.Compact(&c, it); err != nil {
			return "", false
		}
		b.Write(c.Bytes())
		b.WriteByte('\n')
	}
	return b.String(), true
}
