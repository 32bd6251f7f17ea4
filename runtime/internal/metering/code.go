package metering

import "fmt"

// maxDepth bounds the nesting of blocks the pass follows (wazero's own
// validation has no such bound; real code stays far below it).
const maxDepth = 1 << 16

// chargeCost is what a charge adds for itself: its own instructions, so
// that the tightest loop is charged for what it really runs.
const chargeCost = 10

// slowCost is the charge of an instruction that takes a processor tens of
// cycles whatever its operands: integer division and remainder, floating
// point division and square root.
const slowCost = 30

// weight is what each one-byte opcode is charged (a prefixed instruction is
// charged as its prefix: 1).
var weight = func() [256]uint8 {
	var w [256]uint8
	for i := range w {
		w[i] = 1
	}
	for _, op := range []byte{
		0x6d, 0x6e, 0x6f, 0x70, // i32.div_s, div_u, rem_s, rem_u
		0x7f, 0x80, 0x81, 0x82, // i64.div_s, div_u, rem_s, rem_u
		0x91, 0x95, // f32.sqrt, f32.div
		0x9f, 0xa3, // f64.sqrt, f64.div
	} {
		w[op] = slowCost
	}
	return w
}()

// point is a place where the budget is charged: a function's entry or a
// loop's header.
type point struct {
	at   int   // offset in the body, where the charge is inserted
	cost int64 // instructions charged there
	// wrap: the charge needs a loop of its own to branch back to after a
	// refill (a function's entry, or a loop whose type may take
	// parameters, which a branch to it would have to supply).
	wrap bool
}

// meterCode rewrites every function body of the code section; refill is
// what a charge runs once the slice is spent (appendRefill).
func meterCode(s section, budget, globals uint32, refill []byte) ([]byte, error) {
	r := reader{b: s.body, base: s.off}
	n, err := r.u32()
	if err != nil {
		return nil, fmt.Errorf("code section: %w", err)
	}
	out := appendULEB(make([]byte, 0, len(s.body)+len(s.body)/4+16), uint64(n))
	var points []point
	var stack []int
	var body []byte
	for i := range n {
		fr, err := r.sized()
		if err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		points, stack, err = scan(fr, globals, points[:0], stack[:0])
		if err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		body = rewrite(body[:0], fr.b, points, budget, refill)
		out = appendULEB(out, uint64(len(body)))
		out = append(out, body...)
	}
	if !r.done() {
		return nil, fmt.Errorf("offset %d: bytes after the last function body", r.off())
	}
	return out, nil
}

