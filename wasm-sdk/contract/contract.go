// Package contract holds the rules of the canonical event (docs/events.md,
// "The contract") that a mapper and the collector both apply: which
// attributes are quantities and the range of each, which are timestamps, and
// how long a text may be. Mappers reach it through the SDK's helpers
// (sdk.Event.Quantity); the collector checks every event against the same
// rules before it commits it, whatever module wrote it. One table, two
// users: a mapper that uses the SDK never writes what the collector would
// drop.
//
// The package allocates nothing and imports no time package, so a guest
// links it at no cost; the time window of a timestamp is the collector's to
// check (it depends on the clock).
package contract

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// Bounds of the members of an event, in bytes of decoded text.
const (
	// MaxIDBytes bounds event_id, event_type, service, resource_type,
	// resource_id, project_id, user_id and action.
	MaxIDBytes = 255
	// MaxAttributeNameBytes bounds the name of an attribute.
	MaxAttributeNameBytes = 128
	// MaxAttributeBytes bounds a string attribute (swift allows object
	// names of 1,024 bytes).
	MaxAttributeBytes = 1024
	// MaxQuantity is the range of a quantity the table does not name: the
	// largest integer a JSON reader that holds numbers as doubles (Go's
	// float64, JavaScript) keeps exactly.
	MaxQuantity = 1<<53 - 1
)

// Quantity is a numeric attribute and its range, [0, Max].
type Quantity struct {
	Name string
	Max  float64
}

// Quantities are the numeric attributes of the built-in resource types and
// their ranges. Every other numeric attribute is a quantity too, in
// [0, MaxQuantity].
var Quantities = [...]Quantity{
	{"vcpus", 1 << 16},              // 65,536 vCPUs
	{"memory_mb", 1 << 32},          // 4 PiB
	{"root_gb", 1 << 32},            // 4 EiB
	{"ephemeral_gb", 1 << 32},       //
	{"disk_gb", 1 << 32},            //
	{"size_gb", 1 << 32},            //
	{"volume_size_gb", 1 << 32},     //
	{"size_bytes", MaxQuantity},     // 8 PiB
	{"bytes_received", MaxQuantity}, //
	{"bytes_sent", MaxQuantity},     //
	{"ttl", math.MaxInt32},          // designate stores a TTL as a signed 32-bit integer
	{"serial", math.MaxUint32},      // a DNS SOA serial is an unsigned 32-bit integer
}

// TimeAttributes are the attributes that hold a timestamp, written as the
// event's timestamp is.
var TimeAttributes = [...]string{
	"launched_at", "terminated_at", "deleted_at",
	"audit_period_beginning", "audit_period_ending",
}

// MaxOf returns the upper bound of the quantity attribute name, and whether
// the table names it (MaxQuantity when it does not).
func MaxOf(name string) (float64, bool) {
	for i := range Quantities {
		if Quantities[i].Name == name {
			return Quantities[i].Max, true
		}
	}
	return MaxQuantity, false
}

// IsTimeAttribute reports whether the attribute name holds a timestamp.
func IsTimeAttribute(name string) bool {
	for _, n := range TimeAttributes {
		if n == name {
			return true
		}
	}
	return false
}

// Violation names what a value breaks. The set is closed: the collector
// counts dropped members by it (a metric label).
type Violation uint8

// The violations, in the order of their names.
const (
	OK Violation = iota
	// Negative: a quantity below zero (-0 included).
	Negative
	// NotFinite: a number no double holds (1e999).
	NotFinite
	// OutOfRange: a quantity above its maximum.
	OutOfRange
	// WrongType: a value of another JSON kind than the member's (a string
	// where a number goes, a number where a timestamp goes).
	WrongType
	// BadTimestamp: not an RFC 3339 UTC time as the contract writes it, or
	// outside its window.
	BadTimestamp
	// Blank: empty or white space only.
	Blank
	// NotPrintable: a control character, or a text that is not UTF-8.
	NotPrintable
	// TooLong: over the member's bound.
	TooLong
	// Null: JSON null, which the contract never writes (a value not given
	// is left out).
	Null
	// Nested: an object or array where the contract has a plain value.
	Nested
	// Unknown: a member the event does not have.
	Unknown
	// Duplicate: a member written again; the last one counts.
	Duplicate
	// Missing: a required member is absent.
	Missing
	numViolations
)

// NumViolations is the number of violations, OK included: arrays indexed by
// Violation have this length.
const NumViolations = int(numViolations)

var violationNames = [numViolations]string{
	"ok", "negative", "not_finite", "out_of_range", "wrong_type", "bad_timestamp",
	"blank", "not_printable", "too_long", "null", "nested", "unknown_member",
	"duplicate", "missing",
}

