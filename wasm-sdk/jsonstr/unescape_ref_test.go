package jsonstr_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

// The three decoders Unescape replaced, kept as they were, as the reference
// the fuzz target holds Unescape's modes to.

// refKeepEscape is the former AppendUnescaped.
func refKeepEscape(dst, raw []byte) []byte {
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
			r, ok := refHex4(raw[i+2:])
			if !ok {
				dst = append(dst, c)
				i++
				continue
			}
			i += 6
			if r >= 0xD800 && r < 0xDC00 && len(raw) >= i+6 && raw[i] == '\\' && raw[i+1] == 'u' {
				if lo, ok := refHex4(raw[i+2:]); ok && lo >= 0xDC00 && lo < 0xE000 {
					r = (r-0xD800)<<10 + (lo - 0xDC00) + 0x10000
					i += 6
				}
			}
			dst = utf8.AppendRune(dst, r)
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

func refHex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	r, err := strconv.ParseUint(string(b[:4]), 16, 32)
	return rune(r), err == nil //nolint:gosec // four hex digits, at most 0xFFFF
}

// refStop is the former jsonindex.AppendUnquote, the offset of the bad
// escape made absolute.
func refStop(dst, raw []byte) ([]byte, int) {
	base := 0
	for {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			return append(dst, raw...), -1
		}
		dst = append(dst, raw[:i]...)
		if i+1 >= len(raw) {
			return dst, base + i
		}
		var r rune
		size := 2
		switch e := raw[i+1]; e {
		case '"', '\\', '/':
			r = rune(e)
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			hi, ok := refHex4(raw[i+2:])
			if !ok {
				return dst, base + i
			}
			r, size = hi, 6
			if utf16.IsSurrogate(hi) {
				r = utf8.RuneError
				if hi < 0xDC00 && len(raw) >= i+12 && raw[i+6] == '\\' && raw[i+7] == 'u' {
					if lo, ok := refHex4(raw[i+8:]); ok && lo >= 0xDC00 && lo < 0xE000 {
						r, size = utf16.DecodeRune(hi, lo), 12
					}
				}
			}
		default:
			return dst, base + i
		}
		dst = utf8.AppendRune(dst, r)
		raw = raw[i+size:]
		base += i + size
	}
}

// refKeepChar is the former redact.UnquoteLenient, on the content after the
// opening quote.
func refKeepChar(tok []byte) string {
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c == '"' {
			break
		}
		if c != '\\' || i+1 >= len(tok) {
			b.WriteByte(c)
			continue
		}
		i++
		switch tok[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+4 < len(tok) {
				if r, err := strconv.ParseUint(string(tok[i+1:i+5]), 16, 32); err == nil {
					i += 4
					r1 := rune(r) //nolint:gosec // four hex digits, at most 0xFFFF
					if utf16.IsSurrogate(r1) && i+6 < len(tok) && tok[i+1] == '\\' && tok[i+2] == 'u' {
						if r2, err := strconv.ParseUint(string(tok[i+3:i+7]), 16, 32); err == nil {
							if d := utf16.DecodeRune(r1, rune(r2)); d != utf8.RuneError { //nolint:gosec // four hex digits
								b.WriteRune(d)
								i += 6
								continue
							}
						}
					}
					b.WriteRune(r1)
					continue
				}
			}
			b.WriteByte('u')
		default:
			b.WriteByte(tok[i])
		}
	}
	return b.String()
}

// FuzzUnescapeModes holds each mode of Unescape to the decoder it replaced.
func FuzzUnescapeModes(f *testing.F) {
	for _, s := range []string{``, `plain`, `a\"b\\c\/d\b\f\n\r\t`, `\ud83c\udf89`, `\ud83c`, `\udf89\ud83c\u0041`,
		`\u12`, `\u+123`, `tail\`, `\\\`, "raw\x00\xff é", `a"b`, `x\"y"z`, `\ud83c\udf8`, `0123456789\n0123456789\q`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if got, want := jsonstr.AppendUnescaped(nil, raw), refKeepEscape(nil, raw); !bytes.Equal(got, want) {
			t.Fatalf("KeepEscape(%q) = %q, want %q", raw, got, want)
		}
		got, bad := jsonstr.Unescape(nil, raw, jsonstr.Stop)
		if want, wbad := refStop(nil, raw); !bytes.Equal(got, want) || bad != wbad {
			t.Fatalf("Stop(%q) = %q %d, want %q %d", raw, got, bad, want, wbad)
		}
		// KeepChar reads up to the closing quote, as UnquoteLenient does.
		content := raw
		for j := 0; j < len(content); j++ {
			if content[j] == '\\' {
				j++
			} else if content[j] == '"' {
				content = content[:j]
				break
			}
		}
		got, bad = jsonstr.Unescape(nil, content, jsonstr.KeepChar)
		if want := refKeepChar(raw); string(got) != want || bad != -1 {
			t.Fatalf("KeepChar(%q) = %q %d, want %q", raw, got, bad, want)
		}
	})
}

// TestUnescapeWordBoundaries puts an escape, a malformed escape and a
// trailing backslash at every position of a 24-byte string, so the
// word-at-a-time search for a backslash is checked against the byte loop it
// replaced, in every mode.
func TestUnescapeWordBoundaries(t *testing.T) {
	for _, esc := range []string{`\n`, `\u00e9`, `\ud83c\udf89`, `\q`, `\u12`, `\`} {
		for pos := 0; pos < 24; pos++ {
			raw := []byte(strings.Repeat("a", pos) + esc + strings.Repeat("b", 24-pos))
			if esc == `\` {
				raw = []byte(strings.Repeat("a", pos) + esc)
			}
			if got, want := jsonstr.AppendUnescaped(nil, raw), refKeepEscape(nil, raw); !bytes.Equal(got, want) {
				t.Errorf("KeepEscape(%q) = %q, want %q", raw, got, want)
			}
			got, bad := jsonstr.Unescape(nil, raw, jsonstr.Stop)
			if want, wbad := refStop(nil, raw); !bytes.Equal(got, want) || bad != wbad {
				t.Errorf("Stop(%q) = %q %d, want %q %d", raw, got, bad, want, wbad)
			}
			if got, _ := jsonstr.Unescape(nil, raw, jsonstr.KeepChar); string(got) != refKeepChar(raw) {
				t.Errorf("KeepChar(%q) = %q, want %q", raw, got, refKeepChar(raw))
			}
		}
	}
}
