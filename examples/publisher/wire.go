package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// value is a JSON value that keeps the order of object members, so a
// notification read from a file is written back in the same order, as
// Python's json module does with a dict.
type value struct {
	kind    byte // 'o' object, 'a' array, 's' string, 'n' number, 't' true, 'f' false, 'z' null
	members []member
	items   []value
	str     string
	num     string
}

type member struct {
	name string
	val  value
}

func (v *value) get(name string) (value, bool) {
	for _, m := range v.members {
		if m.name == name {
			return m.val, true
		}
	}
	return value{}, false
}

func str(s string) value { return value{kind: 's', str: s} }

// parseOrdered reads one JSON document keeping member order.
func parseOrdered(b []byte) (value, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := parseValue(dec)
	if err != nil {
		return value{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return value{}, fmt.Errorf("trailing data after the document")
	}
	return v, nil
}

func parseValue(dec *json.Decoder) (value, error) {
	t, err := dec.Token()
	if err != nil {
		return value{}, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := value{kind: 'o'}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return value{}, err
				}
				mv, err := parseValue(dec)
				if err != nil {
					return value{}, err
				}
				v.members = append(v.members, member{name: kt.(string), val: mv})
			}
			_, err := dec.Token()
			return v, err
		case '[':
			v := value{kind: 'a', items: []value{}}
			for dec.More() {
				iv, err := parseValue(dec)
				if err != nil {
					return value{}, err
				}
				v.items = append(v.items, iv)
			}
			_, err := dec.Token()
			return v, err
		}
	case string:
		return str(t), nil
	case json.Number:
		return value{kind: 'n', num: t.String()}, nil
	case bool:
		if t {
			return value{kind: 't'}, nil
		}
		return value{kind: 'f'}, nil
	case nil:
		return value{kind: 'z'}, nil
	}
	return value{}, fmt.Errorf("unexpected token %v", t)
}

// appendPython writes v as Python's json.dumps does with its defaults:
// ", " and ": " separators and every character outside printable ASCII
// escaped (ensure_ascii).
func appendPython(dst []byte, v value) []byte {
	switch v.kind {
	case 'o':
		dst = append(dst, '{')
		for i, m := range v.members {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = appendPyString(dst, m.name)
			dst = append(dst, ": "...)
			dst = appendPython(dst, m.val)
		}
		return append(dst, '}')
	case 'a':
		dst = append(dst, '[')
		for i, it := range v.items {
			if i > 0 {
				dst = append(dst, ", "...)
			}
			dst = appendPython(dst, it)
		}
		return append(dst, ']')
	case 's':
		return appendPyString(dst, v.str)
	case 'n':
		return append(dst, v.num...)
	case 't':
		return append(dst, "true"...)
	case 'f':
		return append(dst, "false"...)
	default:
		return append(dst, "null"...)
	}
}

func appendPyString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '"':
			dst = append(dst, `\"`...)
		case r == '\\':
			dst = append(dst, `\\`...)
		case r == '\n':
			dst = append(dst, `\n`...)
		case r == '\r':
			dst = append(dst, `\r`...)
		case r == '\t':
			dst = append(dst, `\t`...)
		case r == '\b':
			dst = append(dst, `\b`...)
		case r == '\f':
			dst = append(dst, `\f`...)
		case r >= 0x20 && r <= 0x7e:
			dst = append(dst, byte(r))
		case r > 0xffff:
			a, b := utf16.EncodeRune(r)
			dst = appendU(appendU(dst, a), b)
		default:
			dst = appendU(dst, r)
		}
	}
	return append(dst, '"')
}

func appendU(dst []byte, r rune) []byte {
	h := strconv.FormatInt(int64(r), 16)
	dst = append(dst, `\u`...)
	for k := len(h); k < 4; k++ {
		dst = append(dst, '0')
	}
	return append(dst, h...)
}

// envelope is oslo's messagingv2 body: the inner message serialised to a
// string under "oslo.message".
func envelope(inner value) []byte {
	s := appendPython(nil, inner)
	outer := value{kind: 'o', members: []member{
		{name: "oslo.version", val: str("2.0")},
		{name: "oslo.message", val: str(string(s))},
	}}
	return appendPython(nil, outer)
}
