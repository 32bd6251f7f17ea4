// Package jsonstr writes and reads the content of JSON strings: escaping text
// into a string, and decoding a string's escapes back into text. It is the
// one copy of both for the guest SDK, the mappers built on it and the host
// (the runtime, the channel input), so that what a guest writes and what the
// host writes are escaped the same way.
//
// It imports only unicode/utf8 and unsafe, so it builds for GOOS=wasip1 and
// stays small in a guest. The fast paths read 8 bytes at a time; a plain
// string (the usual key or value) is copied without a byte-by-byte scan.
//
// Escaping writes quotes, backslashes and control characters as escapes
// (\n, \r, \t, \b, \f, else \u00XX) and replaces invalid UTF-8 with
// U+FFFD; everything else, non-ASCII text included, is copied as it is.
// Decoding (AppendUnescaped) is lenient: it never fails, and keeps a
// malformed escape as it stands.
package jsonstr

import (
	"unicode/utf8"
	"unsafe"
)

const hexDigits = "0123456789abcdef"

// safeASCII[c] is true for the ASCII bytes that go into a JSON string as they are.
var safeASCII = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// load8 reads 8 bytes of s at i (i+8 <= len(s)): one i64.load in wasm.
func load8(s string, i int) uint64 {
	return *(*uint64)(unsafe.Add(unsafe.Pointer(unsafe.StringData(s)), i)) //nolint:gosec // word-at-a-time read inside s (i+8 <= len(s)); unaligned loads are allowed on wasm and amd64
}

// plain8 reports whether none of the 8 bytes in x needs attention in a JSON
// string: no control byte, quote, backslash or non-ASCII byte. (The classic
// SWAR tests; each is exact about whether such a byte exists.)
func plain8(x uint64) bool {
	q := x ^ ('"' * lsb)
	b := x ^ ('\\' * lsb)
	return ((x-0x20*lsb)&^x|(q-lsb)&^q|(b-lsb)&^b|x)&msb == 0
}

// Plain reports whether no byte of s needs escaping in a JSON string
// (AppendEscaped would copy it unchanged):
// whole words, the last one overlapping the one before when len(s) is not a
// multiple of 8, so only strings under 8 bytes are scanned byte by byte.
func Plain(s string) bool {
	n := len(s)
	if n < 8 {
		for i := 0; i < n; i++ {
			if c := s[i]; c >= utf8.RuneSelf || !safeASCII[c] {
				return false
			}
		}
		return true
	}
	for i := 0; i+8 < n; i += 8 {
		if !plain8(load8(s, i)) {
			return false
		}
	}
	return plain8(load8(s, n-8))
}

// plainPrefix returns how many leading bytes of s, in whole 8-byte words,
// need no escaping: the fast path for keys and ordinary values.
func plainPrefix(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if !plain8(load8(s, i)) {
			break
		}
	}
	return i
}

// AppendEscaped appends s as the content of a JSON string (no quotes):
// quotes, backslashes and control characters escaped, invalid UTF-8 replaced
// by U+FFFD, everything else as is. Runs of plain bytes are copied at once,
// and scanned a word at a time.
func AppendEscaped(dst []byte, s string) []byte {
	if Plain(s) {
		return append(dst, s...)
	}
	start := 0
	for i := plainPrefix(s); i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if safeASCII[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// AppendEscapedBytes is AppendEscaped for a byte slice, without a copy.
func AppendEscapedBytes(dst, b []byte) []byte {
	return AppendEscaped(dst, unsafe.String(unsafe.SliceData(b), len(b))) //nolint:gosec // zero-copy view of b for the call only; AppendEscaped copies what it keeps into dst
}

// AppendQuoted appends s as a JSON string with its quotes.
func AppendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = AppendEscaped(dst, s)
	return append(dst, '"')
}

// AppendQuotedBytes is AppendQuoted for a byte slice, without a copy.
func AppendQuotedBytes(dst, b []byte) []byte {
	return AppendQuoted(dst, unsafe.String(unsafe.SliceData(b), len(b))) //nolint:gosec // zero-copy view of b for the call only; AppendQuoted copies what it keeps into dst
}

// CleanRaw reports whether raw, the content of a string of a JSON document
// already validated (its escapes well formed, no bare quote), can be copied
// into another JSON string unchanged: no control bytes and valid UTF-8.
func CleanRaw(raw []byte) bool {
	s := unsafe.String(unsafe.SliceData(raw), len(raw)) //nolint:gosec // zero-copy view of raw, read only during this call and not kept
	i := 0
	for ; i+8 <= len(s); i += 8 {
		// Raw spans of valid JSON hold no bare quote and only valid escapes,
		// so only control and non-ASCII bytes matter here.
		if x := load8(s, i); ((x-0x20*lsb)&^x|x)&msb != 0 {
			break
		}
	}
	if i == len(s) || (i >= 8 && i+8 > len(s) && ((load8(s, len(s)-8)-0x20*lsb)&^load8(s, len(s)-8)|load8(s, len(s)-8))&msb == 0) {
		// All words clean, the last (overlapping) one included.
		return true
	}
	for ; i < len(raw); i++ {
		c := raw[i]
		if c < 0x20 {
			return false
		}
		if c >= utf8.RuneSelf {
			return utf8.Valid(raw[i:]) && !hasControl(raw[i:])
		}
	}
	return true
}

func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// AppendUnescaped appends the decoded text of raw, the content of a JSON
// string without its quotes. Malformed escapes and a trailing backslash are
// kept literally; lone surrogates become U+FFFD.
func AppendUnescaped(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' || i+1 >= len(raw) {
			dst = append(dst, c)
			i++
			continue
		}
		switch e := raw[i+1]; e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw[i+2:])
			if !ok {
				dst = append(dst, c)
				i++
				continue
			}
			i += 6
			if r >= 0xD800 && r < 0xDC00 {
				if len(raw) >= i+6 && raw[i] == '\\' && raw[i+1] == 'u' {
					if lo, ok := hex4(raw[i+2:]); ok && lo >= 0xDC00 && lo < 0xE000 {
						r = (r-0xD800)<<10 + (lo - 0xDC00) + 0x10000
						i += 6
					}
				}
			}
			dst = utf8.AppendRune(dst, r) // surrogates left over become U+FFFD
			continue
		default:
			dst = append(dst, c)
			i++
			continue
		}
		i += 2
	}
	return dst
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
