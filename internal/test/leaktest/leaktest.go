// Package leaktest holds the goleak options every axe test package shares: the background
// goroutines of third-party libraries that outlive a clean shutdown by design. Anything not
// listed here that is still running after a package's tests is a leak of ours.
package leaktest

import "go.uber.org/goleak"

// Options are the ignores for goleak.VerifyTestMain.
func Options() []goleak.Option {
	return []goleak.Option{
		// Goroutines started before the tests, by package init: ants starts a default pool.
		// Called from TestMain, this snapshot holds nothing of ours.
		goleak.IgnoreCurrent(),
		// fasthttp cleans idle connections and cached DNS entries in sleeping loops that end
		// on their own (after MaxIdleConnDuration), not when the client is closed.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		// A stopped fasthttp server's worker-pool cleaner sleeps out its idle period (10 s)
		// before it sees the stop, and the cached Date header of its servers is updated by a
		// goroutine that lives for the whole process.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// net/http test servers close keep-alive connections asynchronously.
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// database/sql keeps a connection opener per pool until Close; stores are closed in
		// t.Cleanup.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	}
}
