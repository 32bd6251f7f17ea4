// Package jsonindex parses a JSON document once, in one pass, into a flat table
// of nodes, and answers path lookups from that table without touching the input
// again.
//
// # Layout
//
// The node table holds one entry per JSON value in document order (pre-order).
// Every entry records its kind, the byte span of its value in the input (for a
// string: the characters between the quotes, still escaped), the span of its
// member name when it is the member of an object, and the index of the first
// entry after its subtree. The children of a container are therefore found by
// starting at the entry after it and jumping from sibling to sibling; a lookup
// never scans the bytes of a value it does not return.
//
//	{"a":1,"b":[true,"x"]}
//
//	#  kind    key  next
//	0  object  -    5
//	1  number  a    2
//	2  array   b    5
//	3  true    -    4
//	4  string  -    5
//
// # Paths
//
// Lookup takes the path syntax of the mapper ABI (docs/abi.md): member names
// separated by '.', a decimal segment indexes an array, a backslash makes the
// next character literal (so `oslo\.message` names the member "oslo.message"),
// and the empty path is the whole document. Member names in the input may be
// JSON-escaped; they are compared after unescaping.
//
// Of members with the same name the last one counts, for Lookup, LookupBytes,
// a Cursor and LookupMany alike: {"a":1,"a":2} answers 2 for "a", and so does
// {"a":1,"\u0061":2}. Python's json, which oslo.messaging and Ceilometer decode
// notifications with, keeps the last duplicate, and so does encoding/json; the
// collector reads the value they read.
//
// A Cursor answers a series of lookups, starting each from the container its
// parent path resolved to last time when the parent is the same ("payload.a",
// then "payload.b"): the host uses one for a guest's single lookups
// (tally.field).
//
// LookupMany answers a batch of paths at once, each exactly as Lookup would:
// the host uses it for a guest's batch (tally.fields). It takes the paths down
// the document together, level by level, so that every container several
// paths pass through is searched once for all the names wanted in it, not
// once per path: "payload.a", "payload.b" and "payload.c.d" cost one walk
// over the members of the document and one over those of payload (and one of
// payload.c). The names wanted in one object are matched against its members
// in a small table of the names (bucketed by length and first and last
// byte), duplicates resolved as above, the last one counting.
//
// AppendChildren lists the members or elements of a container (the host uses it
// to rewrite each event a mapper returns), duplicate member names included, in
// document order; AppendUnquote decodes an escaped string span. Escapes are
// decoded by wasm-sdk/jsonstr's DecodeEscape everywhere in this package (in
// AppendUnquote, in member names compared with a path, in ParseQuoted), the
// one decoder the SDK and the host share.
//
// # A document inside a string
//
// oslo.messaging's v2 envelope carries the notification as a JSON string:
// {"oslo.version": "2.0", "oslo.message": "{\"event_type\": ...}"}. Read in
// passes, its bytes are scanned three times: the envelope's Parse scans the
// string for its end, AppendUnquote decodes it into a buffer, and Parse scans
// the buffer. ParseQuoted reads such a string once: it decodes each escape of
// the string as it meets it and feeds the decoded characters to the same
// grammar as Parse, writing the decoded bytes to the caller's buffer as it
// goes, so that the node table's spans point into the decoded document and
// the string's end is found by the document's own last character. Plain runs
// are copied eight bytes at a time up to the first byte that needs attention
// (specialMask names it); what json.dumps writes between tokens (\" around
// strings, a space after ',' and ':') is read inline, and every other form the
// string may take (white space as \n or \u0020, a character of the grammar
// written as \u007b, the document's own escapes under the string's: \\\"
// is the document's \") through a slower path that decodes one character.
// ParseWrapped is Parse with that reading for one member of the root object:
// the envelope's other members are parsed as usual, the member's string by
// ParseQuoted into a second Index.
//
// The answer is the one of the passes, byte for byte and refusal for refusal:
// the string is refused for an invalid escape, a raw control character,
// invalid UTF-8 or no closing quote, whatever the document; a lone surrogate
// decodes to U+FFFD as AppendUnquote decodes it; and the document is then
// refused as Parse of the decoded bytes refuses it (ErrDepth at the same
// depth). When the document goes wrong first, the rest of the string is still
// checked as a string, so that a broken string wins as it does in the passes.
// FuzzParseQuoted and FuzzParseWrapped hold the passes as the reference.
//
// # Cost
//
// A lookup walks the siblings of an object of up to 16 members (see
// smallContainer), and of an array up to element 16. A larger container gets
// a table on the first lookup that would walk past that (tables.go): for an
// object a hash table of its member names, under a random seed of the Index's
// own, for an array the list of its elements. It is built at most once per
// container and per Parse, in time proportional to the container, and
// afterwards every lookup in it costs the same whatever its size. So a path
// costs a bounded amount per segment beyond reading the segment, and all the
// lookups of a document, in whatever number, cost their count times that
// plus at most one pass over the document for the tables: no shape of input
// makes lookups quadratic. The tables take at most 32 bytes per member and 4
// per element, about as much as the node table itself.
//
// LookupMany keeps that bound. It walks an object only for up to 32
// distinct names at a time, and only while the walk stays within
// smallContainer + 4 members per path that goes through the object
// (walkPerPath); past that the object gets its table as for Lookup and each
// name is probed there, and an object asked for more than 32 names at once
// has each of those paths resolved on its own. So a walk costs at most a
// constant per path, a member's name is compared with a wanted name only
// when they fall in the same bucket and have the same length, and a guest
// that asks for one member of a large object again and again pays a probe
// each time, not a walk. Its scratch (one entry per path of the batch, the
// decoded names of one level) stays in the Index and allocates nothing once
// grown to the largest batch.
//
// # Invariants
//
//   - Parse validates the whole document (RFC 8259 grammar, string escapes,
//     UTF-8, control characters, nesting up to MaxDepth) before it reports success;
//     on error the Index answers every lookup with Missing.
//   - Parse keeps a reference to the input; it does not copy it. The caller must
//     not modify the input while the Index refers to it. ParseQuoted refers to
//     the decoded bytes, in the buffer the caller passed and got back.
//   - After warm-up (once the buffers, the tables' included, have grown to the
//     largest document seen) Parse, ParseQuoted, ParseWrapped and Lookup
//     allocate nothing.
//
// # Concurrency
//
// An Index is not safe for concurrent use: one goroutine parses and looks up.
// Lookups write to the Index too (they build the tables), so not even they may
// run at the same time. Keep one Index per worker and reuse it.
package jsonindex
