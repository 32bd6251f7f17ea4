//go:build !wasip1

package sdk_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
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
		got := string(sdk.AppendEscaped([]byte("x"), tc.in))[1:]
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
		if got := string(sdk.AppendUnescaped(nil, []byte(tc.raw))); got != tc.want {
			t.Errorf("unescape(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

func TestTimestamp(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// oslo
		{"2024-05-01 12:00:00.123456", "2024-05-01T12:00:00.123456Z"},
		{"2024-05-01 12:00:00", "2024-05-01T12:00:00Z"},
		{"2012-05-08 16:03:44.122481", "2012-05-08T16:03:44.122481Z"},
		// ISO 8601
		{"2024-05-01T12:00:00", "2024-05-01T12:00:00Z"},
		{"2024-05-01T12:00:00Z", "2024-05-01T12:00:00Z"},
		{"2024-05-01T12:00:00.5Z", "2024-05-01T12:00:00.5Z"},
		{"2024-05-01T12:00:00.123456789Z", "2024-05-01T12:00:00.123456789Z"},
		{"2024-05-01T12:00:00.000000", "2024-05-01T12:00:00.000000Z"},
		{"2024-05-01t12:00:00z", "2024-05-01T12:00:00Z"},
		{"2024-05-01T12:00:00+00:00", "2024-05-01T12:00:00Z"},
		{"2024-05-01T14:30:00+02:30", "2024-05-01T12:00:00Z"},
		{"2024-05-01T14:30:00.250+0230", "2024-05-01T12:00:00.250Z"},
		{"2024-05-01T07:00:00-05", "2024-05-01T12:00:00Z"},
		{"2024-05-01 12:00:00.123456+00:00", "2024-05-01T12:00:00.123456Z"},
		// offsets crossing days, months, years, leap days
		{"2024-01-01T01:00:00+02:00", "2023-12-31T23:00:00Z"},
		{"2023-12-31T22:00:00-03:00", "2024-01-01T01:00:00Z"},
		{"2024-03-01T00:30:00+01:00", "2024-02-29T23:30:00Z"},
		{"2023-03-01T00:30:00+01:00", "2023-02-28T23:30:00Z"},
		{"2024-02-28T23:00:00-02:00", "2024-02-29T01:00:00Z"},
		{"2000-02-29T12:00:00Z", "2000-02-29T12:00:00Z"},
		// unparsable: omitted
		{"", ""},
		{"2024-05-01", ""},
		{"2024-05-01 12:00", ""},
		{"2024/05/01 12:00:00", ""},
		{"2024-13-01 12:00:00", ""},
		{"2024-02-30 12:00:00", ""},
		{"2023-02-29 12:00:00", ""},
		{"1900-02-29 12:00:00", ""},
		{"2024-05-01 24:00:00", ""},
		{"2024-05-01 12:60:00", ""},
		{"2024-05-01 12:00:60", ""},
		{"2024-05-01X12:00:00", ""},
		{"2024-05-01 12:00:00.", ""},
		{"2024-05-01 12:00:00.1234567890", ""},
		{"2024-05-01 12:00:00 UTC", ""},
		{"2024-05-01T12:00:00+2:00", ""},
		{"2024-05-01T12:00:00+24:00", ""},
		{"2024-05-01T12:00:00Z ", ""},
		{"0000-01-01T00:00:00+01:00", ""},
		{"2024-05-01T12:00:00\\u005a", ""},
		{"20240501T120000Z", ""},
	} {
		got, ok := sdk.AppendTimestamp(nil, []byte(tc.in))
		if string(got) != tc.want || ok != (tc.want != "") {
			t.Errorf("timestamp(%q) = %q %v, want %q", tc.in, got, ok, tc.want)
		}
	}
}

// TestTimestampFastPath: wherever the fast path for oslo's zone-less shape
// answers, it answers exactly what the general path does. Inputs are
// variations of a valid timestamp, one byte changed at a time, and every
// length of fraction.
func TestTimestampFastPath(t *testing.T) {
	bases := []string{
		"2024-05-01 12:00:00", "2024-02-29 23:59:59.999999", "2023-02-28T00:00:00.1",
		"2000-02-29 12:00:00", "1900-02-28 12:00:00", "0000-01-01 00:00:00.123456789",
		"2024-04-30 19:09:59.5", "2024-12-31 20:30:40.123",
	}
	var inputs []string
	for _, b := range bases {
		inputs = append(inputs, b)
		for i := 0; i < len(b); i++ {
			for _, c := range []byte("0123456789 T:-.Zx/") {
				m := []byte(b)
				m[i] = c
				inputs = append(inputs, string(m))
			}
		}
		for n := 0; n <= 11; n++ {
			inputs = append(inputs, b[:19]+"."+"1234567890a"[:n], b+"Z", b[:18])
		}
	}
	fast := 0
	for _, in := range inputs {
		got, ok := sdk.AppendNaive(nil, []byte(in))
		if !ok {
			continue
		}
		fast++
		want, wok := sdk.AppendGeneral(nil, []byte(in))
		if !wok || string(got) != string(want) {
			t.Errorf("%q: fast path %q, general %q %v", in, got, want, wok)
		}
	}
	if fast < len(bases) {
		t.Fatalf("fast path taken for %d inputs only", fast)
	}
}

func TestManifestDocument(t *testing.T) {
	got := string(sdk.AppendManifest(nil, sdk.Manifest{
		Name: "nova", Version: "1.2.0",
		EventTypes: []string{"compute.instance.*", "!compute.instance.*.start"},
	}))
	want := `{"name":"nova","version":"1.2.0","event_types":["compute.instance.*","!compute.instance.*.start"],"releases":[]}`
	if got != want {
		t.Fatalf("manifest %s, want %s", got, want)
	}
}

// TestEscapeWordBoundaries puts every special byte at every position of a
// 24-byte string, so the word-at-a-time scan is checked against the byte loop.
func TestEscapeWordBoundaries(t *testing.T) {
	for _, special := range []string{"\"", "\\", "\x00", "\x1f", "\n", "é", "\xff", "\x7f", " ", "~"} {
		for pos := 0; pos < 24; pos++ {
			in := strings.Repeat("a", pos) + special + strings.Repeat("b", 24-pos)
			got := sdk.AppendEscaped(nil, in)
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
