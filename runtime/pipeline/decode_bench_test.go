package pipeline

import (
	"os"
	"testing"
)

// BenchmarkDecode measures the decode of an oslo envelope alone: the
// envelope and its payload indexed, ready for routing and the guest. The 1.6
// KB body is the one BenchmarkDrain publishes; the 2.6 KB one wraps nova's
// benchmark input (edge__exists_2024_1) as oslo.messaging does.
func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct{ name, path string }{
		{"1.6KB", "../input/broker/testdata/wire/v2_nova_001.body"},
		{"2.6KB", "testdata/v2_nova_exists_2024.body"},
	} {
		body, err := os.ReadFile(c.path)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			var p Pipeline
			var s scratch
			if _, ok := p.decode(&s, body); !ok {
				b.Fatal("not decoded")
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				p.decode(&s, body)
			}
		})
	}
}
