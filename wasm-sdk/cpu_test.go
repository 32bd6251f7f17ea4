//go:build !wasip1

package sdk_test

import (
	"syscall"
	"testing"
	"time"
)

// reportCPU runs loop and reports its CPU time (user and system, from
// getrusage) per b.N, as "cpu-ns/op": the figure the collector's benchmarks
// report (internal/testkit.ReportCPU, in the collector's module, which the
// SDK's module does not require).
func reportCPU(b *testing.B, loop func()) {
	start := cpuTime()
	loop()
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
