// Package jsonstr writes and reads the content of JSON strings: escaping text
// into a string, and decoding a string's escapes back into text. It is the
// one copy of both for the guest SDK, the mappers built on it and the host
// (the runtime, the channel input, the indexer jsonindex, internal/redact), so
// that what a guest writes and what the host writes are escaped the same way,
// and every string is read back by the same decoder.
//
// It imports only unicode/utf8 and unsafe, so it builds for GOOS=wasip1 and
// stays small in a guest. The fast paths read 8 bytes at a time; a plain
// string (the usual key or value) is copied without a byte-by-byte scan.
//
// Escaping writes quotes, backslashes and control characters as escapes
// (\n, \r, \t, \b, \f, else \u00XX) and replaces invalid UTF-8 with
// U+FFFD; everything else, non-ASCII text included, is copied as it is.
//
// Decoding has one decoder of escapes, DecodeEscape (a surrogate pair joined,
// a lone surrogate read as U+FFFD), and one loop over a string, Unescape,
// whose Malformed mode says what becomes of an escape DecodeEscape cannot
// read. Every reader of JSON strings in the project is one of its modes:
//
//   - KeepEscape (AppendUnescaped): the escape is kept as it stands; it
//     never fails. The SDK's values, the runtime's event writer, the channel
//     module.
//   - Stop: decoding ends there and the offset is returned, which
//     jsonindex.AppendUnquote reports as ErrSyntax. The host's indexer, which
//     also decodes escapes one at a time with DecodeEscape while it matches
//     member names and parses a document held in a string.
//   - KeepChar: the backslash is dropped and the character after it kept,
//     the reading of a string in a body that was cut (internal/redact's
//     UnquoteLenient, which also ends the string at its closing quote).
//
// Every byte outside an escape, control bytes and invalid UTF-8 included, is
// copied as it is, in every mode.
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

// DecodeEscape decodes the escape at raw[i], which is a backslash, and
// returns its rune and the number of bytes it takes: 2 for \" \\ \/ \b \f
// \n \r \t, 6 for \uXXXX, 12 for a surrogate pair. A lone surrogate
// decodes to U+FFFD and takes 6 bytes. size is 0 when the escape is
// malformed (an unknown letter, \u without four hex digits, a backslash at
// the end). It is the one decoder of escapes: every way of unescaping below,
// and the host's indexer (jsonindex), read escapes with it.
func DecodeEscape(raw []byte, i int) (r rune, size int) {
	if i+1 >= len(raw) {
		return 0, 0
	}
	switch raw[i+1] {
	case '"':
		return '"', 2
	case '\\':
		return '\\', 2
	case '/':
		return '/', 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r, ok := hex4(raw, i+2)
		if !ok {
			return 0, 0
		}
		if r >= 0xD800 && r < 0xDC00 {
			// High surrogate: combine with a following low one.
			if i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if lo, ok := hex4(raw, i+8); ok && lo >= 0xDC00 && lo < 0xE000 {
					return (r-0xD800)<<10 + (lo - 0xDC00) + 0x10000, 12
				}
			}
			return utf8.RuneError, 6
		}
		if r >= 0xDC00 && r < 0xE000 {
			return utf8.RuneError, 6
		}
		return r, 6
	}
	return 0, 0
}

// hex4 reads the four hex digits at raw[i:i+4].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[i : i+4] {
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

// Malformed says what unescaping does with an escape DecodeEscape cannot read.
type Malformed uint8

const (
	// KeepEscape copies a malformed escape as it stands, backslash and all.
	KeepEscape Malformed = iota
	// KeepChar drops the backslash of a malformed escape and keeps the
	// character after it (a backslash at the very end is kept): the reading
	// of a string in a body that was cut.
	KeepChar
	// Stop ends the decoding before a malformed escape.
	Stop
)

// Unescape appends the decoded text of raw, the content of a JSON string
// without its quotes, treating a malformed escape as m says. bad is the offset
// in raw of the malformed escape decoding stopped at (m == Stop only), -1
// when it decoded all of raw. Bytes outside escapes, control bytes and
// invalid UTF-8 included, are copied as they are; runs without a backslash
// are found a word at a time and copied at once.
func Unescape(dst, raw []byte, m Malformed) (out []byte, bad int) {
	start := 0
	for i := indexBackslash(raw, 0); i < len(raw); i = indexBackslash(raw, i) {
		dst = append(dst, raw[start:i]...)
		r, size := DecodeEscape(raw, i)
		switch {
		case size > 0:
			dst = utf8.AppendRune(dst, r)
			i += size
		case m == Stop:
			return dst, i
		case i+1 >= len(raw):
			dst = append(dst, '\\')
			i++
		default:
			if m == KeepEscape {
				dst = append(dst, '\\')
			}
			dst = append(dst, raw[i+1])
			i += 2
		}
		start = i
	}
	return append(dst, raw[start:]...), -1
}

// indexBackslash returns the offset of the first backslash in raw at or after
// i, len(raw) when there is none: whole words first, then bytes.
func indexBackslash(raw []byte, i int) int {
	if i+8 <= len(raw) {
		s := unsafe.String(unsafe.SliceData(raw), len(raw)) //nolint:gosec // zero-copy view of raw, read only during this call and not kept
		for ; i+8 <= len(s); i += 8 {
			if b := load8(s, i) ^ ('\\' * lsb); (b-lsb)&^b&msb != 0 {
				break
			}
		}
	}
	for ; i < len(raw); i++ {
		if raw[i] == '\\' {
			return i
		}
	}
	return i
}

// AppendUnescaped appends the decoded text of raw, the content of a JSON
// string without its quotes. Malformed escapes and a trailing backslash are
// kept literally; lone surrogates become U+FFFD. It is Unescape with
// KeepEscape.
func AppendUnescaped(dst, raw []byte) []byte {
	i := indexBackslash(raw, 0)
	if i == len(raw) {
		return append(dst, raw...) // the usual string: no escape
	}
	dst, _ = Unescape(append(dst, raw[:i]...), raw[i:], KeepEscape)
	return dst
}
