package sdk

import (
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/contract"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/internal/abi"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/timestamp"
)

const (
	docStart = `{"events":[`
	docEnd   = `]}`
)

// reset prepares o for a new call, keeping its buffers.
func (o *Output) reset() {
	o.buf = append(o.buf[:0], docStart...)
	o.nEv, o.depth, o.first = 0, 0, false
	o.failed, o.errMsg = false, ""
	o.ev.out = o
	o.ops.reset()
}

// finish closes what is open and returns the tally_map document.
func (o *Output) finish() []byte {
	if o.failed {
		o.buf = append(o.buf[:0], `{"error":`...)
		o.buf = jsonstr.AppendQuoted(o.buf, o.errMsg)
		o.buf = append(o.buf, '}')
		o.ops.reset()
		return o.buf
	}
	if emitOps {
		return o.emitFinish()
	}
	o.closeAll()
	o.buf = append(o.buf, docEnd...)
	return o.buf
}

func (o *Output) closeAll() {
	if emitOps {
		for ; o.depth > 0; o.depth-- {
			o.op(abi.OpEnd, "", 0, 0)
		}
		return
	}
	for ; o.depth > 0; o.depth-- {
		o.buf = append(o.buf, '}')
	}
}

// Event begins a new top-level event and returns its builder. An event still
// open is closed first, so End on the last level is optional. Members are
// written in the order of the calls; the host fills "source" itself.
func (o *Output) Event() *Event {
	o.closeAll()
	if emitOps {
		o.op(abi.OpEvent, "", 0, 0)
		o.nEv++
		o.depth, o.first = 1, true
		o.ev.out = o
		return &o.ev
	}
	if o.nEv > 0 {
		o.buf = append(o.buf, ',')
	}
	o.buf = append(o.buf, '{')
	o.nEv++
	o.depth, o.first = 1, true
	o.ev.out = o
	return &o.ev
}

// Error makes the call answer {"error": reason} instead of its events (the
// host reports it as a guest error and dead-letters the notification). Use it
// for input the mapper cannot make sense of; a payload that merely lacks
// fields should still yield an event.
func (o *Output) Error(reason string) {
	o.failed, o.errMsg = true, reason
}

// key writes the separator and "key": of the next member. It reports false,
// writing nothing, when no object is open (after the event's final End).
func (e *Event) key(k string) bool {
	o := e.out
	if o.depth == 0 {
		return false
	}
	if jsonstr.Plain(k) { // keys are literals: the usual case
		// One capacity check and one copy: `,"key":`.
		n := len(o.buf)
		b := grow(o.buf, len(k)+4)
		if !o.first {
			b[n] = ','
			n++
		}
		b[n] = '"'
		copy(b[n+1:], k)
		n += 1 + len(k)
		b[n] = '"'
		b[n+1] = ':'
		o.buf = b[:n+2]
		o.first = false
		return true
	}
	if !o.first {
		o.buf = append(o.buf, ',')
	}
	o.first = false
	o.buf = jsonstr.AppendQuoted(o.buf, k)
	o.buf = append(o.buf, ':')
	return true
}

// Str writes a literal string member; val is escaped by the builder.
func (e *Event) Str(key, val string) {
	if emitOps {
		if e.out.depth > 0 {
			e.out.emitText(key, val)
		}
		return
	}
	if e.key(key) {
		e.out.buf = jsonstr.AppendQuoted(e.out.buf, val)
	}
}

// StrValue writes v as a string member: a string is copied as it arrived
// (still escaped), a number or boolean is written as its text in quotes;
// missing, null, objects and arrays are omitted. It reports whether it wrote.
func (e *Event) StrValue(key string, v Value) bool {
	switch v.kind {
	case String, Number, True, False:
	default:
		return false
	}
	if emitOps {
		if e.out.depth == 0 {
			return false
		}
		e.out.opBytes(abi.OpString, key, v.raw)
		return true
	}
	if !e.key(key) {
		return false
	}
	o := e.out
	if v.kind != String || jsonstr.CleanRaw(v.raw) {
		// Copied as it arrived: one capacity check and one copy.
		n := len(o.buf)
		b := grow(o.buf, len(v.raw)+2)
		b[n] = '"'
		copy(b[n+1:], v.raw)
		b[n+1+len(v.raw)] = '"'
		o.buf = b[:n+2+len(v.raw)]
		return true
	}
	// Control bytes or invalid UTF-8 in the input: decode and re-escape.
	o.buf = append(o.buf, '"')
	o.scratch = jsonstr.AppendUnescaped(o.scratch[:0], v.raw)
	o.buf = jsonstr.AppendEscapedBytes(o.buf, o.scratch)
	o.buf = append(o.buf, '"')
	return true
}

