package jsonindex

import "bytes"

// Span is the answer to one path of LookupMany: what Lookup answers for it.
type Span struct {
	Kind       Kind
	Start, End int
}

// maxWanted is the most distinct names one walk over an object looks for. A
// container asked for more at once has each of its paths resolved on its own,
// as by Lookup.
const maxWanted = 32

// walkPerPath bounds a walk over an object for k paths to smallContainer +
// walkPerPath*k members: past that the object gets its table (tables.go), so
// a walk costs a bounded amount per path whatever the object's size.
const walkPerPath = 4

// manyItem is one path of a LookupMany batch on its way down the document.
// The items that reach the same container at the same level are chained
// through next.
type manyItem struct {
	p        []byte // the path
	i        int32  // its index in the batch
	pos, end int32  // the segment being resolved: p[pos:end]
	next     int32  // 1 + the next item of the chain, 0: none
}

// manyState is the scratch of LookupMany, kept in the Index so that a warm
// Index allocates nothing. The names of one level (names, heads, next, name,
// raw, esc) are used only until that level's children are known, before it
// descends, so one set serves every level.
type manyState struct {
	items     []manyItem
	names     []byte            // escaped segments of the level, decoded
	heads     [64]uint8         // per bucket of nameBucket: 1 + its first name's slot, 0: none
	next      [maxWanted]uint8  // 1 + the next slot in the same bucket, 0: none
	name, raw [maxWanted][]byte // per slot: the name decoded, and as the path spells it
	esc       [maxWanted]bool   // raw holds escapes
}

// LookupMany answers len(paths) lookups at once: out[i] is what Lookup
// answers for paths[i], exactly (out must be at least as long as paths). It
// does the work of the lookups together: the paths are taken down the
// document level by level, and every container that several of them pass
// through is searched once for all the names wanted in it. An object of up
// to smallContainer + 4 members per path that goes through it, with at most
// 32 distinct names wanted, is walked once, each member's name matched
// against the wanted ones; a larger object gets its table (built once, as
// for Lookup) and each name is probed there. So, as with Lookup, every path
// costs a bounded amount per segment beyond reading it, and no document
// makes a batch cost more than that plus one pass for the tables. It does
// not retain paths.
func (x *Index) LookupMany(paths [][]byte, out []Span) {
	out = out[:len(paths)]
	if !x.valid || len(x.nodes) == 0 {
		clear(out)
		return
	}
	m := &x.many
	items := m.items[:0]
	head := int32(0)
	for i, p := range paths {
		if len(p) == 0 {
			out[i] = x.span(0) // the whole document
			continue
		}
		if len(p) > maxInput { // as Lookup: missing (its offsets would not fit an int32)
			out[i] = Span{}
			continue
		}
		items = append(items, manyItem{p: p, i: int32(i), next: head})
		head = int32(len(items)) //nolint:gosec // at most len(paths); 2^31 slice headers (48 GiB) are beyond a wasm32 guest's 4 GiB memory
	}
	m.items = items
	if head != 0 {
		x.resolveMany(0, head, out)
	}
	clear(items) // keep no reference to the paths
}

func (x *Index) span(c int32) Span {
	nd := &x.nodes[c]
	return Span{Kind: nd.kind, Start: int(nd.start), End: int(nd.end)}
}