// scan decodes one function body: its locals, then every instruction, and
// returns the points to charge with their static costs. Each instruction
// counts towards the innermost loop or function that holds it, so that what
// a charge pays for is everything that can run before the next charge: the
// instructions of its own level, those of nested blocks and ifs, none of
// nested loops (they charge for themselves) nor of callees (likewise).
func scan(r reader, globals uint32, points []point, stack []int) ([]point, []int, error) {
	nl, err := r.u32()
	if err != nil {
		return nil, nil, fmt.Errorf("locals: %w", err)
	}
	for range nl {
		if _, err := r.u32(); err != nil {
			return nil, nil, fmt.Errorf("locals: %w", err)
		}
		if _, err := r.byte(); err != nil {
			return nil, nil, fmt.Errorf("locals: %w", err)
		}
	}
	points = append(points, point{at: r.pos, cost: chargeCost, wrap: true})
	stack = append(stack, 0) // the point each open block charges to
	// prologue is true while every instruction so far runs straight on to
	// the next (no branch, call or return): when such a prologue ends at a
	// loop, the loop's charge is made on every entry, and the entry's own
	// charge is folded into it (entryLoop, the loop's point).
	prologue, entryLoop := true, -1
	for {
		if len(stack) == 0 {
			if !r.done() {
				return nil, nil, fmt.Errorf("offset %d: bytes after the function's end", r.off())
			}
			return foldEntry(points, entryLoop), stack, nil
		}
		if r.done() {
			return nil, nil, fmt.Errorf("offset %d: %w: function body ends inside a block", r.off(), errTruncated)
		}
		at := r.off()
		op, _ := r.byte()
		points[stack[len(stack)-1]].cost += int64(weight[op])
		if prologue {
			switch {
			case op == opLoop:
				entryLoop, prologue = len(points), false // the point appended below
			case op != opBlock && !straight(op):
				prologue = false
			}
		}
		switch op {
		case opBlock, opLoop, opIf:
			// A block type is empty (0x40) or one value type (one byte,
			// 0x40-0x7f: a negative LEB128), else a type index, whose
			// parameters a branch back to the loop would have to supply.
			typeIndex := !r.done() && (r.b[r.pos]&0x80 != 0 || r.b[r.pos]&0x40 == 0)
			if err := r.sleb(33); err != nil { // block type
				return nil, nil, err
			}
			if len(stack) >= maxDepth {
				return nil, nil, fmt.Errorf("offset %d: blocks nested deeper than %d", at, maxDepth)
			}
			p := stack[len(stack)-1]
			if op == opLoop {
				points = append(points, point{at: r.pos, cost: chargeCost, wrap: typeIndex})
				p = len(points) - 1
			}
			stack = append(stack, p)
		case opElse:
		case opEnd:
			stack = stack[:len(stack)-1]
		case opBrTable:
			n, err := r.u32()
			if err != nil {
				return nil, nil, err
			}
			for range uint64(n) + 1 {
				if _, err := r.u32(); err != nil {
					return nil, nil, err
				}
			}
		case opGlobalGet, opGlobalSet:
			g, err := r.u32()
			if err != nil {
				return nil, nil, err
			}
			if g >= globals {
				// Valid only once the budget exists: a module must not
				// reach its own budget.
				return nil, nil, &UnsupportedError{Offset: at, Opcode: fmt.Sprintf("0x%02x", op),
					Reason: fmt.Sprintf("global index %d out of range (%d globals)", g, globals)}
			}
		case prefixMisc:
			if err := r.skipMisc(at); err != nil {
				return nil, nil, err
			}
		case prefixSIMD:
			if err := r.skipSIMD(at); err != nil {
				return nil, nil, err
			}
		default:
			if k := plain[op]; k != 0 {
				if err := r.skipPlain(k); err != nil {
					return nil, nil, err
				}
				break
			}
			reason := "unknown instruction"
			if why, ok := refusedOps[op]; ok {
				reason = why
			}
			return nil, nil, &UnsupportedError{Offset: at, Opcode: fmt.Sprintf("0x%02x", op), Reason: reason}
		}
	}
}

// straight reports an instruction that always goes on to the next one (or
// traps): a variable, memory, constant or numeric instruction. It is
// conservative: anything else ends a function's prologue (scan).
func straight(op byte) bool {
	return op == opDrop || op == 0x1b || // drop, select
		op >= 0x20 && op <= 0x24 || // local.get, local.set, local.tee, global.get, global.set
		op >= 0x28 && op <= 0x3e || // loads and stores
		op >= 0x41 && op <= 0xc4 // constants, comparisons, arithmetic, conversions
}

// foldEntry drops the function's entry charge (points[0]) when its prologue
// runs straight into a loop (entryLoop, else -1): that loop's charge is made
// on every entry to the function, before anything else can run but the
// prologue, and it pays for the entry's level from then on, so a call is
// still charged before its first branch, call or return, and the charges of
// a call still bound the instructions it runs (the entry's level runs at
// most once a call, and the loop's charge is made at least once). It saves
// one charge a call where a function body is a loop, which is how Go's wasm
// port compiles every function.
func foldEntry(points []point, entryLoop int) []point {
	if entryLoop < 0 {
		return points
	}
	points[entryLoop].cost += points[0].cost - chargeCost
	return points[1:]
}

