package contract

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"unicode/utf8"
)

// checkTextRunewise is checkText written one character at a time, without
// the eight-byte fast path or a separate ASCII branch: the reference the fast
// path must agree with.
func checkTextRunewise(s []byte, maxBytes int, breaks bool) Violation {
	if len(s) > maxBytes {
		return TooLong
	}
	blank := true
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		s = s[n:]
		switch {
		case r == utf8.RuneError && n == 1: // not UTF-8
			return NotPrintable
		case r < 0x20 && !(breaks && (r == '\t' || r == '\n' || r == '\r')):
			return NotPrintable // C0, breaks unless allowed
		case r >= 0x7f && r < 0xa0: // DEL, C1
			return NotPrintable
		case r > ' ' && !isSpace(r):
			blank = false
		}
	}
	if blank {
		return Blank
	}
	return OK
}

// TestCheckTextWordAtATime: the fast path agrees with the reference for
// every byte at every place of a printable text and of a text of spaces, and
// for 200,000 random
// texts drawn from the bytes that matter (the edges of the printable range,
// spaces, breaks, non-ASCII lead and continuation bytes).
func TestCheckTextWordAtATime(t *testing.T) {
	for _, breaks := range []bool{false, true} {
		for n := 0; n <= 24; n++ {
			for at := 0; at < n; at++ {
				for c := 0; c < 512; c++ {
					s := make([]byte, n)
					for i := range s {
						s[i] = 'a' + byte(i%26)
						if c >= 256 { // a word of spaces: blank unless c is not
							s[i] = ' '
						}
					}
					s[at] = byte(c % 256)
					if got, want := checkText(s, 255, breaks), checkTextRunewise(s, 255, breaks); got != want {
						t.Fatalf("%q (breaks %v): %v, want %v", s, breaks, got, want)
					}
				}
			}
		}
	}
	pool := []byte{0x00, 0x09, 0x0a, 0x0d, 0x1f, 0x20, 0x21, 0x22, 0x41, 0x7e, 0x7f, 0x80, 0x9f, 0xa0, 0xc2, 0xc3, 0xe2, 0x80, 0xbf, 0xff}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		s := make([]byte, r.IntN(40))
		for i := range s {
			if r.IntN(4) == 0 {
				s[i] = pool[r.IntN(len(pool))]
			} else {
				s[i] = byte(0x21 + r.IntN(0x5e))
			}
		}
		breaks := r.IntN(2) == 0
		if got, want := checkText(s, 255, breaks), checkTextRunewise(s, 255, breaks); got != want {
			t.Fatalf("%q (breaks %v): %v, want %v", s, breaks, got, want)
		}
	}
}

// TestCheckQuantitySmallInt: the fast path for 1 to 15 digits agrees with
// strconv.ParseFloat at every range of the contract and around each bound.
func TestCheckQuantitySmallInt(t *testing.T) {
	maxes := []float64{65536, 1 << 32, 1<<53 - 1, 0, 1}
	texts := []string{"", "0", "00", "007", "1", "65535", "65536", "65537", "4294967296", "4294967297",
		"999999999999999", "9999999999999999", "9007199254740991", "9007199254740992", "1.0", "1e3", "12a", "-1"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 100_000 {
		texts = append(texts, strconv.FormatUint(r.Uint64N(1<<50)>>r.UintN(50), 10))
	}
	for _, max := range maxes {
		for _, s := range texts {
			if got, want := CheckQuantity([]byte(s), max), checkQuantityParsed([]byte(s), max); got != want {
				t.Fatalf("CheckQuantity(%q, %v) = %v, want %v", s, max, got, want)
			}
		}
	}
}
