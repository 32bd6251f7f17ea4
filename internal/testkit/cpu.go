package testkit

import (
	"syscall"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// CPUTime is the user and system CPU time the process has used so far, 0
// when it cannot be read. Benchmarks report it per operation beside wall
// time: on a shared machine it is the steadier of the two.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPU reports the CPU time used since cpu0 (a CPUTime reading), per
// b.N, as "cpu-ns/op".
func ReportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(CPUTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchMap is a mapper benchmark: mapJSON(f, in) in a b.Loop, allocations
// reported, and the CPU time per call (cpu-ns/op). mapJSON is the SDK's
// MapJSON and f the mapper's function:
//
//	testkit.BenchMap(b, in, sdk.MapJSON, mapNova)
func BenchMap[F any](b *testing.B, in []byte, mapJSON func(F, []byte) ([]byte, error), f F) {
	BenchCPU(b, func() error {
		_, err := mapJSON(f, in)
		return err
	})
}

// BenchCPU runs call in a b.Loop, an error failing the benchmark, and
// reports allocations and the CPU time per call (cpu-ns/op): the loop of
// BenchMap and BenchIndexed, and of a benchmark of a host that maps through
// its own calls.
func BenchCPU(b *testing.B, call func() error) {
	b.ReportAllocs()
	cpu0 := CPUTime()
	for b.Loop() {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	ReportCPU(b, cpu0)
}

// BenchMapFile is BenchMap on the contents of file, whose size it reports
// as the bytes of an operation (MB/s).
func BenchMapFile[F any](b *testing.B, file string, mapJSON func(F, []byte) ([]byte, error), f F) {
	b.Helper()
	in := ReadFile(b, file)
	b.SetBytes(int64(len(in)))
	BenchMap(b, in, mapJSON, f)
}

// BenchIndexed is a benchmark of a mapper's host: every iteration indexes
// in, as the host indexes each delivery, and hands the index to call; an
// error fails the benchmark. Allocations and the CPU time per iteration
// (cpu-ns/op) are reported.
func BenchIndexed(b *testing.B, in []byte, call func(*jsonindex.Index) error) {
	var x jsonindex.Index
	BenchCPU(b, func() error {
		if err := x.Parse(in); err != nil {
			return err
		}
		return call(&x)
	})
}

// BenchIndexedParallel runs call in b.RunParallel until the benchmark ends,
// every goroutine with a jsonindex.Index of in of its own, as a mapper's
// host indexes a message once before its calls; an error stops that
// goroutine and fails the benchmark.
func BenchIndexedParallel(b *testing.B, in []byte, call func(*jsonindex.Index) error) {
	b.RunParallel(func(pb *testing.PB) {
		var x jsonindex.Index
		if err := x.Parse(in); err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if err := call(&x); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