// rewrite copies body b with the charge of each point inserted.
func rewrite(out, b []byte, points []point, budget uint32, refill []byte) []byte {
	last := 0
	for _, p := range points {
		out = append(out, b[last:p.at]...)
		out = appendCharge(out, budget, p.cost, refill, p.wrap)
		last = p.at
	}
	return append(out, b[last:]...)
}

// appendCharge appends a charge of cost and the refill when the slice is
// spent, after which the charge is made again:
//
//	budget -= cost
//	if budget < 0 {
//	  refill              ;; traps when the call's budget is spent
//	  budget += cost      ;; the charge given back
//	  br 1                ;; to the loop the charge heads: the charge once more
//	}
//
// At a loop's header the branch goes to that loop. At a function's entry,
// and at a loop that may take parameters, the charge is wrapped in a loop
// of its own (loop ... end) to branch to.
//
// The if's body never falls through, so the code after the charge is
// reached from the charge alone: wazero's compiler keeps what it knows along
// a straight path (the memory's base, the globals it read, which bounds
// checks passed) across the charge, as it does across a body that only
// traps. A body that fell through, or a loop of the charge's own at every
// loop header, would break that path at every charge and make the compiler
// load them again after it: about 4 % more instructions per nova call.
func appendCharge(out []byte, budget uint32, cost int64, refill []byte, wrap bool) []byte {
	if wrap {
		out = append(out, opLoop, blockEmpty)
	}
	out = appendAdjust(out, budget, cost, opI64Sub)
	out = append(out, opGlobalGet)
	out = appendULEB(out, uint64(budget))
	out = append(out, opI64Const, 0, opI64LtS, opIf, blockEmpty)
	out = append(out, refill...)
	out = appendAdjust(out, budget, cost, opI64Add)
	out = append(out, opBr, 1, opEnd)
	if wrap {
		out = append(out, opEnd)
	}
	return out
}

// appendAdjust appends the code of budget = budget op cost, where op is
// i64.sub (a charge) or i64.add (a charge given back).
func appendAdjust(out []byte, budget uint32, cost int64, op byte) []byte {
	out = append(out, opGlobalGet)
	out = appendULEB(out, uint64(budget))
	out = append(out, opI64Const)
	out = appendSLEB(out, cost)
	out = append(out, op, opGlobalSet)
	return appendULEB(out, uint64(budget))
}

// appendRefill appends what a charge runs once the slice (the budget
// global) is below zero, the reserve being the global after it:
//
//	memory.grow 0 (drop)                     ;; out to Go and back: a preemption point
//	reserve += budget                        ;; what is left of the call's whole budget
//	budget  = min(reserve, slice)            ;; the next slice, or the (negative) overdraft
//	reserve -= budget
//	if budget < 0 { unreachable }            ;; the call's budget is spent
//
// The sum of the two globals is what the call has left, before and after:
// a refill moves budget from the reserve to the slice and never adds any.
// A module without a memory has nothing to grow: its refill only moves the
// budget (it cannot be a mapper, which must export a memory).
func appendRefill(out []byte, budget uint32, slice int64, mem memory) []byte {
	reserve := uint64(budget) + 1
	get := func(g uint64) { out = appendULEB(append(out, opGlobalGet), g) }
	set := func(g uint64) { out = appendULEB(append(out, opGlobalSet), g) }
	switch mem {
	case memory32:
		out = append(out, opI32Const, 0, opMemoryGrow, 0, opDrop)
	case memory64:
		out = append(out, opI64Const, 0, opMemoryGrow, 0, opDrop)
	}
	get(reserve)
	get(uint64(budget))
	out = append(out, opI64Add)
	set(reserve)
	get(reserve)
	out = appendSLEB(append(out, opI64Const), slice)
	get(reserve)
	out = appendSLEB(append(out, opI64Const), slice)
	out = append(out, opI64LtS, opSelect)
	set(uint64(budget))
	get(reserve)
	get(uint64(budget))
	out = append(out, opI64Sub)
	set(reserve)
	get(uint64(budget))
	return append(out, opI64Const, 0, opI64LtS, opIf, blockEmpty, opUnreachable, opEnd)
}
