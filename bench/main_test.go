package bench

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(summarizing{m},
		// ants starts the goroutines of its package-level default pool when it is imported.
		// They are ignored as "already running when the tests start" rather than by name, so
		// that a dispatcher pool left unreleased by an engine is still reported.
		goleak.IgnoreCurrent(),
		// fasthttp keeps process-wide helpers: the Date header updater of its servers and the
		// DNS cache cleaner of its default dialer run for the life of the process.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreTopFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		// A stopped fasthttp server's worker-pool cleaner sleeps out its idle period before
		// it sees the stop; the client's idle-connection cleaners do the same. They hold no
		// benchmark state.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
	)
}

// summarizing runs the tests and benchmarks, then prints every suite's table: b.Log shows
// only with -v, and the tables are the point of a benchmark run.
type summarizing struct{ m *testing.M }

func (s summarizing) Run() int {
	code := s.m.Run()
	summaries.mu.Lock()
	defer summaries.mu.Unlock()
	for _, t := range summaries.tables {
		fmt.Fprintln(os.Stdout, t)
	}
	return code
}

var summaries struct {
	mu     sync.Mutex
	tables []string
}

// summarize logs a suite's table and keeps it for the summary printed after the run.
func summarize(b *testing.B, format string, args ...any) {
	b.Helper()
	text := fmt.Sprintf(format, args...)
	b.Log(text)
	summaries.mu.Lock()
	summaries.tables = append(summaries.tables, text)
	summaries.mu.Unlock()
}
