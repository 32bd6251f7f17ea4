package jsonindex

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// AppendUnquote decodes raw, the escaped content of a JSON string without its
// quotes (as Lookup returns it), and appends the result to dst. Lone surrogates
// decode to U+FFFD. It fails with an error wrapping ErrSyntax on a malformed
// escape.
//
//	k, s, e := x.Lookup("payload.display_name")
//	if k == jsonindex.String {
//		name, err := jsonindex.AppendUnquote(buf[:0], x.Bytes()[s:e])
//		...
//	}
func AppendUnquote(dst, raw []byte) ([]byte, error) {
	for {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			return append(dst, raw...), nil
		}
		dst = append(dst, raw[:i]...)
		r, size := decodeEscape(raw, i)
		if size == 0 {
			return dst, fmt.Errorf("%w: invalid escape in string at byte %d", ErrSyntax, i)
		}
		dst = utf8.AppendRune(dst, r)
		raw = raw[i+size:]
	}
}
