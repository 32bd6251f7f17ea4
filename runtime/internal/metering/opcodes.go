package metering

import "fmt"

// Opcodes the pass looks at; the others it only steps over.
const (
	opUnreachable = 0x00
	opDrop        = 0x1a
	opSelect      = 0x1b
	opI32Const    = 0x41
	opMemoryGrow  = 0x40
	opI64Add      = 0x7c
	opBlock       = 0x02
	opLoop        = 0x03
	opIf          = 0x04
	opElse        = 0x05
	opEnd         = 0x0b
	opBr          = 0x0c
	opBrTable     = 0x0e
	opGlobalGet   = 0x23
	opGlobalSet   = 0x24
	opI64Const    = 0x42
	opI64LtS      = 0x53
	opI64Sub      = 0x7d
	prefixMisc    = 0xfc
	prefixSIMD    = 0xfd
	prefixThreads = 0xfe
	prefixGC      = 0xfb
	blockEmpty    = 0x40
)

// UnsupportedError is a module the pass refuses: it holds an instruction the
// pass does not know, or one of a proposal it does not meter.
type UnsupportedError struct {
	Offset int    // of the opcode, from the start of the module
	Opcode string // as in the binary: "0x06", "0xfd 0x9a"
	Reason string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("offset %d: opcode %s: %s", e.Offset, e.Opcode, e.Reason)
}

// Refused reasons for whole proposals, by leading opcode.
var refusedOps = map[byte]string{
	0x06:          "exception handling (legacy try) is not metered",
	0x07:          "exception handling (legacy catch) is not metered",
	0x08:          "exception handling (throw) is not metered",
	0x09:          "exception handling (legacy rethrow) is not metered",
	0x0a:          "exception handling (throw_ref) is not metered",
	0x18:          "exception handling (legacy delegate) is not metered",
	0x19:          "exception handling (legacy catch_all) is not metered",
	0x1f:          "exception handling (try_table) is not metered",
	0xd3:          "typed function references are not metered",
	0xd4:          "typed function references are not metered",
	0xd5:          "typed function references are not metered",
	0xd6:          "typed function references are not metered",
	0x14:          "typed function references (call_ref) are not metered",
	0x15:          "typed function references (return_call_ref) are not metered",
	prefixGC:      "garbage collection instructions are not metered",
	prefixThreads: "threads (atomic instructions) are not metered",
}

// Immediates of the one-byte opcodes that take no part in control flow.
type imm uint8

const (
	immNone    imm = iota + 1
	immU32         // an index: local, global, function, table, label, type
	immU32x2       // two indexes (call_indirect, return_call_indirect)
	immMemarg      // align and offset
	immMemidx      // memory.size, memory.grow
	immS32         // i32.const
	immS64         // i64.const
	immF32         // 4 bytes
	immF64         // 8 bytes
	immSelectT     // vector of value types
	immRefType     // ref.null
)

// plain maps the single-byte opcodes outside control flow to their
// immediates; an opcode missing here, and not handled by the control-flow
// switch, is unknown.
var plain = func() [256]imm {
	var t [256]imm
	for _, op := range []byte{0x00, 0x01, 0x0f, 0x1a, 0x1b, 0xd1} {
		t[op] = immNone
	}
	for op := 0x45; op <= 0xc4; op++ { // numeric, sign extension included
		t[op] = immNone
	}
	for _, op := range []byte{0x0c, 0x0d, 0x10, 0x12, 0x20, 0x21, 0x22, 0x25, 0x26, 0xd2} {
		t[op] = immU32
	}
	t[0x11] = immU32x2
	t[0x13] = immU32x2
	for op := 0x28; op <= 0x3e; op++ {
		t[op] = immMemarg
	}
	t[0x3f] = immMemidx
	t[0x40] = immMemidx
	t[0x41] = immS32
	t[0x42] = immS64
	t[0x43] = immF32
	t[0x44] = immF64
	t[0x1c] = immSelectT
	t[0xd0] = immRefType
	return t
}()

