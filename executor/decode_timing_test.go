package executor

import (
	"fmt"
	"strings"
	"testing"

	"github.com/axe-sched/axe/protocol"
)

var sinkRun protocol.Run

// BenchmarkDecodeRun measures the /axe/run body decoder, which every dispatch goes through,
// for growing params.
func BenchmarkDecodeRun(b *testing.B) {
	for _, size := range []int{0, 1 << 10, 64 << 10} {
		params := `{"blob":"` + strings.Repeat("x", size) + `"}`
		body := []byte(`{"ticket":"01J9ZQ3W6Y0K5T7V2B8N4M1C3D","task":"monthly-invoice","handler":"invoice",` +
			`"attempt":1,"scheduled_at":1700000000000,"deadline":1700000300000,"params":` + params +
			`,"dedup_ttl_ms":2100000}`)
		b.Run(fmt.Sprintf("params=%d", size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				r, err := decodeRun(body)
				if err != nil {
					b.Fatal(err)
				}
				sinkRun = r
			}
		})
	}
}

var sinkRuns []decodedRun

// BenchmarkDecodeRuns measures the /axe/runs body decoder on a batch of 64 runs: in one pass
// (decodeRuns, as the scheduler's batches decode) and run by run (decodeRunsEach, what a
// batch holding a malformed run takes), in the same run.
func BenchmarkDecodeRuns(b *testing.B) {
	var body strings.Builder
	body.WriteString(`{"runs":[`)
	for i := range 64 {
		if i > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"ticket":"01J9ZQ3W6Y0K5T7V2B8N4M%04d","task":"monthly-invoice-%d","handler":"invoice",`+
			`"attempt":1,"scheduled_at":1700000000000,"deadline":1700000300000,"params":{"customer":%d}}`, i, i, i)
	}
	body.WriteString(`]}`)
	for _, c := range []struct {
		name   string
		decode func([]byte) ([]decodedRun, error)
	}{{"one-pass", decodeRuns}, {"each", decodeRunsEach}} {
		b.Run("mode="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(body.Len()))
			for b.Loop() {
				runs, err := c.decode([]byte(body.String()))
				if err != nil || len(runs) != 64 || runs[63].err != nil {
					b.Fatalf("decode = %d runs, %v", len(runs), err)
				}
				sinkRuns = runs
			}
		})
	}
}
