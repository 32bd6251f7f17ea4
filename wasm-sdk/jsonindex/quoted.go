package jsonindex

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf8"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

// ParseQuoted indexes the JSON document that a JSON string holds, reading the
// string once: src[i:] is the string's escaped content, starting after its
// opening quote. The string's escapes are decoded into the storage of buf
// (reused from its start, grown when short) while the decoded bytes are
// indexed, and the Index then refers to them: Bytes returns the document.
//
// The outcome is the one of the two passes it replaces, scanning the string,
// AppendUnquote of its content and Parse of the result, in everything: the
// decoded bytes (a lone surrogate decodes to U+FFFD), the index, and which
// inputs are refused:
//
//   - The string is not valid (an invalid escape, a control character or
//     invalid UTF-8 in its raw bytes, no closing quote): end is -1 and the
//     error wraps ErrSyntax.
//   - The string is valid and the document it holds is not: end is the
//     position of the closing quote, and the error wraps ErrSyntax or
//     ErrDepth, as Parse of the decoded bytes would.
//   - Both are valid: end is the position of the closing quote, err is nil.
//
// On error the Index is left with Valid false. The returned slice is the
// storage to pass as buf next time; the Index refers into it.
//
//	doc, end, err := inner.ParseQuoted(buf[:0], body, start)
func (x *Index) ParseQuoted(buf, src []byte, i int) (doc []byte, end int, err error) {
	x.src = nil
	x.valid = false
	x.nodes = x.nodes[:0]
	x.stack = x.stack[:0]
	x.tabs, x.tabsOn = x.tabs[:0], false
	if i < 0 || i > len(src) {
		return buf[:0], -1, syntaxErr(i, "string start outside the input")
	}
	if len(src)-i > maxInput {
		return buf[:0], -1, syntaxErr(i, "string too large")
	}
	// The decoded bytes are never more than the escaped ones; the slack lets
	// plain runs be stored eight bytes at a time.
	need := len(src) - i + 8
	if cap(buf) < need {
		buf = make([]byte, need)
	}
	d := buf[:need]
	end, j, err := x.parseQuoted(src, i, d)
	x.src = d[:j]
	if err != nil {
		x.nodes = x.nodes[:0]
		return d[:j], end, err
	}
	x.valid = true
	return d[:j], end, nil
}

// Decoded characters that are not one byte of ASCII, as qPeek answers them.
const (
	qEnd   = 0x100 // the string's closing quote: the end of the document's bytes
	qOther = 0x101 // a character outside ASCII, which only a string may hold
	qBad   = 0x102 // the string is not valid here (qFail finds out why)
)

// qPeek returns the character the string's text at src[i] decodes to and the
// bytes it takes there, when it is ASCII; otherwise qEnd, qOther or qBad and 0.
func qPeek(src []byte, i int) (c, w int) {
	if i < len(src) {
		if b := src[i]; qPlain[b] {
			return int(b), 1
		}
	}
	return qPeekSlow(src, i)
}

// qPlain: the bytes that are themselves in a string, ASCII only.
var qPlain = func() (t [256]bool) {
	for i := range t {
		t[i] = !strSpecial[i]
	}
	return t
}()

func qPeekSlow(src []byte, i int) (c, w int) {
	if i >= len(src) {
		return qBad, 0
	}
	switch b := src[i]; {
	case b == '"':
		return qEnd, 0
	case b == '\\':
		if i+1 < len(src) && src[i+1] == '"' {
			return '"', 2 // the quote of a string of the document: the common escape
		}
		r, size := jsonstr.DecodeEscape(src, i)
		switch {
		case size == 0:
			return qBad, 0
		case r < 0x80:
			return int(r), size
		}
		return qOther, 0
	case b < 0x20:
		return qBad, 0
	}
	return qOther, 0 // raw UTF-8: checked by whoever reads on from i
}

// qFail ends a parse that failed at src[p], a character boundary of the
// string with every byte before it already checked: the rest of the string
// is checked as scanString checks it, and the string's error wins over the
// document's, as in the two passes.
func qFail(src []byte, p int, docErr error) (end int, err error) {
	end, _, err = scanString(src, p)
	if err != nil {
		return -1, err
	}
	return end, docErr
}

// docErr is an error of the document inside the string, at byte j of the
// decoded bytes.
func docErr(j int, what string) error {
	return fmt.Errorf("%w at byte %d of the decoded string: %s", ErrSyntax, j, what)
}

