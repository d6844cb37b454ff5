// Command benchexec is the executor process of the end-to-end benchmark (bench/e2e): two
// SDK executors with no-op handlers, see e2e.ExecutorMain. e2e.Run builds and starts it;
// nobody else should.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/axe-sched/axe/bench/e2e"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := e2e.ExecutorMain(ctx, os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "axe-bench-executor:", err)
		os.Exit(1)
	}
}
