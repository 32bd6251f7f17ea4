//go:build !wasip1

package sdk_test

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time. Benchmarks report it per
// operation ("cpu-ns/op") next to wall time: on a shared machine it is the
// steadier of the two.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU runs loop and reports its CPU time per b.N.
func reportCPU(b *testing.B, loop func()) {
	start := cpuTime()
	loop()
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}
