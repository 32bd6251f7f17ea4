package jsonindex

import (
	"unicode/utf8"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

// Lookup finds the value at path (ABI path syntax, see the package
// documentation) and returns its kind and its span in Bytes(): for a string the
// characters between the quotes, still escaped; for any other kind the JSON text
// of the value. Of members with the same name the last one is answered. A path
// that does not resolve, or any path when the Index is not Valid, yields
// Missing and a zero span, and so does a path of more than maxInput bytes
// (math.MaxInt32, the most an indexed document holds). A lookup may build
// the table of a large container it passes through (see the package
// documentation, "Cost").
//
//	var x jsonindex.Index
//	_ = x.Parse([]byte(`{"payload":{"instance_id":"abc"}}`))
//	k, s, e := x.Lookup("payload.instance_id") // String, and x.Bytes()[s:e] is "abc"
func (x *Index) Lookup(path string) (k Kind, start, end int) {
	return lookup(x, path)
}

// LookupBytes is Lookup with the path given as bytes; it does not retain path.
func (x *Index) LookupBytes(path []byte) (k Kind, start, end int) {
	return lookup(x, path)
}

func lookup[P string | []byte](x *Index, path P) (Kind, int, int) {
	cur, ok := resolve(x, path)
	if !ok {
		return Missing, 0, 0
	}
	nd := &x.nodes[cur]
	return nd.kind, int(nd.start), int(nd.end)
}

// resolve returns the node index at path.
func resolve[P string | []byte](x *Index, path P) (int32, bool) {
	if !x.valid || len(x.nodes) == 0 {
		return 0, false
	}
	if len(path) == 0 {
		return 0, true
	}
	if len(path) > maxInput {
		return 0, false
	}
	return resolveFrom(x, 0, path, 0)
}

// resolveFrom returns the node at the rest of path, from the segment that
// starts at byte p, below the container at cur.
func resolveFrom[P string | []byte](x *Index, cur int32, path P, p int) (int32, bool) {
	for {
		q, esc := segmentEnd(path, p)
		var ok bool
		if cur, ok = child(x, cur, path[p:q], esc); !ok {
			return 0, false
		}
		if q >= len(path) {
			return cur, true
		}
		p = q + 1 // a trailing '.' leaves an empty last segment: the member ""
	}
}

// segmentEnd answers the end of the path segment that starts at byte p (the
// next '.' that no backslash escapes, or the end of path) and whether the
// segment holds escapes.
func segmentEnd[P string | []byte](path P, p int) (q int, esc bool) {
	q = p
	for q < len(path) && path[q] != '.' {
		if path[q] == '\\' {
			esc = true
			q++
		}
		q++
	}
	return min(q, len(path)), esc
}

// child returns the node of one path segment inside the container at cur: a
// member name (esc: the segment holds backslash escapes), the last member of
// that name, or an array index.
func child[P string | []byte](x *Index, cur int32, seg P, esc bool) (int32, bool) {
	switch x.nodes[cur].kind {
	case Object:
		return member(x, cur, seg, esc)
	case Array:
		return element(x, cur, seg)
	}
	return 0, false
}

// Cursor answers a series of lookups in one Index, remembering the container
// the previous path's parent resolved to: a following path with the same
// parent ("payload.a" after "payload.b") starts there instead of walking from
// the root again. Answers are exactly those of Lookup. The zero Cursor is
// ready; Reset it whenever the Index is parsed again. A Cursor allocates
// nothing once its buffer has grown to the longest parent path seen.
type Cursor struct {
	x      *Index
	prefix []byte // the parent path of the previous lookup
	parent int32  // its node, or -1 when it did not resolve
	have   bool   // prefix and parent are set
}

// Reset binds c to x and forgets the previous parent.
func (c *Cursor) Reset(x *Index) {
	c.x, c.prefix, c.have = x, c.prefix[:0], false
}

// LookupBytes is Index.LookupBytes, sped up for paths that share a parent.
func (c *Cursor) LookupBytes(path []byte) (k Kind, start, end int) {
	x := c.x
	if x == nil || !x.valid || len(x.nodes) == 0 {
		return Missing, 0, 0
	}
	// The last separator, read as resolve reads the path.
	dot, esc := -1, false
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case '\\':
			i++
			esc = true
		case '.':
			dot, esc = i, false
		}
	}
	if dot <= 0 {
		// No parent ("event_type", ""), or the member "" as the first
		// segment (".x"): the plain walk.
		return lookup(x, path)
	}
	prefix := path[:dot]
	if !c.have || string(prefix) != string(c.prefix) {
		p, ok := resolve(x, prefix)
		if !ok {
			p = -1
		}
		c.prefix, c.parent, c.have = append(c.prefix[:0], prefix...), p, true
	}
	if c.parent < 0 {
		return Missing, 0, 0
	}
	cur, ok := child(x, c.parent, path[dot+1:], esc)
	if !ok {
		return Missing, 0, 0
	}
	nd := &x.nodes[cur]
	return nd.kind, int(nd.start), int(nd.end)
}

// parseIndex parses a decimal array index (digits only, no sign).
func parseIndex[P string | []byte](seg P) (int, bool) {
	if len(seg) == 0 || len(seg) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// keyEqual compares a JSON-escaped member name with a path segment whose
// backslashes make the next character literal, without allocating.
func keyEqual[P string | []byte](key []byte, seg P) bool {
	j := 0
	var buf [utf8.UTFMax]byte
	for i := 0; i < len(key); {
		var chunk []byte
		if key[i] != '\\' {
			buf[0] = key[i]
			chunk = buf[:1]
			i++
		} else {
			r, size := jsonstr.DecodeEscape(key, i)
			if size == 0 {
				return false
			}
			i += size
			chunk = buf[:utf8.EncodeRune(buf[:], r)]
		}
		for _, b := range chunk {
			if j >= len(seg) {
				return false
			}
			s := seg[j]
			if s == '\\' && j+1 < len(seg) {
				j++
				s = seg[j]
			}
			j++
			if s != b {
				return false
			}
		}
	}
	return j == len(seg)
}
