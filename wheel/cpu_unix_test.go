//go:build unix

package wheel

import (
	"syscall"
	"time"
)

// processCPU is the user plus system CPU time this process has used, so benchmarks
// can compare work done by the runtime's own timer goroutines with work done inline.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