// simd gives the immediates of each 0xfd opcode; 0 is an opcode that does
// not exist (a gap in the numbering, or relaxed SIMD above 0xff).
type simdImm uint8

const (
	simdNone       simdImm = iota + 1
	simdMemarg             // loads and stores
	simdBytes16            // v128.const, i8x16.shuffle
	simdLane               // extract_lane, replace_lane
	simdMemargLane         // load_lane, store_lane
)

var simd = func() [256]simdImm {
	var t [256]simdImm
	for _, r := range []struct {
		first, last int
		imm         simdImm
	}{
		{0x00, 0x0b, simdMemarg},
		{0x0c, 0x0d, simdBytes16},
		{0x0e, 0x14, simdNone},
		{0x15, 0x22, simdLane},
		{0x23, 0x53, simdNone},
		{0x54, 0x5b, simdMemargLane},
		{0x5c, 0x5d, simdMemarg},
		{0x5e, 0xff, simdNone},
	} {
		for op := r.first; op <= r.last; op++ {
			t[op] = r.imm
		}
	}
	// Unassigned numbers in the SIMD opcode space.
	for _, op := range []int{0x9a, 0xa2, 0xa5, 0xa6, 0xaf, 0xb0, 0xb2, 0xb3, 0xb4, 0xbb,
		0xc2, 0xc5, 0xc6, 0xcf, 0xd0, 0xd2, 0xd3, 0xd4, 0xe2, 0xee} {
		t[op] = 0
	}
	return t
}()

// misc gives the number of index immediates of each 0xfc opcode (-1: none
// such opcode).
var misc = [...]int8{
	0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 0, 6: 0, 7: 0, // trunc_sat
	8:  2, // memory.init data mem
	9:  1, // data.drop
	10: 2, // memory.copy
	11: 1, // memory.fill
	12: 2, // table.init
	13: 1, // elem.drop
	14: 2, // table.copy
	15: 1, // table.grow
	16: 1, // table.size
	17: 1, // table.fill
}

// memarg steps over a memory argument: alignment (bit 6 set: a memory index
// follows, multi-memory) and offset.
func (r *reader) memarg() error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	_, err = r.uleb(64)
	return err
}

// skipPlain steps over the immediates of a plain opcode.
func (r *reader) skipPlain(k imm) error {
	switch k {
	case immNone:
		return nil
	case immU32, immMemidx:
		_, err := r.u32()
		return err
	case immU32x2:
		if _, err := r.u32(); err != nil {
			return err
		}
		_, err := r.u32()
		return err
	case immMemarg:
		return r.memarg()
	case immS32:
		return r.sleb(32)
	case immS64:
		return r.sleb(64)
	case immF32:
		_, err := r.bytes(4)
		return err
	case immF64:
		_, err := r.bytes(8)
		return err
	case immSelectT: // a vector of value types, a byte each
		_, err := r.sized()
		return err
	case immRefType:
		_, err := r.byte()
		return err
	}
	return fmt.Errorf("no immediate kind %d", k)
}

// skipMisc steps over a 0xfc instruction after its prefix.
func (r *reader) skipMisc(at int) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	if int(sub) >= len(misc) {
		return &UnsupportedError{Offset: at, Opcode: fmt.Sprintf("0xfc %d", sub), Reason: "unknown instruction"}
	}
	for range misc[sub] {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// skipSIMD steps over a 0xfd instruction after its prefix.
func (r *reader) skipSIMD(at int) error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	if sub > 0xff || simd[sub] == 0 {
		reason := "unknown instruction"
		if sub >= 0x100 && sub <= 0x113 {
			reason = "relaxed SIMD is not metered"
		}
		return &UnsupportedError{Offset: at, Opcode: fmt.Sprintf("0xfd 0x%x", sub), Reason: reason}
	}
	switch simd[sub] {
	case simdMemarg:
		return r.memarg()
	case simdBytes16:
		_, err := r.bytes(16)
		return err
	case simdLane:
		_, err := r.byte()
		return err
	case simdMemargLane:
		if err := r.memarg(); err != nil {
			return err
		}
		_, err := r.byte()
		return err
	}
	return nil
}
