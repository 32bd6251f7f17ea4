// Package metering is the pass the runtime runs over a mapper module before
// it compiles it, so that a guest that runs away stops itself: it traps when
// the budget the host gave its call is spent, which costs one notification
// and never the process. Only the runtime imports it.
//
// # What is inserted, and where
//
// Meter appends one global to the module: a mutable i64, the budget, at the
// index that follows every imported and defined global (so no index the
// module uses changes), exported as Export ("tally_budget"), with
// Options.Initial as its initial value. At the entry of every function
// (after its locals) and at the header of every loop (after the loop's block
// type, so on every turn) it inserts a charge:
//
//	global.get $budget
//	i64.const  <cost>
//	i64.sub
//	global.set $budget
//	global.get $budget
//	i64.const  0
//	i64.lt_s
//	if
//	  unreachable
//	end
//
// The host sets the budget before each call and reads it after a trap: a
// budget below zero means the trap was the charge's, a budget at or above
// zero that the guest trapped by itself.
//
// # The budget's unit
//
// A charge's cost is static: the number of instructions (opcodes, each 1,
// but integer division and remainder and floating point division and square
// root, 30 each: charged 1, a chain of dependent 64-bit divisions ran nine
// times as long as the tightest loop on the same budget; charged 30, one and
// a half times) of the function or loop body it heads, nested blocks and ifs included,
// nested loops excluded (they charge for themselves), plus the ten of the
// charge itself (so that `loop br 0` costs 12 a turn, not 2). Between two charges a
// guest can only run instructions of one such level once (a backward
// branch re-enters a loop header, a call a function entry, both of which
// charge), so what a call is charged is an upper bound on the instructions
// it runs, the charges included. A budget of N therefore lets a call run at
// most N Wasm instructions. Two kinds of work are outside that count: the
// time spent in host functions (WASI, tally.field), and bulk memory and
// table instructions (memory.fill, memory.copy, ...), which count as one
// whatever their length (bounded by the instance's memory limit).
//
// The bound is loose for code that branches back to a loop header to jump
// within a function, as the Go compiler's wasm port does (each function body
// is one loop around a br_table of its resumption points): every such jump
// is charged the whole body. nova's call on a 2.5 KB notification is
// charged 1.3 million where the whole call, host included, runs about
// 236,000 machine instructions; budgets are sized from measured charges
// (docs/abi.md, "Metering").
//
// # What is refused
//
// Meter decodes every instruction, the prefixed ones included (0xfc:
// saturating truncation, bulk memory, tables; 0xfd: every SIMD instruction
// with its immediates — memory arguments, lane indexes, the 16 bytes of
// v128.const and i8x16.shuffle). It refuses, with an *UnsupportedError naming
// the opcode and its offset in the module, a module that holds an
// instruction it does not know or one of a proposal it does not meter:
// threads (0xfe), exception handling, typed function references, garbage
// collection (0xfb), relaxed SIMD. It refuses a module whose code reads or
// writes a global index past its own globals (valid only once the budget is
// added: the guest must not reach its budget) and one that already exports
// Export. Every error wraps ErrUnsupported. Meter checks the structure it
// walks but does not type-check: the runtime compiles its output with
// wazero, which validates it, so a rewrite that went wrong fails at load and
// never while mapping.
//
// # What else changes
//
// The code section is re-encoded (every body's size grows). Custom sections
// are kept in place, the "name" section included (no function, local or
// global index moves), except the DWARF ones (".debug_*"), which are
// dropped: their code offsets would be stale. The start function, the
// element and data sections and everything else are copied as they are; a
// global or export section the module lacks is added. The start function
// runs metered too, before the host can set the budget: Options.Initial
// pays for it.
//
// Version changes whenever the output for some input changes, and is
// written into the output, in a custom section named VersionSection added at
// its end. wazero's compilation cache is keyed by the module's bytes, so the
// cache key includes the pass's version: code compiled from one version's
// output is never served for another's.
package metering
