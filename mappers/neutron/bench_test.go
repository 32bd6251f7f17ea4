package main

import (
	"os"
	"syscall"
	"testing"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkNeutron maps testdata/port.create.end__ceilometer__1.in.json (1025 bytes)
// natively, indexing the JSON included. The same input through the compiled
// module is BenchmarkBuiltin/neutron in package mappers. cpu-ns/op is the
// process's CPU time per call, the steadier figure on a shared machine.
func BenchmarkNeutron(b *testing.B) {
	in, err := os.ReadFile("testdata/port.create.end__ceilometer__1.in.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := sdk.MapJSON(mapNeutron, in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime returns the user+system CPU time of the process in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
