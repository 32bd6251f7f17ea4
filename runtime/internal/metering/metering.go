package metering

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Version identifies the pass: it changes whenever the output for some input
// changes, so that what was compiled from an older output is not reused.
const Version = 4

// Export is the name under which the budget global is exported: what is
// left of the current slice (Options.Slice).
const Export = "tally_budget"

// ExportReserve is the name under which the reserve global is exported: the
// part of the call's budget not yet handed to the guest as a slice. What a
// call has left is the sum of the two.
const ExportReserve = "tally_budget_reserve"

// VersionSection names the custom section, added at the end of a metered
// module, that holds Version in decimal.
const VersionSection = "tally.metering"

// Options tune the pass.
type Options struct {
	// Initial is the budget's value when an instance starts: it pays for
	// the module's start function, which runs before the host can set the
	// budget.
	Initial int64
	// Slice is the most the guest spends between two trips out of its
	// compiled code (doc.go, "Slices"); 0 or less: the whole budget is one
	// slice.
	Slice int64
}

// split divides a budget into the first slice and the reserve.
func (o Options) split(budget int64) (slice, reserve int64) {
	slice = min(budget, o.slice())
	return slice, budget - slice
}

func (o Options) slice() int64 {
	if o.Slice <= 0 {
		return math.MaxInt64
	}
	return o.Slice
}

// Split divides a budget of n into what the host sets the two globals to
// (Export, ExportReserve) before a call: the first slice and the reserve.
func Split(n, slice int64) (first, reserve int64) {
	return Options{Slice: slice}.split(n)
}

// Section ids of the binary format.
const (
	secCustom   = 0
	secImport   = 2
	secMemory   = 5
	secGlobal   = 6
	secExport   = 7
	secCode     = 10
	importGlob  = 3
	exportGlob  = 3
	valI64      = 0x7e
	globalMut   = 1
	maxSections = 13
)

// order is each known section's place in a module (the tag section, 13,
// comes between memory and global; data count, 12, between element and code).
var order = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

type section struct {
	id   byte
	name string // custom sections
	body []byte
	off  int // of body in the module
}

