package executor

import (
	"fmt"
	"strings"
	"testing"
)

var sinkRun runRequest

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
