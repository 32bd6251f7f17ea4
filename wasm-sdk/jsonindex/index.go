package jsonindex

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"unicode/utf8"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/internal/abi/kind"
)

// Kind is the JSON kind of a value. The numbering is the one of the mapper ABI
// (docs/abi.md), so a Kind can be handed to a guest unchanged.
type Kind uint8

// Kinds, numbered as in the ABI (the one table is wasm-sdk/internal/abi/kind's).
const (
	Missing Kind = kind.Missing
	Null    Kind = kind.Null
	String  Kind = kind.String
	Number  Kind = kind.Number
	True    Kind = kind.True
	False   Kind = kind.False
	Object  Kind = kind.Object
	Array   Kind = kind.Array
)

var kindNames = [...]string{"missing", "null", "string", "number", "true", "false", "object", "array"}

// String returns the lower-case name of k.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MaxDepth is the deepest nesting of objects and arrays Parse accepts.
const MaxDepth = 256

// maxInput is the largest input Parse indexes (offsets are stored as int32).
const maxInput = math.MaxInt32

// off32 converts an offset into the bytes being indexed, or a count of
// nodes, to the int32 a node stores it in. Parse and ParseQuoted refuse more
// than maxInput bytes (math.MaxInt32); an offset is at most the length of
// the bytes indexed (ParseQuoted's decoded bytes are never more than the
// escaped ones), and each node starts at a byte of its own, so there are
// never more nodes than bytes: every value converted fits.
func off32(i int) int32 {
	return int32(i) //nolint:gosec // at most maxInput, as above
}

// node is one value of the document. Spans are byte offsets into the input.
type node struct {
	kind   Kind
	keyEsc bool  // the member name contains a backslash escape
	key0   int32 // member name span (between the quotes); key0 == key1 == 0 when not a member
	key1   int32
	start  int32 // value span; for strings between the quotes
	end    int32
	next   int32 // index of the first node after this subtree
}

// Index is a parsed JSON document. The zero value is ready to use; an Index is
// meant to be reused for one document after another.
type Index struct {
	src   []byte
	valid bool
	nodes []node
	stack []int32

	// Lookup tables of the large containers (tables.go), built by lookups:
	// tabs holds them, tabOf gives per node 1 + the offset of its table (0:
	// none), sized to the nodes once the first table of a Parse is built
	// (tabsOn). The object tables hash under seed and unescape names into
	// the buffers.
	tabs                     []int32
	tabOf                    []int32
	tabsOn                   bool
	seed                     maphash.Seed
	seeded                   bool
	segBuf, nameBuf, candBuf []byte

	many manyState // LookupMany's scratch

	// While ParseWrapped parses: the Index that the strings of the root
	// member wrapName (one member name in path syntax) are indexed into,
	// and the storage of their decoded bytes.
	wrapped   *Index
	wrapName  string
	wrapPlain []byte // wrapName unescaped
	wrapBuf   []byte
}

// Bytes returns the input last given to Parse or SetRaw.
func (x *Index) Bytes() []byte { return x.src }

// Valid reports whether the last Parse succeeded.
func (x *Index) Valid() bool { return x.valid }

// Len returns the number of values in the document (0 when not Valid).
func (x *Index) Len() int {
	if !x.valid {
		return 0
	}
	return len(x.nodes)
}

// SetRaw makes src the current input without parsing it: Bytes returns src,
// Valid is false and every lookup answers Missing. It is meant for inputs that
// are not JSON.
func (x *Index) SetRaw(src []byte) {
	x.src = src
	x.valid = false
	x.nodes = x.nodes[:0]
	x.tabs, x.tabsOn = x.tabs[:0], false
}

// Reset drops the reference to the last input, keeping the buffers.
func (x *Index) Reset() { x.SetRaw(nil) }

// charClass: 0 plain string byte, 1 needs attention inside a string
// ('"', '\\', control characters, non-ASCII).
var strSpecial = func() (t [256]bool) {
	for i := 0; i < 0x20; i++ {
		t[i] = true
	}
	t['"'] = true
	t['\\'] = true
	for i := 0x80; i < 0x100; i++ {
		t[i] = true
	}
	return t
}()