// parseQuoted is parse over the decoded characters of the string at src[i:],
// writing them to d as it reads them: every node's span is in d. It returns
// the position of the closing quote and the count of decoded bytes. What
// json.dumps writes (\" around strings, one space after ',' and ':') is read
// without a call; anything else takes qSkipWS and qPeek.
func (x *Index) parseQuoted(src []byte, i int, d []byte) (end, j int, err error) {
	nodes := x.nodes
	stack := x.stack
	defer func() { x.nodes, x.stack = nodes, stack }()

	n := len(src)
	var key0, key1 int32
	var keyEsc, ok bool
	var c, w int
	for {
		// A value starts at i, after white space.
		if i < n && src[i] == ' ' {
			d[j] = ' '
			i, j = i+1, j+1
		}
		switch {
		case i+1 < n && src[i] == '\\' && src[i+1] == '"':
			c, w = '"', 2
		case i < n && qPlain[src[i]] && src[i] != ' ':
			c, w = int(src[i]), 1
		default:
			i, j = qSkipWS(src, i, d, j)
			c, w = qPeek(src, i)
		}
		idx := off32(len(nodes))
		switch c {
		case '{', '[':
			if len(stack) >= MaxDepth {
				end, err = qFail(src, i, fmt.Errorf("%w: more than %d levels at byte %d of the decoded string", ErrDepth, MaxDepth, j))
				return end, j, err
			}
			k := Object
			closer := int('}')
			if c == '[' {
				k, closer = Array, ']'
			}
			nodes = append(nodes, node{kind: k, keyEsc: keyEsc, key0: key0, key1: key1, start: off32(j)})
			stack = append(stack, idx)
			d[j] = byte(c)
			i, j = i+w, j+1
			if i+1 >= n || src[i] != '\\' || src[i+1] != '"' { // not a string: perhaps the closer
				i, j = qSkipWS(src, i, d, j)
				if c, w := qPeek(src, i); c == closer {
					d[j] = byte(c) //nolint:gosec // c is closer, '}' or ']'
					i, j = i+w, j+1
					nodes[idx].end = off32(j)
					nodes[idx].next = off32(len(nodes))
					stack = stack[:len(stack)-1]
					break // to after-value
				}
			}
			if k == Object {
				if i, j, key0, key1, keyEsc, ok = qKey(src, i, d, j); !ok {
					end, err = qFail(src, i, docErr(j, "expected member name"))
					return end, j, err
				}
			} else {
				key0, key1, keyEsc = 0, 0, false
			}
			continue // parse the first element
		case '"':
			d[j] = '"'
			start := j + 1
			if i, j, _, ok = qString(src, i+w, d, start); !ok {
				end, err = qFail(src, i, docErr(j, "invalid string"))
				return end, j, err
			}
			nodes = append(nodes, node{kind: String, keyEsc: keyEsc, key0: key0, key1: key1, start: off32(start), end: off32(j - 1), next: idx + 1})
		case 't', 'f', 'n':
			lit, k := "true", True
			if c == 'f' {
				lit, k = "false", False
			} else if c == 'n' {
				lit, k = "null", Null
			}
			start := j
			if i, j, ok = qLit(src, i, d, j, lit); !ok {
				end, err = qFail(src, i, docErr(j, "invalid literal"))
				return end, j, err
			}
			nodes = append(nodes, node{kind: k, keyEsc: keyEsc, key0: key0, key1: key1, start: off32(start), end: off32(j), next: idx + 1})
		default:
			start := j
			if i, j, ok = qNumber(src, i, d, j); !ok {
				end, err = qFail(src, i, docErr(j, "invalid value"))
				return end, j, err
			}
			nodes = append(nodes, node{kind: Number, keyEsc: keyEsc, key0: key0, key1: key1, start: off32(start), end: off32(j), next: idx + 1})
		}

		// After a value: close containers or move to the next element.
		for {
			c, w = 0, 1
			if i < n {
				c = int(src[i])
			}
			if c != ',' && c != '}' && c != ']' {
				i, j = qSkipWS(src, i, d, j)
				c, w = qPeek(src, i)
			}
			if len(stack) == 0 {
				if c != qEnd {
					end, err = qFail(src, i, docErr(j, "data after the document"))
					return end, j, err
				}
				return i, j, nil
			}
			top := stack[len(stack)-1]
			if c == ',' {
				d[j] = ','
				i, j = i+w, j+1
				if nodes[top].kind == Object {
					if i, j, key0, key1, keyEsc, ok = qKey(src, i, d, j); !ok {
						end, err = qFail(src, i, docErr(j, "expected member name"))
						return end, j, err
					}
				} else {
					key0, key1, keyEsc = 0, 0, false
				}
				break
			}
			if (c == '}' && nodes[top].kind == Object) || (c == ']' && nodes[top].kind == Array) {
				d[j] = byte(c)
				i, j = i+w, j+1
				nodes[top].end = off32(j)
				nodes[top].next = off32(len(nodes))
				stack = stack[:len(stack)-1]
				continue
			}
			end, err = qFail(src, i, docErr(j, "expected ',' or end of container"))
			return end, j, err
		}
	}
}

