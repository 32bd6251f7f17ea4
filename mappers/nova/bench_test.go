package main

import (
	"os"
	"syscall"
	"testing"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkNovaExists maps a 2.5 KB compute.instance.exists of a current
// release natively (indexing the JSON included). The same input through the
// compiled module is measured by BenchmarkBuiltinNovaExists in package mappers.
// Besides wall time it reports cpu-ns/op, the process's CPU time per call: on
// a shared machine the steadier figure.
func BenchmarkNovaExists(b *testing.B) {
	in, err := os.ReadFile("testdata/edge__exists_2024_1.in.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := sdk.MapJSON(mapNova, in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkNovaVersioned maps the versioned instance.exists of
// testdata/instance.exists__nova__1.in.json (a nova sample with its $ref
// members resolved) natively: two host lookups of the member list, one to
// tell the format, one to read it. Through the compiled module:
// BenchmarkBuiltin/nova-versioned in package mappers.
func BenchmarkNovaVersioned(b *testing.B) {
	in, err := os.ReadFile("testdata/instance.exists__nova__1.in.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := sdk.MapJSON(mapNova, in); err != nil {
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
