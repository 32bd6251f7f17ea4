//go:build !race

package plog

import (
	"math/rand/v2"
	"testing"

	"github.com/spaolacci/murmur3"
)

// The reference implementation fails the race detector's pointer checks, so
// this comparison runs without -race only.
func TestMurmur32MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 300; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if got, want := murmur32(b), murmur3.Sum32(b); got != want {
			t.Fatalf("%d bytes: %#x, reference %#x", n, got, want)
		}
	}
}