func isWS(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

func skipWS(src []byte, i int) int {
	for i < len(src) && isWS(src[i]) {
		i++
	}
	return i
}

func syntaxErr(i int, what string) error {
	return fmt.Errorf("%w at byte %d: %s", ErrSyntax, i, what)
}

// Parse indexes src, which must hold exactly one JSON value (surrounding white
// space allowed). It keeps a reference to src. On error the Index is left
// holding src with Valid false, as after SetRaw, and the error wraps ErrSyntax or
// ErrDepth.
func (x *Index) Parse(src []byte) error {
	x.src = src
	x.valid = false
	x.nodes = x.nodes[:0]
	x.stack = x.stack[:0]
	x.tabs, x.tabsOn = x.tabs[:0], false
	if len(src) > maxInput {
		return syntaxErr(0, "input too large")
	}
	err := x.parse(src)
	if err != nil {
		x.nodes = x.nodes[:0]
		return err
	}
	x.valid = true
	return nil
}

func (x *Index) parse(src []byte) error {
	n := len(src)
	nodes := x.nodes
	stack := x.stack
	defer func() { x.nodes, x.stack = nodes, stack }()

	var key0, key1 int32
	var keyEsc bool
	i := skipWS(src, 0)
	for {
		// A value starts at i.
		if i >= n {
			return syntaxErr(i, "unexpected end of input")
		}
		idx := off32(len(nodes))
		switch c := src[i]; c {
		case '{', '[':
			if len(stack) >= MaxDepth {
				return fmt.Errorf("%w: more than %d levels at byte %d", ErrDepth, MaxDepth, i)
			}
			k := Object
			closer := byte('}')
			if c == '[' {
				k, closer = Array, ']'
			}
			nodes = append(nodes, node{kind: k, keyEsc: keyEsc, key0: key0, key1: key1, start: off32(i)})
			stack = append(stack, idx)
			i = skipWS(src, i+1)
			if i < n && src[i] == closer {
				nodes[idx].end = off32(i + 1)
				nodes[idx].next = off32(len(nodes))
				stack = stack[:len(stack)-1]
				i++
				break // to after-value
			}
			if k == Object {
				var err error
				if i, key0, key1, keyEsc, err = parseKey(src, i); err != nil {
					return err
				}
			} else {
				key0, key1, keyEsc = 0, 0, false
			}
			continue // parse the first element
		case '"':
			var end int
			var err error
			if x.wrapped != nil && len(stack) == 1 && nodes[stack[0]].kind == Object && x.isWrapName(src[key0:key1], keyEsc) {
				// A document in a string: its index finds the string's end.
				if x.wrapBuf, end, err = x.wrapped.ParseQuoted(x.wrapBuf, src, i+1); end < 0 {
					return err
				}
			} else if end, _, err = scanString(src, i+1); err != nil {
				return err
			}
			nodes = append(nodes, node{kind: String, keyEsc: keyEsc, key0: key0, key1: key1, start: off32(i + 1), end: off32(end), next: idx + 1})
			i = end + 1
		case 't':
			if !hasLit(src, i, "true") {
				return syntaxErr(i, "invalid literal")
			}
			nodes = append(nodes, node{kind: True, keyEsc: keyEsc, key0: key0, key1: key1, start: off32(i), end: off32(i + 4), next: idx + 1})
			i += 4
		case 'f':
			if !hasLit(src, i, "false") {
				return syntaxErr(i, "invalid literal")
			}
			nodes = append(nodes, node{kind: False, keyEsc: keyEsc, key0: key0, key1: key1, start: off32(i), end: off32(i + 5), next: idx + 1})
			i += 5
		case 'n':
			if !hasLit(src, i, "null") {
				return syntaxErr(i, "invalid literal")
			}
			nodes = append(nodes, node{kind: Null, keyEsc: keyEsc, key0: key0, key1: key1, start: off32(i), end: off32(i + 4), next: idx + 1})
			i += 4
		default:
			end, ok := scanNumber(src, i)
			if !ok {
				return syntaxErr(i, "invalid value")
			}
			nodes = append(nodes, node{kind: Number, keyEsc: keyEsc, key0: key0, key1: key1, start: off32(i), end: off32(end), next: idx + 1})
			i = end
		}

		// After a value: close containers or move to the next element.
		for {
			if len(stack) == 0 {
				i = skipWS(src, i)
				if i != n {
					return syntaxErr(i, "data after the document")
				}
				return nil
			}
			top := stack[len(stack)-1]
			i = skipWS(src, i)
			if i >= n {
				return syntaxErr(i, "unexpected end of input")
			}
			c := src[i]
			if c == ',' {
				i = skipWS(src, i+1)
				if nodes[top].kind == Object {
					var err error
					if i, key0, key1, keyEsc, err = parseKey(src, i); err != nil {
						return err
					}
				} else {
					key0, key1, keyEsc = 0, 0, false
				}
				break
			}
			if (c == '}' && nodes[top].kind == Object) || (c == ']' && nodes[top].kind == Array) {
				nodes[top].end = off32(i + 1)
				nodes[top].next = off32(len(nodes))
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			return syntaxErr(i, "expected ',' or end of container")
		}
	}
}

// parseKey parses `"name" :` at i (white space before i already skipped) and
// returns the position of the value after the colon and white space.
func parseKey(src []byte, i int) (next int, k0, k1 int32, esc bool, err error) {
	if i >= len(src) || src[i] != '"' {
		return 0, 0, 0, false, syntaxErr(i, "expected member name")
	}
	end, esc, err := scanString(src, i+1)
	if err != nil {
		return 0, 0, 0, false, err
	}
	j := skipWS(src, end+1)
	if j >= len(src) || src[j] != ':' {
		return 0, 0, 0, false, syntaxErr(j, "expected ':'")
	}
	return skipWS(src, j+1), off32(i + 1), off32(end), esc, nil
}

// scanString validates string content starting at i (after the opening quote)
// and returns the index of the closing quote.
func scanString(src []byte, i int) (end int, esc bool, err error) {
	n := len(src)
	for i < n {
		// Fast run over plain bytes: eight at a time, up to the first byte
		// that needs attention (the lowest mark of specialMask), then one
		// at a time near the end of src.
		if i+8 <= n {
			m := specialMask(binary.LittleEndian.Uint64(src[i : i+8 : i+8]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else {
			for i < n && !strSpecial[src[i]] {
				i++
			}
			if i >= n {
				break
			}
		}
		switch c := src[i]; {
		case c == '"':
			return i, esc, nil
		case c == '\\':
			esc = true
			if i+1 >= n {
				return 0, false, syntaxErr(i, "unterminated escape")
			}
			switch src[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > n || !isHex4(src[i+2:i+6]) {
					return 0, false, syntaxErr(i, "invalid \\u escape")
				}
				i += 6
			default:
				return 0, false, syntaxErr(i, "invalid escape")
			}
		case c < 0x20:
			return 0, false, syntaxErr(i, "control character in string")
		default: // non-ASCII
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size <= 1 {
				return 0, false, syntaxErr(i, "invalid UTF-8")
			}
			i += size
		}
	}
	return 0, false, syntaxErr(n, "unterminated string")
}

// specialMask marks, with its high bit, a byte of w (little-endian: the
// first byte is the lowest) that needs attention inside a string, as
// strSpecial says: below 0x20, '"', '\\', or 0x80 and above. The mask
// is nonzero exactly when some byte does, and its lowest mark is exact: it
// names the first such byte.
//
// Where no borrow comes into it, each subtraction sets the high bit of an
// ASCII byte exactly when the byte matches its test (below 0x20, '"', '\\'),
// and borrows from the next byte only then. So borrows start at a matching
// byte, and a false mark can only stand above a true one. A byte of 0x80 and
// above is marked by w itself, whatever the subtractions make of it.
func specialMask(w uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	below := w - 0x20*ones
	quote := (w ^ ('"' * ones)) - ones
	backslash := (w ^ ('\\' * ones)) - ones
	return (below | quote | backslash | w) & highs
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if hexVal(c) < 0 {
			return false
		}
	}
	return true
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func hasLit(src []byte, i int, lit string) bool {
	return len(src)-i >= len(lit) && string(src[i:i+len(lit)]) == lit
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanNumber validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at i.
func scanNumber(src []byte, i int) (int, bool) {
	n := len(src)
	if i < n && src[i] == '-' {
		i++
	}
	if i >= n {
		return 0, false
	}
	if src[i] == '0' {
		i++
	} else if src[i] >= '1' && src[i] <= '9' {
		for i < n && isDigit(src[i]) {
			i++
		}
	} else {
		return 0, false
	}
	if i < n && src[i] == '.' {
		i++
		if i >= n || !isDigit(src[i]) {
			return 0, false
		}
		for i < n && isDigit(src[i]) {
			i++
		}
	}
	if i < n && (src[i] == 'e' || src[i] == 'E') {
		i++
		if i < n && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if i >= n || !isDigit(src[i]) {
			return 0, false
		}
		for i < n && isDigit(src[i]) {
			i++
		}
	}
	return i, true
}