// String returns the name of v, as the metric label and the dead letter's
// reason detail write it.
func (v Violation) String() string {
	if v < numViolations {
		return violationNames[v]
	}
	return "unknown"
}

// CheckQuantity checks raw, the text of a JSON number, as a quantity in
// [0, max].
func CheckQuantity(raw []byte, max float64) Violation {
	if v, ok := smallInt(raw); ok { // the usual quantity: exact as a float64
		if float64(v) > max {
			return OutOfRange
		}
		return OK
	}
	return checkQuantityParsed(raw, max)
}

// checkQuantityParsed is CheckQuantity without the fast path for small
// integers (smallInt): the reference the fast path must agree with.
func checkQuantityParsed(raw []byte, max float64) Violation {
	if len(raw) > 0 && raw[0] == '-' {
		return Negative
	}
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(raw), len(raw)), 64) //nolint:gosec // zero-copy view of raw, which is not changed during the call; ParseFloat keeps no reference (its error holds a copy)
	switch {
	case err != nil && math.IsInf(f, 0):
		return NotFinite
	case err != nil:
		return WrongType
	case f > max:
		return OutOfRange
	}
	return OK
}

// smallInt reads raw when it is 1 to 15 decimal digits and nothing else: a
// value below 2^53, which a float64 holds exactly, so that CheckQuantity
// answers as strconv.ParseFloat would without calling it.
func smallInt(raw []byte) (uint64, bool) {
	if len(raw) == 0 || len(raw) > 15 {
		return 0, false
	}
	var v uint64
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

// CheckText checks s, decoded text, as a member bounded by maxBytes: not
// blank, no control character (C0, DEL, C1), valid UTF-8.
func CheckText(s []byte, maxBytes int) Violation {
	return checkText(s, maxBytes, false)
}

// CheckAttributeText is CheckText for the value of a string attribute, which
// may also hold tabs and line breaks (a note, a description).
func CheckAttributeText(s []byte) Violation {
	return checkText(s, MaxAttributeBytes, true)
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

func checkText(s []byte, maxBytes int, breaks bool) Violation {
	if len(s) > maxBytes {
		return TooLong
	}
	blank := true
	i := 0
	// Eight bytes at a time while every one is printable ASCII other than
	// the space (0x21..0x7e: not blank, nothing to refuse), the usual text
	// of an id or a name; the first word that holds anything else, and the
	// tail, go a byte at a time.
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		if (x-0x21*lsb)&^x&msb != 0 || (x+0x01*lsb|x)&msb != 0 {
			break
		}
		blank = false
	}
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && !(breaks && (c == '\t' || c == '\n' || c == '\r')) || c == 0x7f {
				return NotPrintable
			}
			if c > ' ' {
				blank = false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 || r >= 0x80 && r < 0xa0 {
			return NotPrintable
		}
		if !isSpace(r) {
			blank = false
		}
		i += n
	}
	if blank {
		return Blank
	}
	return OK
}

// isSpace reports the white space of Unicode beyond ASCII's that a text made
// only of is blank.
func isSpace(r rune) bool {
	switch r {
	case 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff:
		return true
	}
	return r >= 0x2000 && r <= 0x200b
}

// CheckTimestamp checks s, decoded text, against the form the contract
// writes: YYYY-MM-DDTHH:MM:SS, a fraction of 1 to 9 digits, Z; a real date
// and time of day. The window is the collector's to check.
func CheckTimestamp(s []byte) Violation {
	if len(s) < 20 || s[len(s)-1] != 'Z' || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return BadTimestamp
	}
	for _, i := range [...]int{0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18} {
		if s[i] < '0' || s[i] > '9' {
			return BadTimestamp
		}
	}
	if frac := s[19 : len(s)-1]; len(frac) > 0 {
		if frac[0] != '.' || len(frac) < 2 || len(frac) > 10 {
			return BadTimestamp
		}
		for _, c := range frac[1:] {
			if c < '0' || c > '9' {
				return BadTimestamp
			}
		}
	}
	num := func(b []byte) int {
		n := 0
		for _, c := range b {
			n = n*10 + int(c-'0')
		}
		return n
	}
	year, month, day := num(s[0:4]), num(s[5:7]), num(s[8:10])
	if month < 1 || month > 12 || day < 1 || day > daysIn(year, month) ||
		num(s[11:13]) > 23 || num(s[14:16]) > 59 || num(s[17:19]) > 59 {
		return BadTimestamp
	}
	return OK
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
