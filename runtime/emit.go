package runtime

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/tetratelabs/wazero/api"

	"github.com/tally-billing/tally-openstack-collector/outbox/ledger"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/contract"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/timestamp"
)

// tally.emit: the events of a call written by the host (docs/abi.md,
// "emit"). The guest hands over a table of operations (begin an event or an
// object, a member and where its value comes from, end); the host checks each
// one and writes the JSON itself, so that what it writes is valid by
// construction. It writes exactly the document the guest SDK's builder
// writes for the same calls ({"events":[...]}), and notes as it goes where
// each member of an event and of the objects directly inside it lies: the
// event contract (eventWriter) then reads the members from those notes
// instead of parsing the document again, and the final events, their
// "source" and their ledger keys are written as for an output document.
//
// A call that does not import tally.emit, or does not call it, answers a
// document as before and is checked as before (buildResult).

// emitRecord is the size of one operation: five little-endian u32s, (op,
// key_ptr, key_len, a, b).
const emitRecord = 20

// maxEmitOps is the most operations one tally.emit call may pass, unless
// the output limit is larger: every operation but an omitted timestamp
// writes at least one byte, so a table the output limit allows is never
// refused for its count (emitOpsLimit).
const maxEmitOps = 1 << 20

// maxTimestampBytes bounds the value of a timestamp operation: no accepted
// form is longer (19 + a fraction of 9 digits + an offset of 6), and a
// longer value is omitted without being read, so that omitted operations,
// which write nothing, cost a bounded time each.
const maxTimestampBytes = 40

// emitOpsLimit is the most operations a tally.emit call may pass with the
// output limit maxOut.
func emitOpsLimit(maxOut int) int { return max(maxEmitOps, maxOut) }

// maxKeptMembers bounds the notes of members an instance keeps from one call
// to the next (a call that wrote more gets new ones next time).
const maxKeptMembers = 4096

// maxEmitDepth is the deepest nesting of objects tally.emit writes, an event
// being the first level: what the output check accepts of a document
// (jsonindex.MaxDepth levels, two of them the document's own object and
// "events" array), so a module can nest through tally.emit exactly what it
// could nest in a document.
const maxEmitDepth = jsonindex.MaxDepth - 2

// Operation codes, the low byte of an operation's first word.
const (
	opEvent  = 1 // begin a top-level event
	opObject = 2 // begin an object member
	opEnd    = 3 // close the innermost object (or the event)
	opText   = 4 // a string member: a (ptr) and b (len) of UTF-8 text, escaped by the host
	opString = 5 // a string member: the content of a JSON string, escaped as in JSON
	opNumber = 6 // a number member: the text of a JSON number
	opInt    = 7 // a number member: the i64 a | b<<32
	opBool   = 8 // a boolean member: a is 0 or 1
	opTime   = 9 // a timestamp member: a string's content, converted to the contract's form
	opLast   = opTime

	opCodeMask  = 0xff
	opFromInput = 1 << 8 // flag: a is an offset into the call's input, not a pointer
)

var opNames = [...]string{"", "event", "object", "end", "text", "string", "number", "int", "bool", "timestamp"}

// emitRange is a range of indexes into emitState.top or emitState.nested.
type emitRange struct{ lo, hi int32 }

// emitState is the tally.emit state of an instance, reused from call to call.
type emitState struct {
	active bool   // tally_map is running (set around the guest call)
	called bool   // tally.emit was called during it
	reason Reason // why the emit failed, with err
	err    error

	doc    []byte                 // the document written
	nested []jsonindex.Child      // members of the objects directly inside an event
	top    []jsonindex.Child      // members of the events
	sub    []emitRange            // for each member of top: its members in nested (an object)
	events []emitRange            // for each event: its members in top
	first  [maxEmitDepth + 1]bool // the next member of the object at that depth is its first
	ts     [48]byte               // a converted timestamp
	base   int32                  // the event being written by eventWriter: its first member in top
}

// reset prepares a call.
func (st *emitState) reset() { st.called, st.reason, st.err = false, "", nil }

// emitError is an operation's failure.
func emitError(i int, code uint32, format string, args ...any) error {
	name := "unknown"
	if code <= opLast {
		name = opNames[code]
	}
	return fmt.Errorf("tally.emit: operation %d (%s): %s", i, name, fmt.Sprintf(format, args...))
}

