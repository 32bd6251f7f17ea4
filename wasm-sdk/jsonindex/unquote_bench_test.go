package jsonindex

import (
	"encoding/json"
	"testing"
)

// BenchmarkAppendUnquote decodes string spans as the host does: short names,
// a display name with escapes, and a whole nova notification held escaped in
// a string (an oslo envelope's oslo.message).
func BenchmarkAppendUnquote(b *testing.B) {
	nova, err := json.Marshal(string(readNova(b)))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, raw string }{
		{"type", "compute.instance.exists"},
		{"short", "nova"},
		{"escaped", `instance \"web-1\" resized\n\tflavor m1.small \u2192 m1.large`},
		{"envelope", string(nova[1 : len(nova)-1])},
	} {
		raw := []byte(c.raw)
		b.Run(c.name, func(b *testing.B) {
			buf := make([]byte, 0, len(raw))
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				buf, _ = AppendUnquote(buf[:0], raw)
			}
		})
	}
}