// Meter returns a copy of wasm with a budget: a mutable i64 global, exported
// as Export, that every function entry and every loop header decrements by
// the static cost of what follows (doc.go), trapping (unreachable) once it is
// below zero. It refuses a module it cannot meter, or cannot decode, with an
// error wrapping ErrUnsupported (and an *UnsupportedError for an
// instruction).
func Meter(wasm []byte, opts Options) ([]byte, error) {
	out, err := meter(wasm, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return out, nil
}

func meter(wasm []byte, opts Options) ([]byte, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], []byte("\x00asm")) {
		return nil, errors.New("not a WebAssembly module (no \\0asm magic)")
	}
	if !bytes.Equal(wasm[4:8], []byte{1, 0, 0, 0}) {
		return nil, fmt.Errorf("binary format version %x: only version 1 (core modules) is metered", wasm[4:8])
	}
	secs, err := sections(wasm)
	if err != nil {
		return nil, err
	}
	if n := len(secs); n > 0 && secs[n-1].id == secCustom && len(secs[n-1].body) == nameLen(secs[n-1].name) {
		// wazero refuses a custom section without contents at the very
		// end of a module (it reads its contents past the end), and
		// would accept the same module with the pass's sections after it.
		return nil, fmt.Errorf("custom section %q without contents at the end of the module, which wazero refuses", secs[n-1].name)
	}
	var importedGlobals, definedGlobals uint32
	var hasGlobal, hasExport bool
	var mem memory // memory 0, which a refill grows by nothing
	for _, s := range secs {
		switch s.id {
		case secImport:
			if importedGlobals, mem, err = walkImports(s); err != nil {
				return nil, fmt.Errorf("import section: %w", err)
			}
		case secMemory:
			if mem == noMemory {
				if mem, err = firstMemory(s); err != nil {
					return nil, fmt.Errorf("memory section: %w", err)
				}
			}
		case secGlobal:
			hasGlobal = true
			r := reader{b: s.body, base: s.off}
			if definedGlobals, err = r.u32(); err != nil {
				return nil, fmt.Errorf("global section: %w", err)
			}
		case secExport:
			hasExport = true
			if err := checkExports(s, uint64(importedGlobals)+uint64(definedGlobals)); err != nil {
				return nil, fmt.Errorf("export section: %w", err)
			}
		}
	}
	globals := uint64(importedGlobals) + uint64(definedGlobals)
	if globals >= 1<<32-2 {
		return nil, errors.New("too many globals")
	}
	budget := uint32(globals)
	slice0, reserve0 := opts.split(opts.Initial)

	out := make([]byte, 0, len(wasm)+len(wasm)/8+64)
	out = append(out, wasm[:8]...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = appendULEB(out, uint64(len(body)))
		out = append(out, body...)
	}
	newGlobal := func(body []byte) []byte { // appends the budget and the reserve to a global section's entries
		for _, v := range []int64{slice0, reserve0} {
			body = append(body, valI64, globalMut, opI64Const)
			body = appendSLEB(body, v)
			body = append(body, opEnd)
		}
		return body
	}
	newExport := func(body []byte) []byte {
		for i, name := range []string{Export, ExportReserve} {
			body = appendULEB(body, uint64(len(name)))
			body = append(body, name...)
			body = append(body, exportGlob)
			body = appendULEB(body, uint64(budget)+uint64(i))
		}
		return body
	}
	placedGlobal, placedExport := hasGlobal, hasExport
	place := func(rank int) { // adds the missing sections that come before rank
		if !placedGlobal && rank > order[secGlobal] {
			emit(secGlobal, newGlobal(appendULEB(nil, 2)))
			placedGlobal = true
		}
		if !placedExport && rank > order[secExport] {
			emit(secExport, newExport(appendULEB(nil, 2)))
			placedExport = true
		}
	}
	for _, s := range secs {
		if s.id == secCustom {
			if strings.HasPrefix(s.name, ".debug_") {
				continue // DWARF: its code offsets would be stale
			}
			emit(s.id, s.body)
			continue
		}
		place(order[s.id])
		switch s.id {
		case secGlobal:
			emit(s.id, newGlobal(appendVecCount(s.body, definedGlobals)))
		case secExport:
			r := reader{b: s.body, base: s.off}
			n, _ := r.u32() // read by checkExports already
			emit(s.id, newExport(append(appendULEB(nil, uint64(n)+2), s.body[r.pos:]...)))
		case secCode:
			body, err := meterCode(s, budget, uint32(globals), appendRefill(nil, budget, opts.slice(), mem))
			if err != nil {
				return nil, err
			}
			emit(s.id, body)
		default:
			emit(s.id, s.body)
		}
	}
	place(maxSections + 1)
	// The pass's version, in the bytes wazero's compilation cache is keyed
	// by: code compiled from one version's output is never reused for
	// another's.
	mark := appendULEB(nil, uint64(len(VersionSection)))
	mark = append(mark, VersionSection...)
	emit(secCustom, fmt.Appendf(mark, "%d", Version))
	return out, nil
}

// nameLen is the size of a custom section's name, its length included.
func nameLen(name string) int { return len(appendULEB(nil, uint64(len(name)))) + len(name) }

// appendVecCount re-encodes a vector's count as n+2 and keeps its entries.
func appendVecCount(body []byte, n uint32) []byte {
	r := reader{b: body}
	_, _ = r.u32() // read before
	out := appendULEB(make([]byte, 0, len(body)+32), uint64(n)+2)
	return append(out, body[r.pos:]...)
}