// hostEmit answers tally.emit(ops_ptr, count) -> i32: 0 when the operations
// were taken, -1 when they were refused (the call then fails with the
// reason recorded, whatever the guest does next).
func hostEmit(ctx context.Context, mod api.Module, stack []uint64) {
	ptr, count := api.DecodeU32(stack[0]), api.DecodeI32(stack[1])
	stack[0] = uint64(uint32(0xFFFFFFFF)) // -1
	cc, ok := ctx.(*callCtx)
	if !ok {
		return
	}
	cc.hostEnter()
	defer cc.hostExit()
	inst := cc.inst
	st := &inst.emit
	if !st.active {
		return // outside tally_map
	}
	if st.called {
		st.reason, st.err = ReasonInvalidOutput, errors.New("tally.emit called a second time in one tally_map call")
		return
	}
	st.called = true
	if limit := emitOpsLimit(inst.m.e.cfg.MaxOutputBytes); count < 0 || int(count) > limit {
		st.reason, st.err = ReasonInvalidOutput, fmt.Errorf("tally.emit: %d operations, not within [0, %d]", count, limit)
		return
	}
	mem := mod.Memory()
	table, ok := mem.Read(ptr, uint32(count)*emitRecord)
	if !ok {
		st.reason, st.err = ReasonABI, fmt.Errorf("tally.emit: the table of %d operations at %d lies outside memory of %d bytes", count, ptr, mem.Size())
		return
	}
	all, _ := mem.Read(0, mem.Size())
	var input []byte
	if inst.in != nil {
		input = inst.in.Bytes()
	}
	st.reason, st.err = st.write(table, all, input, inst.m.e.cfg.MaxOutputBytes)
	if st.err == nil {
		stack[0] = 0
	}
}

// span returns mem[p:p+n], or false when it does not lie within mem.
func span(mem []byte, p, n uint32) ([]byte, bool) {
	if uint64(p)+uint64(n) > uint64(len(mem)) {
		return nil, false
	}
	return mem[p : p+n : p+n], true
}

