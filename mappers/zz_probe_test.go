package mappers

import (
	"context"
	"os"
	"testing"

	"github.com/rs/zerolog"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/jsonindex"
)

func benchProbe(b *testing.B, file string) {
	ctx := context.Background()
	eng, _ := runtime.NewEngine(ctx, runtime.Config{Logger: zerolog.Nop()})
	defer eng.Close(ctx)
	w, _ := os.ReadFile(file)
	m, err := eng.Load(ctx, file, w)
	if err != nil {
		b.Fatal(err)
	}
	in, _ := os.ReadFile("nova/testdata/edge__exists_2024_1.in.json")
	var idx jsonindex.Index
	idx.Parse(in)
	for b.Loop() {
		if _, err := m.Map(ctx, &idx, testSource); err != nil {
			b.Fatal(err)
		}
	}
}
func BenchmarkProbe0(b *testing.B) { benchProbe(b, "/tmp/mw/probe0.wasm") }
func BenchmarkProbeA(b *testing.B) { benchProbe(b, "/tmp/mw/pA.wasm") }
func BenchmarkProbeB(b *testing.B) { benchProbe(b, "/tmp/mw/pB.wasm") }
func BenchmarkProbeC(b *testing.B) { benchProbe(b, "/tmp/mw/pC.wasm") }
