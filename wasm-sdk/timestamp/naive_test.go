package timestamp

import "testing"

// TestNaiveTakesEveryOsloTimestamp: the fast path answers every valid
// timestamp of oslo's shape, whatever its digits, the same as the general
// path (it used to pass on to the general path a date whose digits OR'ed
// together passed 9, such as 2012-05-08).
func TestNaiveTakesEveryOsloTimestamp(t *testing.T) {
	base := []byte("2012-05-07 13:01:27.123456")
	digits := []int{0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22, 23, 24, 25}
	for _, at := range digits {
		for c := byte('0'); c <= '9'; c++ {
			for _, n := range []int{19, len(base)} {
				s := append([]byte(nil), base[:n]...)
				if at >= n {
					continue
				}
				s[at] = c
				want, ok := General(nil, s)
				if !ok {
					continue // not a valid time (month 19, hour 33, ...)
				}
				got, ok := Naive(nil, s)
				if !ok || string(got) != string(want) {
					t.Errorf("Naive(%s) = %s %v, want %s", s, got, ok, want)
				}
			}
		}
	}
}

// TestNdTellsDigits: nd's high nibble is 0 exactly for the ten digits.
func TestNdTellsDigits(t *testing.T) {
	for c := 0; c < 256; c++ {
		if got, want := nd(byte(c))&0xf0 == 0, c >= '0' && c <= '9'; got != want {
			t.Errorf("nd(%#x): digit %v, want %v", c, got, want)
		}
	}
}