// write runs the operations of table (guest memory mem, the call's input
// input) and writes the document into st.doc, at most maxOut bytes.
func (st *emitState) write(table, mem, input []byte, maxOut int) (Reason, error) {
	doc := append(st.doc[:0], `{"events":[`...)
	st.top, st.nested, st.sub, st.events = st.top[:0], st.nested[:0], st.sub[:0], st.events[:0]
	depth := 0
	openTop, openNested := -1, -1 // the object member open at depth 1, at depth 2
	defer func() { st.doc = doc }()
	for i := 0; i < len(table)/emitRecord; i++ {
		r := table[i*emitRecord : (i+1)*emitRecord]
		w0 := binary.LittleEndian.Uint32(r)
		kp, kl := binary.LittleEndian.Uint32(r[4:]), binary.LittleEndian.Uint32(r[8:])
		a, b := binary.LittleEndian.Uint32(r[12:]), binary.LittleEndian.Uint32(r[16:])
		code, flags := w0&opCodeMask, w0&^opCodeMask
		if code == 0 || code > opLast {
			return ReasonInvalidOutput, emitError(i, code, "unknown operation code %d", code)
		}
		if flags&^opFromInput != 0 || (flags != 0 && code != opString && code != opNumber && code != opTime) {
			return ReasonInvalidOutput, emitError(i, code, "flags %#x not allowed", flags)
		}
		switch code {
		case opEvent:
			if kp != 0 || kl != 0 || a != 0 || b != 0 {
				return ReasonInvalidOutput, emitError(i, code, "takes no key and no value")
			}
			if depth != 0 {
				return ReasonInvalidOutput, emitError(i, code, "an event begun inside an open object (depth %d)", depth)
			}
			if len(doc)+2 > maxOut {
				return ReasonInvalidOutput, fmt.Errorf("output over the limit of %d bytes at operation %d", maxOut, i)
			}
			if len(st.events) > 0 {
				doc = append(doc, ',')
			}
			doc = append(doc, '{')
			st.events = append(st.events, emitRange{lo: int32(len(st.top))}) //nolint:gosec // G115: counts of operations, which the output limit bounds far below 2^31
			depth = 1
			st.first[1] = true
			continue
		case opEnd:
			if kp != 0 || kl != 0 || a != 0 || b != 0 {
				return ReasonInvalidOutput, emitError(i, code, "takes no key and no value")
			}
			if depth == 0 {
				return ReasonInvalidOutput, emitError(i, code, "no object is open")
			}
			if len(doc)+1 > maxOut {
				return ReasonInvalidOutput, fmt.Errorf("output over the limit of %d bytes at operation %d", maxOut, i)
			}
			doc = append(doc, '}')
			st.close(depth, len(doc), &openTop, &openNested)
			depth--
			continue
		}
		// A member.
		if depth == 0 {
			return ReasonInvalidOutput, emitError(i, code, "a member outside an event")
		}
		key, ok := span(mem, kp, kl)
		if !ok {
			return ReasonABI, emitError(i, code, "key [%d,+%d) outside memory of %d bytes", kp, kl, len(mem))
		}
		var val []byte
		switch code {
		case opText, opString, opNumber, opTime:
			src := mem
			if flags&opFromInput != 0 {
				src = input
			}
			if val, ok = span(src, a, b); !ok {
				if flags&opFromInput != 0 {
					return ReasonABI, emitError(i, code, "value [%d,+%d) outside the input of %d bytes", a, b, len(input))
				}
				return ReasonABI, emitError(i, code, "value [%d,+%d) outside memory of %d bytes", a, b, len(mem))
			}
		case opBool:
			if a > 1 || b != 0 {
				return ReasonInvalidOutput, emitError(i, code, "value %d is neither 0 nor 1", uint64(b)<<32|uint64(a))
			}
		case opObject:
			if a != 0 || b != 0 {
				return ReasonInvalidOutput, emitError(i, code, "takes no value")
			}
			if depth == maxEmitDepth {
				return ReasonInvalidOutput, emitError(i, code, "objects nested deeper than %d", maxEmitDepth)
			}
		}
		if len(doc)+len(key)+len(val)+8 > maxOut {
			return ReasonInvalidOutput, fmt.Errorf("output over the limit of %d bytes at operation %d", maxOut, i)
		}
		c := jsonindex.Child{Kind: jsonindex.String}
		switch code {
		case opString:
			if err := checkStringContent(val); err != nil {
				return ReasonInvalidOutput, emitError(i, code, "%v", err)
			}
		case opNumber:
			if !contract.IsNumber(val) {
				return ReasonInvalidOutput, emitError(i, code, "%q is not a JSON number", clip(val))
			}
		case opTime:
			if len(val) > maxTimestampBytes {
				continue // not a timestamp: nothing written
			}
			t, ok := timestamp.Append(st.ts[:0], val)
			if !ok {
				continue // not a timestamp: nothing written, as the SDK's Event.Timestamp
			}
			val = t
		}
		// The key, as the SDK's builder writes it.
		if !st.first[depth] {
			doc = append(doc, ',')
		}
		st.first[depth] = false
		open := len(doc)
		doc = jsonstr.AppendQuotedBytes(doc, key)
		c.KeyStart, c.KeyEnd = open+1, len(doc)-1
		doc = append(doc, ':')
		switch code {
		case opText:
			doc = jsonstr.AppendQuotedBytes(doc, val)
		case opString, opTime:
			doc = append(doc, '"')
			if jsonstr.CleanRaw(val) {
				doc = append(doc, val...)
			} else { // control bytes or invalid UTF-8: decoded and escaped again
				start := len(doc)
				doc = jsonstr.AppendUnescaped(doc, val)
				n := len(doc) - start
				doc = jsonstr.AppendEscapedBytes(doc, doc[start:start+n])
				doc = append(doc[:start], doc[start+n:]...)
			}
			doc = append(doc, '"')
		case opNumber:
			c.Kind = jsonindex.Number
			doc = append(doc, val...)
		case opInt:
			c.Kind = jsonindex.Number
			doc = strconv.AppendInt(doc, int64(uint64(b)<<32|uint64(a)), 10)
		case opBool:
			c.Kind = jsonindex.False
			if a == 1 {
				c.Kind = jsonindex.True
				doc = append(doc, "true"...)
			} else {
				doc = append(doc, "false"...)
			}
		case opObject:
			c.Kind = jsonindex.Object
			c.Start = len(doc)
			doc = append(doc, '{')
			st.note(depth, c, &openTop, &openNested)
			depth++
			st.first[depth] = true
			continue
		}
		if c.Kind == jsonindex.String { // the content, between the quotes
			c.Start, c.End = c.KeyEnd+3, len(doc)-1
		} else {
			c.Start, c.End = c.KeyEnd+2, len(doc)
		}
		st.note(depth, c, &openTop, &openNested)
	}
	for ; depth > 0; depth-- { // what is still open is closed, as the SDK's builder does
		if len(doc)+1 > maxOut {
			return ReasonInvalidOutput, fmt.Errorf("output over the limit of %d bytes", maxOut)
		}
		doc = append(doc, '}')
		st.close(depth, len(doc), &openTop, &openNested)
	}
	doc = append(doc, "]}"...)
	if len(doc) > maxOut {
		return ReasonInvalidOutput, fmt.Errorf("output of %d bytes over the limit of %d", len(doc), maxOut)
	}
	return "", nil
}