// sections splits a module into its sections, checking their order.
func sections(wasm []byte) ([]section, error) {
	r := reader{b: wasm, pos: 8}
	var secs []section
	last := 0
	for !r.done() {
		at := r.off()
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		sr, err := r.sized()
		if err != nil {
			return nil, fmt.Errorf("section %d at offset %d: %w", id, at, err)
		}
		s := section{id: id, body: sr.b, off: sr.base}
		if id == secCustom {
			name, err := sr.name()
			if err != nil {
				return nil, fmt.Errorf("custom section at offset %d: %w", at, err)
			}
			s.name = string(name)
		} else {
			rank, ok := order[id]
			if !ok {
				return nil, fmt.Errorf("offset %d: unknown section id %d", at, id)
			}
			if rank <= last {
				return nil, fmt.Errorf("offset %d: section id %d out of order or repeated", at, id)
			}
			last = rank
		}
		secs = append(secs, s)
	}
	return secs, nil
}

// memory says whether a module has a memory 0, and its index type.
type memory uint8

const (
	noMemory memory = iota
	memory32
	memory64
)

// walkImports counts the imported globals and finds an imported memory 0.
func walkImports(s section) (uint32, memory, error) {
	r := reader{b: s.body, base: s.off}
	n, err := r.u32()
	if err != nil {
		return 0, noMemory, err
	}
	var globals uint32
	mem := noMemory
	for range n {
		for range 2 { // module and name
			if _, err := r.name(); err != nil {
				return 0, noMemory, err
			}
		}
		kind, err := r.byte()
		if err != nil {
			return 0, noMemory, err
		}
		switch kind {
		case 0: // function: type index
			_, err = r.u32()
		case 1: // table: reference type, limits
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case 2: // memory: limits
			var m memory
			m, err = r.memLimits()
			if mem == noMemory {
				mem = m
			}
		case importGlob: // global: value type, mutability
			globals++
			_, err = r.bytes(2)
		case 4: // tag: attribute, type index
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return 0, noMemory, fmt.Errorf("offset %d: unknown import kind %d", r.off()-1, kind)
		}
		if err != nil {
			return 0, noMemory, err
		}
	}
	if !r.done() {
		return 0, noMemory, fmt.Errorf("offset %d: bytes after the last import", r.off())
	}
	return globals, mem, nil
}

// firstMemory reads the index type of the first memory the memory section
// defines.
func firstMemory(s section) (memory, error) {
	r := reader{b: s.body, base: s.off}
	n, err := r.u32()
	if err != nil || n == 0 {
		return noMemory, err
	}
	return r.memLimits()
}

// memLimits steps over a memory's limits and says its index type.
func (r *reader) memLimits() (memory, error) {
	if r.done() {
		return noMemory, r.limits() // the error
	}
	flags := r.b[r.pos]
	if err := r.limits(); err != nil {
		return noMemory, err
	}
	if flags&4 != 0 {
		return memory64, nil
	}
	return memory32, nil
}

// limits steps over table or memory limits (flags: bit 0 a maximum follows,
// bit 1 shared, bit 2 64-bit indexes).
func (r *reader) limits() error {
	flags, err := r.byte()
	if err != nil {
		return err
	}
	if flags > 7 {
		return fmt.Errorf("offset %d: limits flags 0x%x", r.off()-1, flags)
	}
	for range 1 + int(flags&1) {
		if _, err := r.uleb(64); err != nil {
			return err
		}
	}
	return nil
}

// checkExports refuses a module that already exports Export or
// ExportReserve, or that exports a global past its own globals (valid only
// once the budget and the reserve are added). The sections before the
// export section have been read: globals counts them all.
func checkExports(s section, globals uint64) error {
	r := reader{b: s.body, base: s.off}
	n, err := r.u32()
	if err != nil {
		return err
	}
	for range n {
		name, err := r.name()
		if err != nil {
			return err
		}
		if string(name) == Export || string(name) == ExportReserve {
			return fmt.Errorf("the module already exports %q", name)
		}
		kind, err := r.byte()
		if err != nil {
			return err
		}
		idx, err := r.u32()
		if err != nil {
			return err
		}
		if kind == exportGlob && uint64(idx) >= globals {
			return fmt.Errorf("export %q: global index %d out of range (%d globals)", name, idx, globals)
		}
	}
	if !r.done() {
		return fmt.Errorf("offset %d: bytes after the last export", r.off())
	}
	return nil
}
