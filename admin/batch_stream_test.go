package admin

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// endlessItem is a batch body whose one item never ends: `[{"name":"xxxx…`, counting what is
// read of it.
type endlessItem struct {
	start string
	read  int64
}

func (e *endlessItem) Read(p []byte) (int, error) {
	n := 0
	if int(e.read) < len(e.start) {
		n = copy(p, e.start[e.read:])
	}
	for i := n; i < len(p); i++ {
		p[i] = 'x'
	}
	e.read += int64(len(p))
	return len(p), nil
}

// TestBatchItemLimitStopsTheStream: a batch item is held to the body limit of one create as
// it streams in, so a client that sends one endless item (or one of 100 MB) makes the server
// read about 256 KiB of it, not the 64 MiB of the whole batch, and the error names the item;
// an item of the largest valid size still decodes.
func TestBatchItemLimitStopsTheStream(t *testing.T) {
	for _, ndjson := range []bool{false, true} {
		body := &endlessItem{start: `[{"name":"a","trigger":"manual"},{"name":"`}
		if ndjson {
			body.start = `{"name":"a","trigger":"manual"}` + "\n" + `{"name":"`
		}
		_, _, err := decodeBatch(body, ndjson)
		var tl *errTooLarge
		if !errors.As(err, &tl) || !strings.Contains(tl.msg, "item 1") {
			t.Fatalf("ndjson=%v: %v, want the limit of item 1", ndjson, err)
		}
		if max := int64(TaskMaxBodyBytes + 2*batchReadChunk); body.read > max {
			t.Errorf("ndjson=%v: read %d bytes of the endless item, want at most %d", ndjson, body.read, max)
		}
	}
	// Params of 64 KiB, each byte escaped as six: the largest definition a single create takes.
	big := `[{"name":"big","trigger":"manual","callback":{"url":"http://h/"},"params":"` + strings.Repeat(`\u0041`, 40<<10) + `"}]`
	specs, bad, err := decodeBatch(io.MultiReader(strings.NewReader(big)), false)
	if err != nil || len(bad) != 0 || len(specs) != 1 {
		t.Fatalf("an item of %d bytes: %d specs, %v, %v", len(big), len(specs), bad, err)
	}
}
