//go:build !unix

package wheel

import "time"

// processCPU is not measured on this platform; cpu-ns/timer then reads 0.
func processCPU() time.Duration { return 0 }
