// Package metering is the pass the runtime runs over a mapper module before
// it compiles it, so that a guest that runs away stops itself: it traps when
// the budget the host gave its call is spent, which costs one notification
// and never the process. Only the runtime imports it.
//
// # What is inserted, and where
//
// Meter appends two globals to the module, mutable i64s at the indexes that
// follow every imported and defined global (so no index the module uses
// changes): the budget, exported as Export ("tally_budget"), which is what
// is left of the current slice, and the reserve, exported as ExportReserve
// ("tally_budget_reserve"), the part of the call's budget not yet handed
// out. Their initial values split Options.Initial the same way (Split). At
// the entry of every function (after its locals) and at the header of
// every loop (after the loop's block type, so on every turn) it inserts a
// charge:
//
//	global.get $budget
//	i64.const  <cost>
//	i64.sub
//	global.set $budget
//	global.get $budget
//	i64.const  0
//	i64.lt_s
//	if
//	  <refill>
//	  global.get $budget    ;; the charge given back: it is made again
//	  i64.const  <cost>
//	  i64.add
//	  global.set $budget
//	  br 1                  ;; to the loop the charge heads
//	end
//
// A function whose prologue runs straight into a loop (only variable,
// memory, constant and numeric instructions and block openers before it: no
// branch, call or return) gets no charge at its entry: the loop's charge,
// made on every entry before anything but the prologue runs, pays for the
// entry's level too (its instructions are added to the loop's cost). That
// is how Go's wasm port compiles every function, and it saves one charge a
// call (version 4).
//
// At a function's entry, and at a loop whose block type is a type index
// (whose parameters a branch would have to supply), the charge is wrapped
// in a loop of its own for that branch (loop ... end). The if's body never
// falls through: the code after a charge is reached from the charge alone,
// and wazero's compiler keeps what it knows on that straight path (the
// memory's base, the globals it read, which bounds checks passed) across
// it, as it did when the body only trapped. A body that fell through, or a
// loop of the charge's own at every loop header, breaks that path at every
// charge and makes the compiler load all of it again after it: 4 % more
// instructions for a nova call, measured, against 1.4 % this way.
//
// The host sets the budget and the reserve before each call and reads them
// after a trap: below zero together, the trap was the pass's, at or above
// zero the guest trapped by itself.
//
// # Slices
//
// The refill runs once the slice is spent, so at most once every
// Options.Slice charged instructions (never, in a call charged less). It
// does two things. First it executes memory.grow 0 on memory 0 and drops
// the result: it grows nothing, but wazero's compiled code leaves for Go to
// run every memory.grow (an exit through its memory-grow trampoline to the
// Go function that grows the memory) and then comes back. That trip is a
// preemption point: while compiled code runs, the Go scheduler cannot stop
// its goroutine, so a garbage collection, which first stops every goroutine,
// would otherwise wait for the guest until its call ends. With slices it
// waits at most one slice. Second it moves the next slice from the reserve:
//
//	reserve += budget                  ;; the call's whole budget left (budget is the overdraft)
//	budget   = min(reserve, Slice)
//	reserve -= budget
//	if budget < 0 { unreachable }      ;; spent: the reserve is drawn to 0
//
// A refill never adds budget: the two globals' sum is what the call has
// left before and after it, so a call is charged the same in slices as in
// one (the charge given back is made again), and traps at the same charge.
// Nothing a guest can name does any of
// this for it: the globals are past every index it may use (below), and
// memory.grow 0 in the guest's own code only makes the same trip. A module
// without a memory has nothing to grow: its refill moves the budget alone
// (a mapper must export a memory, so every mapper has one).
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
// writes a global index past its own globals (valid only once the budget and
// the reserve are added: the guest must not reach them) and one that already
// exports Export or ExportReserve. Every error wraps ErrUnsupported. Meter checks the structure it
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
// pays for it, in slices like any call.
//
// Version changes whenever the output for some input changes, and is
// written into the output, in a custom section named VersionSection added at
// its end. wazero's compilation cache is keyed by the module's bytes, so the
// cache key includes the pass's version: code compiled from one version's
// output is never served for another's.
package metering