// qSkipWS copies the decoded white space at src[i] to d[j].
func qSkipWS(src []byte, i int, d []byte, j int) (int, int) {
	for i < len(src) {
		b := src[i]
		if b == ' ' {
			d[j] = ' '
			i, j = i+1, j+1
			continue
		}
		if b != '\\' || i+1 < len(src) && src[i+1] == '"' {
			return i, j
		}
		c, w := qPeekSlow(src, i) // \n, \t, \r, \u0020...
		if c != ' ' && c != '\n' && c != '\r' && c != '\t' {
			return i, j
		}
		d[j] = byte(c)
		i, j = i+w, j+1
	}
	return i, j
}

// qKey reads the white space before a member's name, `"name" :`, as parseKey
// does. On failure i is where the document went wrong.
func qKey(src []byte, i int, d []byte, j int) (ni, nj int, k0, k1 int32, esc, ok bool) {
	n := len(src)
	if i < n && src[i] == ' ' {
		d[j] = ' '
		i, j = i+1, j+1
	}
	w := 2 // \" opens the name, in what json.dumps writes
	if i+1 >= n || src[i] != '\\' || src[i+1] != '"' {
		i, j = qSkipWS(src, i, d, j)
		var c int
		if c, w = qPeek(src, i); c != '"' {
			return i, j, 0, 0, false, false
		}
	}
	d[j] = '"'
	start := j + 1
	if i, j, esc, ok = qString(src, i+w, d, start); !ok {
		return i, j, 0, 0, false, false
	}
	k1 = off32(j - 1)
	if i+1 < n && src[i] == ':' && src[i+1] == ' ' { // json.dumps's separator
		d[j], d[j+1] = ':', ' '
		return i + 2, j + 2, off32(start), k1, esc, true
	}
	i, j = qSkipWS(src, i, d, j)
	c, w := qPeek(src, i)
	if c != ':' {
		return i, j, 0, 0, false, false
	}
	d[j] = ':'
	return i + w, j + 1, off32(start), k1, esc, true
}

// qString reads a string of the document whose opening quote is read,
// decoding it to d, up to and including its closing quote; esc reports an
// escape of the document's own (a decoded backslash). On failure i is where
// it went wrong.
func qString(src []byte, i int, d []byte, j int) (ni, nj int, esc, ok bool) {
	n := len(src)
	for {
		// Plain bytes are the same in both layers: copied eight at a time,
		// up to the first byte that needs attention (the lowest byte
		// specialMask marks), then one at a time near the end of src.
		if i+8 <= n {
			w := binary.LittleEndian.Uint64(src[i : i+8 : i+8])
			binary.LittleEndian.PutUint64(d[j:j+8:j+8], w)
			m := specialMask(w)
			if m == 0 {
				i, j = i+8, j+8
				continue
			}
			k := bits.TrailingZeros64(m) >> 3
			i, j = i+k, j+k
		} else {
			for i < n && !strSpecial[src[i]] {
				d[j] = src[i]
				i, j = i+1, j+1
			}
			if i >= n {
				return i, j, esc, false
			}
		}
		switch c := src[i]; {
		case c == '\\':
			if i+1 >= n {
				return i, j, esc, false
			}
			switch src[i+1] {
			case '"': // \" closes the document's string
				d[j] = '"'
				return i + 2, j + 1, esc, true
			case '\\': // \\ opens an escape of the document's
				esc = true
				d[j] = '\\'
				if i, j, ok = qEscape(src, i+2, d, j+1); !ok {
					return i, j, esc, false
				}
			case '/':
				d[j] = '/'
				i, j = i+2, j+1
			case 'u':
				r, size := jsonstr.DecodeEscape(src, i)
				switch {
				case size == 0 || r < 0x20: // invalid, or a control character in the document's string
					return i, j, esc, false
				case r == '"':
					d[j] = '"'
					return i + size, j + 1, esc, true
				case r == '\\':
					esc = true
					d[j] = '\\'
					if i, j, ok = qEscape(src, i+size, d, j+1); !ok {
						return i, j, esc, false
					}
				default:
					j += utf8.EncodeRune(d[j:], r)
					i += size
				}
			default: // \b \f \n \r \t: a control character in the document's string; or invalid
				return i, j, esc, false
			}
		case c == '"' || c < 0x20: // the string ends inside the document's string; or invalid
			return i, j, esc, false
		default: // raw UTF-8, the same in both layers
			_, size := utf8.DecodeRune(src[i:])
			if size <= 1 { // utf8.RuneError of one byte
				return i, j, esc, false
			}
			copy(d[j:], src[i:i+size])
			i, j = i+size, j+size
		}
	}
}

