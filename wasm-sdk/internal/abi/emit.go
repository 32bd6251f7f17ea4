package abi

// Op is one operation of the emit import, as the host reads it: five
// little-endian u32s (docs/abi.md, "emit"). A Go []Op is laid out exactly so.
type Op struct {
	Code           uint32 // an Op* code, with OpFromInput for a value in the input
	KeyPtr, KeyLen uint32 // the member's name, UTF-8 text
	A, B           uint32 // the value: (ptr, len), (offset, len) in the input, or an integer
}

// Operation codes of the emit import.
const (
	OpEvent  = 1 // begin a top-level event
	OpObject = 2 // begin an object member
	OpEnd    = 3 // close the innermost object, or the event
	OpText   = 4 // a string member from UTF-8 text, escaped by the host
	OpString = 5 // a string member from the content of a JSON string, escaped as in JSON
	OpNumber = 6 // a number member from the text of a JSON number
	OpInt    = 7 // a number member from the i64 A | B<<32
	OpBool   = 8 // a boolean member, A 0 or 1
	OpTime   = 9 // a timestamp member, converted by the host; omitted when not a timestamp

	// OpFromInput marks a value that lies in the call's input: A is its
	// offset from the input pointer passed to tally_map.
	OpFromInput = 1 << 8
)
