package jsonindex

import (
	"bytes"
	"fmt"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

// AppendUnquote decodes raw, the escaped content of a JSON string without its
// quotes (as Lookup returns it), and appends the result to dst. Lone surrogates
// decode to U+FFFD. It fails with an error wrapping ErrSyntax on a malformed
// escape, naming its offset in raw; dst then holds what came before it. The
// decoding is jsonstr's (Unescape with Stop).
//
//	k, s, e := x.Lookup("payload.display_name")
//	if k == jsonindex.String {
//		name, err := jsonindex.AppendUnquote(buf[:0], x.Bytes()[s:e])
//		...
//	}
func AppendUnquote(dst, raw []byte) ([]byte, error) {
	i := bytes.IndexByte(raw, '\\')
	if i < 0 {
		return append(dst, raw...), nil // the usual string: no escape
	}
	dst, bad := jsonstr.Unescape(append(dst, raw[:i]...), raw[i:], jsonstr.Stop)
	if bad >= 0 {
		return dst, fmt.Errorf("%w: invalid escape in string at byte %d", ErrSyntax, i+bad)
	}
	return dst, nil
}
