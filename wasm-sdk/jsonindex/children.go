package jsonindex

// Child is one member of an object or one element of an array, as listed by
// AppendChildren. Offsets are into Bytes(); the value span follows the rules of
// Lookup (strings between the quotes).
type Child struct {
	Kind             Kind
	KeyStart, KeyEnd int // member name between the quotes (escaped); both 0 for array elements
	Start, End       int
}

// AppendChildren appends the members (in document order, duplicates included:
// a caller that writes them out writes every duplicate, where a lookup answers
// only the last) or elements of the object or array at path to dst and
// returns it. For any
// other kind, or a path that does not resolve, dst is returned unchanged. With a
// reused dst it allocates nothing.
func (x *Index) AppendChildren(dst []Child, path string) []Child {
	return appendChildren(x, dst, path)
}

// AppendChildrenBytes is AppendChildren with the path given as bytes.
func (x *Index) AppendChildrenBytes(dst []Child, path []byte) []Child {
	return appendChildren(x, dst, path)
}

func appendChildren[P string | []byte](x *Index, dst []Child, path P) []Child {
	cur, ok := resolve(x, path)
	if !ok {
		return dst
	}
	nd := &x.nodes[cur]
	if nd.kind != Object && nd.kind != Array {
		return dst
	}
	for c := cur + 1; c < nd.next; c = x.nodes[c].next {
		ch := &x.nodes[c]
		dst = append(dst, Child{Kind: ch.kind, KeyStart: int(ch.key0), KeyEnd: int(ch.key1), Start: int(ch.start), End: int(ch.end)})
	}
	return dst
}
