package jsonstr_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

func TestAppendEscaped(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ``},
		{"plain ascii", `plain ascii`},
		{`say "hi"`, `say \"hi\"`},
		{`C:\dir\`, `C:\\dir\\`},
		{"a\nb\rc\td\be\ff", `a\nb\rc\td\be\ff`},
		{"\x00\x01\x1f", `\u0000\u0001\u001f`},
		{"\x7f", "\x7f"},
		{"héllo wörld", "héllo wörld"},
		{"日本語 🎉", "日本語 🎉"},
		{"\u2028\u2029", "\u2028\u2029"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{"\xc3", "\uFFFD"},                     // truncated sequence at the end
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // encoded surrogate: invalid UTF-8
		{"\xe6\x97", "\uFFFD\uFFFD"},
		{"</script>&", "</script>&"},
	} {
		got := string(jsonstr.AppendEscaped([]byte("x"), tc.in))[1:]
		if got != tc.want {
			t.Errorf("escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
		var back string
		if err := json.Unmarshal([]byte(`"`+got+`"`), &back); err != nil {
			t.Errorf("escape(%q) is not a JSON string: %v", tc.in, err)
		}
		if utf8.ValidString(tc.in) && back != tc.in {
			t.Errorf("escape(%q) decodes to %q", tc.in, back)
		}
	}
}

func TestAppendUnescaped(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`plain`, "plain"},
		{`a\"b\\c\/d`, `a"b\c/d`},
		{`\n\r\t\b\f`, "\n\r\t\b\f"},
		{`\u00e9\u65e5`, "é日"},
		{`\ud83c\udf89`, "🎉"},
		{`\ud83c`, "\uFFFD"},   // lone high surrogate
		{`\udf89x`, "\uFFFDx"}, // lone low surrogate
		{`\u12`, `\u12`},       // malformed: kept
		{`tail\`, `tail\`},     // dangling backslash: kept
		{"raw é", "raw é"},     // non-ASCII passes through
		{`\uD83C\uDF89`, "🎉"},  // upper-case hex
	} {
		if got := string(jsonstr.AppendUnescaped(nil, []byte(tc.raw))); got != tc.want {
			t.Errorf("unescape(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

// TestEscapeWordBoundaries puts every special byte at every position of a
// 24-byte string, so the word-at-a-time scan is checked against the byte loop.
func TestEscapeWordBoundaries(t *testing.T) {
	for _, special := range []string{"\"", "\\", "\x00", "\x1f", "\n", "é", "\xff", "\x7f", " ", "~"} {
		for pos := 0; pos < 24; pos++ {
			in := strings.Repeat("a", pos) + special + strings.Repeat("b", 24-pos)
			got := jsonstr.AppendEscaped(nil, in)
			var back string
			if err := json.Unmarshal([]byte(`"`+string(got)+`"`), &back); err != nil {
				t.Fatalf("%q: %s is not a JSON string", in, got)
			}
			want := strings.ToValidUTF8(in, "\uFFFD")
			if back != want {
				t.Fatalf("%q round-trips to %q", in, back)
			}
			if special == "\x7f" || special == " " || special == "~" || special == "é" {
				if string(got) != in {
					t.Fatalf("%q escaped needlessly: %q", in, got)
				}
			}
		}
	}
}

// FuzzRoundTrip: whatever the text, AppendQuoted writes a JSON string that
// encoding/json reads back as the text it writes itself (invalid UTF-8
// replaced by U+FFFD, byte by byte), AppendUnescaped reads it back the same
// way, and Plain says that escaping changes nothing for plain ASCII (and for
// nothing else: text beyond ASCII is left to the byte loop).
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "plain", `say "hi"`, "a\nb\x00\x1f", "é日🎉", "bad \xff", "\xed\xa0\x80", `\u0041`, strings.Repeat("abcdefgh", 3) + "\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := jsonstr.AppendQuoted(nil, s)
		var got string
		if err := json.Unmarshal(q, &got); err != nil {
			t.Fatalf("AppendQuoted(%q) = %s: not a JSON string: %v", s, q, err)
		}
		m, _ := json.Marshal(s)
		var want string
		if err := json.Unmarshal(m, &want); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("AppendQuoted(%q) reads back as %q, want %q", s, got, want)
		}
		content := q[1 : len(q)-1]
		if back := string(jsonstr.AppendUnescaped(nil, content)); back != want {
			t.Fatalf("AppendUnescaped(%s) = %q, want %q", content, back, want)
		}
		if !jsonstr.CleanRaw(content) {
			t.Fatalf("CleanRaw(%s) = false for escaped text", content)
		}
		if jsonstr.Plain(s) && string(content) != s {
			t.Fatalf("Plain(%q), but escaped it is %s", s, content)
		}
		if !jsonstr.Plain(s) && utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == '"' || r == '\\' || r >= utf8.RuneSelf }) {
			t.Fatalf("Plain(%q) = false for plain ASCII", s)
		}
		if b := jsonstr.AppendQuotedBytes(nil, []byte(s)); string(b) != string(q) {
			t.Fatalf("AppendQuotedBytes(%q) = %s, AppendQuoted %s", s, b, q)
		}
	})
}

// FuzzUnescape: on the content of any JSON string encoding/json accepts,
// AppendUnescaped decodes what encoding/json decodes, and CleanRaw says
// whether the content may be copied as it is.
func FuzzUnescape(f *testing.F) {
	for _, s := range []string{"", `plain`, `a\"b\\c\/d`, `\n\r\t\b\f`, `\u00e9\ud83c\udf89`, `\ud83c`, `\udf89x`, "raw é", `\uD83C\uDF89`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var want string
		if err := json.Unmarshal([]byte(`"`+raw+`"`), &want); err != nil {
			return // not the content of a JSON string
		}
		valid := utf8.ValidString(raw)
		if clean := jsonstr.CleanRaw([]byte(raw)); clean != valid {
			t.Fatalf("CleanRaw(%q) = %v, valid UTF-8 %v", raw, clean, valid)
		}
		if !valid {
			return // encoding/json replaces the bad bytes; AppendUnescaped keeps them
		}
		if got := string(jsonstr.AppendUnescaped(nil, []byte(raw))); got != want {
			t.Fatalf("AppendUnescaped(%q) = %q, want %q", raw, got, want)
		}
	})
}

var benchText = []struct{ name, s string }{
	{"key", "resource_id"},
	{"uuid", "8f6b1a3c-2d4e-4f5a-9b6c-7d8e9f0a1b2c"},
	{"exchange", "nova"},
	{"text", "instance \"web-1\" resized\n\tflavor m1.small → m1.large"},
}

func BenchmarkAppendQuoted(b *testing.B) {
	for _, tc := range benchText {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, 0, 256)
			b.SetBytes(int64(len(tc.s)))
			for b.Loop() {
				buf = jsonstr.AppendQuoted(buf[:0], tc.s)
			}
		})
	}
}

func BenchmarkAppendUnescaped(b *testing.B) {
	for _, tc := range benchText {
		raw := jsonstr.AppendEscaped(nil, tc.s)
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, 0, 256)
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				buf = jsonstr.AppendUnescaped(buf[:0], raw)
			}
		})
	}
}