// resolveMany answers the chain of items from head, whose paths have led to
// the node cur and go on with the segment at their pos.
func (x *Index) resolveMany(cur int32, head int32, out []Span) {
	m := &x.many
	items := m.items
	kind := x.nodes[cur].kind
	if kind != Object && kind != Array {
		for j := head; j != 0; j = items[j-1].next {
			out[items[j-1].i] = Span{}
		}
		return
	}
	// Each item's segment, its distinct name in a slot, and the chain of
	// each slot's items.
	clear(m.heads[:])
	m.names = m.names[:0]
	var slotHead [maxWanted]int32
	var lens uint64 // the lengths of the names, modulo 64
	n, count := 0, 0
	for j := head; j != 0; {
		it := &items[j-1]
		next := it.next
		p, pos := it.p, int(it.pos)
		// The segment ends at the first '.' unless a backslash before it
		// (in the segment) may escape it; either way only the bytes up to
		// the segment's end are read, as by Lookup.
		q, esc := len(p), false
		if d := bytes.IndexByte(p[pos:], '.'); d >= 0 {
			q = pos + d
		}
		if bytes.IndexByte(p[pos:q], '\\') >= 0 {
			q, esc = segmentEnd(p, pos)
		}
		it.end = int32(q) //nolint:gosec // q <= len(p) <= maxInput: LookupMany answers a longer path missing
		raw := p[pos:q]
		name := raw
		if esc {
			if kind == Array {
				out[it.i] = Span{} // not a decimal index
				j = next
				continue
			}
			start := len(m.names)
			m.names = appendSegment(m.names, raw)
			name = m.names[start:]
		}
		b := nameBucket(name)
		s := int(m.heads[b])
		for s != 0 && string(m.name[s-1]) != string(name) {
			s = int(m.next[s-1])
		}
		if s == 0 {
			if n == maxWanted {
				x.resolveEach(cur, slotHead[:n], j, out)
				return
			}
			m.name[n], m.raw[n], m.esc[n] = name, raw, esc
			m.next[n], m.heads[b] = m.heads[b], uint8(n+1)
			lens |= 1 << (len(name) & 63)
			n++
			s = n
		}
		it.next, slotHead[s-1] = slotHead[s-1], j
		count++
		j = next
	}
	// The child each name leads to, -1: none.
	var child [maxWanted]int32
	if kind == Object {
		x.members(cur, child[:n], count, lens)
	} else {
		for s := 0; s < n; s++ {
			child[s] = -1
			if c, ok := element(x, cur, m.name[s]); ok {
				child[s] = c
			}
		}
	}
	// Down each child: an item whose path ends there is answered, the others
	// go on together.
	for s := 0; s < n; s++ {
		c := child[s]
		sub := int32(0)
		for j := slotHead[s]; j != 0; {
			it := &items[j-1]
			next := it.next
			switch {
			case c < 0:
				out[it.i] = Span{}
			case int(it.end) >= len(it.p):
				out[it.i] = x.span(c)
			default:
				it.pos = it.end + 1
				it.next, sub = sub, j
			}
			j = next
		}
		if sub != 0 {
			x.resolveMany(c, sub, out)
		}
	}
}

// members finds in the object at cur the member each of the level's names
// leads to (the last of that name), into child: by one walk over the
// members for the k paths, or in the object's table when it has one or the
// walk would pass smallContainer + walkPerPath*k members. lens has bit l%64
// set for every name of length l.
func (x *Index) members(cur int32, child []int32, k int, lens uint64) {
	m := &x.many
	for s := range child {
		child[s] = -1
	}
	if x.tableOf(cur) == 0 {
		nodes, src := x.nodes, x.src
		left := smallContainer + walkPerPath*k
		walked := true
		for c, end := cur+1, nodes[cur].next; c < end; c = nodes[c].next {
			if left--; left < 0 && left > -2 && x.buildMembers(cur) {
				walked = false
				break
			}
			ch := &nodes[c]
			k0, k1 := int(ch.key0), int(ch.key1)
			if ch.keyEsc {
				key := src[k0:k1]
				for s := range child {
					if keyEqual(key, m.raw[s]) {
						child[s] = c
						break
					}
				}
				continue
			}
			if lens>>((k1-k0)&63)&1 == 0 {
				continue
			}
			key := src[k0:k1]
			s := int(m.heads[nameBucket(key)])
			for s != 0 && string(m.name[s-1]) != string(key) {
				s = int(m.next[s-1])
			}
			if s != 0 {
				child[s-1] = c
			}
		}
		if walked {
			return
		}
	}
	off := x.tableOf(cur) - 1
	for s := range child {
		child[s] = -1
		if c, ok := findMember(x, off, m.raw[s], m.esc[s]); ok {
			child[s] = c
		}
	}
}

// resolveEach answers each item on its own, as Lookup would from cur: the
// way out when a level asks for more than maxWanted distinct names. The
// items are the chains of the slots so far and the chain from rest.
func (x *Index) resolveEach(cur int32, slotHead []int32, rest int32, out []Span) {
	items := x.many.items
	one := func(j int32) int32 {
		it := &items[j-1]
		if c, ok := resolveFrom(x, cur, it.p, int(it.pos)); ok {
			out[it.i] = x.span(c)
		} else {
			out[it.i] = Span{}
		}
		return it.next
	}
	for _, j := range slotHead {
		for j != 0 {
			j = one(j)
		}
	}
	for j := rest; j != 0; {
		j = one(j)
	}
}

// nameBucket spreads names over the 64 buckets of manyState.heads by their
// length and first and last bytes. A bucket holds distinct names only, at
// most maxWanted of them.
func nameBucket(name []byte) uint8 {
	h := uint32(len(name)) //nolint:gosec // a hash: the length modulo 2^32 is all it wants
	if len(name) > 0 {
		h |= uint32(name[0])<<8 | uint32(name[len(name)-1])<<16
	}
	return uint8((h * 0x9E3779B1) >> 26)
}

// appendSegment appends a path segment with its escapes undone: a backslash
// makes the next byte literal; a backslash at the end stands for itself.
func appendSegment[P string | []byte](dst []byte, seg P) []byte {
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '\\' && i+1 < len(seg) {
			i++
			c = seg[i]
		}
		dst = append(dst, c)
	}
	return dst
}