// qEscape reads what follows the backslash of an escape of the document's
// string, as scanString accepts it.
func qEscape(src []byte, i int, d []byte, j int) (ni, nj int, ok bool) {
	c, w := qPeek(src, i)
	switch c {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		d[j] = byte(c)
		return i + w, j + 1, true
	case 'u':
		d[j] = 'u'
		i, j = i+w, j+1
		for range 4 {
			c, w := qPeek(src, i)
			if c >= 0x80 || hexVal(byte(c)) < 0 { //nolint:gosec // c < 0x80 when byte(c) is taken
				return i, j, false
			}
			d[j] = byte(c) //nolint:gosec // c < 0x80, checked above
			i, j = i+w, j+1
		}
		return i, j, true
	}
	return i, j, false
}

// qLit reads the literal lit.
func qLit(src []byte, i int, d []byte, j int, lit string) (ni, nj int, ok bool) {
	if hasLit(src, i, lit) {
		copy(d[j:], lit)
		return i + len(lit), j + len(lit), true
	}
	for k := 0; k < len(lit); k++ {
		c, w := qPeek(src, i)
		if c != int(lit[k]) {
			return i, j, false
		}
		d[j] = lit[k]
		i, j = i+w, j+1
	}
	return i, j, true
}

// qNumber reads a number as scanNumber does.
func qNumber(src []byte, i int, d []byte, j int) (ni, nj int, ok bool) {
	c, w := qPeek(src, i)
	next := func() {
		d[j] = byte(c) //nolint:gosec // every caller has checked c is one of -+.eE0-9
		i, j = i+w, j+1
		c, w = qPeek(src, i)
	}
	digits := func() {
		for c >= '0' && c <= '9' {
			next()
		}
	}
	if c == '-' {
		next()
	}
	switch {
	case c == '0':
		next()
	case c >= '1' && c <= '9':
		digits()
	default:
		return i, j, false
	}
	if c == '.' {
		next()
		if c < '0' || c > '9' {
			return i, j, false
		}
		digits()
	}
	if c == 'e' || c == 'E' {
		next()
		if c == '+' || c == '-' {
			next()
		}
		if c < '0' || c > '9' {
			return i, j, false
		}
		digits()
	}
	return i, j, true
}

// ParseWrapped is Parse for a document that may wrap another in a string
// member of its root object, as oslo.messaging's envelope wraps a
// notification in "oslo.message", reading the wrapped one once: a string
// member named name (one member name in path syntax: `oslo\.message`) is
// indexed into inner with ParseQuoted where Parse would only scan it, its
// decoded bytes in the storage of buf. It returns the kind Lookup(name)
// answers afterwards and the storage to pass as buf next time.
//
//   - err != nil: src is not JSON, exactly as Parse says.
//   - Missing: there is no such member (or the root is not an object).
//   - String: inner is the wrapped document as ParseQuoted leaves it, Valid
//     when that document is JSON. Of members of the same name the last one
//     counts, as for Lookup: each is indexed in turn, the last one last.
//   - any other kind: the member is not a string.
//
// inner must not be x. The outcome is the one of Parse, Lookup, AppendUnquote
// of the member's span and Parse of its decoded bytes.
func (x *Index) ParseWrapped(src []byte, name string, inner *Index, buf []byte) (k Kind, storage []byte, err error) {
	inner.SetRaw(nil)
	// The name as a member's unescaped bytes: a name without escapes of
	// its own compares with it directly.
	plain := x.wrapPlain[:0]
	for i := 0; i < len(name); i++ {
		if name[i] == '\\' && i+1 < len(name) {
			i++
		}
		plain = append(plain, name[i])
	}
	x.wrapped, x.wrapName, x.wrapPlain, x.wrapBuf = inner, name, plain, buf
	err = x.Parse(src)
	storage = x.wrapBuf
	x.wrapped, x.wrapBuf = nil, nil
	if err != nil {
		return Missing, storage, err
	}
	// Lookup(name), for one segment: the last member of that name.
	if len(x.nodes) == 0 || x.nodes[0].kind != Object {
		return Missing, storage, nil
	}
	k = Missing
	for c := int32(1); c < x.nodes[0].next; c = x.nodes[c].next {
		if nd := &x.nodes[c]; x.isWrapName(src[nd.key0:nd.key1], nd.keyEsc) {
			k = nd.kind
		}
	}
	return k, storage, nil
}

// isWrapName reports whether a member name (escaped) is ParseWrapped's name,
// as a lookup compares them.
func (x *Index) isWrapName(key []byte, keyEsc bool) bool {
	if keyEsc {
		return keyEqual(key, x.wrapName)
	}
	return string(key) == string(x.wrapPlain)
}