// NumValue writes v as a number member: a number as it arrived, or a string
// holding exactly a JSON number ("512") without its quotes. Anything else is
// omitted. It reports whether it wrote.
func (e *Event) NumValue(key string, v Value) bool {
	b, ok := v.numeric()
	if emitOps {
		if !ok || e.out.depth == 0 {
			return false
		}
		e.out.opBytes(abi.OpNumber, key, b)
		return true
	}
	if !ok || !e.key(key) {
		return false
	}
	e.out.buf = append(e.out.buf, b...)
	return true
}

// Quantity writes v as a quantity member: a number as NumValue takes it,
// written only when it lies within the range the event contract gives key
// (contract.Quantities: vcpus up to 65,536, memory_mb up to 2^32 ...; any
// other name [0, 2^53-1]). A negative value (-0 too), one no double holds
// (1e999), one over the range, or anything but a number is left out, as the
// collector would drop it. It reports whether it wrote. Use it for every
// number a bill is computed from:
//
//	a := e.Object("attributes")
//	a.Quantity("vcpus", msg.Get("payload.vcpus"))
func (e *Event) Quantity(key string, v Value) bool {
	b, ok := v.numeric()
	if !ok {
		return false
	}
	max, _ := contract.MaxOf(key)
	if emitOps {
		if contract.CheckQuantity(b, max) != contract.OK || e.out.depth == 0 {
			return false
		}
		e.out.opBytes(abi.OpNumber, key, b)
		return true
	}
	if contract.CheckQuantity(b, max) != contract.OK || !e.key(key) {
		return false
	}
	e.out.buf = append(e.out.buf, b...)
	return true
}

// Int writes an integer member.
func (e *Event) Int(key string, n int64) {
	if emitOps {
		if e.out.depth > 0 {
			e.out.emitInt(key, n)
		}
		return
	}
	if e.key(key) {
		e.out.buf = appendInt(e.out.buf, n)
	}
}

// Bool writes a boolean member.
func (e *Event) Bool(key string, b bool) {
	if emitOps {
		if e.out.depth > 0 {
			e.out.emitBool(key, b)
		}
		return
	}
	if e.key(key) {
		if b {
			e.out.buf = append(e.out.buf, "true"...)
		} else {
			e.out.buf = append(e.out.buf, "false"...)
		}
	}
}

// Timestamp writes v, a string timestamp, as RFC 3339 in UTC with a Z:
// oslo's "2024-05-01 12:00:00.123456" (or without the fraction) and ISO 8601
// with a 'T' and an optional "Z" or UTC offset are understood; the fraction is
// kept digit for digit and an offset is converted to UTC. Anything else is
// omitted. It reports whether it wrote.
func (e *Event) Timestamp(key string, v Value) bool {
	if v.kind != String {
		return false
	}
	if emitOps {
		return e.out.depth > 0 && e.out.emitTimestamp(key, v)
	}
	var ts [40]byte
	t, ok := timestamp.Append(ts[:0], v.raw)
	if !ok || !e.key(key) {
		return false
	}
	o := e.out
	o.buf = append(o.buf, '"')
	o.buf = append(o.buf, t...)
	o.buf = append(o.buf, '"')
	return true
}

// Object begins a nested object member (for example "attributes") and
// returns the builder positioned inside it. Close it with End.
func (e *Event) Object(key string) *Event {
	if emitOps {
		if o := e.out; o.depth > 0 {
			o.op(abi.OpObject, key, 0, 0)
			o.depth++
		}
		return e
	}
	if e.key(key) {
		e.out.buf = append(e.out.buf, '{')
		e.out.depth++
		e.out.first = true
	}
	return e
}

// End closes the innermost open object: a nested object, or at the outer
// level the event itself. Extra calls do nothing.
func (e *Event) End() {
	o := e.out
	if o.depth == 0 {
		return
	}
	if emitOps {
		o.op(abi.OpEnd, "", 0, 0)
		o.depth--
		return
	}
	o.buf = append(o.buf, '}')
	o.depth--
	o.first = false
}

// grow returns b with room for n more bytes, extended to its capacity: the
// caller writes into b[len(b):] and reslices. It allocates only when the
// output buffer has to grow (doubling, as append does).
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), max(2*cap(b), len(b)+n, 1024))
		copy(nb, b)
		b = nb
	}
	return b[:cap(b)]
}

// appendInt appends the decimal text of n.
func appendInt(dst []byte, n int64) []byte {
	var b [20]byte
	i := len(b)
	u := uint64(n)
	if n < 0 {
		u = uint64(-n)
	}
	for u >= 10 {
		i--
		b[i] = byte('0' + u%10)
		u /= 10
	}
	i--
	b[i] = byte('0' + u)
	if n < 0 {
		dst = append(dst, '-')
	}
	return append(dst, b[i:]...)
}