// note records member c of the object at depth.
func (st *emitState) note(depth int, c jsonindex.Child, openTop, openNested *int) {
	switch depth {
	case 1:
		st.top = append(st.top, c)
		st.sub = append(st.sub, emitRange{})
		if c.Kind == jsonindex.Object {
			*openTop = len(st.top) - 1
			st.sub[*openTop].lo = int32(len(st.nested)) //nolint:gosec // G115: counts of operations, which the output limit bounds far below 2^31
		}
	case 2:
		st.nested = append(st.nested, c)
		if c.Kind == jsonindex.Object {
			*openNested = len(st.nested) - 1
		}
	}
}

// close records the end, at end, of the object open at depth.
func (st *emitState) close(depth, end int, openTop, openNested *int) {
	switch depth {
	case 1: // an event
		st.events[len(st.events)-1].hi = int32(len(st.top)) //nolint:gosec // G115: counts of operations, which the output limit bounds far below 2^31
	case 2:
		st.top[*openTop].End = end
		st.sub[*openTop].hi = int32(len(st.nested)) //nolint:gosec // G115: counts of operations, which the output limit bounds far below 2^31
	case 3:
		st.nested[*openNested].End = end
	}
}

// checkStringContent checks that raw can stand between the quotes of a JSON
// string: no bare quote, every escape well formed. (Control bytes and
// invalid UTF-8 are not refused: they are escaped again, as the SDK does.)
func checkStringContent(raw []byte) error {
	if bytes.IndexByte(raw, '\\') < 0 && bytes.IndexByte(raw, '"') < 0 {
		return nil // the usual case: nothing to look at
	}
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			return fmt.Errorf("a bare quote at byte %d of the string", i)
		case '\\':
			_, size := jsonstr.DecodeEscape(raw, i) // the one decoder of escapes
			switch {
			case size > 0:
				i += size - 1
			case i+1 == len(raw):
				return errors.New("a backslash at the end of the string")
			case raw[i+1] == 'u':
				return fmt.Errorf("an invalid \\u escape at byte %d of the string", i)
			default:
				return fmt.Errorf("an invalid escape \\%c at byte %d of the string", raw[i+1], i)
			}
		}
	}
	return nil
}

// clip is at most the first 40 bytes of b, for an error message.
func clip(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

// attributes gives the members of the object that is member j of the event
// being written (eventWriter, attrSource).
func (st *emitState) attributes(dst []jsonindex.Child, j int) []jsonindex.Child {
	r := st.sub[int(st.base)+j]
	return append(dst, st.nested[r.lo:r.hi]...)
}

// writeEvent writes emitted event i (instance.writeEvent for tally.emit).
func (st *emitState) writeEvent(w *eventWriter, dst []byte, i int, src sourceMember, ids *idSeed, k int, drops *Drops, keys *ledger.Keys) ([]byte, Reason, error) {
	r := st.events[i]
	st.base = r.lo
	out, err := w.writeMembers(dst, st.doc, st.top[r.lo:r.hi], st, src, ids, k, drops, keys)
	if err != nil {
		return out, ReasonInvalidEvent, err
	}
	return out, "", nil
}

// emitted is the result of a call that called tally.emit, which returned
// (ptr, n) from tally_map: the events the host wrote, or the failure of the
// emit. Such a call must return 0 from tally_map: its events are the ones
// emitted.
func (inst *instance) emitted(in *jsonindex.Index, src Source, ptr, n uint32) (Result, Reason, error) {
	st := &inst.emit
	if cap(st.doc) > 4*inst.m.e.cfg.MaxOutputBytes {
		defer func() { st.doc = nil }() // do not keep a rare huge buffer
	}
	if st.err != nil {
		return Result{}, st.reason, st.err
	}
	if ptr != 0 || n != 0 {
		return Result{}, ReasonInvalidOutput, fmt.Errorf("tally_map returned an output document ([%d,+%d)) after tally.emit; it must return 0", ptr, n)
	}
	if cap(st.top)+cap(st.nested) > maxKeptMembers {
		defer func() { st.top, st.nested, st.sub, st.events = nil, nil, nil, nil }() // nor rare huge notes
	}
	return inst.collect(in, src, len(st.events), st)
}
