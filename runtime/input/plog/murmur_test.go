package plog

import "testing"

func TestMurmur32Vectors(t *testing.T) {
	// Published MurmurHash3_x86_32 values for seed 0.
	for in, want := range map[string]uint32{
		"":      0,
		"hello": 0x248bfa47,
		"The quick brown fox jumps over the lazy dog": 0x2e4ff723,
	} {
		if got := murmur32([]byte(in)); got != want {
			t.Errorf("murmur32(%q) = %#x, want %#x", in, got, want)
		}
	}
}
