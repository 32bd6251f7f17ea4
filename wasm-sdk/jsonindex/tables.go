package jsonindex

import (
	"bytes"
	"hash/maphash"
	"math"
	"slices"
)

// smallContainer is the most members a lookup finds by walking the siblings
// of an object, and the deepest array index it reaches that way. Past it the
// container gets a table on its first such lookup, and every later lookup in
// it costs the same whatever the container's size: a hash probe for an
// object, one read for an array. Up to about this size walking is as fast as
// the probe (BenchmarkObjectSize).
const smallContainer = 16

// Tables live in Index.tabs, one after another, each built at most once per
// container and per Parse, on the first lookup that needs it; Index.tabOf
// gives per node 1 + the offset of its container's table, 0 while it has
// none. A table costs at most 32 bytes per member (fewer than four slots of 8
// bytes each) or 4 per element, and tabOf 4 bytes a node once a document has a
// table, so all of them together stay about the size of the node table (24
// bytes a node). tabOf lives beside the nodes rather than in them so that
// Parse, which does not need it, writes no more than before.
//
// An object's table is open-addressed with linear probing, at most half full,
// so every probe ends at an empty slot:
//
//	tabs[off]                      mask (number of slots - 1)
//	tabs[off+1+2i], tabs[off+2+2i] slot i: 1 + member node (0: empty), hash tag
//
// It holds one slot per distinct member name (compared after unescaping): the
// last member of that name, the one lookups answer. Names are hashed with
// maphash under a seed of the Index's own, drawn at random, so a publisher
// cannot choose names that all land in one probe sequence.
//
// An array's table lists its elements:
//
//	tabs[off]       number of elements
//	tabs[off+1+i]   node of element i

// member returns the member of the object at cur named seg (esc: seg holds
// path escapes): the last one of that name.
func member[P string | []byte](x *Index, cur int32, seg P, esc bool) (int32, bool) {
	if x.tableOf(cur) == 0 {
		if c, done := scanMembers(x, cur, seg, esc, smallContainer); done {
			return c, c >= 0
		}
	}
	return findMember(x, x.tableOf(cur)-1, seg, esc)
}

// scanMembers walks the members of a small object for seg and answers the
// last match (-1: none) and done. An object with more than limit members
// gets its table instead, and scanMembers answers done false.
func scanMembers[P string | []byte](x *Index, cur int32, seg P, esc bool, limit int) (found int32, done bool) {
	nodes, src := x.nodes, x.src
	nd := &nodes[cur]
	n := int32(len(seg)) //nolint:gosec // a quick filter only: the string comparison after it decides a match, so a length cut modulo 2^32 finds none
	found, count := -1, 0
	for c := cur + 1; c < nd.next; c = nodes[c].next {
		if count++; count == limit+1 && x.buildMembers(cur) {
			return 0, false
		}
		ch := &nodes[c]
		switch {
		case ch.keyEsc || esc:
			if keyEqual(src[ch.key0:ch.key1], seg) {
				found = c
			}
		case ch.key1-ch.key0 == n && string(src[ch.key0:ch.key1]) == string(seg):
			found = c
		}
	}
	return found, true
}

// findMember looks seg up in the object table at off.
func findMember[P string | []byte](x *Index, off int32, seg P, esc bool) (int32, bool) {
	name := x.segBuf[:0]
	if !esc {
		name = append(name, seg...)
	} else {
		name = appendSegment(name, seg)
	}
	x.segBuf = name
	h := maphash.Bytes(x.seed, name)
	tabs := x.tabs[off:]
	mask, tag := uint32(tabs[0]), int32(uint32(h>>32))
	for i := uint32(h) & mask; ; i = (i + 1) & mask { //nolint:gosec // the hash's low 32 bits, cut on purpose, pick the first slot
		c := tabs[1+2*i]
		if c == 0 {
			return 0, false
		}
		if tabs[2+2*i] == tag && x.nameIs(c-1, name) {
			return c - 1, true
		}
	}
}

