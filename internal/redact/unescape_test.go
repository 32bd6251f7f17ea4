package redact

import (
	"errors"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

// TestUnescapersPinned pins what each caller of the one JSON unescaper gets
// for the same string content: jsonstr.AppendUnescaped (lenient, keeps a
// malformed escape whole), jsonindex.AppendUnquote (strict: stops with
// ErrSyntax at a malformed escape, keeping what it decoded before it) and
// UnquoteLenient (a token of a cut body: stops at the closing quote, and drops
// the backslash of a malformed escape). Valid escapes, surrogate pairs, lone
// surrogates, invalid escapes, cut strings and raw bytes alike.
func TestUnescapersPinned(t *testing.T) {
	for _, c := range []struct {
		raw       string // content of a string, without its quotes
		unescaped string // jsonstr.AppendUnescaped
		unquoted  string // jsonindex.AppendUnquote
		err       string // its error, "" for none (the offset of the malformed escape in raw)
		lenient   string // UnquoteLenient of `"` + raw
	}{
		{"", "", "", "", ""},
		{"plain", "plain", "plain", "", "plain"},
		{"a\\\"b\\\\c\\/d", "a\"b\\c/d", "a\"b\\c/d", "", "a\"b\\c/d"},
		{"\\n\\r\\t\\b\\f", "\n\r\t\b\f", "\n\r\t\b\f", "", "\n\r\t\b\f"},
		{"\\u00e9\\u65e5", "é日", "é日", "", "é日"},
		{"\\u00E9t\\u00e9", "été", "été", "", "été"},
		{"\\u0000\\u001f", "\x00\x1f", "\x00\x1f", "", "\x00\x1f"},
		{"\\ud83c\\udf89", "🎉", "🎉", "", "🎉"},
		{"\\uD83C\\uDF89!", "🎉!", "🎉!", "", "🎉!"},
		{"\\ud83c", "�", "�", "", "�"},
		{"\\ud83cx", "�x", "�x", "", "�x"},
		{"\\udf89x", "�x", "�x", "", "�x"},
		{"\\ud83c\\ud83c", "��", "��", "", "��"},
		{"\\ud83c\\u0041", "�A", "�A", "", "�A"},
		{"\\ud83c\\n", "�\n", "�\n", "", "�\n"},
		{"\\ud83c\\udf8", "�\\udf8", "�", "jsonindex: syntax error: invalid escape in string at byte 6", "�udf8"},
		{"\\udf89\\ud83c\\udf89", "�🎉", "�🎉", "", "�🎉"},
		{"\\u12", "\\u12", "", "jsonindex: syntax error: invalid escape in string at byte 0", "u12"},
		{"\\u12x4", "\\u12x4", "", "jsonindex: syntax error: invalid escape in string at byte 0", "u12x4"},
		{"\\u", "\\u", "", "jsonindex: syntax error: invalid escape in string at byte 0", "u"},
		{"\\uzzzz", "\\uzzzz", "", "jsonindex: syntax error: invalid escape in string at byte 0", "uzzzz"},
		{"\\u+123", "\\u+123", "", "jsonindex: syntax error: invalid escape in string at byte 0", "u+123"},
		{"\\x", "\\x", "", "jsonindex: syntax error: invalid escape in string at byte 0", "x"},
		{"a\\qb", "a\\qb", "a", "jsonindex: syntax error: invalid escape in string at byte 1", "aqb"},
		{"\\n\\q", "\n\\q", "\n", "jsonindex: syntax error: invalid escape in string at byte 2", "\nq"},
		{"\\é", "\\é", "", "jsonindex: syntax error: invalid escape in string at byte 0", "é"},
		{"tail\\", "tail\\", "tail", "jsonindex: syntax error: invalid escape in string at byte 4", "tail\\"},
		{"\\\\\\", "\\\\", "\\", "jsonindex: syntax error: invalid escape in string at byte 2", "\\\\"},
		{"\\", "\\", "", "jsonindex: syntax error: invalid escape in string at byte 0", "\\"},
		{"raw é", "raw é", "raw é", "", "raw é"},
		{"raw\x00\x1f\x7f", "raw\x00\x1f\x7f", "raw\x00\x1f\x7f", "", "raw\x00\x1f\x7f"},
		{"bad\xff", "bad\xff", "bad\xff", "", "bad\xff"},
		{"a\"b", "a\"b", "a\"b", "", "a"},
		{"a\\\"b\"c", "a\"b\"c", "a\"b\"c", "", "a\"b"},
		{"\"x", "\"x", "\"x", "", ""},
		{"x\\\"", "x\"", "x\"", "", "x\""},
		{"\\u\"abc", "\\u\"abc", "", "jsonindex: syntax error: invalid escape in string at byte 0", "u"},
		{"\\ud83c\\\"", "�\"", "�\"", "", "�\""},
	} {
		if got := string(jsonstr.AppendUnescaped([]byte(">"), []byte(c.raw))); got != ">"+c.unescaped {
			t.Errorf("AppendUnescaped(%q) = %q, want %q", c.raw, got[1:], c.unescaped)
		}
		got, err := jsonindex.AppendUnquote([]byte(">"), []byte(c.raw))
		if string(got) != ">"+c.unquoted {
			t.Errorf("AppendUnquote(%q) = %q, want %q", c.raw, got[1:], c.unquoted)
		}
		switch {
		case c.err == "" && err != nil:
			t.Errorf("AppendUnquote(%q): %v", c.raw, err)
		case c.err != "" && (err == nil || err.Error() != c.err || !errors.Is(err, jsonindex.ErrSyntax)):
			t.Errorf("AppendUnquote(%q) err = %v, want %s", c.raw, err, c.err)
		}
		if got := UnquoteLenient([]byte(`"` + c.raw)); got != c.lenient {
			t.Errorf("UnquoteLenient(%q) = %q, want %q", `"`+c.raw, got, c.lenient)
		}
		if got := UnquoteLenient([]byte(`"` + c.raw + `"`)); got != c.lenient && c.raw != "" && c.raw[len(c.raw)-1] != '\\' {
			t.Errorf("UnquoteLenient(%q) = %q, want %q", `"`+c.raw+`"`, got, c.lenient)
		}
	}
}
