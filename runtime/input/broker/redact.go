package broker

import "unicode/utf8"

// cutUTF8 cuts b to at most n bytes without splitting a UTF-8 sequence.
func cutUTF8(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	b = b[:n]
	for k := 0; k < utf8.UTFMax && len(b) > 0; k++ {
		r, size := utf8.DecodeLastRune(b)
		if r != utf8.RuneError || size > 1 {
			break
		}
		b = b[:len(b)-1]
	}
	return b
}