// buildMembers builds the table of the object at cur. It answers false, and
// builds nothing, when the tables would outgrow their int32 offsets (inputs
// of hundreds of megabytes); lookups in that object then walk.
func (x *Index) buildMembers(cur int32) bool {
	nodes := x.nodes
	nd := &nodes[cur]
	n := x.childCount(cur)
	size := 1
	for size < 2*n {
		size <<= 1
	}
	off, ok := x.grow(1 + 2*size)
	if !ok {
		return false
	}
	if !x.seeded {
		x.seed, x.seeded = maphash.MakeSeed(), true
	}
	tabs := x.tabs[off:]
	mask := uint32(size - 1) //nolint:gosec // grow(1 + 2*size) succeeded, so size < 2^30
	tabs[0] = int32(mask)
	for c := cur + 1; c < nd.next; c = nodes[c].next {
		h, name := x.memberHash(c)
		tag := int32(uint32(h >> 32))
		for i := uint32(h) & mask; ; i = (i + 1) & mask { //nolint:gosec // the hash's low 32 bits, cut on purpose, pick the first slot
			s := 1 + 2*i
			if tabs[s] == 0 {
				tabs[s], tabs[s+1] = c+1, tag
				break
			}
			if tabs[s+1] == tag && x.nameIs(tabs[s]-1, name) {
				tabs[s] = c + 1 // a later member of the same name replaces it
				break
			}
		}
	}
	x.setTable(cur, off)
	return true
}

// element returns element seg (a decimal index) of the array at cur.
func element[P string | []byte](x *Index, cur int32, seg P) (int32, bool) {
	idx, ok := parseIndex(seg)
	if !ok {
		return 0, false
	}
	nodes := x.nodes
	nd := &nodes[cur]
	if x.tableOf(cur) == 0 && (idx < smallContainer || !x.buildElements(cur)) {
		c := cur + 1
		for ; c < nd.next && idx > 0; c = nodes[c].next {
			idx--
		}
		if c >= nd.next {
			return 0, false
		}
		return c, true
	}
	tabs := x.tabs[x.tableOf(cur)-1:]
	if idx >= int(tabs[0]) {
		return 0, false
	}
	return tabs[1+idx], true
}

// childCount returns the number of members or elements of the container at
// cur.
func (x *Index) childCount(cur int32) int {
	nodes := x.nodes
	n := 0
	for c := cur + 1; c < nodes[cur].next; c = nodes[c].next {
		n++
	}
	return n
}

// buildElements builds the table of the array at cur; false as for
// buildMembers.
func (x *Index) buildElements(cur int32) bool {
	nodes := x.nodes
	nd := &nodes[cur]
	n := x.childCount(cur)
	off, ok := x.grow(1 + n)
	if !ok {
		return false
	}
	tabs := x.tabs[off:]
	tabs[0] = int32(n) //nolint:gosec // grow(1 + n) succeeded, so n < 2^31
	i := 1
	for c := cur + 1; c < nd.next; c = nodes[c].next {
		tabs[i] = c
		i++
	}
	x.setTable(cur, off)
	return true
}

// tableOf answers 1 + the offset of the table of container cur, 0 while it
// has none.
func (x *Index) tableOf(cur int32) int32 {
	if !x.tabsOn {
		return 0
	}
	return x.tabOf[cur]
}

// setTable records off as the offset of the table of container cur.
func (x *Index) setTable(cur int32, off int) {
	if !x.tabsOn {
		x.tabOf = slices.Grow(x.tabOf[:0], len(x.nodes))[:len(x.nodes)]
		clear(x.tabOf)
		x.tabsOn = true
	}
	x.tabOf[cur] = int32(off) + 1 //nolint:gosec // off comes from grow, which keeps off+1 <= math.MaxInt32
}

// grow appends n zeroed entries to the tables and answers the offset of the
// first, or false when an offset would no longer fit in an int32.
func (x *Index) grow(n int) (int, bool) {
	off := len(x.tabs)
	if n > math.MaxInt32-1-off {
		return 0, false
	}
	x.tabs = slices.Grow(x.tabs, n)[:off+n]
	clear(x.tabs[off:])
	return off, true
}

// memberHash answers the hash of the name of member c, and the name itself,
// unescaped (in nameBuf when it holds escapes).
func (x *Index) memberHash(c int32) (uint64, []byte) {
	ch := &x.nodes[c]
	name := x.src[ch.key0:ch.key1]
	if ch.keyEsc {
		x.nameBuf = appendName(x.nameBuf[:0], name)
		name = x.nameBuf
	}
	return maphash.Bytes(x.seed, name), name
}

// nameIs reports whether member c is named name (unescaped). It may use
// candBuf.
func (x *Index) nameIs(c int32, name []byte) bool {
	ch := &x.nodes[c]
	key := x.src[ch.key0:ch.key1]
	if !ch.keyEsc {
		return string(key) == string(name)
	}
	x.candBuf = appendName(x.candBuf[:0], key)
	return bytes.Equal(x.candBuf, name)
}

// appendName unescapes a member name Parse validated, so it cannot fail.
func appendName(dst, key []byte) []byte {
	dst, _ = AppendUnquote(dst, key)
	return dst
}
